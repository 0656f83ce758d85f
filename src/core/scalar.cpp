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

// Calls fn(T{}) with the C++ type of integer dtype d and returns true; false for the others.
template <class Fn>
bool with_int_type(DType d, Fn&& fn) {
  switch (d) {
    case DType::I8:
      fn(int8_t{});
      return true;
    case DType::I16:
      fn(int16_t{});
      return true;
    case DType::I32:
      fn(int32_t{});
      return true;
    case DType::I64:
      fn(int64_t{});
      return true;
    case DType::U8:
      fn(uint8_t{});
      return true;
    case DType::U16:
      fn(uint16_t{});
      return true;
    case DType::U32:
      fn(uint32_t{});
      return true;
    default:
      return false;
  }
}

}  // namespace

void store_scalar(void* dst, DType dtype, double v) {
  if (with_int_type(dtype, [&](auto t) {
        using T = decltype(t);
        *static_cast<T*>(dst) = saturate<T>(v);
      })) {
    return;
  }
  switch (dtype) {
    case DType::Bool:
      *static_cast<uint8_t*>(dst) = v != 0.0 ? 1 : 0;
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
  double out = 0.0;
  if (with_int_type(dtype, [&](auto t) {
        out = static_cast<double>(*static_cast<const decltype(t)*>(src));
      })) {
    return out;
  }
  switch (dtype) {
    case DType::Bool:
      return *static_cast<const uint8_t*>(src) ? 1.0 : 0.0;
    case DType::F16:
      return static_cast<float>(*static_cast<const float16*>(src));
    case DType::BF16:
      return static_cast<float>(*static_cast<const bfloat16*>(src));
    case DType::F32:
      return *static_cast<const float*>(src);
    case DType::F64:
      return *static_cast<const double*>(src);
    default:
      return 0.0;  // quantized: no scalar element
  }
}

int64_t load_int(const void* src, DType dtype) {
  int64_t out = 0;
  if (with_int_type(dtype, [&](auto t) {
        out = static_cast<int64_t>(*static_cast<const decltype(t)*>(src));
      })) {
    return out;
  }
  if (dtype == DType::Bool) return *static_cast<const uint8_t*>(src) ? 1 : 0;
  return static_cast<int64_t>(load_scalar(src, dtype));
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

// Integers keep their low bits: integer arithmetic wraps in its own width.
void store_int(void* dst, DType dtype, int64_t v) {
  if (with_int_type(dtype, [&](auto t) {
        using T = decltype(t);
        *static_cast<T*>(dst) = static_cast<T>(v);
      })) {
    return;
  }
  if (dtype == DType::Bool) {
    *static_cast<uint8_t*>(dst) = v != 0 ? 1 : 0;
    return;
  }
  store_scalar(dst, dtype, static_cast<double>(v));
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
