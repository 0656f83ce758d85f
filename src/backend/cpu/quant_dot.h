// Matmul with a block-quantized right operand: y[M, N] = x[M, K] w[N, K]^T,
// where w holds N rows of K / block_elems GGUF blocks. Weights are decoded block by block in
// registers, never into an f32 copy; x is quantized to 8 bits per 32 elements (one f32 scale
// per block), as the formats are meant to be used, and the products summed in integers.
#pragma once

#include <cstdint>
#include <string_view>

#include "partix/dtype.h"

namespace partix::backend::cpu {

// Instruction sets of the integer dot products, best last; each is chosen at run time from
// cpuid. kAvx512Vnni runs Q4_0, Q4_1 and Q8_0 on 512-bit kernels (quant_dot_avx512.cpp) and the
// K-quants on 256-bit VNNI (AVX512-VNNI with AVX512-VL).
enum class QuantIsa { kPortable, kAvx2, kAvx512Vnni };
std::string_view quant_isa_name(QuantIsa isa);
bool quant_isa_supported(QuantIsa isa);
// The best supported instruction set (PARTIX_QUANT_ISA=portable|avx2|avx512vnni caps it).
QuantIsa quant_isa();

// y[M, N] = x[M, K] . dequantize(w)[N, K]^T on the calling device's thread team.
// Preconditions: is_quantized(dt), K % dtype_block_elems(dt) == 0, w holds
// dtype_nbytes(dt, {N, K}) bytes.
void quant_matmul(DType dt, const float* x, const void* w, float* y, int64_t M, int64_t N,
                  int64_t K, QuantIsa isa);
inline void quant_matmul(DType dt, const float* x, const void* w, float* y, int64_t M, int64_t N,
                         int64_t K) {
  quant_matmul(dt, x, w, y, M, N, K, quant_isa());
}

// The activation quantization the kernels use (one scale per 32 elements, int8 codes), on
// `isa`'s code path; for tests (every path must give the same bits). K % 32 == 0.
void quantize_activations(const float* x, int64_t K, QuantIsa isa, float* scales, int8_t* codes);

}  // namespace partix::backend::cpu
