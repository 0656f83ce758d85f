// The job's device set and per-device counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace partix::detail {

// One cache line per device: threads running different devices update their own counters on
// every allocation, and counters packed together made them contend for shared lines.
struct alignas(64) DeviceCounters {
  std::atomic<int64_t> in_use{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocs{0};
};

DeviceCounters& device_counters(int device);

// Parses PARTIX_NUM_CPU_DEVICES; nullopt when unset. Throws partix::Error when it is
// not a positive integer.
std::optional<int> parse_num_cpu_devices(const char* text);

// How this process learns its place in a job and agrees with the other processes. Devices sit
// below communication, so the MPI layer (src/comm/mpi) installs these when the library loads;
// without them partix is one process.
struct ProcessLaunch {
  int index = 0;  // this process
  int count = 1;  // processes in the job
};
struct ProcessHooks {
  ProcessLaunch (*launch)() = nullptr;
  // Every process of `processes` sends `mine`; returns the values by position in `processes`.
  std::vector<std::string> (*exchange)(const std::vector<int>& processes, const std::string& mine,
                                       const char* what) = nullptr;
};
void set_process_hooks(const ProcessHooks& hooks);

// Threads each device worker should give oneDNN/OpenMP: max(1, cores / local devices).
int threads_per_device();
// The cores this process may run on (its affinity mask; mpirun binds each process to its own).
int usable_cores();

}  // namespace partix::detail
