// ggml tensor types: block sizes for validation, and dequantization of the types partix
// loads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K). Block layouts follow the GGUF/ggml
// format description; each block stores its scale(s) as IEEE half floats.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "partix/dtype.h"

namespace partix::detail {

// Elements and bytes per block of a ggml type id, for every type the format defines (so a
// file's tensor sizes can be validated even for types partix does not dequantize).
struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;
  int64_t block_elems;
  int64_t block_bytes;
  bool supported;  // partix dequantizes it
};
// nullopt for an id the format does not define.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id);

// ggml type ids partix dequantizes.
inline constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ8_0 = 8,
                          kGgmlQ4_K = 12, kGgmlQ6_K = 14, kGgmlBF16 = 30;

// The partix dtype of a ggml type id (floats and the block-quantized formats), and back: the
// one place the two numberings meet.
std::optional<DType> dtype_of_ggml(uint32_t id);
uint32_t ggml_of_dtype(DType dtype);  // precondition: dtype_of_ggml(result) == dtype

// Dequantizes `nblocks` consecutive blocks of type `id` starting at src into
// nblocks * block_elems floats. Precondition: ggml_type_info(id)->supported.
void dequantize_blocks(uint32_t id, const uint8_t* src, int64_t nblocks, float* dst);
// The same for `n` elements (whole blocks) of a quantized partix dtype.
void dequantize(DType dtype, const void* src, int64_t n, float* dst);

}  // namespace partix::detail
