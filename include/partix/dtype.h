// Element types and shapes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace partix {

// Q8_0 ... Q6_K are GGUF's block-quantized storage layouts: an array of
// shape [..., K] stores each row of K elements as K / block_elems blocks of block_bytes, so
// K must be a multiple of the block and the last dimension shards only on block boundaries.
// I8, I16, U8, U16 and U32 are the narrow and unsigned integers (JAX's int8 ... uint32); their
// arithmetic wraps in their own width. There is no u64 (a u64 would not fit the int64 the
// reference kernels compute integers in).
enum class DType {
  Bool, I32, I64, F16, BF16, F32, F64, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, I8, I16, U8, U16, U32
};
using Shape = std::vector<int64_t>;

// Size of one element in bytes; for a quantized dtype, the size of one block (use
// dtype_nbytes for the bytes of a shape).
int dtype_size(DType dtype);
// Short name as in the IR text: bool i8 i16 i32 i64 u8 u16 u32 f16 bf16 f32 f64 q8_0 q4_0
// q4_1 q4_k q6_k.
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name; throws partix::Error naming the text.
DType dtype_from_name(std::string_view name);
bool is_floating(DType dtype);  // F16, BF16, F32, F64 (not the quantized dtypes)
bool is_integral(DType dtype);  // I8, I16, I32, I64, U8, U16, U32 (not Bool)
bool is_unsigned(DType dtype);  // U8, U16, U32
// Bits of an integer dtype (8, 16, 32, 64); 0 for the others.
int int_bits(DType dtype);
bool is_quantized(DType dtype);  // Q8_0, Q4_0, Q4_1, Q4_K, Q6_K
// Elements per block: 32 (Q8_0, Q4_0, Q4_1), 256 (Q4_K, Q6_K), 1 for unquantized dtypes.
int64_t dtype_block_elems(DType dtype);
// Bytes of `shape` stored in `dtype`. Precondition for a quantized dtype: the last dimension
// is a multiple of dtype_block_elems (see check_quantized_shape).
int64_t dtype_nbytes(DType dtype, const Shape& shape);
// Throws partix::Error from `api` unless a quantized array can have this shape (rank >= 1,
// last dimension a positive multiple of the block); no-op for other dtypes.
void check_quantized_shape(std::string_view api, DType dtype, const Shape& shape);

// Number of elements of a shape (1 for a scalar). Precondition: dims >= 0.
int64_t shape_size(const Shape& shape);
// "[8,32]" style text.
std::string shape_to_string(const Shape& shape);

// IEEE binary16. Conversions round to nearest even; NaN stays NaN.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float f);
  explicit operator float() const;
  static float16 from_bits(uint16_t b) { float16 h; h.bits = b; return h; }
  friend bool operator==(float16 a, float16 b) { return a.bits == b.bits; }
};

// bfloat16: the upper 16 bits of an IEEE float. Conversions round to nearest even.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f);
  explicit operator float() const;
  static bfloat16 from_bits(uint16_t b) { bfloat16 h; h.bits = b; return h; }
  friend bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }
};

// The DType of a C++ element type (bool, int8_t ... int64_t, uint8_t ... uint32_t, float16,
// bfloat16, float, double).
template <class T>
struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::I8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::I16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::U16; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = DType::U32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace partix
