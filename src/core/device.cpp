#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "core/device_registry.h"
#include "core/errors.h"
#include "core/memory.h"
#include "partix/device.h"

namespace partix {
namespace {

constexpr int kMaxDevices = 4096;
// What a device costs before it holds any array: its worker thread (the stack pages it
// touches) and bookkeeping, about 30 KiB measured; checked with room to spare.
constexpr int64_t kDeviceFixedBytes = int64_t{64} << 10;

struct Registry {
  std::mutex mu;
  bool initialized = false;
  std::atomic<bool> ready{false};  // lock-free fast path once initialised
  int process_index = 0;
  int process_count = 1;
  int local_count = 0;
  std::vector<Device> all;
  std::deque<detail::DeviceCounters> counters;  // deque: stable addresses
};

detail::ProcessHooks& process_hooks() {
  static detail::ProcessHooks hooks;
  return hooks;
}

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: device workers may outlive main
  return *r;
}

// Devices are process-major: process p holds ids [p * count, (p + 1) * count). Every process
// must have the same count (checked with the others when there are several).
void initialize_locked(Registry& r, int count) {
  const detail::ProcessHooks& hooks = process_hooks();
  const detail::ProcessLaunch launch =
      hooks.launch != nullptr ? hooks.launch() : detail::ProcessLaunch{};
  if (launch.count > 1) {
    std::vector<int> all_procs;
    for (int p = 0; p < launch.count; ++p) all_procs.push_back(p);
    std::vector<std::string> counts =
        hooks.exchange(all_procs, std::to_string(count), "distributed::initialize");
    for (int p = 0; p < launch.count; ++p) {
      if (counts[static_cast<size_t>(p)] != std::to_string(count)) {
        detail::fail("distributed::initialize",
                     "process {} has {} CPU device(s) but process {} has {}: every process must "
                     "have the same number (PARTIX_NUM_CPU_DEVICES)",
                     launch.index, count, p, counts[static_cast<size_t>(p)]);
      }
    }
    if (static_cast<int64_t>(count) * launch.count > kMaxDevices) {
      detail::fail("distributed::initialize", "{} processes of {} devices exceed {} devices",
                   launch.count, count, kMaxDevices);
    }
  }
  detail::check_host_memory("init", fmt::format("{} CPU devices (a worker thread each)", count),
                            count * kDeviceFixedBytes);
  r.process_index = launch.index;
  r.process_count = launch.count;
  r.local_count = count;
  r.all.clear();
  for (int p = 0; p < launch.count; ++p) {
    for (int i = 0; i < count; ++i) r.all.push_back(Device{p * count + i, p, "cpu"});
  }
  r.counters.resize(r.all.size());
  r.initialized = true;
  r.ready.store(true, std::memory_order_release);
}

Registry& initialized_registry() {
  Registry& r = registry();
  if (r.ready.load(std::memory_order_acquire)) return r;
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.initialized) {
    auto env = detail::parse_num_cpu_devices(std::getenv("PARTIX_NUM_CPU_DEVICES"));
    initialize_locked(r, env.value_or(1));
  }
  return r;
}

}  // namespace

namespace detail {

void set_process_hooks(const ProcessHooks& hooks) { process_hooks() = hooks; }

std::optional<int> parse_num_cpu_devices(const char* text) {
  if (text == nullptr) return std::nullopt;
  std::string s(text);
  bool digits = !s.empty() && s.size() <= 9;
  for (char c : s) digits = digits && c >= '0' && c <= '9';
  if (!digits || std::stoi(s) < 1 || std::stoi(s) > kMaxDevices) {
    fail("PARTIX_NUM_CPU_DEVICES", "expected a positive integer of at most {}, got '{}'",
         kMaxDevices, s);
  }
  return std::stoi(s);
}

DeviceCounters& device_counters(int device) {
  Registry& r = initialized_registry();
  if (device < 0 || device >= static_cast<int>(r.counters.size())) {
    internal_error("device_counters", fmt::format("no device {}", device));
  }
  return r.counters[static_cast<size_t>(device)];
}

int usable_cores() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  return std::max(1, cores);
}

int threads_per_device() { return std::max(1, usable_cores() / std::max(1, local_device_count())); }

}  // namespace detail

void init(const InitOptions& options) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  int count = options.num_cpu_devices;
  if (count < 0 || count > kMaxDevices) {
    detail::fail("init", "num_cpu_devices must be between 1 and {}, got {}", kMaxDevices, count);
  }
  if (count == 0) {
    count = detail::parse_num_cpu_devices(std::getenv("PARTIX_NUM_CPU_DEVICES")).value_or(1);
  }
  detail::check(options.device_memory_bytes >= 0, "init",
                "device_memory_bytes must be non-negative, got {}", options.device_memory_bytes);
  if (options.device_memory_bytes > 0) detail::set_device_memory_limit(options.device_memory_bytes);
  if (r.initialized) {
    if (r.local_count != count) {
      detail::fail("init",
                   "devices are already initialised with {} CPU device(s); cannot change to {} "
                   "(call init before any other partix function)",
                   r.local_count, count);
    }
    return;
  }
  initialize_locked(r, count);
}

bool is_initialized() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.initialized;
}

const std::vector<Device>& devices() { return initialized_registry().all; }

std::vector<Device> local_devices() {
  Registry& r = initialized_registry();
  std::vector<Device> out;
  for (const Device& d : r.all) {
    if (d.process_index == r.process_index) out.push_back(d);
  }
  return out;
}

int device_count() { return static_cast<int>(initialized_registry().all.size()); }
int local_device_count() { return initialized_registry().local_count; }
namespace {
thread_local std::optional<Device> chosen_default_device;  // set_default_device's choice
}  // namespace

const Device& default_device() {
  if (chosen_default_device) return *chosen_default_device;
  Registry& r = initialized_registry();
  return r.all[static_cast<size_t>(r.process_index * r.local_count)];
}

std::optional<Device> set_default_device(std::optional<Device> device) {
  if (device) {
    Registry& r = initialized_registry();
    if (device->id < 0 || device->id >= static_cast<int>(r.all.size())) {
      detail::fail("default_device", "no device {} (the job has {} devices)", device->id,
                   r.all.size());
    }
    const Device& d = r.all[static_cast<size_t>(device->id)];
    if (d.process_index != r.process_index) {
      detail::fail("default_device",
                   "device {} belongs to process {}, not this process ({}): uncommitted work "
                   "runs on a device of the process that makes it",
                   d.id, d.process_index, r.process_index);
    }
    device = d;
  }
  std::optional<Device> previous = chosen_default_device;
  chosen_default_device = std::move(device);
  return previous;
}
int process_index() { return initialized_registry().process_index; }
int process_count() { return initialized_registry().process_count; }

MemoryStats memory_stats(int device_id) {
  if (device_id < 0 || device_id >= device_count()) {
    detail::fail("memory_stats", "no device {} (the job has {} devices)", device_id,
                 device_count());
  }
  const detail::DeviceCounters& c = detail::device_counters(device_id);
  return MemoryStats{c.in_use.load(), c.peak.load(), c.allocs.load(),
                     detail::device_memory_limit()};
}

void reset_peak_memory_stats() {
  for (int d = 0; d < device_count(); ++d) {
    detail::DeviceCounters& c = detail::device_counters(d);
    c.peak.store(c.in_use.load());
  }
}

}  // namespace partix
