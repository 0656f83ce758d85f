// erfc, the complementary error function, end to end from its row of the elementwise table:
// values against the C library and known digits, the VJP against central differences and
// its closed form, one fusion group with the ops around it, and the same results with the
// operand sharded over 8 devices.
#include <cmath>

#include "test_util.h"

using namespace partix;

namespace {

// Both tails (where 1 - erf(x) would lose every digit), zero, and the f32 underflow.
const std::vector<double> kXs = {-6.0, -3.5, -1.25, -0.5, -1e-3, 0.0, 1e-3, 0.3,
                                 0.5,  1.0,  2.0,   3.0,  5.5,   9.0, 10.5, 27.0};

Array sum_of_erfc(const Array& x) { return sum(erfc(x)); }

// d/dx erfc(x) = -2/sqrt(pi) exp(-x^2).
double derivative(double x) { return -2.0 / std::sqrt(M_PI) * std::exp(-x * x); }

TEST(Erfc, ValuesMatchTheCLibraryAndKnownDigits) {
  const int64_t n = static_cast<int64_t>(kXs.size());
  // f64: computed in double, as std::erfc.
  const std::vector<double> y = erfc(from_vector(kXs, {n})).to_vector<double>();
  for (size_t i = 0; i < kXs.size(); ++i) EXPECT_EQ(y[i], std::erfc(kXs[i])) << kXs[i];
  EXPECT_GT(y.back(), 0.0);  // erfc(27) ~ 5e-319: the tail keeps its value
  // Digits from Python's math.erfc.
  const std::vector<double> xs = {-1.0, 0.5, 1.0, 2.0, 3.0, 5.0};
  const std::vector<double> want = {1.842700792949715,     0.4795001221869535,
                                    0.15729920705028513,   0.004677734981047265,
                                    2.2090496998585438e-05, 1.5374597944280351e-12};
  const std::vector<double> got = erfc(from_vector(xs, {6})).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15 * want[i]) << xs[i];
  // f32: the double result rounded once, by the fast and the reference kernels alike.
  const std::vector<float> xf(kXs.begin(), kXs.end());
  const std::vector<float> yf = erfc(from_vector(xf, {n})).to_vector<float>();
  for (size_t i = 0; i < xf.size(); ++i) {
    EXPECT_EQ(yf[i], static_cast<float>(std::erfc(static_cast<double>(xf[i])))) << xf[i];
  }
  // Integer operands become f32, as in jax.scipy.special.erfc.
  const std::vector<int32_t> ints = {-2, 0, 1, 3};
  Array yi = erfc(from_vector(ints, {4}));
  EXPECT_EQ(yi.dtype(), DType::F32);
  const std::vector<float> vi = yi.to_vector<float>();
  for (size_t k = 0; k < ints.size(); ++k) {
    EXPECT_EQ(vi[k], static_cast<float>(std::erfc(ints[k]))) << ints[k];
  }
  // bf16 stays bf16.
  EXPECT_EQ(erfc(ones({3}, DType::BF16)).dtype(), DType::BF16);
}

TEST(Erfc, VjpMatchesFiniteDifferencesAndTheClosedForm) {
  const std::vector<double> xs = {-2.0, -0.7, 0.0, 0.4, 1.3, 2.5};
  const int64_t n = static_cast<int64_t>(xs.size());
  // d/dx_i sum(erfc(x)) is erfc'(x_i): through jit, so the VJP runs as a program.
  auto g = jit([](const Array& x) -> Array { return grad(sum_of_erfc)(x); });
  const std::vector<double> analytic = g(from_vector(xs, {n})).to_vector<double>();
  const double h = 1e-6;
  std::vector<double> up = xs, down = xs;
  for (double& v : up) v += h;
  for (double& v : down) v -= h;
  const std::vector<double> yu = erfc(from_vector(up, {n})).to_vector<double>();
  const std::vector<double> yd = erfc(from_vector(down, {n})).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double fd = (yu[i] - yd[i]) / (2 * h);
    EXPECT_NEAR(analytic[i], fd, 1e-8) << xs[i];
    EXPECT_NEAR(analytic[i], derivative(xs[i]), 1e-15) << xs[i];
  }
}

TEST(Erfc, FusesWithTheOpsAroundIt) {
  auto body = [](const Array& x) { return erfc(x * 0.5) * 2.0 + x; };
  Array x = random::normal(random::key(4), {64, 32});
  auto f = jit(body);
  const std::vector<std::string> groups = f.lower(x).fusions();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_NE(groups[0].find("fusion(mul,erfc,mul,add)"), std::string::npos) << groups[0];
  // The fused loop runs erfc's fast kernel: the double result rounded once, then exact f32.
  const std::vector<float> xv = x.to_vector<float>(), yv = f(x).to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const float e = static_cast<float>(std::erfc(static_cast<double>(xv[i] * 0.5f)));
    ASSERT_EQ(yv[i], e * 2.0f + xv[i]) << xv[i];
  }
}

TEST(Erfc, ShardedOverEightDevices) {
  Mesh mesh({8}, {"x"});
  const NamedSharding rows(mesh, P("x"));
  Array x = random::normal(random::key(9), {16, 24}, DType::F64) * 3.0;
  Array xs = device_put(x, rows);
  const std::vector<double> xv = x.to_vector<double>();
  Array eager = erfc(xs);
  Array jitted = jit([](const Array& a) { return erfc(a); })(xs);
  EXPECT_EQ(eager.sharding(), rows);
  EXPECT_EQ(jitted.sharding(), rows);
  const std::vector<double> ye = eager.to_vector<double>(), yj = jitted.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    ASSERT_EQ(ye[i], std::erfc(xv[i])) << xv[i];
    ASSERT_EQ(yj[i], std::erfc(xv[i])) << xv[i];
  }
  // The gradient of the sharded operand, sharded like it.
  Array g = jit([](const Array& a) -> Array { return grad(sum_of_erfc)(a); })(xs);
  EXPECT_EQ(g.sharding(), rows);
  const std::vector<double> gv = g.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) ASSERT_NEAR(gv[i], derivative(xv[i]), 1e-15) << xv[i];
}

}  // namespace
