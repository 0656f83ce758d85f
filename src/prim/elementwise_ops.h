// The scalar math of every elementwise primitive, written once as functors templated on the
// compute type. The reference kernels (src/prim/elementwise.cpp) instantiate them in double
// (floats) or int64 (integers); the fast CPU kernels in float for f32/bf16/f16.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

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

#define PARTIX_UNARY(Name, str, allowed, expr)   \
  struct Name {                                  \
    static constexpr const char* kName = str;    \
    static constexpr Allowed kAllowed = allowed; \
    template <class T>                           \
    static T f(T x) {                            \
      return expr;                               \
    }                                            \
  };

PARTIX_UNARY(Neg, "neg", Allowed::kNumeric, wrap_neg(x))
PARTIX_UNARY(Exp, "exp", Allowed::kFloat, std::exp(x))
PARTIX_UNARY(Log, "log", Allowed::kFloat, std::log(x))
PARTIX_UNARY(Sin, "sin", Allowed::kFloat, std::sin(x))
PARTIX_UNARY(Cos, "cos", Allowed::kFloat, std::cos(x))
PARTIX_UNARY(Tanh, "tanh", Allowed::kFloat, std::tanh(x))
PARTIX_UNARY(Sqrt, "sqrt", Allowed::kFloat, std::sqrt(x))
PARTIX_UNARY(Rsqrt, "rsqrt", Allowed::kFloat, T(1) / std::sqrt(x))
PARTIX_UNARY(Abs, "abs", Allowed::kNumeric, abs_value(x))
PARTIX_UNARY(Sign, "sign", Allowed::kNumeric,
             x > T(0) ? T(1) : (x < T(0) ? T(-1) : x))  // keeps NaN and signed zero
PARTIX_UNARY(Floor, "floor", Allowed::kFloat, std::floor(x))
PARTIX_UNARY(Ceil, "ceil", Allowed::kFloat, std::ceil(x))
PARTIX_UNARY(Round, "round", Allowed::kFloat, std::nearbyint(x))  // half to even
PARTIX_UNARY(Logistic, "logistic", Allowed::kFloat,
             x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)))
PARTIX_UNARY(Erf, "erf", Allowed::kFloat, std::erf(x))
PARTIX_UNARY(ErfInv, "erf_inv", Allowed::kFloat, erf_inv_impl(x))
PARTIX_UNARY(Log1p, "log1p", Allowed::kFloat, std::log1p(x))
PARTIX_UNARY(Expm1, "expm1", Allowed::kFloat, std::expm1(x))
PARTIX_UNARY(Not, "not", Allowed::kBool, !x)
#undef PARTIX_UNARY

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

#define PARTIX_BINARY(Name, str, allowed, compare, expr) \
  struct Name {                                          \
    static constexpr const char* kName = str;            \
    static constexpr Allowed kAllowed = allowed;         \
    static constexpr bool kCompare = compare;            \
    template <class T>                                   \
    static auto f(T a, T b) {                            \
      return expr;                                       \
    }                                                    \
  };

PARTIX_BINARY(Add, "add", Allowed::kNumeric, false, wrap_add(a, b))
PARTIX_BINARY(Sub, "sub", Allowed::kNumeric, false, wrap_sub(a, b))
PARTIX_BINARY(Mul, "mul", Allowed::kNumeric, false, wrap_mul(a, b))
PARTIX_BINARY(Div, "div", Allowed::kNumeric, false,
              [](T x, T y) -> T {
                if constexpr (kIsInt<T>) return int_div(x, y);
                else return x / y;
              }(a, b))
PARTIX_BINARY(Rem, "rem", Allowed::kNumeric, false,
              [](T x, T y) -> T {
                if constexpr (kIsInt<T>) return int_rem(x, y);
                else return std::fmod(x, y);
              }(a, b))
PARTIX_BINARY(Pow, "pow", Allowed::kFloat, false, T(std::pow(a, b)))
// max/min propagate NaN, as XLA does.
PARTIX_BINARY(Max, "max", Allowed::kNumeric, false,
              (a != a) ? a : ((b != b) ? b : (a > b ? a : b)))
PARTIX_BINARY(Min, "min", Allowed::kNumeric, false,
              (a != a) ? a : ((b != b) ? b : (a < b ? a : b)))
PARTIX_BINARY(And, "and", Allowed::kIntOrBool, false, T(a & b))
PARTIX_BINARY(Or, "or", Allowed::kIntOrBool, false, T(a | b))
PARTIX_BINARY(Eq, "eq", Allowed::kAny, true, a == b)
PARTIX_BINARY(Ne, "ne", Allowed::kAny, true, a != b)
PARTIX_BINARY(Lt, "lt", Allowed::kAny, true, a < b)
PARTIX_BINARY(Le, "le", Allowed::kAny, true, a <= b)
PARTIX_BINARY(Gt, "gt", Allowed::kAny, true, a > b)
PARTIX_BINARY(Ge, "ge", Allowed::kAny, true, a >= b)
#undef PARTIX_BINARY

}  // namespace partix::prim::ew
