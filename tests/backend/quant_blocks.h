// Random GGUF blocks for the quantized-dtype tests: codes uniform over their range, scales
// (f16) and Q4_K / Q6_K sub-block scales drawn so that values are O(1).
#pragma once

#include <cstring>
#include <random>
#include <vector>

#include "partix/array.h"
#include "partix/dtype.h"

namespace partix::testing_quant {

inline void put_half(uint8_t* p, float v) {
  const uint16_t b = float16(v).bits;
  std::memcpy(p, &b, 2);
}

// rows x K elements of dtype dt (K a multiple of its block), as consecutive blocks.
inline std::vector<uint8_t> random_blocks(DType dt, int64_t rows, int64_t K, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> scale(0.002f, 0.03f);
  const int64_t nblocks = rows * K / dtype_block_elems(dt);
  const int bs = dtype_size(dt);
  std::vector<uint8_t> out(static_cast<size_t>(nblocks * bs));
  for (int64_t b = 0; b < nblocks; ++b) {
    uint8_t* p = out.data() + b * bs;
    for (int i = 0; i < bs; ++i) p[i] = static_cast<uint8_t>(rng());
    switch (dt) {
      case DType::Q8_0:
        put_half(p, scale(rng));
        break;
      case DType::Q4_0:
        put_half(p, 8 * scale(rng));
        break;
      case DType::Q4_1:
        put_half(p, 8 * scale(rng));
        put_half(p + 2, -60 * scale(rng));
        break;
      case DType::Q4_K:
        put_half(p, scale(rng) / 4);
        put_half(p + 2, scale(rng) / 4);
        break;
      case DType::Q6_K:
        for (int i = 0; i < 16; ++i) p[192 + i] = static_cast<uint8_t>(rng() % 64);  // int8 scales
        put_half(p + 208, scale(rng) / 8);
        break;
      default:
        break;
    }
  }
  return out;
}

inline std::vector<float> random_floats(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

// A [rows, k] array of random blocks (one device, replicated).
inline Array quantized(DType dt, int64_t rows, int64_t k, uint64_t seed) {
  std::vector<uint8_t> w = random_blocks(dt, rows, k, seed);
  return from_blocks(w.data(), static_cast<int64_t>(w.size()), dt, {rows, k});
}

inline constexpr DType kQuantTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K,
                                        DType::Q6_K};

}  // namespace partix::testing_quant
