// What the quantized matmul's translation units share (quant_dot.cpp, quant_dot_avx512.cpp):
// the layout of a quantized activation block and the row kernels' signature.
#pragma once

#include <cstdint>

#include "partix/dtype.h"

namespace partix::backend::cpu::quant {

// One block of 32 activations: x ~ d * q, with the sums of q over each half (for the offset
// terms of Q4_0, Q4_1, Q4_K and Q6_K) and ds = d * (sum[0] + sum[1]), which the matrix-vector
// kernels scale by each weight row's offset instead of redoing per row.
struct Q8Block {
  float d, ds;
  int32_t sum[2];
  int8_t q[32];
};

// Weight rows [n0, n1) of w (row n at w + n * rb bytes) against every activation row (M rows
// of nb blocks each, row m at x + m * nb): y[m * ys + n].
using RowsFn = void (*)(DType dt, const uint8_t* w, int64_t rb, const Q8Block* x, int64_t M,
                        int64_t nb, float* y, int64_t ys, int64_t n0, int64_t n1);

// 512-bit AVX512-VNNI kernels (quant_dot_avx512.cpp) for the formats avx512_rows_handles
// accepts; callers check the CPU first.
bool avx512_rows_handles(DType dt);
void rows_avx512(DType dt, const uint8_t* w, int64_t rb, const Q8Block* x, int64_t M, int64_t nb,
                 float* y, int64_t ys, int64_t n0, int64_t n1);

}  // namespace partix::backend::cpu::quant
