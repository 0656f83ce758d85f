// The scalar math of every elementwise primitive: the helpers the rows of
// prim/elementwise_table.inc use, and one functor per row, templated on the compute type, with
// the row's facts. The reference kernels (src/prim/elementwise.cpp) instantiate them in double
// (floats) or int64 (integers); the fast CPU kernels in the element type or float.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "ir/primitive.h"

namespace partix::prim::ew {

enum class Allowed { kFloat, kNumeric, kBool, kIntOrBool, kAny };

// The dtype categories an op admits; kernels instantiate the math only for those.
constexpr bool allows_float(Allowed a) {
  return a == Allowed::kFloat || a == Allowed::kNumeric || a == Allowed::kAny;
}
constexpr bool allows_int(Allowed a) {
  return a == Allowed::kNumeric || a == Allowed::kIntOrBool || a == Allowed::kAny;
}
constexpr bool allows_bool(Allowed a) {
  return a == Allowed::kBool || a == Allowed::kIntOrBool || a == Allowed::kAny;
}

template <class T>
inline constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Integer arithmetic wraps (two's complement), as XLA defines it; floats are plain.
template <class T>
T wrap_add(T a, T b) {
  if constexpr (kIsInt<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T>
T wrap_sub(T a, T b) {
  if constexpr (kIsInt<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <class T>
T wrap_mul(T a, T b) {
  if constexpr (kIsInt<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <class T>
T wrap_neg(T x) {
  if constexpr (kIsInt<T>) {
    return wrap_sub(T(0), x);
  } else {
    return -x;
  }
}

// |x|: integers wrap (|INT_MIN| = INT_MIN); floats clear the sign bit, so |-0.0| = +0.0.
template <class T>
T abs_value(T x) {
  if constexpr (kIsInt<T>) {
    return x < T(0) ? wrap_neg(x) : x;
  } else {
    return std::fabs(x);
  }
}

// Inverse error function: an initial rational approximation refined by Newton steps.
template <class T>
T erf_inv_impl(T x) {
  if (!(x > T(-1))) return x == T(-1) ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
  if (!(x < T(1))) return x == T(1) ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
  // Giles (2010) single-precision approximation as the starting point.
  double w = -std::log((1.0 - static_cast<double>(x)) * (1.0 + static_cast<double>(x)));
  double p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double y = p * static_cast<double>(x);
  // Newton: f(y) = erf(y) - x, f'(y) = 2/sqrt(pi) exp(-y^2).
  for (int i = 0; i < 2; ++i) {
    double err = std::erf(y) - static_cast<double>(x);
    y -= err / (1.1283791670955126 * std::exp(-y * y));
  }
  return static_cast<T>(y);
}

// Integer division as XLA defines it: x / 0 = -1, INT_MIN / -1 = INT_MIN; truncates.
template <class T>
T int_div(T a, T b) {
  if (b == 0) return T(-1);
  if (b == T(-1)) return wrap_sub(T(0), a);
  return a / b;
}
template <class T>
T int_rem(T a, T b) {
  if (b == 0) return a;
  if (b == T(-1)) return T(0);
  return a % b;
}

template <class T>
T div_value(T a, T b) {
  if constexpr (kIsInt<T>) {
    return int_div(a, b);
  } else {
    return a / b;
  }
}
template <class T>
T rem_value(T a, T b) {
  if constexpr (kIsInt<T>) {
    return int_rem(a, b);
  } else {
    return std::fmod(a, b);
  }
}

// How the fast kernel computes f32 (and bf16 / f16 widened to f32): the table's f32 column.
enum class F32Eval {
  kExact,   // the math in float, whose result is the double result rounded: the same bits
  kDouble,  // the math in double, then rounded, as the reference: the same bits
  kVector,  // vectorised approximations (vector_math.h): within 1 ulp of the reference
  kBlock,   // a routine over a block: within 1 ulp of the reference
  kNone,    // floats are not admitted
};
#define PARTIX_EW_F32_EXACT F32Eval::kExact
#define PARTIX_EW_F32_DOUBLE F32Eval::kDouble
#define PARTIX_EW_F32_VM(expr) F32Eval::kVector
#define PARTIX_EW_F32_BLOCK(fn) F32Eval::kBlock
#define PARTIX_EW_F32_NONE F32Eval::kNone

// One functor per row of the table.
#define PARTIX_UNARY(Type, str, api, dtypes, lin, math, f32, ...) struct Type;
#define PARTIX_BINARY(Type, str, api, dtypes, lin, result, bools, math, f32, ...) struct Type;
#include "prim/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY

#define PARTIX_UNARY(Type, str, api, dtypes, lin, math, f32, ...) \
  struct Type {                                                   \
    static constexpr const char* kName = str;                     \
    static constexpr Allowed kAllowed = Allowed::k##dtypes;       \
    static constexpr Linearity kLinearity = Linearity::k##lin;    \
    static constexpr F32Eval kF32 = PARTIX_EW_F32_##f32;          \
    template <class T>                                            \
    static T f(T x) {                                             \
      return math;                                                \
    }                                                             \
  };
#define PARTIX_BINARY(Type, str, api, dtypes, lin, result, bools, math, f32, ...) \
  struct Type {                                                                   \
    static constexpr const char* kName = str;                                     \
    static constexpr Allowed kAllowed = Allowed::k##dtypes;                       \
    static constexpr Linearity kLinearity = Linearity::k##lin;                    \
    static constexpr F32Eval kF32 = PARTIX_EW_F32_##f32;                          \
    static constexpr bool kCompare = PARTIX_EW_RESULT_##result;                   \
    using OnBools = bools;                                                        \
    template <class T>                                                            \
    static auto f(T a, T b) {                                                     \
      return math;                                                                \
    }                                                                             \
  };
#define PARTIX_EW_RESULT_Same false
#define PARTIX_EW_RESULT_Bool true
#include "prim/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY
#undef PARTIX_EW_RESULT_Same
#undef PARTIX_EW_RESULT_Bool
#undef PARTIX_EW_F32_EXACT
#undef PARTIX_EW_F32_DOUBLE
#undef PARTIX_EW_F32_VM
#undef PARTIX_EW_F32_BLOCK
#undef PARTIX_EW_F32_NONE

// Calls fn.template operator()<Type>() for every unary row, then every binary row: for
// consumers that need the list as a whole (registration, lookup by name).
template <class Fn>
void for_each_unary(Fn&& fn) {
#define PARTIX_UNARY(Type, ...) fn.template operator()<Type>();
#define PARTIX_BINARY(...)
#include "prim/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY
}
template <class Fn>
void for_each_binary(Fn&& fn) {
#define PARTIX_UNARY(...)
#define PARTIX_BINARY(Type, ...) fn.template operator()<Type>();
#include "prim/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY
}

}  // namespace partix::prim::ew
