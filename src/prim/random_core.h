// The threefry2x32 block function and bits -> uniform float mapping.
#pragma once

#include <cstdint>
#include <utility>

#include "partix/dtype.h"

namespace partix::prim {

std::pair<uint32_t, uint32_t> threefry2x32(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1);

// Uniform in [0, 1), exactly representable in dtype (so rounding never reaches 1).
inline double uniform_from_bits(uint32_t x0, uint32_t x1, DType dtype) {
  switch (dtype) {
    case DType::F64: {
      uint64_t u = (static_cast<uint64_t>(x0) << 32 | x1) >> 11;
      return static_cast<double>(u) * 0x1.0p-53;
    }
    case DType::BF16: return static_cast<double>(x0 >> 24) * 0x1.0p-8;
    case DType::F16: return static_cast<double>(x0 >> 21) * 0x1.0p-11;
    default: return static_cast<double>(x0 >> 8) * 0x1.0p-24;
  }
}

}  // namespace partix::prim
