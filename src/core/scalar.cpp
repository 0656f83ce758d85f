#include "core/scalar.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace partix::detail {

namespace {

// v converted to the integer type I, saturating at its limits (NaN gives 0): reductions store
// +-inf as the identity of max and min, and a cast of an out-of-range double is undefined.
template <class I>
I saturate(double v) {
  if (v != v) return 0;
  if (v <= static_cast<double>(std::numeric_limits<I>::lowest())) {
    return std::numeric_limits<I>::lowest();
  }
  // 2^digits (2^31, 2^63, 2^32, ...) is an exact double; everything below it converts.
  if (v >= std::ldexp(1.0, std::numeric_limits<I>::digits)) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

}  // namespace

void store_scalar(void* dst, DType dtype, double v) {
  switch (dtype) {
    case DType::Bool:
      *static_cast<uint8_t*>(dst) = v != 0.0 ? 1 : 0;
      break;
    case DType::I32:
      *static_cast<int32_t*>(dst) = saturate<int32_t>(v);
      break;
    case DType::I64:
      *static_cast<int64_t*>(dst) = saturate<int64_t>(v);
      break;
    case DType::I8:
      *static_cast<int8_t*>(dst) = saturate<int8_t>(v);
      break;
    case DType::I16:
      *static_cast<int16_t*>(dst) = saturate<int16_t>(v);
      break;
    case DType::U8:
      *static_cast<uint8_t*>(dst) = saturate<uint8_t>(v);
      break;
    case DType::U16:
      *static_cast<uint16_t*>(dst) = saturate<uint16_t>(v);
      break;
    case DType::U32:
      *static_cast<uint32_t*>(dst) = saturate<uint32_t>(v);
      break;
    case DType::F16:
      *static_cast<float16*>(dst) = float16(static_cast<float>(v));
      break;
    case DType::BF16:
      *static_cast<bfloat16*>(dst) = bfloat16(static_cast<float>(v));
      break;
    case DType::F32:
      *static_cast<float*>(dst) = static_cast<float>(v);
      break;
    case DType::F64:
      *static_cast<double*>(dst) = v;
      break;
    default:
      break;  // quantized: no scalar element
  }
}

double load_scalar(const void* src, DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return *static_cast<const uint8_t*>(src) ? 1.0 : 0.0;
    case DType::I32:
      return *static_cast<const int32_t*>(src);
    case DType::I64:
      return static_cast<double>(*static_cast<const int64_t*>(src));
    case DType::I8:
      return *static_cast<const int8_t*>(src);
    case DType::I16:
      return *static_cast<const int16_t*>(src);
    case DType::U8:
      return *static_cast<const uint8_t*>(src);
    case DType::U16:
      return *static_cast<const uint16_t*>(src);
    case DType::U32:
      return *static_cast<const uint32_t*>(src);
    case DType::F16:
      return static_cast<float>(*static_cast<const float16*>(src));
    case DType::BF16:
      return static_cast<float>(*static_cast<const bfloat16*>(src));
    case DType::F32:
      return *static_cast<const float*>(src);
    case DType::F64:
      return *static_cast<const double*>(src);
    default:
      break;  // quantized: no scalar element
  }
  return 0.0;
}

int64_t load_int(const void* src, DType dtype) {
  switch (dtype) {
    case DType::I32:
      return *static_cast<const int32_t*>(src);
    case DType::I64:
      return *static_cast<const int64_t*>(src);
    case DType::I8:
      return *static_cast<const int8_t*>(src);
    case DType::I16:
      return *static_cast<const int16_t*>(src);
    case DType::U8:
      return *static_cast<const uint8_t*>(src);
    case DType::U16:
      return *static_cast<const uint16_t*>(src);
    case DType::U32:
      return *static_cast<const uint32_t*>(src);
    case DType::Bool:
      return *static_cast<const uint8_t*>(src) ? 1 : 0;
    default:
      return static_cast<int64_t>(load_scalar(src, dtype));
  }
}

int64_t int_lowest(DType dtype) {
  const int bits = int_bits(dtype);
  if (is_unsigned(dtype)) return 0;
  return bits >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
}

int64_t int_highest(DType dtype) {
  const int bits = int_bits(dtype);
  if (bits >= 64) return std::numeric_limits<int64_t>::max();
  return (int64_t{1} << (is_unsigned(dtype) ? bits : bits - 1)) - 1;
}

void store_int(void* dst, DType dtype, int64_t v) {
  switch (dtype) {
    case DType::I32:
      *static_cast<int32_t*>(dst) = static_cast<int32_t>(v);
      break;
    case DType::I64:
      *static_cast<int64_t*>(dst) = v;
      break;
    // Narrower integers keep the low bits: integer arithmetic wraps in its own width.
    case DType::I8:
      *static_cast<int8_t*>(dst) = static_cast<int8_t>(v);
      break;
    case DType::I16:
      *static_cast<int16_t*>(dst) = static_cast<int16_t>(v);
      break;
    case DType::U8:
      *static_cast<uint8_t*>(dst) = static_cast<uint8_t>(v);
      break;
    case DType::U16:
      *static_cast<uint16_t*>(dst) = static_cast<uint16_t>(v);
      break;
    case DType::U32:
      *static_cast<uint32_t*>(dst) = static_cast<uint32_t>(v);
      break;
    case DType::Bool:
      *static_cast<uint8_t*>(dst) = v != 0 ? 1 : 0;
      break;
    default:
      store_scalar(dst, dtype, static_cast<double>(v));
      break;
  }
}

namespace {

std::string format_one(const char* p, DType dtype) {
  double v = load_scalar(p, dtype);
  switch (dtype) {
    case DType::Bool:
      return v != 0.0 ? "true" : "false";
    default:
      if (is_integral(dtype)) return fmt::format("{}", load_int(p, dtype));
      return fmt::format("{:.6g}", v);
  }
}

constexpr int64_t kEdge = 3;  // elements shown at each end of an elided dimension

void format_rec(const char* data, DType dtype, const Shape& shape, size_t dim, int64_t stride_elems,
                bool elide, std::string& out) {
  const int es = dtype_size(dtype);
  if (dim == shape.size()) {
    out += format_one(data, dtype);
    return;
  }
  int64_t n = shape[dim];
  int64_t inner = stride_elems / (n == 0 ? 1 : n);
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (elide && n > 2 * kEdge && i == kEdge) {
      out += "..., ";
      i = n - kEdge - 1;
      continue;
    }
    format_rec(data + i * inner * es, dtype, shape, dim + 1, inner, elide, out);
    if (i + 1 < n) out += dim + 1 == shape.size() ? ", " : ",\n" + std::string(dim + 1, ' ');
  }
  out += ']';
}

}  // namespace

std::string format_values(const void* data, DType dtype, const Shape& shape) {
  std::string out;
  int64_t n = shape_size(shape);
  format_rec(static_cast<const char*>(data), dtype, shape, 0, n, n > 1000, out);
  return out;
}

}  // namespace partix::detail
