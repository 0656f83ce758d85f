// Collectives between the devices of a group. A group is a list of device ids in
// rank order; every member calls the same collective with the same group, in the same order.
// Implementations: in-process threads (shared memory, the default), MPI between processes,
// NCCL for CUDA. A peer that never arrives raises TimeoutError naming the collective and the
// missing devices.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "partix/dtype.h"
#include "partix/mesh.h"
#include "core/reduce_kind.h"

namespace partix::comm {

using Group = std::vector<int>;  // device ids, rank order
using detail::ReduceKind;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;

  // out[i] = reduce over ranks of in[i]; count elements.
  virtual void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceKind kind,
                          const Group& group, int self) = 0;
  // out = concatenation over ranks of each rank's `bytes` bytes.
  virtual void all_gather(const void* in, void* out, int64_t bytes, const Group& group,
                          int self) = 0;
  // in holds group.size() chunks of `count` elements; rank r gets the reduction of chunk r.
  virtual void reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                              ReduceKind kind, const Group& group, int self) = 0;
  // in holds group.size() chunks of `bytes`; chunk j goes to rank j, which stores what rank r
  // sent it at chunk r of out.
  virtual void all_to_all(const void* in, void* out, int64_t bytes, const Group& group,
                          int self) = 0;
  // Sends `bytes` to each target of `pairs` (source device, target device); a device that is
  // no pair's target gets zeros. Every device of `group` calls it.
  virtual void permute(const void* in, void* out, int64_t bytes,
                       const std::vector<std::pair<int, int>>& pairs, const Group& group,
                       int self) = 0;
  virtual void barrier(const Group& group, int self) = 0;

  // The same collectives returning their result as a buffer attributed to `self`. A
  // shared-memory communicator computes the result once and gives every member an alias of it;
  // the default allocates a private buffer and calls the pointer form.
  virtual detail::Buffer all_reduce_to_buffer(const void* in, int64_t count, DType dtype,
                                              ReduceKind kind, const Group& group, int self);
  virtual detail::Buffer all_gather_to_buffer(const void* in, int64_t bytes, const Group& group,
                                              int self);

  // A member failed with `cause`: the first call records it; every member waiting in a
  // collective of this communicator, and every later one, raises CollectiveCancelled naming
  // the failed device and the cause. A communicator serves one execution of one program, so
  // a failure cancels exactly that program's collectives and is never reset.
  void abort(int device, std::exception_ptr cause);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 protected:
  // Throws CollectiveCancelled when a member has failed.
  void throw_if_aborted(const char* what, const Group& group) const;
  // Wakes members blocked in this communicator (called once, after the cause is recorded).
  virtual void wake_all() {}
  // The failure recorded by abort (device -1 and "" before one).
  int failed_device() const;
  std::string failure_cause() const;

 private:
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  int failed_device_ = -1;
  std::string cause_;
};

// A fresh communicator for one execution of a program on `mesh`'s devices: in-process threads
// when they all live in this process, hierarchical over MPI when they span processes. Its
// collective state belongs to that execution alone.
std::unique_ptr<Communicator> communicator_for_run(const Mesh& mesh);

// Seconds a collective waits for its peers: PARTIX_COLLECTIVE_TIMEOUT_S (or
// PARTIX_COLLECTIVE_TIMEOUT), default 120, at most kMaxCollectiveTimeout; anything not a
// positive finite number is an error.
inline constexpr double kMaxCollectiveTimeout = 1e7;  // 116 days: far from clock overflow
double collective_timeout_seconds();
// The value of environment variable `name`, checked and clamped as above.
double parse_collective_timeout(const char* name, const char* text);
void set_collective_timeout_seconds(double seconds);
// The deadline `collective_timeout_seconds()` from now.
std::chrono::steady_clock::time_point collective_deadline();

}  // namespace partix::comm
