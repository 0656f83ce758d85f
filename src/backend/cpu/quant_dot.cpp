// Quantized x f32 matmul. Activations become Q8 blocks of 32 (scale dx, int8 codes, code sums
// per 16); each weight format decodes 32 of its codes at a time into unsigned bytes and the
// per-16 integer dot products with the activation codes are combined with the block's scales:
//   Q4_0  w = d (c - 8)              Q4_1  w = d c + m
//   Q8_0  w = d c (c signed)         Q4_K  w = d sc_j c - dmin mn_j  (sub-blocks of 32)
//   Q6_K  w = d sc_j (c - 32)        (sub-blocks of 16)
// Portable C++, AVX2 (maddubs) and 256-bit AVX512-VNNI (dpbusd) share everything but the
// integer dot of 32 codes; the instruction set is picked at run time. On AVX512-VNNI, Q4_0, Q4_1
// and Q8_0 take 512-bit kernels of their own (quant_dot_avx512.cpp).
#include "backend/cpu/quant_dot.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/kernel_util.h"
#include "backend/cpu/quant_dot_blocks.h"
#include "core/errors.h"
#include "core/quants.h"

namespace partix::backend::cpu {

namespace {

float half(const uint8_t* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return static_cast<float>(float16::from_bits(b));
}

using quant::Q8Block;

// Portable: the reference for the SIMD version, which must give the same bits.
void quantize_q8(const float* x, int64_t K, Q8Block* out) {
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* v = x + 32 * b;
    float amax = 0;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      const float a = std::fabs(v[i]);
      finite = finite && a <= std::numeric_limits<float>::max();
      amax = std::max(amax, a);
    }
    // A NaN or infinity must reach the result (as in an f32 matmul), not vanish in rounding:
    // the scale is NaN and the codes are 0 (any would do; 0 keeps every ISA alike).
    const float d = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
    const float inv = finite && d > 0 ? 1.0f / d : 0.0f;
    Q8Block& o = out[b];
    o.d = d;
    o.sum[0] = o.sum[1] = 0;
    for (int i = 0; i < 32; ++i) {
      // Codes stay in [-127, 127]: AVX2's maddubs sums of two products must fit in int16.
      const float r = std::clamp(std::nearbyint(v[i] * inv), -127.0f, 127.0f);
      o.q[i] = finite ? static_cast<int8_t>(r) : int8_t{0};
      o.sum[i / 16] += o.q[i];
    }
    o.ds = d * static_cast<float>(o.sum[0] + o.sum[1]);
  }
}

// AVX2: the same arithmetic (one f32 product, round half to even, clamp) on 8 lanes at once.
// The sum of a vector's eight int32 lanes. A function, not a lambda: lambdas do not inherit
// their enclosing function's target, so without -march=native they would not compile.
__attribute__((target("avx2,fma,f16c"))) inline int hsum_epi32(__m256i a) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

__attribute__((target("avx2,fma,f16c"))) void quantize_q8_avx2(const float* x, int64_t K,
                                                               Q8Block* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 fmax = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* v = x + 32 * b;
    __m256 f[4];
    __m256 amax = _mm256_setzero_ps();
    __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int j = 0; j < 4; ++j) {
      f[j] = _mm256_loadu_ps(v + 8 * j);
      const __m256 a = _mm256_andnot_ps(sign, f[j]);
      ok = _mm256_and_ps(ok, _mm256_cmp_ps(a, fmax, _CMP_LE_OQ));  // false for NaN and inf
      amax = _mm256_max_ps(amax, a);
    }
    const bool finite = _mm256_movemask_ps(ok) == 0xFF;
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = finite ? _mm_cvtss_f32(m) / 127.0f : std::numeric_limits<float>::quiet_NaN();
    const float inv = finite && d > 0 ? 1.0f / d : 0.0f;
    Q8Block& o = out[b];
    o.d = d;
    if (!finite) {
      o.sum[0] = o.sum[1] = 0;
      o.ds = d;
      std::memset(o.q, 0, sizeof o.q);
      continue;
    }
    const __m256 vi = _mm256_set1_ps(inv);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 r =
          _mm256_round_ps(_mm256_mul_ps(f[j], vi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    // Sums per 16 from the int32 lanes; then int32 -> int8 (the packs interleave 128-bit
    // lanes, the permute puts the groups of four back in order).
    o.sum[0] = hsum_epi32(_mm256_add_epi32(q[0], q[1]));
    o.sum[1] = hsum_epi32(_mm256_add_epi32(q[2], q[3]));
    o.ds = d * static_cast<float>(o.sum[0] + o.sum[1]);
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
}

// ---- decoding 32 codes (one activation block's worth) ----

// Q4_0/Q4_1: 16 bytes, low nibbles are elements 0..15, high nibbles 16..31.
void codes_q4(const uint8_t* qs, uint8_t* c) {
  for (int j = 0; j < 16; ++j) {
    c[j] = qs[j] & 0x0F;
    c[j + 16] = qs[j] >> 4;
  }
}
// Q4_K: 32 bytes per pair of sub-blocks; sub-block `odd` takes the high nibbles.
void codes_q4k(const uint8_t* q, int odd, uint8_t* c) {
  for (int l = 0; l < 32; ++l) c[l] = odd ? q[l] >> 4 : q[l] & 0x0F;
}
// Q6_K: block i (0..3) of a half: nibble (i / 2) of ql[l + 32 (i % 2)], top bits 2i of qh[l].
void codes_q6k(const uint8_t* ql, const uint8_t* qh, int i, uint8_t* c) {
  for (int l = 0; l < 32; ++l) {
    const uint8_t lo = ql[l + 32 * (i % 2)];
    const uint8_t nib = i < 2 ? (lo & 0x0F) : (lo >> 4);
    c[l] = static_cast<uint8_t>(nib | (((qh[l] >> (2 * i)) & 3) << 4));
  }
}

// Q4_K's 6-bit scale and min of sub-block j (0..7) from its 12 packed bytes.
inline void scale_min_q4k(const uint8_t* s, int j, int* scale, int* mn) {
  *scale = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
  *mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
}

// ---- portable: 32 codes unpacked to bytes, integer sums per half ----

void dot_u(const uint8_t* c, const int8_t* q, int32_t* s) {
  s[0] = s[1] = 0;
  for (int i = 0; i < 32; ++i) s[i / 16] += static_cast<int32_t>(c[i]) * q[i];
}

float row_dot_portable(DType dt, const uint8_t* w, const Q8Block* x, int64_t nb) {
  float acc = 0;
  int32_t s[2];
  uint8_t c[32];
  switch (dt) {
    case DType::Q4_0:
      for (int64_t b = 0; b < nb; ++b, w += 18) {
        codes_q4(w + 2, c);
        dot_u(c, x[b].q, s);
        acc += half(w) * x[b].d * static_cast<float>(s[0] + s[1] - 8 * (x[b].sum[0] + x[b].sum[1]));
      }
      return acc;
    case DType::Q4_1:
      for (int64_t b = 0; b < nb; ++b, w += 20) {
        codes_q4(w + 4, c);
        dot_u(c, x[b].q, s);
        acc += x[b].d * (half(w) * static_cast<float>(s[0] + s[1]) +
                         half(w + 2) * static_cast<float>(x[b].sum[0] + x[b].sum[1]));
      }
      return acc;
    case DType::Q8_0:
      for (int64_t b = 0; b < nb; ++b, w += 34) {
        const int8_t* wq = reinterpret_cast<const int8_t*>(w + 2);
        int32_t d = 0;
        for (int i = 0; i < 32; ++i) d += static_cast<int32_t>(wq[i]) * x[b].q[i];
        acc += half(w) * x[b].d * static_cast<float>(d);
      }
      return acc;
    case DType::Q4_K:
      for (int64_t b = 0; b < nb; b += 8, w += 144) {
        const float d = half(w), dmin = half(w + 2);
        for (int j = 0; j < 8; ++j) {
          int scale, mn;
          scale_min_q4k(w + 4, j, &scale, &mn);
          const Q8Block& xb = x[b + j];
          codes_q4k(w + 16 + 32 * (j / 2), j % 2, c);
          dot_u(c, xb.q, s);
          acc += xb.d * (d * static_cast<float>(scale * (s[0] + s[1])) -
                         dmin * static_cast<float>(mn * (xb.sum[0] + xb.sum[1])));
        }
      }
      return acc;
    case DType::Q6_K:
      for (int64_t b = 0; b < nb; b += 8, w += 210) {
        const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
        const float d = half(w + 208);
        for (int h = 0; h < 2; ++h) {
          for (int i = 0; i < 4; ++i) {
            const Q8Block& xb = x[b + 4 * h + i];
            codes_q6k(w + 64 * h, w + 128 + 32 * h, i, c);
            dot_u(c, xb.q, s);
            const int8_t* si = sc + 8 * h + 2 * i;
            const int32_t t = si[0] * (s[0] - 32 * xb.sum[0]) + si[1] * (s[1] - 32 * xb.sum[1]);
            acc += d * xb.d * static_cast<float>(t);
          }
        }
      }
      return acc;
    default:
      detail::internal_error("quant_matmul", "not a quantized dtype");
  }
}

// Weight rows [n0, n1) against every activation row (y: row n at y + n, activation row m at
// y + m * ys).
void rows_portable(DType dt, const uint8_t* w, int64_t row_bytes, const Q8Block* x, int64_t M,
                   int64_t nb, float* y, int64_t ys, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      y[m * ys + n] = row_dot_portable(dt, w + n * row_bytes, x + m * nb, nb);
    }
  }
}

// Rows of w are split over the device's thread team in contiguous ranges (whole groups of
// kRowGroup, the rows a matrix-vector kernel takes at once); each row meets every activation row
// while in cache. Splitting pays once a product has a few thousand blocks of work: the team's
// helpers spin between a decode step's products, so handing them chunks costs a few
// microseconds, against ~50 us for a 576 x 1536 product on one thread. A helper the OS has not
// scheduled holds nothing up: the caller runs the chunks nobody claimed (ThreadTeam). Every
// split gives the same bits as one thread.
constexpr int64_t kRowGroup = 8;
constexpr int64_t kSplitBlocks = 2048;

template <class Rows>
void matmul_rows(Rows rows, DType dt, const Q8Block* xq, const uint8_t* w, float* y, int64_t M,
                 int64_t N, int64_t nb, int64_t row_bytes) {
  const int64_t team = ThreadTeam::current() ? ThreadTeam::current()->size() : 1;
  const int64_t work = N * nb * M;
  // A few chunks per thread (more for large products: the lm_head, prefill), taken
  // dynamically, so that a thread preempted for a moment holds up little work.
  const int64_t per = std::clamp<int64_t>(work / (team * 16384), 2, 8);
  const int64_t want = team > 1 && work >= kSplitBlocks ? team * per : 1;
  const int64_t groups = (N + kRowGroup - 1) / kRowGroup;
  const int64_t grain = kRowGroup * ((groups + want - 1) / want);
  parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
    rows(dt, w, row_bytes, xq, M, nb, y, N, n0, n1);
  });
}

// ---- SIMD: 32 codes decoded in a register, int32 lanes scaled into f32 accumulators ----

// u8 x s8 products summed in groups of four into 8 int32 lanes (lanes 0-3: elements 0..15).
struct Avx2Dot {
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256i dot(__m256i u,
                                                                                    __m256i q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
  }
};
struct VnniDot {
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"),
                 always_inline)) static inline __m256i
  dot(__m256i u, __m256i q) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, q);
  }
};

// The row kernels, compiled once per instruction set (GCC's target pragma; clang's attribute
// pragma, as clang ignores GCC's).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define PARTIX_QUANT_DOT Avx2Dot
#define PARTIX_QUANT_SUFFIX avx2
#include "backend/cpu/quant_dot_rows.inc"
#undef PARTIX_QUANT_DOT
#undef PARTIX_QUANT_SUFFIX
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(                                                      \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))), \
    apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
#endif
#define PARTIX_QUANT_DOT VnniDot
#define PARTIX_QUANT_SUFFIX vnni
#include "backend/cpu/quant_dot_rows.inc"
#undef PARTIX_QUANT_DOT
#undef PARTIX_QUANT_SUFFIX
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

bool cpu_has(const char* feature) {
  __builtin_cpu_init();
  if (std::string(feature) == "avx2") {
    // F16C from cpuid leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

std::string_view quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kPortable:
      return "portable";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

bool quant_isa_supported(QuantIsa isa) {
  // cpuid once: every product asks.
  static const bool avx2 = cpu_has("avx2");
  static const bool vnni = avx2 && cpu_has("avx512vnni");
  switch (isa) {
    case QuantIsa::kPortable:
      return true;
    case QuantIsa::kAvx2:
      return avx2;
    case QuantIsa::kAvx512Vnni:
      return vnni;
  }
  return false;
}

QuantIsa quant_isa() {
  static const QuantIsa best = [] {
    QuantIsa cap = QuantIsa::kAvx512Vnni;
    if (const char* env = std::getenv("PARTIX_QUANT_ISA")) {
      for (QuantIsa i : {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
        if (quant_isa_name(i) == env) cap = i;
      }
    }
    for (QuantIsa i : {QuantIsa::kAvx512Vnni, QuantIsa::kAvx2}) {
      if (i <= cap && quant_isa_supported(i)) return i;
    }
    return QuantIsa::kPortable;
  }();
  return best;
}

void quant_matmul(DType dt, const float* x, const void* w, float* y, int64_t M, int64_t N,
                  int64_t K, QuantIsa isa) {
  if (M == 0 || N == 0) return;
  const int64_t nb = K / 32;
  const bool simd = isa != QuantIsa::kPortable && quant_isa_supported(QuantIsa::kAvx2);
  // The activation codes live in a per-thread scratch buffer that only grows: a decode step
  // runs hundreds of products and would otherwise allocate for each.
  thread_local std::vector<Q8Block> scratch;
  if (scratch.size() < static_cast<size_t>(M * nb)) scratch.resize(static_cast<size_t>(M * nb));
  Q8Block* xq = scratch.data();
  for (int64_t m = 0; m < M; ++m) {
    (simd ? quantize_q8_avx2 : quantize_q8)(x + m * K, K, xq + m * nb);
  }
  // One row's bytes, without building a Shape (this runs for every product of a decode step).
  const int64_t row_bytes = K / dtype_block_elems(dt) * dtype_size(dt);
  const auto* wb = static_cast<const uint8_t*>(w);
  const bool vnni = isa == QuantIsa::kAvx512Vnni && quant_isa_supported(isa);
  if (vnni && quant::avx512_rows_handles(dt)) {
    matmul_rows(quant::rows_avx512, dt, xq, wb, y, M, N, nb, row_bytes);
  } else if (vnni) {
    matmul_rows(rows_vnni, dt, xq, wb, y, M, N, nb, row_bytes);
  } else if (simd) {
    matmul_rows(rows_avx2, dt, xq, wb, y, M, N, nb, row_bytes);
  } else {
    matmul_rows(rows_portable, dt, xq, wb, y, M, N, nb, row_bytes);
  }
}

void quantize_activations(const float* x, int64_t K, QuantIsa isa, float* scales, int8_t* codes) {
  thread_local std::vector<Q8Block> q;  // only grows (see quant_matmul)
  if (q.size() < static_cast<size_t>(K / 32)) q.resize(static_cast<size_t>(K / 32));
  const bool simd = isa != QuantIsa::kPortable && quant_isa_supported(QuantIsa::kAvx2);
  (simd ? quantize_q8_avx2 : quantize_q8)(x, K, q.data());
  for (size_t b = 0; b < static_cast<size_t>(K / 32); ++b) {
    scales[b] = q[b].d;
    std::memcpy(codes + 32 * b, q[b].q, 32);
  }
}

}  // namespace partix::backend::cpu
