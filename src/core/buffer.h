// Per-device buffers from an allocator that records current and peak bytes per device.
#pragma once

#include <cstdint>
#include <memory>

namespace partix::detail {

class Buffer {
 public:
  Buffer() = default;
  // Uninitialised memory of nbytes on the device. Alignment 64 bytes.
  static Buffer allocate(int device, int64_t nbytes);
  static Buffer zeros(int device, int64_t nbytes);

  bool valid() const { return storage_ != nullptr; }
  void* data() const;
  int64_t nbytes() const;
  int device() const;
  // True when no other Buffer handle shares this storage (safe to write in place).
  bool unique() const { return storage_.use_count() == 1; }
  template <class T>
  T* as() const { return static_cast<T*>(data()); }

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
};

// Allocation accounting (the public memory_stats reads it).
void record_alloc(int device, int64_t nbytes);
void record_free(int device, int64_t nbytes);

}  // namespace partix::detail
