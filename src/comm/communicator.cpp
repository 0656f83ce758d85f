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

detail::Buffer Communicator::all_reduce_to_buffer(const void* in, int64_t count, DType dtype,
                                                  ReduceKind kind, const Group& group, int self) {
  detail::Buffer out = detail::Buffer::allocate(self, count * dtype_size(dtype));
  all_reduce(in, out.data(), count, dtype, kind, group, self);
  return out;
}

detail::Buffer Communicator::all_gather_to_buffer(const void* in, int64_t bytes,
                                                  const Group& group, int self) {
  detail::Buffer out = detail::Buffer::allocate(self, bytes * static_cast<int64_t>(group.size()));
  all_gather(in, out.data(), bytes, group, self);
  return out;
}

std::shared_ptr<Communicator> communicator_for(const Mesh&) {
  // Every local device shares one in-process communicator.
  static std::shared_ptr<Communicator> local = std::make_shared<ThreadCommunicator>();
  return local;
}

}  // namespace partix::comm
