#include "backend/cpu/half_dot.h"

#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/kernel_util.h"
#include "backend/cpu/quant_dot.h"

namespace partix::backend::cpu {

namespace {

float widen(DType dt, uint16_t v) {
  return dt == DType::BF16 ? bf16_to_f32(v) : static_cast<float>(float16::from_bits(v));
}

// Portable: one weight row against R activation rows.
template <int R>
void rows_portable(DType dt, const float* x, const uint16_t* w, int64_t K, float* out) {
  float acc[R] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float v = widen(dt, w[k]);
    for (int r = 0; r < R; ++r) acc[r] += x[r * K + k] * v;
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

// 8 weights widened to f32 (bf16: the bits shifted into the top half of an f32; f16: F16C's
// conversion). A function of its own, not a lambda: a lambda does not inherit its enclosing
// function's target, so without -march=native (the sanitizer presets) it would not compile.
template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load_w(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(h);
  }
}

// AVX2: two independent accumulators per activation row.
template <int R, bool kBf16>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(const float* x, const uint16_t* w,
                                                         int64_t K, float* out) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m256 w0 = load_w<kBf16>(w + k), w1 = load_w<kBf16>(w + k + 8);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * K + k), w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * K + k + 8), w1, acc[r][1]);
    }
  }
  for (; k + 8 <= K; k += 8) {
    const __m256 w0 = load_w<kBf16>(w + k);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * K + k), w0, acc[r][0]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256 s = _mm256_add_ps(acc[r][0], acc[r][1]);
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    float tail = 0;
    for (int64_t t = k; t < K; ++t) {
      const uint16_t b = w[t];
      const float wv = kBf16 ? bf16_to_f32(b) : _cvtsh_ss(b);
      tail += x[r * K + t] * wv;
    }
    out[r] = _mm_cvtss_f32(v) + tail;
  }
}

template <int R>
void rows_dispatch(DType dt, const float* x, const uint16_t* w, int64_t K, float* out) {
  static const bool avx2 = quant_isa_supported(QuantIsa::kAvx2);  // AVX2, FMA and F16C
  if (!avx2) return rows_portable<R>(dt, x, w, K, out);
  if (dt == DType::BF16) return rows_avx2<R, true>(x, w, K, out);
  rows_avx2<R, false>(x, w, K, out);
}

}  // namespace

void half_weight_matmul(DType dt, const float* x, const uint16_t* w, float* y, int64_t M,
                        int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(y, y + M * N, 0.0f);
    return;
  }
  // Weight rows split over the team, each row read once for four activation rows at a time;
  // blocks of at least ~32K multiply-adds.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / (K * std::min<int64_t>(M, 4)));
  parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
    float out[4];
    for (int64_t n = n0; n < n1; ++n) {
      const uint16_t* wr = w + n * K;
      int64_t m = 0;
      for (; m + 4 <= M; m += 4) {
        rows_dispatch<4>(dt, x + m * K, wr, K, out);
        for (int r = 0; r < 4; ++r) y[(m + r) * N + n] = out[r];
      }
      for (; m < M; ++m) {
        rows_dispatch<1>(dt, x + m * K, wr, K, out);
        y[m * N + n] = out[0];
      }
    }
  });
}

}  // namespace partix::backend::cpu
