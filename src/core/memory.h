// Host memory: what is available now, and checks before large allocations, so that running
// out is a partix::Error naming what was being allocated rather than an OOM kill (Linux
// overcommits: a huge allocation succeeds and the process dies when its pages are touched).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace partix::detail {

// Bytes this process can still use: the smaller of the kernel's MemAvailable and the
// cgroup's remaining limit, plus what partix's allocator holds cached. INT64_MAX when unknown.
int64_t available_host_bytes();
// The same for deciding whether nbytes fits: a reading younger than 200 ms that is at least four
// times nbytes answers without reading the limits again (the answer could not change unless
// the host lost three quarters of its free memory meanwhile).
int64_t available_host_bytes_for(int64_t nbytes);
// How many times this process has read the limits (for tests).
int64_t host_limit_readings();
// Gives the buffer pool's cached blocks back to the system (core/buffer.cpp): after a phase
// that freed buffers of sizes that will not come again (per-layer weights once stacked).
void release_pool_cache();
// Bytes the buffer pool holds cached (core/buffer.cpp): its shared cache and every thread's own.
int64_t pool_cached_bytes();

// Allocations below this are not checked (reading the limits costs a few microseconds).
inline constexpr int64_t kCheckedAllocationBytes = int64_t{32} << 20;

// Throws partix::Error "[api] out of host memory: <what> needs N bytes, M available" when a
// checked allocation of nbytes cannot fit. Returns the bytes available it compared against
// (INT64_MAX when nbytes is below the checked size, or the limits are unknown).
int64_t check_host_memory(std::string_view api, std::string_view what, int64_t nbytes);

// A host staging buffer of nbytes: checked as above, and std::bad_alloc becomes an Error.
std::vector<char> host_staging(std::string_view api, std::string_view what, int64_t nbytes);

// Bytes each device may hold (InitOptions::device_memory_bytes or PARTIX_DEVICE_MEMORY_BYTES);
// 0 means no limit but the host's memory.
int64_t device_memory_limit();
void set_device_memory_limit(int64_t bytes);
int64_t parse_device_memory_bytes(const char* text);

// "1.5 GiB": sizes in messages.
std::string format_bytes(int64_t bytes);

}  // namespace partix::detail
