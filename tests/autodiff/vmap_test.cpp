// vmap: every example computed as the unbatched function computes it alone (the oracle: a loop
// over the examples), for the primitives that have batching rules, in_axes and out_axes at any
// position, per-example gradients, grad of vmap, jit, sharded batches, remat and custom
// derivatives inside; primitives without a rule are refused by name.
#include <cmath>
#include <set>

#include "ir/primitive.h"
#include "test_util.h"
#include "trace/trace.h"

using namespace partix;

namespace {

std::vector<float> vec(const Array& a) { return astype(a, DType::F32).to_vector<float>(); }

// f applied to each example (slice `i` of axis `axis` of x; y whole) and stacked on axis 0.
Array loop(const ArraysFn& f, const Array& x, int axis, const Array& y) {
  std::vector<Array> outs;
  for (int64_t i = 0; i < x.shape()[static_cast<size_t>(axis)]; ++i) {
    Array xi = squeeze(slice_axis(x, axis, i, i + 1), {axis});
    outs.push_back(expand_dims(f({xi, y})[0], 0));
  }
  return concatenate(outs, 0);
}

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<float> a = vec(got), b = vec(want);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << what << " element " << i;
  }
}

// One function per family of primitives, each of an example x [3, 4] and a shared y [4, 2].
std::vector<std::pair<std::string, ArraysFn>> programs() {
  auto one = [](auto f) { return ArraysFn([f](const std::vector<Array>& a) { return std::vector<Array>{f(a[0], a[1])}; }); };
  return {
      {"elementwise and scalars", one([](const Array& x, const Array&) { return tanh(x) * 2.0 + sum(x) - exp(x * 0.1); })},
      {"matmul with a shared weight", one([](const Array& x, const Array& y) { return matmul(x, y); })},
      {"reductions", one([](const Array& x, const Array&) { return max(x, {1}) + sum(min(x, {0})) + mean(x, {0, 1}); })},
      {"argmax and cumsum", one([](const Array& x, const Array&) { return astype(argmax(x, 1), DType::F32) + sum(cumsum(x, 1)); })},
      {"shapes", one([](const Array& x, const Array&) {
         Array t = transpose(reshape(x, {2, 6}));
         return concatenate({slice_axis(t, 0, 1, 5), sum(pad(flip(t, {1}), {1, 0}, {0, 2})) + t}, 0);
       })},
      {"broadcast and where", one([](const Array& x, const Array& y) {
         return where(x > 0.5, broadcast_to(sum(y, {1}), {3, 4}), x);
       })},
      {"take with shared indices", one([](const Array& x, const Array&) {
         return take(x, from_vector<int32_t>({2, 0, 1}, {3}), 1);
       })},
  };
}

}  // namespace

TEST(Vmap, EveryExampleAsTheFunctionComputesItAlone) {
  Array x = random::normal(random::key(1), {5, 3, 4});
  Array y = random::normal(random::key(2), {4, 2});
  for (const auto& [name, f] : programs()) {
    SCOPED_TRACE(name);
    Array want = loop(f, x, 0, y);
    expect_close(vmap(f, {0, -1})({x, y})[0], want, 1e-5, "eager");
    expect_close(jit([&](const Array& a, const Array& b) { return vmap(f, {0, -1})({a, b})[0]; })(x, y),
                 want, 1e-5, "jit");
    // The mapped axis elsewhere, and the result's batch axis last.
    Array xt = moveaxis(x, 0, 2);
    Array got = vmap(f, {2, -1}, {want.ndim() - 1})({xt, y})[0];
    expect_close(moveaxis(got, want.ndim() - 1, 0), want, 1e-5, "in_axes 2, out_axes last");
  }
}

TEST(Vmap, TakeAndScatterWithBatchedIndices) {
  Array table = random::normal(random::key(3), {4, 6, 3});
  Array idx = from_vector<int32_t>({0, 5, 2, 1, 1, 4, 3, 3, 0, 2, 2, 5}, {4, 3});
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{take(a[0], a[1], 0)}; };
  Array got = vmap(f, {0, 0})({table, idx})[0];
  for (int b = 0; b < 4; ++b) {
    Array tb = squeeze(slice_axis(table, 0, b, b + 1), {0});
    Array ib = squeeze(slice_axis(idx, 0, b, b + 1), {0});
    expect_close(squeeze(slice_axis(got, 0, b, b + 1), {0}), take(tb, ib, 0), 0, "take");
  }
  // Its gradient scatters each example's cotangent into its own table.
  auto loss = [](const Array& t, const Array& i) { return sum(square(take(t, i, 0))); };
  auto pg = [&](const std::vector<Array>& a) { return std::vector<Array>{Array(grad(loss)(a[0], a[1]))}; };
  Array g = vmap(pg, {0, 0})({table, idx})[0];
  for (int b = 0; b < 4; ++b) {
    Array tb = squeeze(slice_axis(table, 0, b, b + 1), {0});
    Array ib = squeeze(slice_axis(idx, 0, b, b + 1), {0});
    expect_close(squeeze(slice_axis(g, 0, b, b + 1), {0}), Array(grad(loss)(tb, ib)), 1e-6, "scatter");
  }
}

TEST(Vmap, PerExampleGradientsAndGradOfVmap) {
  Array w = random::normal(random::key(4), {4, 2}, DType::F64);
  Array x = random::normal(random::key(5), {6, 4}, DType::F64);
  auto loss = [](const Array& wv, const Array& xv) { return sum(square(tanh(matmul(xv, wv)))); };
  auto per = [&](const std::vector<Array>& a) { return std::vector<Array>{Array(grad(loss)(a[0], a[1]))}; };
  Array pg = vmap(per, {-1, 0})({w, x})[0];
  ASSERT_EQ(pg.shape(), (Shape{6, 4, 2}));
  Array total = zeros({4, 2}, DType::F64);
  for (int i = 0; i < 6; ++i) {
    Array xi = squeeze(slice_axis(x, 0, i, i + 1), {0});
    Array gi = grad(loss)(w, xi);
    expect_close(squeeze(slice_axis(pg, 0, i, i + 1), {0}), gi, 1e-12, "example");
    total = total + gi;
  }
  auto batched = [&](const Array& wv) {
    return sum(vmap([&](const std::vector<Array>& a) { return std::vector<Array>{loss(a[0], a[1])}; },
                    {-1, 0})({wv, x})[0]);
  };
  expect_close(Array(grad(batched)(w)), total, 1e-12, "grad of vmap");
}

TEST(Vmap, ShardedBatchKeepsItsSharding) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  NamedSharding s(m, P("x"));
  Array x = device_put(random::normal(random::key(6), {8, 6}), s);
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{sin(a[0]) * sum(a[0])}; };
  Array r = jit([&](const Array& v) { return vmap(f, {0})({v})[0]; })(x);
  EXPECT_EQ(r.sharding(), s);
  Array want = loop([&](const std::vector<Array>& a) { return f({a[0]}); }, x, 0, x);
  expect_close(r, want, 1e-5, "values");
}

TEST(Vmap, RematAndCustomDerivativesInside) {
  Array x = random::normal(random::key(7), {5, 3}, DType::F64);
  ArraysFn twice_sin = custom_vjp([](const std::vector<Array>& a) { return std::vector<Array>{sin(a[0])}; },
                                  [](const std::vector<Array>& a) { return std::vector<Array>{sin(a[0]), cos(a[0])}; },
                                  [](const std::vector<Array>& r) { return std::vector<Array>{r[0] * r[1] * 2.0}; });
  auto loss = [&](const Array& v) {
    return sum(checkpoint([](const Array& u) { return tanh(u); })(v) + twice_sin({v})[0]);
  };
  auto per = [&](const std::vector<Array>& a) { return std::vector<Array>{Array(grad(loss)(a[0]))}; };
  Array g = vmap(per, {0})({x})[0];
  std::vector<double> xs = x.to_vector<double>(), gs = g.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double t = std::tanh(xs[i]);
    EXPECT_NEAR(gs[i], 1 - t * t + 2 * std::cos(xs[i]), 1e-12) << i;
  }
}

TEST(Vmap, BadInputAndPrimitivesWithoutARuleAreErrorsNamingVmap) {
  auto id = [](const std::vector<Array>& a) { return a; };
  EXPECT_PARTIX_ERROR(vmap(id, {0, 0})({ones({3}), ones({4})}), "[vmap] inconsistent sizes",
                      "argument 1 has size 4");
  EXPECT_PARTIX_ERROR(vmap(id, {1})({ones({3})}), "[vmap] in_axes 1 is out of range");
  EXPECT_PARTIX_ERROR(vmap(id, {-1})({ones({3})}), "no argument is mapped");
  EXPECT_PARTIX_ERROR(vmap(id, {0}, {-1})({ones({3})}), "out_axes is None for an output that "
                                                        "depends on the mapped axis");
}

namespace {

// A primitive that states no batching rule (every real one does).
class NoBatchingRule final : public prim::Primitive {
 public:
  std::string_view name() const override { return "test_no_batching_rule"; }
  std::vector<ir::Aval> infer(const std::vector<ir::Aval>& in, const ir::Attrs&,
                              const prim::Regions&) const override {
    return in;
  }
  void reference(const prim::KernelCall&) const override {}
};

}  // namespace

TEST(Vmap, APrimitiveWithoutARuleIsRefusedByNameNeverUnrolled) {
  static NoBatchingRule p;
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{detail::bind1(p, {a[0]}, {})};
  };
  EXPECT_PARTIX_ERROR(vmap(f, {0})({ones({3, 2})}), "[vmap] test_no_batching_rule has no "
                                                    "batching rule");
}

TEST(Vmap, EveryPrimitiveWithOperandsStatesHowItBatches) {
  // constant and iota take no operands, so nothing of theirs is ever batched; storage_view
  // exists only in partitioned per-device programs, which vmap never sees.
  const std::set<std::string> kNoOperands{"constant", "iota", "storage_view"};
  for (const std::string& name : prim::primitive_names()) {
    if (kNoOperands.count(name)) continue;
    EXPECT_NE(prim::get_primitive(name).batching(), nullptr) << name << " has no batching rule";
  }
}
