// Fast CPU kernels of the elementwise primitives: unary math, binary arithmetic and
// comparisons, select and convert. The scalar math is the functors of
// src/ir/elementwise_ops.h and the compute type the f32 column of the table
// (ir/elementwise_table.inc); this file writes loops that vectorise, for every row.
//
// Compute types, chosen to match the reference (which computes in double and rounds once):
//  - f32, as the row's f32 column says: EXACT ops (+ - * / sqrt max min, comparisons, neg abs
//    sign floor ceil round: the f32 result equals the double result rounded) run in f32; VM
//    and BLOCK ones (exp tanh logistic erf log sin cos) use vector_math.h (<= 1 ulp); DOUBLE
//    ones (rsqrt pow rem log1p expm1 erf_inv) are evaluated in double exactly as the
//    reference: bit-identical.
//  - bf16 / f16: converted to f32 in blocks, computed as f32, rounded back. The reference
//    rounds double -> f32 -> half too, so results agree wherever the f32 results do.
//  - f64, i32, i64, bool: the functor in the element type (integer arithmetic wraps in both).
// Operands have the result's shape or are rank-0 scalars; the result may alias an operand
// (in-place reuse), which index-by-index loops and whole-block conversions both tolerate.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <type_traits>

#include "backend/cpu/kernel_util.h"
#include "core/quants.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/vector_math.h"
#include "ir/elementwise_ops.h"
#include "ir/primitive.h"

namespace partix::backend::cpu {

namespace {

using prim::KernelCall;
namespace ew = prim::ew;

// Elements per block of the half-precision pipelines (f32 buffers on the stack).
constexpr int64_t kBlock = 512;

// ---- f32 evaluation of unary ops ----

// sin / cos: vector reduction for |x| <= 2^19, the C library beyond (as the reference).
template <int kCos>
void trig_f32(const float* x, float* y, int64_t n) {
  alignas(64) float v[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    std::memcpy(v, x + b, static_cast<size_t>(m) * sizeof(float));  // y may alias x
    float* out = y + b;
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) out[i] = static_cast<float>(vm::sincos_d(v[i], kCos));
    for (int64_t i = 0; i < m; ++i) {
      if (!(std::fabs(v[i]) <= vm::kTrigMaxArg)) {  // huge, inf or NaN
        double d = v[i];
        out[i] = static_cast<float>(kCos ? std::cos(d) : std::sin(d));
      }
    }
  }
}

// F32Unary<Op>::run(x, y, n): y = Op(x) over f32 values, as the row's f32 column says.
template <class Op>
struct F32Unary;

#define PARTIX_F32_LOOP(expr)                           \
  _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) { \
    float v = x[i];                                     \
    y[i] = (expr);                                      \
  }
#define PARTIX_F32_RUN_EXACT PARTIX_F32_LOOP(Op::f<float>(v))
#define PARTIX_F32_RUN_DOUBLE \
  PARTIX_F32_LOOP(static_cast<float>(Op::f<double>(static_cast<double>(v))))
#define PARTIX_F32_RUN_VM(expr) PARTIX_F32_LOOP(expr)
#define PARTIX_F32_RUN_BLOCK(fn) fn(x, y, n);
#define PARTIX_F32_RUN_NONE (void)x, (void)y, (void)n;
#define PARTIX_UNARY(Type, str, api, dtypes, lin, math, f32, ...)                 \
  template <>                                                                     \
  struct F32Unary<ew::Type> {                                                     \
    using Op = ew::Type;                                                          \
    static void run(const float* x, float* y, int64_t n) { PARTIX_F32_RUN_##f32 } \
  };
#define PARTIX_BINARY(...)
#include "ir/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY
#undef PARTIX_F32_RUN_EXACT
#undef PARTIX_F32_RUN_DOUBLE
#undef PARTIX_F32_RUN_VM
#undef PARTIX_F32_RUN_BLOCK
#undef PARTIX_F32_RUN_NONE
#undef PARTIX_F32_LOOP

// ---- loops ----

template <class T, class R, class F>
void map_unary(const T* in, R* out, int64_t n, F f) {
  parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) out[i] = f(in[i]);
  });
}

// Half-precision pipeline: blocks of n converted to f32, run(f32 in, f32 out), back to half.
template <class Run>
void half_unary(DType dt, const uint16_t* in, uint16_t* out, int64_t n, Run run) {
  parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    alignas(64) float buf[kBlock];
    for (int64_t b = lo; b < hi; b += kBlock) {
      const int64_t m = std::min(kBlock, hi - b);
      half_to_f32(dt, in + b, buf, m);
      run(buf, buf, m);
      f32_to_half(dt, buf, out + b, m);
    }
  });
}

template <class Op>
bool unary_kernel(const KernelCall& c) {
  const DType dt = c.in_aval(0).dtype;
  const int64_t n = c.out_aval(0).size();
  if (n == 0) return true;
  if constexpr (ew::allows_float(Op::kAllowed)) {
    if (dt == DType::F32) {
      const float* in = c.input<float>(0);
      float* out = c.output<float>(0);
      parallel_for(n, kParallelGrain,
                   [&](int64_t lo, int64_t hi) { F32Unary<Op>::run(in + lo, out + lo, hi - lo); });
      return true;
    }
    if (is_half(dt)) {
      half_unary(dt, c.input<uint16_t>(0), c.output<uint16_t>(0), n, F32Unary<Op>::run);
      return true;
    }
    if (dt == DType::F64) {
      map_unary(c.input<double>(0), c.output<double>(0), n,
                [](double v) { return Op::template f<double>(v); });
      return true;
    }
  }
  if constexpr (ew::allows_int(Op::kAllowed)) {
    if (dt == DType::I32) {
      map_unary(c.input<int32_t>(0), c.output<int32_t>(0), n,
                [](int32_t v) { return Op::template f<int32_t>(v); });
      return true;
    }
    if (dt == DType::I64) {
      map_unary(c.input<int64_t>(0), c.output<int64_t>(0), n,
                [](int64_t v) { return Op::template f<int64_t>(v); });
      return true;
    }
  }
  if constexpr (ew::allows_bool(Op::kAllowed)) {
    if (dt == DType::Bool) {
      map_unary(c.input<uint8_t>(0), c.output<uint8_t>(0), n,
                [](uint8_t v) -> uint8_t { return Op::template f<bool>(v != 0) ? 1 : 0; });
      return true;
    }
  }
  return false;
}

// ---- binary ----

// Ops whose f32 result is the double result rounded (so f32 compute is bit-identical).
template <class Op>
inline constexpr bool kExactInF32 = Op::kF32 == ew::F32Eval::kExact;

template <class C, class T>
C load_as(T v) {
  if constexpr (std::is_same_v<C, bool>) {
    return v != 0;  // bool storage: any nonzero byte is true
  } else {
    return static_cast<C>(v);
  }
}

// out[i] = Op(a[i], b[i]) computed in C; kSa / kSb mark rank-0 operands (stride 0).
template <class C, class Op, class T, class R, bool kSa, bool kSb>
void binary_loop(const T* a, const T* b, R* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    C x = load_as<C>(a[kSa ? 0 : i]);
    C y = load_as<C>(b[kSb ? 0 : i]);
    out[i] = static_cast<R>(Op::template f<C>(x, y));
  }
}

template <class C, class Op, class T, class R>
void binary_any(const T* a, bool sa, const T* b, bool sb, R* out, int64_t n) {
  if (sa && sb) {
    binary_loop<C, Op, T, R, true, true>(a, b, out, n);
  } else if (sa) {
    binary_loop<C, Op, T, R, true, false>(a, b, out, n);
  } else if (sb) {
    binary_loop<C, Op, T, R, false, true>(a, b, out, n);
  } else {
    binary_loop<C, Op, T, R, false, false>(a, b, out, n);
  }
}

template <class C, class Op, class T, class R>
void binary_typed(const KernelCall& c, int64_t n) {
  const bool sa = c.in_aval(0).shape.empty(), sb = c.in_aval(1).shape.empty();
  const T* a = c.input<T>(0);
  const T* b = c.input<T>(1);
  R* out = c.output<R>(0);
  parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    binary_any<C, Op, T, R>(sa ? a : a + lo, sa, sb ? b : b + lo, sb, out + lo, hi - lo);
  });
}

template <class C, class Op>
void binary_half(const KernelCall& c, DType dt, int64_t n) {
  const bool sa = c.in_aval(0).shape.empty(), sb = c.in_aval(1).shape.empty();
  const uint16_t* a = c.input<uint16_t>(0);
  const uint16_t* b = c.input<uint16_t>(1);
  float a0, b0;  // scalar operands, converted once
  half_to_f32(dt, a, &a0, 1);
  half_to_f32(dt, b, &b0, 1);
  parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    alignas(64) float fa[kBlock], fb[kBlock], fo[kBlock];
    for (int64_t s = lo; s < hi; s += kBlock) {
      const int64_t m = std::min(kBlock, hi - s);
      const float* pa = &a0;
      const float* pb = &b0;
      if (!sa) {
        half_to_f32(dt, a + s, fa, m);
        pa = fa;
      }
      if (!sb) {
        half_to_f32(dt, b + s, fb, m);
        pb = fb;
      }
      if constexpr (Op::kCompare) {
        binary_any<C, Op, float, uint8_t>(pa, sa, pb, sb, c.output<uint8_t>(0) + s, m);
      } else {
        binary_any<C, Op, float, float>(pa, sa, pb, sb, fo, m);
        f32_to_half(dt, fo, c.output<uint16_t>(0) + s, m);
      }
    }
  });
}

template <class Op, class T>
using result_t = std::conditional_t<Op::kCompare, uint8_t, T>;

template <class Op>
bool binary_kernel(const KernelCall& c) {
  const DType dt = c.in_aval(0).dtype;
  const int64_t n = c.out_aval(0).size();
  if (n == 0) return true;  // operands may have no storage at all
  if constexpr (ew::allows_float(Op::kAllowed)) {
    using C = std::conditional_t<kExactInF32<Op>, float, double>;
    if (dt == DType::F32) {
      binary_typed<C, Op, float, result_t<Op, float>>(c, n);
      return true;
    }
    if (is_half(dt)) {
      binary_half<C, Op>(c, dt, n);
      return true;
    }
    if (dt == DType::F64) {
      binary_typed<double, Op, double, result_t<Op, double>>(c, n);
      return true;
    }
  }
  if constexpr (ew::allows_int(Op::kAllowed)) {
    if (dt == DType::I32) {
      binary_typed<int32_t, Op, int32_t, result_t<Op, int32_t>>(c, n);
      return true;
    }
    if (dt == DType::I64) {
      binary_typed<int64_t, Op, int64_t, result_t<Op, int64_t>>(c, n);
      return true;
    }
  }
  if constexpr (ew::allows_bool(Op::kAllowed)) {
    if (dt == DType::Bool) {
      binary_typed<bool, Op, uint8_t, uint8_t>(c, n);
      return true;
    }
  }
  return false;
}

// ---- select(pred, on_true, on_false) ----

template <class T, bool kSt, bool kSf>
void select_loop(const uint8_t* p, const T* t, const T* f, T* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = p[i] ? t[kSt ? 0 : i] : f[kSf ? 0 : i];
}

template <class T>
void select_typed(const KernelCall& c, int64_t n) {
  bool s[3];
  for (size_t k = 0; k < 3; ++k) s[k] = c.in_aval(k).shape.empty();
  const uint8_t* p = c.input<uint8_t>(0);
  const T* t = c.input<T>(1);
  const T* f = c.input<T>(2);
  T* out = c.output<T>(0);
  parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    const T* pt = s[1] ? t : t + lo;
    const T* pf = s[2] ? f : f + lo;
    T* po = out + lo;
    const int64_t m = hi - lo;
    if (s[0]) {  // one predicate: a copy of one branch (possibly a broadcast scalar)
      const bool take_t = p[0] != 0;
      const T* src = take_t ? pt : pf;
      if (take_t ? s[1] : s[2]) {
        std::fill(po, po + m, src[0]);
      } else if (src != po) {
        std::memcpy(po, src, static_cast<size_t>(m) * sizeof(T));
      }
      return;
    }
    const uint8_t* pp = p + lo;
    if (s[1] && s[2]) {
      select_loop<T, true, true>(pp, pt, pf, po, m);
    } else if (s[1]) {
      select_loop<T, true, false>(pp, pt, pf, po, m);
    } else if (s[2]) {
      select_loop<T, false, true>(pp, pt, pf, po, m);
    } else {
      select_loop<T, false, false>(pp, pt, pf, po, m);
    }
  });
}

bool select_kernel(const KernelCall& c) {
  const int64_t n = c.out_aval(0).size();
  if (n == 0) return true;
  switch (dtype_size(c.out_aval(0).dtype)) {  // a select moves bits: only the width matters
    case 1:
      select_typed<uint8_t>(c, n);
      return true;
    case 2:
      select_typed<uint16_t>(c, n);
      return true;
    case 4:
      select_typed<uint32_t>(c, n);
      return true;
    case 8:
      select_typed<uint64_t>(c, n);
      return true;
  }
  return false;
}

// ---- convert{dtype} ----

// One element, with the reference's semantics: float -> int saturates (to the same bounds)
// and maps NaN to 0; -> bool is x != 0; int -> f32 rounds once, int -> f64 is exact or rounds once.
template <class To, class From>
To convert_value(From v) {
  if constexpr (std::is_same_v<From, uint8_t>) {  // bool storage
    return convert_value<To, int32_t>(v != 0 ? 1 : 0);
  } else if constexpr (std::is_floating_point_v<From>) {
    if constexpr (std::is_floating_point_v<To>) {
      return static_cast<To>(v);
    } else if constexpr (std::is_same_v<To, uint8_t>) {
      return v != From(0) ? 1 : 0;
    } else {
      // Saturate at the integer limits: 2^31 - 1 is a double, 2^63 - 1 is not (v >= 2^63
      // saturates to INT64_MAX, v in [-2^63, 2^63) truncates exactly).
      constexpr bool k32 = std::is_same_v<To, int32_t>;
      constexpr double lo = k32 ? -2147483648.0 : -9223372036854775808.0;
      constexpr double hi = k32 ? 2147483647.0 : 9223372036854775808.0;
      double d = static_cast<double>(v);
      if (d != d) return To(0);
      if (d <= lo) return std::numeric_limits<To>::min();
      if (d >= hi) return std::numeric_limits<To>::max();
      return static_cast<To>(d);
    }
  } else {  // i32 / i64
    if constexpr (std::is_same_v<To, float>) {
      return static_cast<float>(v);  // one rounding (via double would round twice past 2^53)
    } else if constexpr (std::is_floating_point_v<To>) {
      return static_cast<To>(static_cast<double>(v));
    } else if constexpr (std::is_same_v<To, uint8_t>) {
      return v != 0 ? 1 : 0;
    } else {
      return static_cast<To>(v);  // i64 -> i32 wraps
    }
  }
}

// I8, I16, U8, U16, U32: their kernels are the reference's (u8 is bool's storage below).
bool is_narrow_int(DType d) { return is_integral(d) && d != DType::I32 && d != DType::I64; }

// Calls fn(T{}) with the storage type of a non-half, non-narrow dtype (no call for the others).
template <class Fn>
void with_storage(DType d, Fn&& fn) {
  switch (d) {
    case DType::Bool:
      fn(uint8_t{});
      break;
    case DType::I32:
      fn(int32_t{});
      break;
    case DType::I64:
      fn(int64_t{});
      break;
    case DType::F32:
      fn(float{});
      break;
    case DType::F64:
      fn(double{});
      break;
    case DType::F16:
    case DType::BF16:
    case DType::I8:
    case DType::I16:
    case DType::U8:
    case DType::U16:
    case DType::U32:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q4_K:
    case DType::Q6_K:
      break;
  }
}

bool convert_kernel(const KernelCall& c) {
  const DType from = c.in_aval(0).dtype, to = c.out_aval(0).dtype;
  const int64_t n = c.out_aval(0).size();
  if (n == 0) return true;
  // The narrow and unsigned integers convert in the reference (u8 storage here means bool).
  if (is_narrow_int(from) || is_narrow_int(to)) return false;
  if (is_quantized(from) || is_quantized(to)) {  // dequantizing to f32 directly, else reference
    if (to != DType::F32 || from == to) return false;
    detail::dequantize(from, c.in[0], n, c.output<float>(0));
    return true;
  }
  if (from == to && from != DType::Bool) {  // (bool -> bool still normalises to 0 / 1)
    if (c.in[0] != c.out[0])
      std::memcpy(c.out[0], c.in[0], static_cast<size_t>(c.out_aval(0).nbytes()));
    return true;
  }
  if (!is_half(from) && !is_half(to)) {
    with_storage(from, [&](auto f) {
      using F = decltype(f);
      with_storage(to, [&](auto t) {
        using T = decltype(t);
        map_unary(c.input<F>(0), c.output<T>(0), n, [](F v) { return convert_value<T, F>(v); });
      });
    });
    return true;
  }
  // A half type on either side: through f32 blocks (the reference also rounds via f32).
  parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    alignas(64) float buf[kBlock];
    for (int64_t s = lo; s < hi; s += kBlock) {
      const int64_t m = std::min(kBlock, hi - s);
      if (is_half(from)) {
        half_to_f32(from, c.input<uint16_t>(0) + s, buf, m);
      } else {
        with_storage(from, [&](auto f) {
          using F = decltype(f);
          const F* src = c.input<F>(0) + s;
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) buf[i] = convert_value<float, F>(src[i]);
        });
      }
      if (is_half(to)) {
        f32_to_half(to, buf, c.output<uint16_t>(0) + s, m);
      } else {
        with_storage(to, [&](auto t) {
          using T = decltype(t);
          T* dst = c.output<T>(0) + s;
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) dst[i] = convert_value<T, float>(buf[i]);
        });
      }
    }
  });
  return true;
}

// ---- f32 loops for fused groups ----

template <class Op>
void f32_unary_loop(const float* a, bool sa, const float*, bool, float* out, int64_t n) {
  if (sa && n > 1) {  // one value, repeated
    F32Unary<Op>::run(a, out, 1);
    std::fill(out + 1, out + n, out[0]);
    return;
  }
  F32Unary<Op>::run(a, out, n);
}
template <class Op>
void f32_binary_loop(const float* a, bool sa, const float* b, bool sb, float* out, int64_t n) {
  using C = std::conditional_t<kExactInF32<Op>, float, double>;
  binary_any<C, Op, float, float>(a, sa, b, sb, out, n);
}

}  // namespace

F32Loop f32_loop(std::string_view op) {
  // Every row that admits floats and computes a float.
  static const auto* loops = [] {
    auto* m = new std::map<std::string, F32Loop, std::less<>>;
    ew::for_each_unary([&]<class Op>() {
      if constexpr (ew::allows_float(Op::kAllowed)) (*m)[Op::kName] = &f32_unary_loop<Op>;
    });
    ew::for_each_binary([&]<class Op>() {
      if constexpr (ew::allows_float(Op::kAllowed) && !Op::kCompare) {
        (*m)[Op::kName] = &f32_binary_loop<Op>;
      }
    });
    return m;
  }();
  auto it = loops->find(op);
  return it == loops->end() ? nullptr : it->second;
}

namespace {

struct Registrar {
  Registrar() {
    ew::for_each_unary(
        []<class Op>() { prim::register_kernel(Op::kName, "cpu", &unary_kernel<Op>); });
    ew::for_each_binary(
        []<class Op>() { prim::register_kernel(Op::kName, "cpu", &binary_kernel<Op>); });
    prim::register_kernel("select", "cpu", &select_kernel);
    prim::register_kernel("convert", "cpu", &convert_kernel);
  }
} registrar;

}  // namespace
}  // namespace partix::backend::cpu
