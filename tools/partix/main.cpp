// partix: the command-line tool.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <cstdio>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "partix/partix.h"

namespace {

// An exception that escapes a thread ends in std::terminate: say what it was and exit with a
// status instead of aborting into a core dump.
[[noreturn]] void on_terminate() {
  std::string what = "unknown error";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  }
  std::cerr << "partix: fatal: " << what << std::endl;
  partix::distributed::notify_failure(what);
  std::_Exit(1);
}

// Reports an error, and tells the other processes of the job (if any) that this one stops, so
// that they raise at once instead of waiting for it in a collective.
int fail(const std::string& message) {
  std::cerr << "partix: " << message << "\n";
  if (partix::distributed::launch_process_count() > 1) {
    std::cerr << "partix: process " << partix::distributed::launch_process_index()
              << " stops\n";
  }
  partix::distributed::notify_failure(message);
  return 1;
}

// Under mpirun every process must be given the same command: a process given another --seed
// or --lr would silently run another job. Compares the parsed flags across processes before
// the command starts.
void agree_on_flags(const CLI::App& app) {
  if (partix::distributed::launch_process_count() == 1) return;
  std::vector<std::pair<std::string, std::string>> settings;
  std::string api = "partix";
  for (const CLI::App* sub : app.get_subcommands()) {
    api += " " + sub->get_name();
    settings.emplace_back("command", sub->get_name());
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt == sub->get_help_ptr() || opt == sub->get_help_all_ptr()) continue;
      settings.emplace_back(opt->get_name(), opt->count() > 0
                                                 ? fmt::format("{}", fmt::join(opt->results(), " "))
                                                 : opt->get_default_str());
    }
  }
  partix::distributed::assert_same_settings(api, settings);
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(on_terminate);
  // Past a file-size limit, writes then fail with EFBIG, which the writers report by path,
  // instead of the signal killing the process with the output half written.
  std::signal(SIGXFSZ, SIG_IGN);
  // Under mpirun every process runs the same command; process 0 alone prints (errors still
  // come from every process, on stderr).
  try {
    if (partix::distributed::launch_process_index() != 0) {
      if (std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
    }
  } catch (const partix::Error& e) {
    std::cerr << "partix: " << e.what() << "\n";
    return 1;
  }
  CLI::App app{"partix: SPMD array programming over a mesh of devices"};
  partix::cli::add_commands(app);
  // Runs after the flags are parsed and checked, before the command.
  app.parse_complete_callback([&app] { agree_on_flags(app); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    // A process that cannot start tells the others, which would otherwise wait for it.
    if (code != 0 && partix::distributed::launch_process_count() > 1) {
      std::cerr << "partix: process " << partix::distributed::launch_process_index() << " stops\n";
      partix::distributed::notify_failure(e.what());
    }
    return code;
  } catch (const partix::Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory (a host allocation failed); try fewer devices, a smaller batch "
                "or a shorter sequence");
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what());
  } catch (...) {
    return fail("internal error: an unknown exception");
  }
  return 0;
}
