// custom_vjp and custom_jvp: the function's values, the rule's derivatives (rules that differ
// from the true derivative show that the rule, not the function, was differentiated), eagerly
// and under jit, on sharded arguments, inside shard_map, under nested grad, and bad rules.
#include <cmath>

#include "test_util.h"

using namespace partix;

namespace {

std::vector<float> vec(const Array& a) { return astype(a, DType::F32).to_vector<float>(); }

// sin with a VJP of 2 cos x: deliberately twice the true derivative.
ArraysFn doubled_sin() {
  return custom_vjp([](const std::vector<Array>& a) { return std::vector<Array>{sin(a[0])}; },
                    [](const std::vector<Array>& a) {
                      return std::vector<Array>{sin(a[0]), cos(a[0])};  // output, residual
                    },
                    [](const std::vector<Array>& r) {
                      return std::vector<Array>{r[1] * r[0] * 2.0};  // residual, cotangent
                    });
}

// log(1 + e^x), whose naive derivative e^x / (1 + e^x) is NaN at x = 100; the rule's tangent
// is t * logistic(x).
ArraysFn log1pexp() {
  return custom_jvp(
      [](const std::vector<Array>& a) { return std::vector<Array>{log1p(exp(a[0]))}; },
      [](const std::vector<Array>& a) {  // primal, tangent
        return std::vector<Array>{log1p(exp(a[0])), a[1] * logistic(a[0])};
      });
}

}  // namespace

TEST(CustomDerivatives, CustomVjpRunsTheFunctionAndDifferentiatesByTheRule) {
  ArraysFn f = doubled_sin();
  Array x = from_vector<float>({0.1f, 0.5f, 1.0f, 2.0f}, {4});
  EXPECT_EQ(vec(f({x})[0]), vec(sin(x)));
  auto loss = [&](const Array& v) { return sum(f({v})[0]); };
  for (bool jitted : {false, true}) {
    SCOPED_TRACE(jitted ? "jit" : "eager");
    Array g = jitted ? jit(grad(loss))(x) : grad(loss)(x);
    std::vector<float> got = vec(g), xs = vec(x);
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(got[i], 2 * std::cos(xs[i]), 1e-6);
    // Under jit the function's value is the inlined function's.
    EXPECT_EQ(vec(jit([&](const Array& v) { return f({v})[0]; })(x)), vec(sin(x)));
  }
}

TEST(CustomDerivatives, CustomJvpGivesAStableGradientWhereTheNaiveOneIsNaN) {
  ArraysFn f = log1pexp();
  Array x = from_vector<float>({-3.0f, 0.0f, 3.0f, 100.0f}, {4});
  auto loss = [&](const Array& v) { return sum(f({v})[0]); };
  auto naive = [](const Array& v) { return sum(log1p(exp(v))); };
  EXPECT_TRUE(std::isnan(vec(grad(naive)(x))[3]));
  for (bool jitted : {false, true}) {
    SCOPED_TRACE(jitted ? "jit" : "eager");
    std::vector<float> g = vec(jitted ? jit(grad(loss))(x) : grad(loss)(x));
    const float want[] = {0.04742587f, 0.5f, 0.95257413f, 1.0f};
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
  }
}

// Second order: grad of grad goes through the rule's own derivative (the VJP of the custom
// VJP's bwd region, and the transpose of the jvp rule's).
TEST(CustomDerivatives, NestedGradDifferentiatesTheRules) {
  Array x = from_vector<double>({0.3, 1.2}, {2});
  ArraysFn f = doubled_sin();
  auto d1 = [&](const Array& v) { return sum(Array(grad([&](const Array& u) { return sum(f({u})[0]); })(v))); };
  std::vector<double> g2 = Array(grad(d1)(x)).to_vector<double>();
  EXPECT_NEAR(g2[0], -2 * std::sin(0.3), 1e-12);
  EXPECT_NEAR(g2[1], -2 * std::sin(1.2), 1e-12);
  ArraysFn s = log1pexp();
  auto e1 = [&](const Array& v) { return sum(Array(grad([&](const Array& u) { return sum(s({u})[0]); })(v))); };
  std::vector<double> h = Array(grad(e1)(x)).to_vector<double>();
  for (int i = 0; i < 2; ++i) {
    const double xi = i == 0 ? 0.3 : 1.2, sg = 1 / (1 + std::exp(-xi));
    EXPECT_NEAR(h[static_cast<size_t>(i)], sg * (1 - sg), 1e-12);
  }
}

TEST(CustomDerivatives, ShardedArgumentsKeepTheirShardingAndValues) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  NamedSharding s(m, P("x", "y"));
  Array x = device_put(random::normal(random::key(3), {8, 6}), s);
  ArraysFn f = doubled_sin();
  ArraysFn l = log1pexp();
  auto loss = [&](const Array& v) { return sum(f({v})[0] * l({v})[0]); };
  Array g = jit(grad(loss))(x);
  EXPECT_EQ(g.sharding(), s);
  Array xr = device_put(x, NamedSharding(m, P()));
  Array want = 2.0 * cos(xr) * log1p(exp(xr)) + sin(xr) * logistic(xr);
  std::vector<float> a = vec(g), b = vec(want);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

TEST(CustomDerivatives, InsideShardMapWithACollective) {
  Mesh m = make_mesh({8}, {"x"});
  Array x = device_put(arange(16, DType::F32) * 0.1, NamedSharding(m, P("x")));
  ArraysFn f = doubled_sin();
  auto body = [&](const Array& b) { return reshape(psum(sum(f({b})[0]), "x"), {1}); };
  auto loss = [&](const Array& v) { return sum(shard_map(body, m, {P("x")}, {P("x")})(v)) / 8.0; };
  std::vector<float> g = vec(jit(grad(loss))(x)), xs = vec(x);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(g[i], 2 * std::cos(xs[i]), 1e-5) << i;
}

TEST(CustomDerivatives, RulesOfTheWrongShapeAreErrorsNamingTheRule) {
  Array x = ones({3});
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{a[0] * 2.0}; };
  ArraysFn bad_bwd = custom_vjp(f, [&](const std::vector<Array>& a) { return f(a); },
                                [](const std::vector<Array>& r) { return std::vector<Array>{sum(r[0])}; });
  EXPECT_PARTIX_ERROR(grad([&](const Array& v) { return sum(bad_bwd({v})[0]); })(x),
                      "[custom_vjp] bwd must return one cotangent per differentiable input",
                      "(f32[3])", "got (f32[])");
  ArraysFn bad_fwd = custom_vjp(f, [](const std::vector<Array>& a) { return std::vector<Array>{sum(a[0])}; },
                                [](const std::vector<Array>& r) { return r; });
  EXPECT_PARTIX_ERROR(grad([&](const Array& v) { return sum(bad_fwd({v})[0] * 0.0 + sum(v)); })(ones({2, 2})),
                      "[custom_vjp] fwd must return the function's outputs");
  ArraysFn bad_jvp = custom_jvp(f, [](const std::vector<Array>& a) {
    return std::vector<Array>{a[0] * 2.0, sum(a[1])};
  });
  EXPECT_PARTIX_ERROR(grad([&](const Array& v) { return sum(bad_jvp({v})[0]); })(x),
                      "[custom_jvp] the jvp rule must return (primal outputs, tangent outputs)");
  // Closing over the value being differentiated gives it no cotangent: refused.
  auto closes = [&](const Array& v) {
    ArraysFn c = custom_vjp([&](const std::vector<Array>& a) { return std::vector<Array>{a[0] * v}; },
                            [&](const std::vector<Array>& a) { return std::vector<Array>{a[0] * v}; },
                            [](const std::vector<Array>& r) { return r; });
    return sum(c({ones({3})})[0]);
  };
  EXPECT_PARTIX_ERROR(grad(closes)(x), "[custom_vjp] the function or its rules close over a value "
                                       "being differentiated");
}
