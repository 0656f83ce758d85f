// partix: the command-line tool.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <cstdio>
#include <new>
#include <string>

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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
