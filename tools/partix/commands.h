// Subcommands of the partix tool; each registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

namespace partix::cli {

void add_demo(CLI::App& app);
void add_train(CLI::App& app);
void add_generate(CLI::App& app);
void add_plan(CLI::App& app);
// All of the above, with the app's own flags (--help-all) and one subcommand required.
void add_commands(CLI::App& app);

// When set, a command parses and checks its flags but does not run (the flag fuzzer's mode:
// no input trains, generates or plans).
void set_parse_only(bool on);
bool parse_only();

}  // namespace partix::cli
