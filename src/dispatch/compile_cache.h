// The one cache of compiled programs that jit, eager ops and device_put share.
//
// Keys are canonical text made by the caller, prefixed by who made it: a one-op program's
// primitive, attributes, avals and shardings; a created value's traced text and sharding; a
// reshard's aval and both shardings; a jitted function's identity and call signature. A key
// names exactly one compile, so a hit returns what compiling again would give.
//
// Concurrent requests for one key compile once: the first compiles outside the lock and the
// others wait for it. Past the limit the least recently used program leaves the cache; callers
// hold programs by shared_ptr, so one that is running (or held by a jitted function's call, or
// a Lowered) lives on until they let go.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "partix/transforms.h"
#include "spmd/compile.h"

namespace partix::detail {

class CompileCache {
 public:
  using Program = std::shared_ptr<spmd::Compiled>;
  using CompileFn = std::function<Program()>;

  explicit CompileCache(size_t capacity);
  CompileCache(const CompileCache&) = delete;
  CompileCache& operator=(const CompileCache&) = delete;

  // The program for `key`, compiling it with `compile` on a miss. A compile that throws caches
  // nothing: the error reaches its caller, and each caller that was waiting for it compiles
  // for itself (so it sees its own error, as without the cache).
  Program get_or_compile(const std::string& key, const CompileFn& compile);

  // Drops these keys (a jitted function that dies takes its programs with it). Running
  // programs are unaffected.
  void erase(const std::vector<std::string>& keys);
  // At least 1. Shrinking evicts the least recently used programs at once.
  void set_capacity(size_t capacity);
  CompileCacheStats stats() const;

 private:
  // One key's compile: a waiter holds it and reads `value` once `done` (null: it failed).
  struct Flight {
    bool done = false;
    Program value;
  };
  struct Slot {
    Program value;                               // null while compiling
    std::shared_ptr<Flight> flight;              // while compiling
    std::list<std::string>::iterator lru_entry;  // valid once compiled
  };

  void evict_locked();

  mutable std::mutex mu_;
  std::condition_variable compiled_;
  std::unordered_map<std::string, Slot> slots_;
  std::list<std::string> lru_;  // compiled keys, most recently used first
  size_t capacity_;
  int64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

// The process's cache. Its limit: PARTIX_COMPILE_CACHE_SIZE programs, else
// kDefaultCompileCacheSize.
constexpr size_t kDefaultCompileCacheSize = 4096;
CompileCache& compile_cache();

}  // namespace partix::detail
