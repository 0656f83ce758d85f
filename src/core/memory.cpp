#include "core/memory.h"

#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <new>
#include <string>

#include "core/errors.h"
#include "core/fault_injection.h"

namespace partix::detail {

namespace {

constexpr int64_t kUnknown = std::numeric_limits<int64_t>::max();

// MemAvailable from /proc/meminfo, in bytes.
int64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return kUnknown;
}

int64_t read_number(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return kUnknown;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return end && *end == '\0' && v >= 0 ? v : kUnknown;
}

// What the cgroup (v2) still allows this process: memory.max - memory.current.
int64_t cgroup_left() {
  const int64_t max = read_number("/sys/fs/cgroup/memory.max");
  if (max == kUnknown) return kUnknown;
  const int64_t cur = read_number("/sys/fs/cgroup/memory.current");
  if (cur == kUnknown) return kUnknown;
  return max > cur ? max - cur : 0;
}

std::atomic<int64_t> g_device_limit{-1};

// The last reading of the limits (before adding the pool's cached blocks), and when it was
// taken: reading them parses /proc/meminfo and the cgroup's files, tens of microseconds, and
// a program's run checks its buffers every time (a decode step: every token).
constexpr auto kReadingAge = std::chrono::milliseconds(200);
struct Reading {
  int64_t bytes = kUnknown;
  std::chrono::steady_clock::time_point at;
};
std::mutex g_reading_mu;
Reading g_reading;  // guarded by g_reading_mu
std::atomic<int64_t> g_readings{0};

}  // namespace

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / (1 << 20));
  if (bytes >= 1024) return fmt::format("{:.1f} KiB", b / 1024);
  return fmt::format("{} B", bytes);
}

int64_t available_host_bytes() {
  int64_t avail = std::min(mem_available(), cgroup_left());
  g_readings.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(g_reading_mu);
    g_reading = {avail, std::chrono::steady_clock::now()};
  }
  if (avail == kUnknown) return kUnknown;
  return avail + pool_cached_bytes();
}

int64_t available_host_bytes_for(int64_t nbytes) {
  {
    std::lock_guard<std::mutex> lock(g_reading_mu);
    if (g_reading.bytes != kUnknown && nbytes <= g_reading.bytes / 4 &&
        std::chrono::steady_clock::now() - g_reading.at < kReadingAge) {
      return g_reading.bytes + pool_cached_bytes();
    }
  }
  return available_host_bytes();
}

int64_t host_limit_readings() { return g_readings.load(std::memory_order_relaxed); }

int64_t check_host_memory(std::string_view api, std::string_view what, int64_t nbytes) {
  if (nbytes < kCheckedAllocationBytes) return kUnknown;
  const int64_t avail = available_host_bytes_for(nbytes);
  if (nbytes > avail) {
    fail(api, "out of host memory: {} needs {} ({} bytes), {} available", what,
         format_bytes(nbytes), nbytes, format_bytes(avail));
  }
  return avail;
}

std::vector<char> host_staging(std::string_view api, std::string_view what, int64_t nbytes) {
  if (nbytes < 0) internal_error("host_staging", "negative size");
  maybe_inject_allocation_fault(api, -1, nbytes);
  check_host_memory(api, what, nbytes);
  try {
    return std::vector<char>(static_cast<size_t>(nbytes));
  } catch (const std::bad_alloc&) {
    fail(api, "out of host memory: {} needs {} ({} bytes)", what, format_bytes(nbytes), nbytes);
  } catch (const std::length_error&) {
    fail(api, "out of host memory: {} needs {} ({} bytes)", what, format_bytes(nbytes), nbytes);
  }
}

int64_t parse_device_memory_bytes(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < 0) {
    fail("PARTIX_DEVICE_MEMORY_BYTES", "expected a non-negative number of bytes, got '{}'", text);
  }
  return v;
}

int64_t device_memory_limit() {
  const int64_t l = g_device_limit.load(std::memory_order_relaxed);
  if (l >= 0) return l;
  const char* env = std::getenv("PARTIX_DEVICE_MEMORY_BYTES");
  const int64_t v = env ? parse_device_memory_bytes(env) : 0;
  g_device_limit.store(v);
  return v;
}

void set_device_memory_limit(int64_t bytes) {
  check(bytes >= 0, "set_device_memory_limit", "expected a non-negative number of bytes, got {}",
        bytes);
  g_device_limit.store(bytes);
}

}  // namespace partix::detail
