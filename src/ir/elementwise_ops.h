// The scalar math of every elementwise primitive: the helpers the rows of
// ir/elementwise_table.inc use, and one functor per row, templated on the compute type, with
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

enum class Allowed { kFloat, kNumeric, kBool, kInt, kIntOrBool, kAny };

// The dtype categories an op admits; kernels instantiate the math only for those.
constexpr bool allows_float(Allowed a) {
  return a == Allowed::kFloat || a == Allowed::kNumeric || a == Allowed::kAny;
}
constexpr bool allows_int(Allowed a) {
  return a == Allowed::kNumeric || a == Allowed::kInt || a == Allowed::kIntOrBool ||
         a == Allowed::kAny;
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

// Bitwise not of an integer; logical not of a bool.
template <class T>
T bit_not(T x) {
  if constexpr (kIsInt<T>) {
    return static_cast<T>(~x);
  } else {
    return !x;
  }
}

// Shifts as XLA defines them, in the compute type's width (the reference's int64 results are
// then truncated to the element's width, which gives the same bits): a left shift by a
// negative amount or by the width or more gives 0; an arithmetic right shift by such an amount
// fills with the sign bit (0 for an unsigned type).
template <class T>
T shl_value(T a, T b) {
  constexpr T kWidth = static_cast<T>(sizeof(T) * 8);
  if constexpr (std::is_signed_v<T>) {
    if (b < T(0)) return T(0);
  }
  if (b >= kWidth) return T(0);
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) << b));
}
template <class T>
T sra_value(T a, T b) {
  constexpr T kWidth = static_cast<T>(sizeof(T) * 8);
  if constexpr (std::is_signed_v<T>) {
    if (b < T(0) || b >= kWidth) b = kWidth - 1;
  } else {
    if (b >= kWidth) return T(0);
  }
  return static_cast<T>(a >> b);
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

// p(r) / q(r) for degree-7 polynomials given highest coefficient first (q's constant term 1),
// both by Horner's rule.
inline double rational7(double r, const double (&p)[8], const double (&q)[7]) {
  double num = p[0], den = q[0];
  for (int k = 1; k < 8; ++k) num = num * r + p[k];
  for (int k = 1; k < 7; ++k) den = den * r + q[k];
  return num / (den * r + 1.0);
}

// Inverse error function, through the normal quantile: erf_inv(x) = z / sqrt(2) where z is the
// standard normal deviate of lower tail area (1 + x) / 2. z comes from Wichura's rational
// approximations (Algorithm AS 241, PPND16: relative error about 1e-16), evaluated in double:
// no transcendental function near 0, one logarithm and one square root in the tails. The
// tail area is formed as (1 - |x|) / 2, exact in double, so that the tails keep their digits.
template <class T>
T erf_inv_impl(T x) {
  if (!(x > T(-1)))
    return x == T(-1) ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
  if (!(x < T(1)))
    return x == T(1) ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
  // AS 241's coefficients: the central region, then the tails near and far.
  static constexpr double kCentralP[8] = {2.5090809287301226727e3, 3.3430575583588128105e4,
                                          6.7265770927008700853e4, 4.5921953931549871457e4,
                                          1.3731693765509461125e4, 1.9715909503065514427e3,
                                          1.3314166789178437745e2, 3.3871328727963666080e0};
  static constexpr double kCentralQ[7] = {5.2264952788528545610e3, 2.8729085735721942674e4,
                                          3.9307895800092710610e4, 2.1213794301586595867e4,
                                          5.3941960214247511077e3, 6.8718700749205790830e2,
                                          4.2313330701600911252e1};
  static constexpr double kNearP[8] = {7.74545014278341407640e-4, 2.27238449892691845833e-2,
                                       2.41780725177450611770e-1, 1.27045825245236838258e0,
                                       3.64784832476320460504e0,  5.76949722146069140550e0,
                                       4.63033784615654529590e0,  1.42343711074968357734e0};
  static constexpr double kNearQ[7] = {1.05075007164441684324e-9, 5.47593808499534494600e-4,
                                       1.51986665636164571966e-2, 1.48103976427480074590e-1,
                                       6.89767334985100004550e-1, 1.67638483018380384940e0,
                                       2.05319162663775882187e0};
  static constexpr double kFarP[8] = {2.01033439929228813265e-7, 2.71155556874348757815e-5,
                                      1.24266094738807843860e-3, 2.65321895265761230930e-2,
                                      2.96560571828504891230e-1, 1.78482653991729133580e0,
                                      5.46378491116411436990e0,  6.65790464350110377720e0};
  static constexpr double kFarQ[7] = {2.04426310338993978564e-15, 1.42151175831644588870e-7,
                                      1.84631831751005468180e-5,  7.86869131145613259100e-4,
                                      1.48753612908506148525e-2,  1.36929880922735805310e-1,
                                      5.99832206555887937690e-1};
  const double xd = static_cast<double>(x);
  const double q = 0.5 * xd;  // (1 + x) / 2 - 1/2
  double z;
  if (std::fabs(q) <= 0.425) {
    z = q * rational7(0.180625 - q * q, kCentralP, kCentralQ);
  } else {
    const double r = std::sqrt(-std::log(0.5 * (1.0 - std::fabs(xd))));  // the smaller tail
    z = r <= 5.0 ? rational7(r - 1.6, kNearP, kNearQ) : rational7(r - 5.0, kFarP, kFarQ);
    if (q < 0) z = -z;
  }
  return static_cast<T>(z * 0.70710678118654752440);
}

// Integer division as XLA defines it: x / 0 = -1, INT_MIN / -1 = INT_MIN; truncates.
// Unsigned types have no -1 divisor (x / 0 is all ones there too).
template <class T>
T int_div(T a, T b) {
  if (b == 0) return T(-1);
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return wrap_sub(T(0), a);
  }
  return static_cast<T>(a / b);
}
template <class T>
T int_rem(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
  }
  return static_cast<T>(a % b);
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
#include "ir/elementwise_table.inc"
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
#include "ir/elementwise_table.inc"
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
#include "ir/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY
}
template <class Fn>
void for_each_binary(Fn&& fn) {
#define PARTIX_UNARY(...)
#define PARTIX_BINARY(Type, ...) fn.template operator()<Type>();
#include "ir/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY
}

}  // namespace partix::prim::ew
