// The partix command line: every subcommand and its flags on one app (main runs it; the
// flag-parser fuzz harness parses with the same app).
#include "commands.h"

namespace partix::cli {

namespace {
bool g_parse_only = false;
}  // namespace

void set_parse_only(bool on) { g_parse_only = on; }
bool parse_only() { return g_parse_only; }

void add_commands(CLI::App& app) {
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  add_demo(app);
  add_train(app);
  add_generate(app);
  add_plan(app);
}

}  // namespace partix::cli
