#include "core/buffer.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include "core/device_registry.h"
#include "core/errors.h"
#include "core/fault_injection.h"
#include "core/memory.h"

namespace partix::detail {

namespace {

// Freed blocks are kept for reuse: a fresh large allocation is a new mapping whose every
// page faults and is zeroed by the kernel, which costs about as much as a copy of the data.
// Sizes are rounded to 64 bytes, or above 64 KiB to quarter powers of two, so that blocks of
// nearby sizes are shared. The cache holds at most half of physical memory
// (PARTIX_POOL_BYTES overrides): a training step frees and takes again what its devices hold
// at their peak, and with 8 devices holding 12 GiB between them a quarter made every step
// fault a third of its buffers in afresh. Memory statistics count only live buffers, and
// allocations that find the host short give the cache back first.
//
// Small blocks go through a cache of the calling thread first: a step's many small buffers are
// freed and taken again on the same few threads, and a shared lock there made the threads that
// run devices sleep on each other (futex waits on every instruction).
class Pool {
 public:
  static Pool& get() {
    static Pool* p = new Pool;  // never destroyed: buffers may die during static destruction
    return *p;
  }
  static size_t round(size_t n) {
    if (n <= 65536) return (n + 63) / 64 * 64;
    size_t top = size_t{1} << (63 - __builtin_clzll(n - 1));  // largest power of two < n
    size_t step = top / 4;
    return (n + step - 1) / step * step;
  }
  // A block of `bytes`: a cached one, else fresh memory (checked against what the host has
  // left when large, so that overcommitted memory is not touched into an OOM kill).
  void* take(size_t bytes, int device) {
    if (bytes <= kLocalBlock) {
      if (void* p = local_take(bytes)) return p;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_.fetch_sub(bytes, std::memory_order_relaxed);
        return p;
      }
    }
    if (static_cast<int64_t>(bytes) >= kCheckedAllocationBytes) {
      // The check counts cached blocks as available; where the host has too little without
      // them, give them back before touching new pages.
      const int64_t avail = check_host_memory(
          "Buffer",
          device >= 0 ? fmt::format("a buffer on device {}", device)
                      : std::string("a shared collective result"),
          static_cast<int64_t>(bytes));
      if (avail != std::numeric_limits<int64_t>::max() &&
          avail - cached() < static_cast<int64_t>(bytes)) {
        trim(0);
      }
    }
    void* p = std::aligned_alloc(64, bytes);
    if (!p) {
      trim(0);  // give the cache back and try once more
      p = std::aligned_alloc(64, bytes);
    }
    return p;
  }
  void give(void* p, size_t bytes) {
    if (bytes <= kLocalBlock && local_give(p, bytes)) return;
    if (cached_.load(std::memory_order_relaxed) + bytes > cap_) {
      std::free(p);
      return;
    }
    give_shared(p, bytes);
  }
  // The shared cache's bytes and every thread's own.
  int64_t cached() {
    size_t sum = cached_.load(std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(locals_mu_);
    for (const Local* l : locals_) sum += l->bytes.load(std::memory_order_relaxed);
    return static_cast<int64_t>(sum);
  }
  // Frees cached blocks down to `keep` bytes: the shared cache's, and the calling thread's own
  // (other threads' caches hold at most local_cap_ each, and count as kept).
  void trim(size_t keep) {
    local_release();
    const size_t kept = static_cast<size_t>(cached());  // other threads' caches count as kept
    const size_t others = kept - std::min(kept, cached_.load(std::memory_order_relaxed));
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_) {
      while (!blocks.empty() && cached_.load(std::memory_order_relaxed) + others > keep) {
        std::free(blocks.back());
        blocks.pop_back();
        cached_.fetch_sub(size, std::memory_order_relaxed);
      }
    }
  }

 private:
  static constexpr size_t kLocalBlock = size_t{256} << 10;  // largest block a thread keeps
  static constexpr size_t kLocalBytes = size_t{16} << 20;   // what a thread keeps at most

  // A thread's blocks (counted in its own `bytes`, not in cached_: taking and giving them touch
  // no memory another thread writes, where one shared counter moved between the cores on every
  // instruction of 8 devices on 2 threads). Given back to the shared cache when the thread
  // ends; buffers freed after that (static objects destroyed at exit) go to the shared cache.
  // Blocks up to 64 KiB (multiples of 64 bytes: Pool::round) are found by index, the few larger
  // sizes by hash: a decode step takes and gives back thousands of small blocks.
  struct Local {
    static constexpr size_t kIndexed = 65536 / 64;
    std::vector<void*> small[kIndexed];
    std::unordered_map<size_t, std::vector<void*>> large;
    // Written by the owning thread only (a load and a store, no locked instruction); read by
    // cached().
    std::atomic<size_t> bytes{0};
    void add(size_t n) {
      bytes.store(bytes.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    void sub(size_t n) {
      bytes.store(bytes.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
    }
    std::vector<void*>& blocks(size_t size) {
      return size <= 65536 ? small[size / 64 - 1] : large[size];
    }
    void release() {
      for (size_t k = 0; k < kIndexed; ++k) {
        for (void* p : small[k]) Pool::get().give_shared(p, (k + 1) * 64);
        small[k].clear();
      }
      for (auto& [size, list] : large) {
        for (void* p : list) Pool::get().give_shared(p, size);
        list.clear();
      }
      bytes.store(0, std::memory_order_relaxed);
    }
  };
  struct LocalGuard {
    Local* local = nullptr;
    ~LocalGuard();
  };
  // Not inlined: a device's fiber may move to another thread between two instructions, so the
  // thread's cache is looked up afresh on every call and never held across one. Null once the
  // thread's cache is gone.
  [[gnu::noinline]] static Local* local();
  [[gnu::noinline]] static void* local_take(size_t bytes) {
    Local* l = local();
    if (!l) return nullptr;
    std::vector<void*>* list = nullptr;
    if (bytes <= 65536) {
      list = &l->small[bytes / 64 - 1];
    } else {
      auto it = l->large.find(bytes);
      if (it == l->large.end()) return nullptr;
      list = &it->second;
    }
    if (list->empty()) return nullptr;
    void* p = list->back();
    list->pop_back();
    l->sub(bytes);
    return p;
  }
  [[gnu::noinline]] static bool local_give(void* p, size_t bytes) {
    Local* l = local();
    if (!l || l->bytes.load(std::memory_order_relaxed) + bytes > get().local_cap_) return false;
    l->blocks(bytes).push_back(p);
    l->add(bytes);
    return true;
  }
  [[gnu::noinline]] static void local_release() {
    if (Local* l = local()) l->release();
  }
  void give_shared(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[bytes].push_back(p);
    cached_.fetch_add(bytes, std::memory_order_relaxed);
  }

  Pool() {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    cap_ = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 2 : size_t{1} << 30;
    if (const char* env = std::getenv("PARTIX_POOL_BYTES")) cap_ = std::strtoull(env, nullptr, 10);
    local_cap_ = std::min(kLocalBytes, cap_ / 16);
  }
  void add_local(Local* l) {
    std::lock_guard<std::mutex> lock(locals_mu_);
    locals_.push_back(l);
  }
  void remove_local(Local* l) {
    std::lock_guard<std::mutex> lock(locals_mu_);
    locals_.erase(std::remove(locals_.begin(), locals_.end(), l), locals_.end());
  }
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::atomic<size_t> cached_{0};  // the shared cache's bytes
  size_t cap_ = 0;
  size_t local_cap_ = 0;  // what one thread keeps: kLocalBytes, less when the cap is small
  std::mutex locals_mu_;
  std::vector<Local*> locals_;
};

// Trivially destructible, so still readable while other thread-local and static objects are
// destroyed.
thread_local bool t_local_gone = false;

Pool::LocalGuard::~LocalGuard() {
  if (local) {
    local->release();
    Pool::get().remove_local(local);
    delete local;
  }
  local = nullptr;
  t_local_gone = true;
}

Pool::Local* Pool::local() {
  if (t_local_gone) return nullptr;
  thread_local LocalGuard guard;
  if (!guard.local) {
    guard.local = new Local;
    Pool::get().add_local(guard.local);
  }
  return guard.local;
}

}  // namespace

int64_t pool_cached_bytes() { return Pool::get().cached(); }
void release_pool_cache() {
  Pool::get().trim(0);
#if defined(__GLIBC__)
  // glibc keeps freed heap pages mapped (blocks under its mmap threshold): hand them back too.
  malloc_trim(0);
#endif
}

namespace {

// Buffer handles' control blocks (a shared_ptr's counts with its Storage, under 100 bytes):
// every result of every instruction, and every view and alias, makes one, so that on 8 devices
// they were a third of a decode step's calls to malloc. They come from a free list of the
// calling thread instead (at most kMaxFreeHandles blocks, given back to malloc when the thread
// ends); a block freed on another thread joins that thread's list. Under AddressSanitizer they
// go straight to malloc, which then still sees every use after free.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPoolHandles = false;
#else
constexpr bool kPoolHandles = true;
#endif
constexpr int kMaxFreeHandles = 4096;

struct FreeHandle {
  FreeHandle* next;
};
// Trivially destructible, so still readable while other thread-local objects are destroyed.
thread_local FreeHandle* t_free_handles = nullptr;
thread_local int t_free_count = 0;
thread_local bool t_handles_gone = false;

struct HandleListGuard {
  HandleListGuard() = default;
  ~HandleListGuard() {
    while (t_free_handles) {
      FreeHandle* h = t_free_handles;
      t_free_handles = h->next;
      ::operator delete(h);
    }
    t_free_count = 0;
    t_handles_gone = true;
  }
};

// The one block size the list holds: the first size asked for (all handles are one type).
std::atomic<size_t> g_handle_bytes{0};

// Not inlined, as Pool::local(): a fiber may move to another thread between two calls.
[[gnu::noinline]] void* take_handle(size_t bytes) {
  if (kPoolHandles && bytes == g_handle_bytes.load(std::memory_order_relaxed) && t_free_handles) {
    FreeHandle* h = t_free_handles;
    t_free_handles = h->next;
    --t_free_count;
    return h;
  }
  size_t none = 0;
  g_handle_bytes.compare_exchange_strong(none, bytes, std::memory_order_relaxed);
  return ::operator new(bytes);
}

[[gnu::noinline]] void give_handle(void* p, size_t bytes) {
  if (kPoolHandles && !t_handles_gone && bytes == g_handle_bytes.load(std::memory_order_relaxed) &&
      t_free_count < kMaxFreeHandles) {
    thread_local HandleListGuard guard;  // frees the list when the thread ends
    (void)guard;
    auto* h = static_cast<FreeHandle*>(p);
    h->next = t_free_handles;
    t_free_handles = h;
    ++t_free_count;
    return;
  }
  ::operator delete(p);
}

template <class T>
struct HandleAllocator {
  using value_type = T;
  HandleAllocator() = default;
  template <class U>
  HandleAllocator(const HandleAllocator<U>&) {}  // NOLINT: rebinding converts implicitly
  T* allocate(size_t n) { return static_cast<T*>(take_handle(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { give_handle(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HandleAllocator<U>&) const { return true; }
};

}  // namespace

struct Buffer::Storage {
  void* ptr = nullptr;
  int64_t nbytes = 0;
  size_t block = 0;                // the pool block size behind ptr
  int device = 0;                  // -1: attributed to no device
  std::shared_ptr<Storage> base;   // set for aliases: the memory is base's
  ~Storage() {
    if (!base && ptr) Pool::get().give(ptr, block);
    if (device >= 0) record_free(device, nbytes);
  }
};

// Pooled storage of `nbytes` for `device` (-1: shared by the devices of a collective, which
// count it through their aliases).
std::shared_ptr<Buffer::Storage> Buffer::new_storage(int device, int64_t nbytes) {
  if (nbytes < 0) internal_error("Buffer", "negative size");
  auto s = std::allocate_shared<Buffer::Storage>(HandleAllocator<Buffer::Storage>{});
  s->device = device;
  if (nbytes == 0) return s;
  maybe_inject_allocation_fault("Buffer", device, nbytes);
  const int64_t limit = device >= 0 ? device_memory_limit() : 0;
  if (limit > 0) {
    const int64_t in_use = device_counters(device).in_use.load();
    if (in_use + nbytes > limit) {
      fail("Buffer",
           "out of memory on device {}: allocating {} ({} bytes) with {} in use, limit {} per "
           "device",
           device, format_bytes(nbytes), nbytes, format_bytes(in_use), format_bytes(limit));
    }
  }
  const size_t block = Pool::round(static_cast<size_t>(nbytes));
  void* ptr = Pool::get().take(block, device);
  if (!ptr) {
    if (device >= 0) {
      fail("Buffer", "out of host memory allocating {} bytes on device {}", nbytes, device);
    }
    fail("Buffer", "out of host memory allocating {} bytes", nbytes);
  }
  // Only now does the storage own memory and count (its destructor gives both back).
  s->ptr = ptr;
  s->block = block;
  s->nbytes = nbytes;
  return s;
}

Buffer Buffer::allocate(int device, int64_t nbytes) {
  Buffer b;
  b.storage_ = new_storage(device, nbytes);
  b.ptr_ = b.storage_->ptr;
  record_alloc(device, nbytes);
  return b;
}

Buffer Buffer::shared(int64_t nbytes) {
  Buffer b;
  b.storage_ = new_storage(-1, nbytes);
  b.ptr_ = b.storage_->ptr;
  return b;
}

Buffer Buffer::alias_for(int device) const {
  auto s = std::allocate_shared<Storage>(HandleAllocator<Storage>{});
  s->base = storage_->base ? storage_->base : storage_;
  s->ptr = storage_->ptr;
  s->nbytes = storage_->nbytes;
  s->device = device;
  record_alloc(device, s->nbytes);
  Buffer b;
  b.storage_ = std::move(s);
  b.ptr_ = b.storage_->ptr;
  return b;
}

Buffer Buffer::view(int64_t offset, int64_t nbytes) const {
  if (offset < 0 || nbytes < 0 || offset + nbytes > this->nbytes() || offset % 64 != 0) {
    internal_error("Buffer", "a view outside its buffer or misaligned");
  }
  auto s = std::allocate_shared<Storage>(HandleAllocator<Storage>{});
  s->base = storage_->base ? storage_->base : storage_;
  s->ptr = static_cast<char*>(storage_->ptr) + offset;
  s->nbytes = nbytes;
  s->device = storage_->device;
  if (s->device >= 0) record_alloc(s->device, nbytes);
  Buffer b;
  b.storage_ = std::move(s);
  b.ptr_ = b.storage_->ptr;
  return b;
}

bool Buffer::unique() const {
  // Aliases of a shared collective result are never written in place: other devices'
  // threads read the same memory, and a relaxed reference count would not order their last
  // read before this device's write.
  return storage_.use_count() == 1 && !storage_->base;
}

Buffer Buffer::zeros(int device, int64_t nbytes) {
  Buffer b = allocate(device, nbytes);
  if (nbytes > 0) std::memset(b.data(), 0, static_cast<size_t>(nbytes));
  return b;
}

int64_t Buffer::nbytes() const { return storage_ ? storage_->nbytes : 0; }
int Buffer::device() const { return storage_ ? storage_->device : -1; }

void record_alloc(int device, int64_t nbytes) {
  DeviceCounters& c = device_counters(device);
  int64_t now = c.in_use.fetch_add(nbytes) + nbytes;
  c.allocs.fetch_add(1);
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

void record_free(int device, int64_t nbytes) { device_counters(device).in_use.fetch_sub(nbytes); }

}  // namespace partix::detail
