// The job's device set and per-device counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace partix::detail {

struct DeviceCounters {
  std::atomic<int64_t> in_use{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocs{0};
};

DeviceCounters& device_counters(int device);

// Parses PARTIX_NUM_CPU_DEVICES; nullopt when unset. Throws partix::Error when it is
// not a positive integer.
std::optional<int> parse_num_cpu_devices(const char* text);

// Threads each device worker should give oneDNN/OpenMP: max(1, cores / local devices).
int threads_per_device();

}  // namespace partix::detail
