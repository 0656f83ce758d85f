// Runs a program's per-device tasks on the local devices. By default each
// task is a fiber (core/fiber.h) on one of min(cores, local devices) threads: device i's on
// thread i mod threads, all of a thread's devices interleaved at their collectives. A single
// device's task runs on the calling thread. Each thread gives its kernels a team of
// max(1, cores / threads) threads (oneDNN runs on one OpenMP thread per call).
// PARTIX_DEVICE_THREADS=1 selects the thread-per-device mode instead (one worker thread per
// local device, for debugging: a debugger then shows one thread per device).
#pragma once

#include <exception>
#include <functional>
#include <vector>

namespace partix::runtime {

class DevicePool {
 public:
  static DevicePool& instance();

  // Runs task(i) on the worker of device_ids[i] for every i, concurrently, and waits for all.
  // Programs on overlapping devices run one at a time (a second caller waits), so collectives
  // of different programs never interleave; programs on disjoint devices run at once. Returns one
  // exception_ptr per task (null when it succeeded). In a child forked after the pool started
  // (whose copy of the pool has no threads) it raises partix::Error instead.
  std::vector<std::exception_ptr> run(const std::vector<int>& device_ids,
                                      const std::function<void(size_t)>& task);

  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

 private:
  DevicePool();
  struct Impl;
  Impl* impl_;
};

// Rethrows the most informative error of a run (partix::Error first), if any.
void rethrow_first(const std::vector<std::exception_ptr>& errors, const std::vector<int>& device_ids);

}  // namespace partix::runtime
