#include "comm/communicator.h"

#include <atomic>
#include <cstdlib>

#include "comm/thread/thread_communicator.h"
#include "core/errors.h"

namespace partix::comm {

namespace {
std::atomic<double> g_timeout{-1.0};
}

double collective_timeout_seconds() {
  double t = g_timeout.load();
  if (t > 0) return t;
  if (const char* env = std::getenv("PARTIX_COLLECTIVE_TIMEOUT")) {
    char* end = nullptr;
    double v = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(v > 0)) {
      detail::fail("PARTIX_COLLECTIVE_TIMEOUT", "expected a positive number of seconds, got '{}'",
                   env);
    }
    return v;
  }
  return 300.0;
}

void set_collective_timeout_seconds(double seconds) { g_timeout.store(seconds); }

std::shared_ptr<Communicator> communicator_for(const Mesh&) {
  // Every local device shares one in-process communicator.
  static std::shared_ptr<Communicator> local = std::make_shared<ThreadCommunicator>();
  return local;
}

}  // namespace partix::comm
