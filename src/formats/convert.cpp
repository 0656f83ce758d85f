#include "formats/convert.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/array_impl.h"
#include "core/errors.h"

namespace partix::detail {

int stored_size(StoredType t) {
  switch (t) {
    case StoredType::Bool:
      return 1;
    case StoredType::I32:
      return 4;
    case StoredType::I64:
      return 8;
    case StoredType::F16:
      return 2;
    case StoredType::BF16:
      return 2;
    case StoredType::F32:
      return 4;
    case StoredType::F64:
      return 8;
    case StoredType::I8:
    case StoredType::U8:
      return 1;
    case StoredType::I16:
    case StoredType::U16:
      return 2;
    case StoredType::U32:
      return 4;
  }
  return 0;
}

std::string_view stored_name(StoredType t) {
  switch (t) {
    case StoredType::Bool:
      return "BOOL";
    case StoredType::I32:
      return "I32";
    case StoredType::I64:
      return "I64";
    case StoredType::F16:
      return "F16";
    case StoredType::BF16:
      return "BF16";
    case StoredType::F32:
      return "F32";
    case StoredType::F64:
      return "F64";
    case StoredType::I8:
      return "I8";
    case StoredType::I16:
      return "I16";
    case StoredType::U8:
      return "U8";
    case StoredType::U16:
      return "U16";
    case StoredType::U32:
      return "U32";
  }
  return "?";
}

DType stored_dtype(StoredType t) {
  switch (t) {
    case StoredType::Bool:
      return DType::Bool;
    case StoredType::I32:
      return DType::I32;
    case StoredType::I64:
      return DType::I64;
    case StoredType::F16:
      return DType::F16;
    case StoredType::BF16:
      return DType::BF16;
    case StoredType::F32:
      return DType::F32;
    case StoredType::F64:
      return DType::F64;
    case StoredType::I8:
      return DType::I8;
    case StoredType::I16:
      return DType::I16;
    case StoredType::U8:
      return DType::U8;
    case StoredType::U16:
      return DType::U16;
    case StoredType::U32:
      return DType::U32;
  }
  return DType::F32;
}

bool convertible(StoredType from, DType to) {
  DType f = stored_dtype(from);
  if (is_floating(to)) return true;
  if (is_integral(to)) return f == DType::Bool || is_integral(f);
  return f == DType::Bool;  // to == Bool
}

float round_to_odd_f32(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || static_cast<double>(f) == v) return f;
  // Inexact: take the float just toward zero of v, then mark it odd (sticky bit).
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  uint32_t u = std::bit_cast<uint32_t>(f) | 1u;
  return std::bit_cast<float>(u);
}

namespace {

template <class T>
T load_unaligned(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The value of one stored element, in the widest type that holds it exactly.
struct Value {
  enum Kind { kInt, kFloat, kDouble } kind;
  int64_t i = 0;
  float f = 0;
  double d = 0;
};

Value read_value(const uint8_t* p, StoredType t) {
  switch (t) {
    case StoredType::Bool:
      return {Value::kInt, *p != 0 ? 1 : 0};
    case StoredType::I32:
      return {Value::kInt, load_unaligned<int32_t>(p)};
    case StoredType::I64:
      return {Value::kInt, load_unaligned<int64_t>(p)};
    case StoredType::I8:
      return {Value::kInt, load_unaligned<int8_t>(p)};
    case StoredType::I16:
      return {Value::kInt, load_unaligned<int16_t>(p)};
    case StoredType::U8:
      return {Value::kInt, *p};
    case StoredType::U16:
      return {Value::kInt, load_unaligned<uint16_t>(p)};
    case StoredType::U32:
      return {Value::kInt, load_unaligned<uint32_t>(p)};
    case StoredType::F16:
      return {Value::kFloat, 0,
              static_cast<float>(float16::from_bits(load_unaligned<uint16_t>(p)))};
    case StoredType::BF16:
      return {Value::kFloat, 0,
              static_cast<float>(bfloat16::from_bits(load_unaligned<uint16_t>(p)))};
    case StoredType::F32:
      return {Value::kFloat, 0, load_unaligned<float>(p)};
    case StoredType::F64:
      return {Value::kDouble, 0, 0, load_unaligned<double>(p)};
  }
  return {};
}

// A float from which one more rounding to bf16/f16 is correct (see round_to_odd_f32).
float narrowable(const Value& v) {
  switch (v.kind) {
    case Value::kFloat:
      return v.f;
    case Value::kDouble:
      return round_to_odd_f32(v.d);
    case Value::kInt:
      return round_to_odd_f32(static_cast<double>(v.i));
  }
  return 0;
}

bool is_finite(const Value& v) {
  return v.kind == Value::kInt ||
         (v.kind == Value::kFloat ? std::isfinite(v.f) : std::isfinite(v.d));
}

// Stores integer v as I; false when I cannot hold it (the caller names the tensor).
template <class I>
bool store_narrow(int64_t v, char* dst) {
  const I out = static_cast<I>(v);
  std::memcpy(dst, &out, sizeof(I));
  return v >= static_cast<int64_t>(std::numeric_limits<I>::lowest()) &&
         v <= static_cast<int64_t>(std::numeric_limits<I>::max());
}

// The generic path: correct for every pair, used when no fast loop below applies.
bool convert_generic(const uint8_t* src, StoredType from, char* dst, DType to, int64_t n,
                     bool finite_only) {
  const int ss = stored_size(from), ds = dtype_size(to);
  bool ok = true;
  for (int64_t k = 0; k < n; ++k, src += ss, dst += ds) {
    Value v = read_value(src, from);
    // A narrower float cannot hold it: infinity would stand for a finite value.
    auto overflows = [&](float out) { return finite_only && std::isinf(out) && is_finite(v); };
    switch (to) {
      case DType::F32: {
        float out = v.kind == Value::kFloat    ? v.f
                    : v.kind == Value::kDouble ? static_cast<float>(v.d)
                                               : static_cast<float>(v.i);
        ok = ok && !overflows(out);
        std::memcpy(dst, &out, 4);
        break;
      }
      case DType::F64: {
        double out = v.kind == Value::kFloat    ? static_cast<double>(v.f)
                     : v.kind == Value::kDouble ? v.d
                                                : static_cast<double>(v.i);
        std::memcpy(dst, &out, 8);
        break;
      }
      case DType::BF16: {
        const bfloat16 out(narrowable(v));
        ok = ok && !overflows(static_cast<float>(out));
        std::memcpy(dst, &out.bits, 2);
        break;
      }
      case DType::F16: {
        const float16 out(narrowable(v));
        ok = ok && !overflows(static_cast<float>(out));
        std::memcpy(dst, &out.bits, 2);
        break;
      }
      case DType::I64:
        std::memcpy(dst, &v.i, 8);
        break;
      case DType::I32:
        ok = store_narrow<int32_t>(v.i, dst) && ok;
        break;
      case DType::I8:
        ok = store_narrow<int8_t>(v.i, dst) && ok;
        break;
      case DType::I16:
        ok = store_narrow<int16_t>(v.i, dst) && ok;
        break;
      case DType::U8:
        ok = store_narrow<uint8_t>(v.i, dst) && ok;
        break;
      case DType::U16:
        ok = store_narrow<uint16_t>(v.i, dst) && ok;
        break;
      case DType::U32:
        ok = store_narrow<uint32_t>(v.i, dst) && ok;
        break;
      case DType::Bool:
        *dst = v.i != 0 ? 1 : 0;
        break;
      default:  // quantized: never a conversion target (callers check)
        ok = false;
        break;
    }
  }
  return ok;
}

}  // namespace

bool convert_elements(const uint8_t* src, StoredType from, void* dst, DType to, int64_t n,
                      bool finite_only) {
  char* out = static_cast<char*>(dst);
  if (n <= 0) return true;
  if (from == StoredType::Bool && to == DType::Bool) {
    // Normalise: a stored 2 must not become a partix bool that is neither true nor false.
    bool ok = true;
    for (int64_t k = 0; k < n; ++k) {
      ok = ok && src[k] <= 1;
      out[k] = src[k] != 0 ? 1 : 0;
    }
    return ok;
  }
  if (stored_dtype(from) == to) {
    std::memcpy(out, src, static_cast<size_t>(n * dtype_size(to)));
    return true;
  }
  // The common widenings of model weights get a tight loop.
  if (to == DType::F32 && (from == StoredType::BF16 || from == StoredType::F16)) {
    float* o = reinterpret_cast<float*>(out);
    for (int64_t k = 0; k < n; ++k) {
      uint16_t b = load_unaligned<uint16_t>(src + 2 * k);
      o[k] = from == StoredType::BF16 ? static_cast<float>(bfloat16::from_bits(b))
                                      : static_cast<float>(float16::from_bits(b));
    }
    return true;
  }
  return convert_generic(src, from, out, to, n, finite_only);
}

void for_each_box_row(const Shape& shape, const std::vector<Slice>& idx, const Shape& local,
                      const std::function<void(int64_t, int64_t)>& row) {
  const size_t r = shape.size();
  if (r == 0) {
    row(0, 0);
    return;
  }
  for (const Slice& s : idx) {
    if (s.size() <= 0) return;  // an empty block: nothing to copy
  }
  // Strides of the global row index (dims 0..r-2) and of the local block (elements).
  std::vector<int64_t> gstride(r, 1), lstride(r, 1);
  int64_t g = 1;
  for (size_t d = r - 1; d-- > 0;) {
    gstride[d] = g;
    g *= shape[d];
  }
  int64_t l = 1;
  for (size_t d = r; d-- > 0;) {
    lstride[d] = l;
    l *= local[d];
  }
  std::vector<int64_t> pos(r - 1, 0);  // odometer over the box's dims 0..r-2
  while (true) {
    int64_t grow = 0, loff = 0;
    for (size_t d = 0; d + 1 < r; ++d) {
      grow += (idx[d].start + pos[d]) * gstride[d];
      loff += pos[d] * lstride[d];
    }
    row(grow, loff);
    int d = static_cast<int>(r) - 2;
    for (; d >= 0; --d) {
      if (++pos[static_cast<size_t>(d)] < idx[static_cast<size_t>(d)].size()) break;
      pos[static_cast<size_t>(d)] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace partix::detail
