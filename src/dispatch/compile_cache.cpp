#include "dispatch/compile_cache.h"

#include <cstdlib>

#include "core/errors.h"

namespace partix::detail {

CompileCache::CompileCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

CompileCache::Program CompileCache::get_or_compile(const std::string& key,
                                                   const CompileFn& compile) {
  std::shared_ptr<Flight> mine;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      auto it = slots_.find(key);
      if (it == slots_.end()) break;
      Slot& s = it->second;
      if (s.value) {
        lru_.splice(lru_.begin(), lru_, s.lru_entry);
        hits_++;
        return s.value;
      }
      // Another thread compiles this key: wait for it rather than compile it twice.
      std::shared_ptr<Flight> f = s.flight;
      compiled_.wait(lock, [&] { return f->done; });
      if (f->value) {
        hits_++;
        return f->value;  // even if already evicted again
      }
      // It failed: look again (someone may be compiling anew), else compile here.
    }
    mine = std::make_shared<Flight>();
    slots_[key].flight = mine;
    misses_++;
  }
  Program value;
  try {
    value = compile();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    slots_.erase(key);
    mine->done = true;
    compiled_.notify_all();
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // The slot is still ours: erase() leaves keys being compiled alone.
  Slot& s = slots_[key];
  s.value = value;
  s.flight.reset();
  lru_.push_front(key);
  s.lru_entry = lru_.begin();
  mine->value = value;
  mine->done = true;
  evict_locked();
  compiled_.notify_all();
  return value;
}

void CompileCache::evict_locked() {
  while (lru_.size() > capacity_) {
    slots_.erase(lru_.back());
    lru_.pop_back();
    evictions_++;
  }
}

void CompileCache::erase(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& k : keys) {
    auto it = slots_.find(k);
    if (it == slots_.end() || !it->second.value) continue;
    lru_.erase(it->second.lru_entry);
    slots_.erase(it);
  }
}

void CompileCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = std::max<size_t>(capacity, 1);
  evict_locked();
}

CompileCacheStats CompileCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CompileCacheStats{.hits = hits_,
                           .misses = misses_,
                           .evictions = evictions_,
                           .size = static_cast<int64_t>(lru_.size()),
                           .capacity = static_cast<int64_t>(capacity_)};
}

namespace {

size_t capacity_from_env() {
  const char* text = std::getenv("PARTIX_COMPILE_CACHE_SIZE");
  if (text == nullptr) return kDefaultCompileCacheSize;
  std::string s(text);
  bool digits = !s.empty() && s.size() <= 9;
  for (char c : s) digits = digits && c >= '0' && c <= '9';
  if (!digits || std::stoi(s) < 1) {
    fail("PARTIX_COMPILE_CACHE_SIZE", "expected a positive number of programs, got '{}'", s);
  }
  return static_cast<size_t>(std::stoi(s));
}

}  // namespace

CompileCache& compile_cache() {
  // Never destroyed: jitted functions held by statics drop their programs from it at exit.
  static CompileCache* cache = new CompileCache(capacity_from_env());
  return *cache;
}

}  // namespace partix::detail

namespace partix {

CompileCacheStats compile_cache_stats() { return detail::compile_cache().stats(); }

}  // namespace partix
