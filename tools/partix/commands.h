// Subcommands of the partix tool; each registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

namespace partix::cli {

void add_demo(CLI::App& app);
void add_train(CLI::App& app);
void add_generate(CLI::App& app);
void add_plan(CLI::App& app);

}  // namespace partix::cli
