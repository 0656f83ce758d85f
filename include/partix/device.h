// Devices. Virtual CPU devices: environment variable PARTIX_NUM_CPU_DEVICES
// (default 1), or partix::init({.num_cpu_devices = 8}) before first use. Under mpirun that is
// the count per process, and devices() lists those of every process, process-major.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace partix {

struct Device {
  int id = 0;
  int process_index = 0;
  std::string platform = "cpu";
  friend bool operator==(const Device& a, const Device& b) { return a.id == b.id; }
};

struct InitOptions {
  int num_cpu_devices = 0;  // 0: from PARTIX_NUM_CPU_DEVICES, else 1
  // Bytes each device may hold; an allocation past it, or a program whose planned peak
  // exceeds it, raises partix::Error. 0: from PARTIX_DEVICE_MEMORY_BYTES, else no limit but
  // the host's available memory (which is always checked).
  int64_t device_memory_bytes = 0;
};

// Initialises the device set. Precondition: not yet initialised with different options
// (a second call with the same count is a no-op; otherwise throws partix::Error).
void init(const InitOptions& options = {});
bool is_initialized();

const std::vector<Device>& devices();  // every device of the job, by id
std::vector<Device> local_devices();   // the devices of this process
int device_count();
int local_device_count();
int process_index();
int process_count();
// Where arrays made from host values live, and where eager ops and jits whose arguments are
// all uncommitted run: this process's first device (device 0 in a single process), unless
// set_default_device chose another on this thread.
const Device& default_device();
// JAX's jax.default_device: makes `device` (nullopt: this process's first device) the default
// device of this thread and returns the previous choice (nullopt: none was made). Throws
// partix::Error naming the device unless it is one of this process's devices.
std::optional<Device> set_default_device(std::optional<Device> device);
// The choice of set_default_device for one scope: restored when the scope ends.
class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(const Device& device) : previous_(set_default_device(device)) {}
  ~DefaultDeviceScope() { set_default_device(previous_); }
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  std::optional<Device> previous_;
};

// Per-device allocator statistics (as JAX's Device.memory_stats()).
struct MemoryStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t num_allocs = 0;
  int64_t bytes_limit = 0;  // the per-device limit; 0: none but the host's memory
};
MemoryStats memory_stats(int device_id);
// Sets each device's peak to its current usage.
void reset_peak_memory_stats();

}  // namespace partix
