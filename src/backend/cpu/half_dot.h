// Matmul with a 16-bit float weight (bf16 or f16) and f32 activations: y[M, N] = x[M, K]
// w[N, K]^T, each weight element widened to f32 in registers (exactly: both formats widen
// without rounding), so the result is the f32 matmul of the widened weight at half its memory
// traffic. Decode steps are memory-bound: this is what a bf16 checkpoint buys on a CPU.
#pragma once

#include <cstdint>

#include "partix/dtype.h"

namespace partix::backend::cpu {

// Preconditions: dt is BF16 or F16; x, w, y dense row-major. Runs on the calling device's
// thread team.
void half_weight_matmul(DType dt, const float* x, const uint16_t* w, float* y, int64_t M,
                        int64_t N, int64_t K);

}  // namespace partix::backend::cpu
