#include "core/buffer.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/device_registry.h"
#include "core/errors.h"

namespace partix::detail {

struct Buffer::Storage {
  void* ptr = nullptr;
  int64_t nbytes = 0;
  int device = 0;                  // -1: attributed to no device
  std::shared_ptr<Storage> base;   // set for aliases: the memory is base's
  ~Storage() {
    if (!base) std::free(ptr);
    if (device >= 0) record_free(device, nbytes);
  }
};

Buffer Buffer::allocate(int device, int64_t nbytes) {
  if (nbytes < 0) internal_error("Buffer", "negative size");
  auto s = std::make_shared<Storage>();
  s->device = device;
  s->nbytes = nbytes;
  if (nbytes > 0) {
    size_t rounded = (static_cast<size_t>(nbytes) + 63) / 64 * 64;
    s->ptr = std::aligned_alloc(64, rounded);
    if (!s->ptr) {
      s->nbytes = 0;
      fail("Buffer", "out of host memory allocating {} bytes on device {}", nbytes, device);
    }
  }
  record_alloc(device, nbytes);
  Buffer b;
  b.storage_ = std::move(s);
  return b;
}

Buffer Buffer::shared(int64_t nbytes) {
  auto s = std::make_shared<Storage>();
  s->device = -1;
  s->nbytes = nbytes;
  if (nbytes > 0) {
    s->ptr = std::aligned_alloc(64, (static_cast<size_t>(nbytes) + 63) / 64 * 64);
    if (!s->ptr) {
      s->nbytes = 0;
      fail("Buffer", "out of host memory allocating {} bytes", nbytes);
    }
  }
  Buffer b;
  b.storage_ = std::move(s);
  return b;
}

Buffer Buffer::alias_for(int device) const {
  auto s = std::make_shared<Storage>();
  s->base = storage_->base ? storage_->base : storage_;
  s->ptr = storage_->ptr;
  s->nbytes = storage_->nbytes;
  s->device = device;
  record_alloc(device, s->nbytes);
  Buffer b;
  b.storage_ = std::move(s);
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

void* Buffer::data() const { return storage_ ? storage_->ptr : nullptr; }
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
