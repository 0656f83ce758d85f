// XXH64, the 64-bit xxHash of Yann Collet (seed 0), computed incrementally. Checkpoints store
// it for every chunk so that a flipped byte in a data file is an error, never a silently
// different value; it runs at memory speed, so hashing hides under the write it guards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace partix::detail {

class Xxh64 {
 public:
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  uint64_t acc_[4] = {0x9E3779B185EBCA87ull + 0xC2B2AE3D27D4EB4Full, 0xC2B2AE3D27D4EB4Full, 0,
                      0 - 0x9E3779B185EBCA87ull};
  unsigned char pending_[32] = {};
  size_t pending_n_ = 0;
  uint64_t total_ = 0;
};

uint64_t xxh64(const void* data, size_t n);

// 16 lowercase hex digits, and back (nullopt-like: returns false for anything else).
std::string hex64(uint64_t v);
bool parse_hex64(std::string_view text, uint64_t* out);

}  // namespace partix::detail
