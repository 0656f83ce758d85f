#include "comm/communicator.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "comm/mpi/process_communicator.h"
#include "comm/thread/thread_communicator.h"
#include "core/errors.h"

namespace partix::comm {

namespace {
std::atomic<double> g_timeout{-1.0};
}  // namespace

double parse_collective_timeout(const char* name, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !std::isfinite(v) || !(v > 0)) {
    detail::fail(name, "expected a positive, finite number of seconds, got '{}'", text);
  }
  return std::min(v, kMaxCollectiveTimeout);
}

double collective_timeout_seconds() {
  const double t = g_timeout.load();
  if (t > 0) return t;
  for (const char* name : {"PARTIX_COLLECTIVE_TIMEOUT_S", "PARTIX_COLLECTIVE_TIMEOUT"}) {
    if (const char* env = std::getenv(name)) return parse_collective_timeout(name, env);
  }
  return 120.0;
}

void set_collective_timeout_seconds(double seconds) {
  detail::check(std::isfinite(seconds) && seconds > 0, "set_collective_timeout_seconds",
                "expected a positive, finite number of seconds, got {}", seconds);
  g_timeout.store(std::min(seconds, kMaxCollectiveTimeout));
}

std::chrono::steady_clock::time_point collective_deadline() {
  const auto ns = std::chrono::nanoseconds(
      static_cast<int64_t>(collective_timeout_seconds() * 1e9));  // <= 1e16: no overflow
  return std::chrono::steady_clock::now() + ns;
}

void Communicator::abort(int device, std::exception_ptr cause) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return;
    failed_device_ = device;
    try {
      if (cause) std::rethrow_exception(cause);
      cause_ = "unknown error";
    } catch (const std::bad_alloc&) {
      cause_ = "out of memory";
    } catch (const std::exception& e) {
      cause_ = e.what();
    } catch (...) {
      cause_ = "unknown error";
    }
    aborted_.store(true, std::memory_order_release);
  }
  wake_all();
}

void Communicator::throw_if_aborted(const char* what, const Group& group) const {
  if (!aborted()) return;
  std::lock_guard<std::mutex> lock(abort_mu_);
  throw CollectiveCancelled(fmt::format("[{}] cancelled on group [{}]: device {} failed: {}",
                                        what, fmt::join(group, ","), failed_device_, cause_));
}

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

int Communicator::failed_device() const {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return failed_device_;
}

std::string Communicator::failure_cause() const {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return cause_;
}

std::unique_ptr<Communicator> communicator_for_run(const Mesh& mesh) {
  const int me = process_index();
  for (const Device& d : mesh.devices()) {
    if (d.process_index != me) return std::make_unique<ProcessCommunicator>(mesh);
  }
  return std::make_unique<ThreadCommunicator>();
}

}  // namespace partix::comm
