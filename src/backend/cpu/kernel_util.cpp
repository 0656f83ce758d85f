#include "backend/cpu/kernel_util.h"

#include <immintrin.h>

// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as maybe-uninitialized
// (GCC bug 105593); the values are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdlib>
#include <memory>

namespace partix::backend::cpu {

namespace {

void bf16_to_f32_n(const uint16_t* in, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void f32_to_bf16_n(const float* in, uint16_t* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

void f16_to_f32_n(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(float16::from_bits(in[i]));
}

void f32_to_f16_n(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  // vcvtps2ph rounds to nearest even with subnormals, as partix::float16 does, but keeps
  // NaN payloads; partix::float16 makes every NaN sign | 0x7e00, so patch those lanes.
  const __m512i sign_mask = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(in + i);
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan) {
      __m512i sign = _mm512_srli_epi32(_mm512_and_si512(_mm512_castps_si512(v), sign_mask), 16);
      __m256i canon = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
      h = _mm256_mask_mov_epi16(h, nan, canon);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = float16(in[i]).bits;
}

}  // namespace

void half_to_f32(DType half, const uint16_t* in, float* out, int64_t n) {
  if (half == DType::BF16) {
    bf16_to_f32_n(in, out, n);
  } else {
    f16_to_f32_n(in, out, n);
  }
}

void f32_to_half(DType half, const float* in, uint16_t* out, int64_t n) {
  if (half == DType::BF16) {
    f32_to_bf16_n(in, out, n);
  } else {
    f32_to_f16_n(in, out, n);
  }
}

void* thread_scratch(int64_t bytes, int slot) {
  struct Block {
    void* ptr = nullptr;
    int64_t size = 0;
    ~Block() { std::free(ptr); }
  };
  thread_local Block blocks[4];
  Block& b = blocks[slot];
  if (b.size < bytes) {
    std::free(b.ptr);
    b.size = (bytes + 4095) / 4096 * 4096;
    b.ptr = std::aligned_alloc(64, static_cast<size_t>(b.size));
    if (!b.ptr) {
      b.size = 0;
      return nullptr;
    }
  }
  return b.ptr;
}

}  // namespace partix::backend::cpu
