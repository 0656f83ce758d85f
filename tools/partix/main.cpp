// partix: the command-line tool.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "partix/partix.h"

int main(int argc, char** argv) {
  CLI::App app{"partix: SPMD array programming over a mesh of devices"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  partix::cli::add_demo(app);
  partix::cli::add_train(app);
  partix::cli::add_generate(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const partix::Error& e) {
    std::cerr << "partix: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
