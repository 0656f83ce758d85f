// Transcendental functions for f32 data, written as branch-free scalar code that GCC
// vectorises inside `#pragma omp simd` loops (the kernels are compiled with
// -fno-trapping-math -fno-math-errno so that selects if-convert and sqrt/rint vectorise).
//
// Why our own and not glibc's libmvec: GCC only calls libmvec under -ffast-math, which would
// also break the NaN and signed-zero semantics the other kernels must keep, and libmvec
// promises 4 ulp. Instead:
//  - exp, tanh, logistic and erf (softmax, GELU, SiLU: the hot loops of a transformer) are
//    evaluated in f32 lanes. exp: Cody-Waite reduction, a degree-6 minimax polynomial
//    (relative error 3e-9) and exact scaling by 2^n. tanh and logistic divide by 1 + e^x; the
//    rounding of that sum and of the division would cost up to ~2.5 ulp, so both are
//    recovered exactly (Fast2Sum, fma residual) and corrected by one Newton step.
//  - log, sin and cos (log-softmax rows, rotary tables: not hot) are evaluated in f64 lanes
//    with ~1e-11 polynomials and rounded once, which makes them almost always equal to the
//    reference (double, then rounded) at half the f32 throughput.
//  All are within 1 ulp of the reference over all 2^32 f32 inputs (checked exhaustively while
//  writing them; they differ from it on 0.40% of inputs for exp, 0.17% tanh, 1.8% logistic,
//  0.69% erf, under 1e-6 for log, sin, cos). tests/backend/cpu_elementwise_test.cpp sweeps
//  every 509th bit pattern.
// Polynomial constants come from tools/kernels/fit_polynomials.py or are Taylor coefficients.
#pragma once

#include <bit>
#include <cstdint>

namespace partix::backend::cpu::vm {

// c0 x^n + c1 x^(n-1) + ... + cn by Horner's rule, one fused multiply-add per coefficient.
template <class... C>
inline float horner(float x, float c0, C... cs) {
  float p = c0;
  ((p = __builtin_fmaf(p, x, cs)), ...);
  return p;
}
template <class... C>
inline double horner(double x, double c0, C... cs) {
  double p = c0;
  ((p = __builtin_fma(p, x, cs)), ...);
  return p;
}

// ---- f32 exp ----

// e^x. kFullRange = false is for callers that know x is in [-87, 88] or NaN (normal results):
// it skips the clamps and scales by 2^n in one step; NaN still propagates.
template <bool kFullRange = true>
inline float exp(float x) {
  // Clamp so that the two-step scaling below stays exact; beyond the clamp the result has
  // already overflowed to inf or underflowed to 0 through that scaling. NaN passes through.
  float xc = x;
  if constexpr (kFullRange) {
    xc = xc < -104.0f ? -104.0f : xc;
    xc = xc > 89.0f ? 89.0f : xc;
  }
  // n = nearest integer to x / ln2, read from the low mantissa bits of t.
  const float kShift = 0x1.8p23f;
  float t = __builtin_fmaf(xc, 1.44269504089f, kShift);
  float n = t - kShift;
  // r = x - n ln2 with ln2 split so that n * kLn2Hi is exact.
  float r = __builtin_fmaf(n, -0.693145752f, xc);
  r = __builtin_fmaf(n, -1.42860677e-6f, r);
  // e^r = 1 + r + r^2 q(r), |r| <= ln2/2.
  float q = horner(r, 0.0013814608737026498f, 0.0083687102523521499f, 0.041668387455869408f,
                       0.16666520685229849f, 0.49999993451237159f);
  float p = 1.0f + __builtin_fmaf(r * r, q, r);
  // Unsigned arithmetic: wraps (never overflows) for NaN bit patterns, whose result is unused.
  int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kShift));
  if constexpr (!kFullRange) return p * std::bit_cast<float>((ni + 127) << 23);
  // 2^n as two normal powers of two (n in [-150, 128]): only the last product rounds.
  int32_t n1 = ni >> 1;
  int32_t n2 = ni - n1;
  float s1 = std::bit_cast<float>((n1 + 127) << 23);
  float s2 = std::bit_cast<float>((n2 + 127) << 23);
  float y = (p * s1) * s2;
  return x != x ? x + x : y;
}

// ---- f32 tanh, logistic, erf ----

inline float tanh(float x) {
  float a = __builtin_fabsf(x);
  // |x| < 0.625: tanh(x) = x + x^3 q(x^2), minimax (relative error 4e-9).
  float t = a * a;
  float q = horner(t, -0.005704974573169582f, 0.020639075000659226f, -0.053739710871606514f,
                       0.13331442139748338f, -0.33333281939383021f);
  float small = __builtin_fmaf(a * t, q, a);
  // Otherwise tanh = 1 - g, g = 2 / (e + 1), e = e^2|x|; tanh rounds to 1 beyond 9.01.
  float ac = a > 9.5f ? 9.5f : a;  // NaN stays NaN: exp<false> propagates it
  float e = exp<false>(2.0f * ac);
  float d = e + 1.0f;
  float dl = 1.0f - (d - e);  // e + 1 = d + dl exactly (Fast2Sum, e >= 1)
  float r = 1.0f / d;
  float g0 = 2.0f * r;
  float rho = __builtin_fmaf(-g0, d, 2.0f) - g0 * dl;  // 2 - g0 (d + dl)
  float g = __builtin_fmaf(rho, r, g0);
  float y = a < 0.625f ? small : 1.0f - g;
  return __builtin_copysignf(y, x);  // odd; keeps -0 and NaN
}

inline float logistic(float x) {
  // 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below: e = e^-|x| never overflows.
  float e = exp(-__builtin_fabsf(x));
  float d = 1.0f + e;
  float dl = e - (d - 1.0f);  // 1 + e = d + dl exactly (Fast2Sum, 1 >= e)
  float num = x < 0.0f ? e : 1.0f;
  float r = 1.0f / d;
  float y0 = num * r;
  float rho = __builtin_fmaf(-y0, d, num) - y0 * dl;  // num - y0 (d + dl)
  return __builtin_fmaf(rho, r, y0);
}

inline float erf(float x) {
  float a = __builtin_fabsf(x);
  // |x| < 1: erf(x) = x + x p(x^2), minimax (relative error 3e-11).
  float t = a * a;
  float p = horner(t, -9.6415062815035833e-6f, 0.00011256944441152256f,
                       -0.00084828283624719733f, 0.0052209453994059717f, -0.026865400030237183f,
                       0.11283781973902506f, -0.37612638434637958f, 0.12837916705802086f);
  float small = __builtin_fmaf(a, p, a);
  // 1 <= |x| <= 4: erf(x) = 1 - e^(-x^2) Q(x), Q minimax in (x - 2.5) (absolute error 5e-10);
  // erf rounds to 1 beyond 3.92. x^2 = h + hl exactly, e^-(h+hl) = e^-h (1 - hl).
  float ac = a > 4.0f ? 4.0f : a;
  float h = ac * ac;
  float hl = __builtin_fmaf(ac, ac, -h);
  float e = exp<false>(-h) * (1.0f - hl);
  float dd = ac - 2.5f;
  float g = horner(dd, -2.7994644396312444e-5f, -5.7781260572707783e-5f,
                       -0.00013621208855396179f, 0.00022366717009660065f,
                       -0.00064916929163208198f, 0.0025207069980542463f,
                       -0.0080001915049705691f, 0.02492953418143501f, -0.074349383870435683f,
                       0.21080633465140501f);
  float y = a < 1.0f ? small : __builtin_fmaf(-e, g, 1.0f);
  return __builtin_copysignf(y, x);
}

// ---- f64 building blocks (arguments come from f32 values) ----

// log(x) of a (converted) f32 value: x = 2^k m, m in [sqrt(1/2), sqrt(2)),
// log(m) = 2 atanh(s) with s = (m-1)/(m+1), |s| <= 0.172, series to s^13.
inline double log_d(double x) {
  const uint64_t kSqrtHalf = std::bit_cast<uint64_t>(0.70710678118654752);
  uint64_t u = std::bit_cast<uint64_t>(x);
  int64_t k = static_cast<int64_t>(u - kSqrtHalf) >> 52;  // arithmetic shift
  double m = std::bit_cast<double>(u - (static_cast<uint64_t>(k) << 52));
  double s = (m - 1.0) / (m + 1.0);
  double z = s * s;
  double p = horner(z, 1.0 / 13, 1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3);
  double lm = 2.0 * __builtin_fma(s * z, p, s);
  double y = __builtin_fma(static_cast<double>(k), 0.6931471805599453, lm);
  // Special values: log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN.
  y = x == 0.0 ? -__builtin_inf() : y;
  y = x < 0.0 ? __builtin_nan("") : y;
  y = x == __builtin_inf() ? x : y;
  return x != x ? x + x : y;
}

// Largest |x| the f64 sin/cos reduction handles exactly (k * C1 exact for |k| < 2^20);
// callers evaluate larger arguments with the C library.
inline constexpr double kTrigMaxArg = 524288.0;  // 2^19

// sin (cos_shift = 0) or cos (cos_shift = 1) for |x| <= kTrigMaxArg.
inline double sincos_d(double x, int64_t cos_shift) {
  // k = nearest integer to x / (pi/2); r = x - k pi/2 with pi/2 = C1 + C2 + C3 (C1, C2 of 33
  // bits, so k*C1 and k*C2 are exact).
  const double kShift = 0x1.8p52;
  double t = __builtin_fma(x, 0.63661977236758134, kShift);
  double k = t - kShift;
  double r = __builtin_fma(k, -0x1.921fb544p+0, x);
  r = __builtin_fma(k, -0x1.0b4611a6p-34, r);
  r = __builtin_fma(k, -0x1.3198a2e037073p-69, r);
  int64_t quadrant = static_cast<int64_t>(std::bit_cast<uint64_t>(t) + cos_shift) & 3;
  // Taylor polynomials on |r| <= pi/4 (truncation below 1e-11 relative).
  double z = r * r;
  double s = horner(z, -1.0 / 39916800, 1.0 / 362880, -1.0 / 5040, 1.0 / 120, -1.0 / 6);
  s = __builtin_fma(r * z, s, r);
  double c = horner(z, 1.0 / 479001600, -1.0 / 3628800, 1.0 / 40320, -1.0 / 720, 1.0 / 24, -0.5,
                    1.0);
  double y = (quadrant & 1) ? c : s;
  y = (quadrant & 2) ? -y : y;
  return (cos_shift == 0 && x == 0.0) ? x : y;  // sin(-0) = -0
}

}  // namespace partix::backend::cpu::vm
