#include "partix/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/errors.h"

namespace partix {

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return 1;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::Q8_0:
      return 34;
    case DType::Q4_0:
      return 18;
    case DType::Q4_1:
      return 20;
    case DType::Q4_K:
      return 144;
    case DType::Q6_K:
      return 210;
    case DType::I8:
      return 1;
    case DType::I16:
      return 2;
    case DType::U8:
      return 1;
    case DType::U16:
      return 2;
    case DType::U32:
      return 4;
  }
  return 0;
}

bool is_quantized(DType d) {
  return d == DType::Q8_0 || d == DType::Q4_0 || d == DType::Q4_1 || d == DType::Q4_K ||
         d == DType::Q6_K;
}

int64_t dtype_block_elems(DType d) {
  if (d == DType::Q4_K || d == DType::Q6_K) return 256;
  return is_quantized(d) ? 32 : 1;
}

int64_t dtype_nbytes(DType d, const Shape& shape) {
  return shape_size(shape) / dtype_block_elems(d) * dtype_size(d);
}

void check_quantized_shape(std::string_view api, DType d, const Shape& shape) {
  if (!is_quantized(d)) return;
  const int64_t b = dtype_block_elems(d);
  if (!(!shape.empty() && shape.back() > 0 && shape.back() % b == 0)) {
    detail::fail(api,
                 "a {} array stores rows of {}-element blocks: its last dimension must be a "
                 "multiple of {}, got shape {}",
                 dtype_name(d), b, b, shape_to_string(shape));
  }
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "bool";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::Q8_0:
      return "q8_0";
    case DType::Q4_0:
      return "q4_0";
    case DType::Q4_1:
      return "q4_1";
    case DType::Q4_K:
      return "q4_k";
    case DType::Q6_K:
      return "q6_k";
    case DType::I8:
      return "i8";
    case DType::I16:
      return "i16";
    case DType::U8:
      return "u8";
    case DType::U16:
      return "u16";
    case DType::U32:
      return "u32";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType d : {DType::Bool, DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U16,
                  DType::U32, DType::F16, DType::BF16, DType::F32, DType::F64, DType::Q8_0,
                  DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K}) {
    if (dtype_name(d) == name) return d;
  }
  detail::fail("dtype",
               "unknown dtype '{}' (expected bool, i8, i16, i32, i64, u8, u16, u32, f16, bf16, "
               "f32, f64, q8_0, q4_0, q4_1, q4_k or q6_k)",
               name);
}

bool is_floating(DType d) {
  return d == DType::F16 || d == DType::BF16 || d == DType::F32 || d == DType::F64;
}
bool is_integral(DType d) { return int_bits(d) != 0; }
bool is_unsigned(DType d) { return d == DType::U8 || d == DType::U16 || d == DType::U32; }
int int_bits(DType d) {
  switch (d) {
    case DType::I8:
    case DType::U8:
      return 8;
    case DType::I16:
    case DType::U16:
      return 16;
    case DType::I32:
    case DType::U32:
      return 32;
    case DType::I64:
      return 64;
    default:
      return 0;
  }
}

int64_t shape_size(const Shape& shape) {
  // Wraps instead of overflowing (undefined): shapes too large for 64 bits are rejected by
  // detail::checked_size, which every created shape goes through after its rule ran.
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return static_cast<int64_t>(n);
}

std::string shape_to_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

// float -> bfloat16: keep the upper half, rounding the lower half to nearest even.
bfloat16::bfloat16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) {
    bits = static_cast<uint16_t>((u >> 16) | 0x0040);  // keep sign, force a quiet NaN
    return;
  }
  uint32_t lsb = (u >> 16) & 1;
  u += 0x7fff + lsb;
  bits = static_cast<uint16_t>(u >> 16);
}

bfloat16::operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// float -> binary16 with round to nearest even, including subnormals and overflow to inf.
float16::float16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t exp = (u >> 23) & 0xff;
  uint32_t mant = u & 0x7fffff;
  if (exp == 0xff) {  // inf or NaN
    bits = static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
    return;
  }
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 0x1f) {  // overflow
    bits = static_cast<uint16_t>(sign | 0x7c00);
    return;
  }
  if (e <= 0) {  // subnormal or zero in half precision
    if (e < -10) {
      bits = sign;
      return;
    }
    mant |= 0x800000;  // implicit leading one
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1))) half_mant++;
    bits = static_cast<uint16_t>(sign | half_mant);
    return;
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;  // may carry into the exponent
  bits = static_cast<uint16_t>(sign | half);
}

float16::operator float() const {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exp = (bits >> 10) & 0x1f;
  uint32_t mant = bits & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        e++;
      } while ((mant & 0x400) == 0);
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000 | (mant << 13);
  } else {
    u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(u);
}

}  // namespace partix
