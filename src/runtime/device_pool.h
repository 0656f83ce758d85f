// One worker thread per local device (DESIGN §3.6). Each worker gives oneDNN/OpenMP
// max(1, cores / local devices) threads.
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
  // exception_ptr per task (null when it succeeded).
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
