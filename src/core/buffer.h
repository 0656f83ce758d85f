// Per-device buffers from an allocator that records current and peak bytes per device.
#pragma once

#include <cstdint>
#include <memory>

namespace partix::detail {

class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = default;
  Buffer& operator=(const Buffer&) = default;
  Buffer(Buffer&& o) noexcept : storage_(std::move(o.storage_)), ptr_(o.ptr_) { o.ptr_ = nullptr; }
  Buffer& operator=(Buffer&& o) noexcept {
    storage_ = std::move(o.storage_);
    ptr_ = o.ptr_;
    if (&o != this) o.ptr_ = nullptr;
    return *this;
  }
  // Uninitialised memory of nbytes on the device. Alignment 64 bytes.
  static Buffer allocate(int device, int64_t nbytes);
  static Buffer zeros(int device, int64_t nbytes);
  // Memory attributed to no device, for results that several devices share (aliases).
  static Buffer shared(int64_t nbytes);
  // A view of this buffer's memory attributed to `device` (its bytes count there, as if it
  // were a copy). Devices of one process share immutable collective results this way.
  Buffer alias_for(int device) const;
  // A read-only view of nbytes of this buffer's memory from `offset` (a multiple of 64, so the
  // view keeps the allocator's alignment), attributed to this buffer's device and counted there
  // as if it were a copy (memory plans count a scanned slice as a fresh buffer). The memory
  // stays alive while the view does; neither is written in place while the other lives.
  Buffer view(int64_t offset, int64_t nbytes) const;

  bool valid() const { return storage_ != nullptr; }
  // Kept beside the handle: the interpreter asks for every operand's address on every
  // instruction, and a read through the shared storage missed the cache after each large
  // kernel (one miss per operand per device).
  void* data() const { return ptr_; }
  int64_t nbytes() const;
  int device() const;
  // True when no other Buffer handle shares this memory and it is not an alias of a shared
  // result (safe to write in place).
  bool unique() const;
  template <class T>
  T* as() const { return static_cast<T*>(data()); }

 private:
  struct Storage;
  static std::shared_ptr<Storage> new_storage(int device, int64_t nbytes);
  std::shared_ptr<Storage> storage_;
  void* ptr_ = nullptr;  // storage_->ptr
};

// Allocation accounting (the public memory_stats reads it).
void record_alloc(int device, int64_t nbytes);
void record_free(int device, int64_t nbytes);

}  // namespace partix::detail
