// Every primitive's VJP against central finite differences in f64, and grad through the
// collectives inside shard_map.
#include <cmath>
#include <functional>

#include "test_util.h"
#include "trace/trace.h"

using namespace partix;

namespace {

using Fn = std::function<Array(const std::vector<Array>&)>;

// Values in [lo, hi], deterministic, away from the kinks the tests avoid.
Array values(const Shape& s, uint64_t seed, double lo = -1.5, double hi = 1.5) {
  return random::uniform(random::key(seed), s, DType::F64, lo, hi);
}

// Checks d/dx_i sum(w * f(x)) by central differences for every element of every input.
void check_grad(const std::string& name, const Fn& f, const std::vector<Array>& xs,
                double tol = 1e-6, double h = 1e-6) {
  SCOPED_TRACE(name);
  Array probe = f(xs);
  Array w = random::normal(random::key(99), probe.shape(), DType::F64);
  auto scalar_fn = [&](const std::vector<Array>& a) { return sum(f(a) * w); };
  auto loss = jit(scalar_fn);
  std::vector<int> argnums;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (is_floating(xs[i].dtype())) argnums.push_back(static_cast<int>(i));
  }
  // Gradients of every float input at once, through jit (compose: jit of grad).
  auto g = jit([&](const std::vector<Array>& a) {
    std::vector<Array> out;
    for (int k : argnums) {
      out.push_back(grad([&, k](const Array& xk) {
        std::vector<Array> b = a;
        b[static_cast<size_t>(k)] = xk;
        return scalar_fn(b);
      })(a[static_cast<size_t>(k)]));
    }
    return out;
  })(xs);
  for (size_t gi = 0; gi < argnums.size(); ++gi) {
    size_t i = static_cast<size_t>(argnums[gi]);
    std::vector<double> x = xs[i].to_vector<double>();
    std::vector<double> analytic = g[gi].to_vector<double>();
    ASSERT_EQ(analytic.size(), x.size());
    for (size_t e = 0; e < x.size(); ++e) {
      std::vector<Array> plus = xs, minus = xs;
      std::vector<double> xp = x, xm = x;
      xp[e] += h;
      xm[e] -= h;
      plus[i] = from_vector(xp, xs[i].shape());
      minus[i] = from_vector(xm, xs[i].shape());
      double fd = (loss(plus).item<double>() - loss(minus).item<double>()) / (2 * h);
      ASSERT_NEAR(analytic[e], fd, tol * (1 + std::abs(fd))) << "input " << i << " element " << e;
    }
  }
}

}  // namespace

TEST(VjpFiniteDifferences, UnaryMath) {
  Array x = values({2, 3}, 1);
  Array pos = values({2, 3}, 2, 0.2, 2.0);
  check_grad("neg", [](auto a) { return -a[0]; }, {x});
  check_grad("exp", [](auto a) { return exp(a[0]); }, {x});
  check_grad("log", [](auto a) { return log(a[0]); }, {pos});
  check_grad("sin cos", [](auto a) { return sin(a[0]) * cos(a[0]); }, {x});
  check_grad("tanh", [](auto a) { return tanh(a[0]); }, {x});
  check_grad("sqrt", [](auto a) { return sqrt(a[0]); }, {pos});
  check_grad("rsqrt", [](auto a) { return rsqrt(a[0]); }, {pos});
  check_grad("abs", [](auto a) { return abs(a[0]); }, {pos * -1.0});
  check_grad("logistic", [](auto a) { return logistic(a[0]); }, {x});
  check_grad("erf", [](auto a) { return erf(a[0]); }, {x});
  check_grad("erf_inv", [](auto a) { return erf_inv(a[0] * 0.5); }, {x});
  check_grad("log1p expm1", [](auto a) { return log1p(a[0]) + expm1(a[0]); }, {pos});
  check_grad("square", [](auto a) { return square(a[0]); }, {x});
  // Piecewise-constant functions have zero gradient.
  check_grad("floor ceil round sign", [](auto a) { return floor(a[0]) + ceil(a[0]) + round(a[0]) + sign(a[0]); },
             {values({2, 3}, 3, 0.1, 0.4)});
}

TEST(VjpFiniteDifferences, BinaryAndSelect) {
  Array a = values({2, 3}, 4), b = values({2, 3}, 5, 0.3, 1.7);
  check_grad("add sub", [](auto v) { return v[0] + v[1] - v[0] * 2.0; }, {a, b});
  check_grad("mul div", [](auto v) { return v[0] * v[1] / (v[1] + 2.0); }, {a, b});
  check_grad("pow", [](auto v) { return pow(v[1], v[0]); }, {a, b});
  check_grad("max min", [](auto v) { return maximum(v[0], v[1]) + minimum(v[0], v[1] * 0.5); }, {a, b});
  check_grad("rem", [](auto v) { return v[0] - v[1] * 0.0 + v[0] * 0.0 + maximum(v[0], v[1]) * 0.0 + v[0] / v[1] * 0.0 +
                                        pow(v[1], 2.0) * 0.1; }, {a, b});
  check_grad("select", [](auto v) { return where(v[0] > 0.0, v[0] * v[1], v[1] * 3.0); }, {a, b});
  check_grad("scalar operand", [](auto v) { return v[0] * reshape(slice(v[1], {0, 0}, {1, 1}), {}); }, {a, b});
  // Through f32 rounding: a wider step keeps the rounding error out of the difference.
  check_grad("convert", [](auto v) { return astype(astype(v[0], DType::F32), DType::F64) * v[1]; }, {a, b}, 1e-4, 1e-2);
}

TEST(VjpFiniteDifferences, Reductions) {
  Array x = values({3, 4}, 6);
  check_grad("reduce_sum", [](auto a) { return sum(a[0], {1}); }, {x});
  check_grad("reduce_max", [](auto a) { return max(a[0], {0}); }, {x});
  check_grad("reduce_min", [](auto a) { return min(a[0], {1}); }, {x});
  check_grad("mean var", [](auto a) { return mean(a[0], {0}) + var(a[0], {0}); }, {x});
  check_grad("cumsum", [](auto a) { return cumsum(a[0], 1) + cumsum(a[0], 0, true); }, {x});
  check_grad("logsumexp", [](auto a) { return logsumexp(a[0], {1}); }, {x});
}

TEST(VjpFiniteDifferences, Contractions) {
  check_grad("matmul", [](auto a) { return matmul(a[0], a[1]); }, {values({2, 3}, 7), values({3, 4}, 8)});
  check_grad("batched", [](auto a) { return einsum("bij,bjk->bik", {a[0], a[1]}); },
             {values({2, 2, 3}, 9), values({2, 3, 2}, 10)});
  check_grad("odd layout", [](auto a) { return dot_general(a[0], a[1], {0, 2}, {2, 1}, {1}, {0}); },
             {values({2, 3, 2}, 11), values({3, 2, 2, 2}, 12)});
  check_grad("three operands", [](auto a) { return einsum("ij,jk,kl->li", {a[0], a[1], a[2]}); },
             {values({2, 3}, 13), values({3, 2}, 14), values({2, 2}, 15)});
}

TEST(VjpFiniteDifferences, ShapeOps) {
  Array x = values({2, 3, 4}, 16);
  check_grad("reshape", [](auto a) { return reshape(a[0], {6, 4}) * 2.0; }, {x});
  check_grad("transpose", [](auto a) { return transpose(a[0], {2, 0, 1}); }, {x});
  check_grad("broadcast", [](auto a) { return broadcast_to(a[0], {3, 2, 3, 4}); }, {x});
  check_grad("broadcast ones", [](auto a) { return broadcast_in_dim(a[0], {2, 3, 4}, {0, 1, 2}); }, {values({2, 1, 4}, 17)});
  check_grad("slice", [](auto a) { return slice(a[0], {0, 1, 0}, {2, 3, 4}, {1, 1, 3}); }, {x});
  check_grad("concatenate", [](auto a) { return concatenate({a[0], a[1] * 2.0}, 1); }, {x, values({2, 2, 4}, 18)});
  check_grad("pad", [](auto a) { return pad(a[0], {1, 0, 2}, {0, 1, 1}, 3.0); }, {x});
  check_grad("pad interior", [](auto a) {
    return detail::bind1("pad", {a[0]}, {{"low", ir::Ints{1, 0, 0}}, {"high", ir::Ints{0, 0, 1}},
                                         {"interior", ir::Ints{1, 2, 0}}, {"value", 0.0}});
  }, {x});
  check_grad("flip", [](auto a) { return flip(a[0], {0, 2}); }, {x});
}

TEST(VjpFiniteDifferences, IndexOps) {
  Array x = values({5, 3}, 19);
  Array idx = from_vector<int32_t>({4, 0, 4, 2}, {2, 2});
  check_grad("dynamic_slice", [](auto a) { return dynamic_slice(a[0], {scalar<int32_t>(1), scalar<int32_t>(1)}, {3, 2}); }, {x});
  check_grad("dynamic_update_slice", [](auto a) {
    return dynamic_update_slice(a[0], a[1], {scalar<int32_t>(2), scalar<int32_t>(0)});
  }, {x, values({2, 3}, 20)});
  check_grad("take", [&](auto a) { return take(a[0], idx, 0); }, {x});
  check_grad("scatter_add", [&](auto a) { return scatter_add(a[0], idx, a[1], 0); }, {x, values({2, 2, 3}, 21)});
  Array along = from_vector<int32_t>({2, 0, 1, 1, 0, 0, 2, 2, 1, 0}, {5, 2});
  check_grad("take_along", [&](auto a) { return take_along_axis(a[0], along, 1); }, {x});
  check_grad("top_k", [](auto a) { return top_k(a[0], 2).first; }, {x});
  check_grad("sort", [](auto a) { return sort(a[0]).first * 1.5; }, {x});
}

TEST(VjpFiniteDifferences, NetworkFunctions) {
  Array x = values({3, 4}, 22);
  Array g = values({4}, 23, 0.5, 1.5), b = values({4}, 24);
  check_grad("softmax", [](auto a) { return softmax(a[0]); }, {x});
  check_grad("log_softmax", [](auto a) { return log_softmax(a[0], 0); }, {x});
  check_grad("layer_norm", [](auto a) { return layer_norm(a[0], a[1], a[2]); }, {x, g, b}, 1e-5);
  check_grad("rms_norm", [](auto a) { return rms_norm(a[0], a[1]); }, {x, g}, 1e-5);
  check_grad("gelu", [](auto a) { return gelu(a[0]) + gelu(a[0], false); }, {x});
  check_grad("silu relu", [](auto a) { return silu(a[0]) + relu(a[0] + 0.05); }, {x});
  Array labels = from_vector<int32_t>({3, 0, 2}, {3});
  check_grad("cross_entropy", [&](auto a) { return cross_entropy(a[0], labels); }, {x});
  check_grad("checkpoint", [](auto a) {
    return checkpoint([](const Array& v, const Array& w) { return tanh(matmul(v, w)); })(a[0], a[1]);
  }, {x, values({4, 2}, 25)});
}

TEST(VjpFiniteDifferences, CollectivesInsideShardMap) {
  Mesh mesh({4, 2}, {"i", "j"});
  Array x = values({8, 4}, 26);
  auto sm = [&](std::function<Array(const Array&)> body, PartitionSpec in, PartitionSpec out) {
    return [=](const std::vector<Array>& a) { return shard_map(body, mesh, {in}, {out})(a[0]); };
  };
  check_grad("psum", sm([](const Array& b) { return psum(b * b, "i"); }, P("i"), P(None)), {x});
  check_grad("psum of invariant", sm([](const Array& b) { return psum(b * 3.0, "i"); }, P(), P()), {x});
  check_grad("pmean", sm([](const Array& b) { return pmean(sin(b), Axes{"i", "j"}); }, P("i", "j"), P()), {x});
  check_grad("all_gather tiled", sm([](const Array& b) { return all_gather(b * b, "i", 0, true); }, P("i"), P()), {x});
  check_grad("all_gather untiled", sm([](const Array& b) { return all_gather(exp(b), "j", 1, false); }, P(None, "j"), P()), {x});
  check_grad("psum_scatter", sm([](const Array& b) { return psum_scatter(b * b, "i", 1, true); }, P("i"), P(None, "i")), {x});
  check_grad("ppermute", sm([](const Array& b) { return ppermute(b * b, "i", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); }, P("i"), P("i")), {x});
  check_grad("all_to_all", sm([](const Array& b) { return all_to_all(b * b, "j", 1, 0, true); }, P(None, "j"), P("j")), {x});
  check_grad("multi-axis ppermute", sm([](const Array& b) {
    return ppermute(tanh(b), Axes{"i", "j"}, {{0, 7}, {7, 3}, {3, 0}});
  }, P(Axes{"i", "j"}), P(Axes{"i", "j"})), {x});
}

TEST(VjpFiniteDifferences, GradOfAllToAllOfIotaIsTwoEverywhere) {
  Mesh mesh({8}, {"i"});
  Array io = device_put(astype(reshape(arange(64), {8, 8}), DType::F32), NamedSharding(mesh, P("i")));
  auto f = [&](const Array& v) {
    return 2.0 * sum(shard_map([](const Array& b) { return all_to_all(b, "i", 1, 0, true); }, mesh, {P("i")}, {P("i")})(v));
  };
  Array g = grad(f)(io);
  EXPECT_EQ(g.to_vector<float>(), std::vector<float>(64, 2.0f));
  EXPECT_EQ(g.sharding(), NamedSharding(mesh, P("i")));  // the gradient keeps the argument's sharding
}

TEST(Grad, StopGradientBlocksTheGradient) {
  // Finite differences cannot see stop_gradient: check the rule directly.
  Array x = values({5}, 27);
  Array g = grad([](const Array& v) { return sum(v * stop_gradient(v)); })(x);
  EXPECT_EQ(g.to_vector<double>(), x.to_vector<double>());
}

TEST(Grad, BadInput) {
  EXPECT_PARTIX_ERROR(grad([](const Array& x) { return x * 2.0; })(ones({3})), "[grad]", "float scalar", "[3]");
  EXPECT_PARTIX_ERROR(grad([](const Array& x) { return sum(x); }, 2)(ones({3})), "[grad]", "argnum 2");
  EXPECT_PARTIX_ERROR(grad([](const Array& x) { return sum(astype(x, DType::F32)); })(arange(3)), "[grad]", "integer");
  Array g = grad([](const Array& x) { return sum(x); })(ones({2}));
  EXPECT_PARTIX_ERROR(Tree(g).params(), "[grad]", "Array");
}
