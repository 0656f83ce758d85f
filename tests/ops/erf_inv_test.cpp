// erf_inv against an independent oracle: a starting guess refined by Newton steps on
// erf(y) - x in long double (with the C library's erfl and expl), over a dense sweep of f32
// inputs, both tails to the last float below 1, and f64 inputs; plus the edge values, the
// normal draws built on it, and the same results with the operand sharded over 8 devices.
#include <cmath>
#include <limits>

#include "test_util.h"

using namespace partix;

namespace {

// erf_inv(x) by Newton's method in long double, from a guess good to a few digits:
// quadratic convergence makes a handful of steps exact to double precision. Near +-1 it
// solves erfc(y) = 1 - |x| instead (1 - |x| is exact, and erfc keeps its relative digits
// where erf(y) - x would cancel them).
long double oracle(long double x) {
  const long double t = std::fabs(x), tail = 1.0L - t;
  const long double w = -std::log(tail * (1.0L + t));
  long double y = t < 0.5L ? t * 0.886226925452758L
                           : std::sqrt(std::max(w - std::log(w) / 2.0L, 0.0L));
  for (int i = 0; i < 60; ++i) {
    const long double slope = 1.1283791670955126L * std::exp(-y * y);
    const long double step =
        t < 0.5L ? (std::erf(y) - t) / slope : (tail - std::erfc(y)) / slope;
    y -= step;
    if (std::fabs(step) <= 1e-19L * std::fabs(y)) break;
  }
  return std::copysign(y, x);
}

// The f32 inputs of the sweep: evenly spaced in (-1, 1), dense near 0, and the approach to
// +-1 in the tails (1 - 2^-k, down to the last float below 1).
std::vector<float> sweep() {
  std::vector<float> xs;
  for (int i = -20000; i <= 20000; ++i) xs.push_back(static_cast<float>(i) / 20001.0f);
  for (int k = 1; k <= 30; ++k) xs.push_back(std::ldexp(1.0f, -k));
  for (int k = 1; k <= 24; ++k) {
    const float t = 1.0f - std::ldexp(1.0f, -k);
    xs.push_back(t);
    xs.push_back(-t);
  }
  xs.push_back(std::nextafter(1.0f, 0.0f));
  xs.push_back(std::nextafter(-1.0f, 0.0f));
  return xs;
}

}  // namespace

TEST(ErfInv, F32MatchesTheNewtonOracleToOneUlpAndMostlyExactly) {
  const std::vector<float> xs = sweep();
  const int64_t n = static_cast<int64_t>(xs.size());
  const std::vector<float> got = erf_inv(from_vector(xs, {n})).to_vector<float>();
  int64_t off = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = static_cast<float>(oracle(xs[i]));
    if (got[i] == want) continue;
    ++off;
    // Off only where the exact value lies within a rounding of a tie: the next float.
    ASSERT_TRUE(got[i] == std::nextafter(want, got[i] > want ? 1e30f : -1e30f))
        << "x " << xs[i] << " got " << got[i] << " want " << want;
  }
  std::printf("%lld of %lld differ by one ulp\n", static_cast<long long>(off),
              static_cast<long long>(n));
  EXPECT_LE(off, n / 10000);
}

TEST(ErfInv, F64MatchesTheNewtonOracleToDoublePrecision) {
  std::vector<double> xs;
  for (int i = -5000; i <= 5000; ++i) xs.push_back(std::sin(i * 0.37) * (1.0 - 1e-9));
  for (int k = 1; k <= 52; ++k) xs.push_back(1.0 - std::ldexp(1.0, -k));
  const int64_t n = static_cast<int64_t>(xs.size());
  const std::vector<double> got = erf_inv(from_vector(xs, {n})).to_vector<double>();
  long double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const long double want = oracle(xs[i]);
    if (want == 0) {
      ASSERT_EQ(got[i], 0.0) << "x " << xs[i];
      continue;
    }
    const long double rel = std::fabs(static_cast<long double>(got[i]) - want) / std::fabs(want);
    worst = std::max(worst, rel);
    // A few units in the last place (AS 241's own error, the rational's rounding, 1/sqrt(2)).
    ASSERT_LE(rel, 8e-16L) << "x " << xs[i];
  }
  std::printf("largest relative error %.3Lg\n", worst);
}

TEST(ErfInv, EdgeValuesAndSignedZero) {
  const std::vector<float> xs = {1.0f, -1.0f, 1.5f, -2.0f, std::numeric_limits<float>::quiet_NaN(),
                                 0.0f, -0.0f, 1e-40f};
  const std::vector<float> y = erf_inv(from_vector(xs, {8})).to_vector<float>();
  EXPECT_EQ(y[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y[2]) && std::isnan(y[3]) && std::isnan(y[4]));
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_FALSE(std::signbit(y[5]));
  EXPECT_TRUE(std::signbit(y[6]));
  EXPECT_EQ(y[7], static_cast<float>(oracle(1e-40f)));  // a subnormal keeps its digits
}

TEST(ErfInv, ShardedOverEightDevicesGivesTheSameBits) {
  const std::vector<float> xs = sweep();
  const int64_t n = static_cast<int64_t>(xs.size()) / 8 * 8;
  Array x = from_vector(std::vector<float>(xs.begin(), xs.begin() + n), {n});
  Mesh mesh({8}, {"x"});
  Array xsh = device_put(x, NamedSharding(mesh, P("x")));
  auto f = jit([](const Array& a) { return erf_inv(a) * 2.0; });
  EXPECT_EQ(f(xsh).to_vector<float>(), f(x).to_vector<float>());
}

TEST(ErfInv, NormalDrawsHaveTheNormalMoments) {
  // random.normal is sqrt(2) erf_inv(2u - 1): its draws have mean 0, variance 1, and the
  // normal's tail mass beyond 3 sigma (0.27%).
  const int64_t n = 400000;
  const std::vector<float> z = random::normal(random::key(11), {n}).to_vector<float>();
  double s = 0, s2 = 0;
  int64_t beyond = 0;
  for (float v : z) {
    s += v;
    s2 += static_cast<double>(v) * v;
    beyond += std::fabs(v) > 3.0f;
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(beyond) / n, 0.0026998, 0.0005);
}

TEST(ErfInv, InShardMapInALoopAndUnderGradOnEightDevices) {
  Mesh mesh({8}, {"x"});
  const NamedSharding rows(mesh, P("x"));
  Array x = random::uniform(random::key(5), {16, 12}, DType::F32, -0.95, 0.95);
  Array xs = device_put(x, rows);
  const std::vector<float> xv = x.to_vector<float>();
  const std::vector<float> want = erf_inv(x).to_vector<float>();  // one device, eager
  // shard_map: each device's block, then a psum of the block sums.
  auto blockwise = shard_map(
      [](const Array& b) { return std::vector<Array>{erf_inv(b), psum(sum(erf_inv(b)), "x")}; },
      mesh, {P("x")}, {P("x"), P()});
  const std::vector<Array> out = jit(blockwise)(xs);
  EXPECT_EQ(out[0].to_vector<float>(), want);
  double total = 0;
  for (float v : want) total += v;
  EXPECT_NEAR(out[1].to_vector<float>()[0], total, 1e-4 * (1 + std::fabs(total)));
  // A fori_loop applying erf(erf_inv(.)) three times stays at x (to f32 rounding).
  Array looped = jit([](const Array& a) {
    return fori_loop(0, 3, [](const Array&, const Array& c) { return erf(erf_inv(c)); }, a);
  })(xs);
  EXPECT_EQ(looped.sharding(), rows);
  const std::vector<float> lv = looped.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) ASSERT_NEAR(lv[i], xv[i], 4e-6) << xv[i];
  // d/dx erf_inv(x) = sqrt(pi)/2 exp(erf_inv(x)^2), sharded like x.
  Array g = jit([](const Array& a) -> Array {
    return grad([](const Array& b) { return sum(erf_inv(b)); })(a);
  })(xs);
  EXPECT_EQ(g.sharding(), rows);
  const std::vector<float> gv = g.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double y = static_cast<double>(oracle(xv[i]));
    ASSERT_NEAR(gv[i], 0.886226925452758 * std::exp(y * y), 1e-5 * std::exp(y * y)) << xv[i];
  }
}
