// 512-bit AVX512-VNNI row kernels for Q4_0, Q4_1 and Q8_0 weights (quant_dot.h).
//
// A weight row's blocks lie one after another, as GGUF stores them, and stay so: a 512-bit
// register holds the same block of four rows, one row per 128-bit lane. Lane (row i, dword j)
// multiplies codes 4j..4j+3 and 16+4j..16+4j+3 of row i with the activation codes at the same
// places (the activation block broadcast to every lane). A block's scale is one per row, the same
// over a row's four lanes, so the int32 lanes are scaled and summed in f32 as they are; each
// row's four lanes are added up once, at the end of the row, not per block.
//   Q4_0  sum (c - 8) q   = sum c q - 8 sum q          c: codes 0..15
//   Q8_0  sum c q         = sum (c + 128) q - 128 sum q  c: signed; c + 128 = c ^ 0x80, unsigned
//   Q4_1  sum (d c + m) q = d sum c q + m sum q         m: the block's min (f32 term)
// The "sum q" terms of Q4_0 and Q8_0 are integers per lane, subtracted exactly before the
// conversion to f32. Eight rows (two registers) share each activation block and one gather
// of their scales.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/quant_dot_blocks.h"
#include "core/errors.h"

#if defined(__clang__)
#pragma clang attribute push(                                                      \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
// GCC 12's AVX-512 headers make their "undefined" vectors by initialising a variable from
// itself, which -Wuninitialized reports inside every intrinsic that uses one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace partix::backend::cpu::quant {

namespace {

// Block bytes, where the codes start, and the bias whose activation sums are subtracted
// (as a shift: 8 = 1 << 3, 128 = 1 << 7; -1: none).
struct Q40 {
  static constexpr int kBytes = 18, kCodes = 2, kBiasShift = 3;
  static constexpr bool kMin = false, kSigned = false;
};
struct Q41 {
  static constexpr int kBytes = 20, kCodes = 4, kBiasShift = -1;
  static constexpr bool kMin = true, kSigned = false;
};
struct Q80 {
  static constexpr int kBytes = 34, kCodes = 2, kBiasShift = 7;
  static constexpr bool kMin = false, kSigned = true;
};

inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// The 16 bytes at p0..p3, one per 128-bit lane.
inline __m512i lanes4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
  __m512i v = _mm512_castsi128_si512(load128(p0));
  v = _mm512_inserti32x4(v, load128(p1), 1);
  v = _mm512_inserti32x4(v, load128(p2), 2);
  return _mm512_inserti32x4(v, load128(p3), 3);
}

// Four rows' codes of one block (p: the rows' block starts) as unsigned bytes: lo pairs with
// activation codes 0..15, hi with 16..31.
template <class F>
inline void codes4(const uint8_t* const* p, int64_t o, __m512i& lo, __m512i& hi) {
  if constexpr (F::kSigned) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const int64_t c = o + F::kCodes;
    lo = _mm512_xor_si512(lanes4(p[0] + c, p[1] + c, p[2] + c, p[3] + c), flip);
    hi = _mm512_xor_si512(lanes4(p[0] + c + 16, p[1] + c + 16, p[2] + c + 16, p[3] + c + 16), flip);
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int64_t c = o + F::kCodes;
    const __m512i v = lanes4(p[0] + c, p[1] + c, p[2] + c, p[3] + c);
    lo = _mm512_and_si512(v, m4);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
}

// An activation block broadcast to the four lanes, and per lane the bias times the sum of the
// activation codes that lane multiplies.
struct XLanes {
  __m512i lo, hi, bias;
};
template <class F>
inline XLanes x_lanes(const Q8Block& xb) {
  XLanes x;
  x.lo = _mm512_broadcast_i32x4(load128(xb.q));
  x.hi = _mm512_broadcast_i32x4(load128(xb.q + 16));
  if constexpr (F::kBiasShift >= 0) {
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, x.lo),
                                          ones, x.hi);
    x.bias = _mm512_slli_epi32(s, F::kBiasShift);
  }
  return x;
}

template <class F>
inline __m512 dot_lanes(__m512i lo, __m512i hi, const XLanes& x) {
  __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, x.lo), hi, x.hi);
  if constexpr (F::kBiasShift >= 0) p = _mm512_sub_epi32(p, x.bias);
  return _mm512_cvtepi32_ps(p);
}

// Per row of two registers (rows 0-3 in a, 4-7 in b, four lanes each): the sum of its lanes,
// in row order. Each row's lanes add up in the same order wherever the row sits.
inline __m256 row_sums(__m512 a, __m512 b) {
  a = _mm512_add_ps(a, _mm512_shuffle_ps(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
  a = _mm512_add_ps(a, _mm512_shuffle_ps(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
  b = _mm512_add_ps(b, _mm512_shuffle_ps(b, b, _MM_SHUFFLE(1, 0, 3, 2)));
  b = _mm512_add_ps(b, _mm512_shuffle_ps(b, b, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutex2var_ps(a, pick, b));
}

// Eight weight rows (row r at w + rows[r] * rb; a short group repeats its last row) against R
// activation rows (x + r * nb): y[r * ys + i] for the first `valid` rows i. With `prefetch`,
// the eight rows after w are fetched while these compute (decode is otherwise bound by memory
// latency; prefetches past the matrix's end are harmless), as non-temporal data: a decode step
// reads each weight once, and ~90 MB of them passing through the caches would evict what the
// step reads again (the key/value cache, the program's own state) every token (+12% tokens/s).
template <class F, int R>
void group8(const uint8_t* w, int64_t rb, const int32_t* rows, const Q8Block* x, int64_t nb,
            float* y, int64_t ys, int valid, bool prefetch) {
  const uint8_t* p[8];
  for (int r = 0; r < 8; ++r) p[r] = w + rows[r] * rb;
  const __m256i offs = _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows)),
                                          _mm256_set1_epi32(static_cast<int>(rb)));
  const __m512i rows_a = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i rows_b = _mm512_add_epi32(rows_a, _mm512_set1_epi32(4));
  __m512 acc_a[R], acc_b[R];
  __m256 off[R];
  for (int r = 0; r < R; ++r) {
    acc_a[r] = acc_b[r] = _mm512_setzero_ps();
    off[r] = _mm256_setzero_ps();
  }
  const uint8_t* next = w + 8 * rb;
  const int64_t lines = (8 * rb + 63) / 64, per_block = (lines + nb - 1) / nb;
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch) {
      for (int64_t l = b * per_block; l < std::min(lines, (b + 1) * per_block); ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(next + 64 * l), _MM_HINT_NTA);
      }
    }
    const int64_t o = b * F::kBytes;
    __m512i lo_a, hi_a, lo_b, hi_b;
    codes4<F>(p, o, lo_a, hi_a);
    codes4<F>(p + 4, o, lo_b, hi_b);
    // The eight rows' first four bytes of the block: the f16 scale (and Q4_1's f16 min).
    const __m256i head = _mm256_i32gather_epi32(reinterpret_cast<const int*>(w + o), offs, 1);
    const __m512 d8 = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_cvtepi32_epi16(head)));
    const __m512 d_a = _mm512_permutexvar_ps(rows_a, d8), d_b = _mm512_permutexvar_ps(rows_b, d8);
    [[maybe_unused]] __m256 m8 = _mm256_setzero_ps();
    if constexpr (F::kMin) m8 = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(head, 16)));
    for (int r = 0; r < R; ++r) {
      const Q8Block& xb = x[r * nb + b];
      const XLanes xl = x_lanes<F>(xb);
      const __m512 xd = _mm512_set1_ps(xb.d);
      acc_a[r] = _mm512_fmadd_ps(dot_lanes<F>(lo_a, hi_a, xl), _mm512_mul_ps(d_a, xd), acc_a[r]);
      acc_b[r] = _mm512_fmadd_ps(dot_lanes<F>(lo_b, hi_b, xl), _mm512_mul_ps(d_b, xd), acc_b[r]);
      if constexpr (F::kMin) off[r] = _mm256_fmadd_ps(m8, _mm256_set1_ps(xb.ds), off[r]);
    }
  }
  const __mmask8 keep = static_cast<__mmask8>((1u << valid) - 1u);
  for (int r = 0; r < R; ++r) {
    __m256 s = row_sums(acc_a[r], acc_b[r]);
    if constexpr (F::kMin) s = _mm256_add_ps(s, off[r]);
    _mm256_mask_storeu_ps(y + r * ys, keep, s);
  }
}

template <class F>
void rows_fmt(const uint8_t* w, int64_t rb, const Q8Block* x, int64_t M, int64_t nb, float* y,
              int64_t ys, int64_t n0, int64_t n1) {
  alignas(32) int32_t rows[8];
  for (int64_t n = n0; n < n1; n += 8) {
    const int k = static_cast<int>(std::min<int64_t>(8, n1 - n));
    for (int r = 0; r < 8; ++r) rows[r] = std::min(r, k - 1);
    const uint8_t* wn = w + n * rb;
    if (M == 1) {
      group8<F, 1>(wn, rb, rows, x, nb, y + n, ys, k, true);
      continue;
    }
    // Prefill: the group's codes are decoded once per four activation rows.
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) group8<F, 4>(wn, rb, rows, x + m * nb, nb, y + m * ys + n, ys, k, false);
    for (; m < M; ++m) group8<F, 1>(wn, rb, rows, x + m * nb, nb, y + m * ys + n, ys, k, false);
  }
}

}  // namespace

bool avx512_rows_handles(DType dt) {
  return dt == DType::Q4_0 || dt == DType::Q4_1 || dt == DType::Q8_0;
}

void rows_avx512(DType dt, const uint8_t* w, int64_t rb, const Q8Block* x, int64_t M, int64_t nb,
                 float* y, int64_t ys, int64_t n0, int64_t n1) {
  switch (dt) {
    case DType::Q4_0:
      return rows_fmt<Q40>(w, rb, x, M, nb, y, ys, n0, n1);
    case DType::Q4_1:
      return rows_fmt<Q41>(w, rb, x, M, nb, y, ys, n0, n1);
    case DType::Q8_0:
      return rows_fmt<Q80>(w, rb, x, M, nb, y, ys, n0, n1);
    default:
      detail::internal_error("quant_matmul", "no 512-bit kernel for this format");
  }
}

}  // namespace partix::backend::cpu::quant

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
