// A shard_map nested in another's body (manual over the axes the outer one leaves automatic):
// equal to the unsharded computation on 8 devices, with collectives over both maps' axes,
// under jit and grad (against finite differences), slicing operands without communication;
// the mesh it must name and the axes it may map are checked.
#include "spmd/spmd_test_util.h"
#include "test_util.h"

namespace partix {
namespace {

Mesh mesh222() {
  std::vector<Device> devs(devices().begin(), devices().begin() + 8);
  return Mesh({2, 2, 2}, {"x", "y", "z"}, devs);
}

Array data(Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return reshape(astype(arange(n, DType::F32), DType::F32) * 0.25 - 3.0, shape);
}

// Outer map manual over 'x' (rows), inner map manual over 'y' (columns) with a psum over 'y'
// and one over 'x' inside the inner body.
auto nested(const Mesh& m) {
  auto inner = [](const Array& b) {
    auto body = [](const Array& blk) { return psum(blk * blk, Axes{"y"}) + psum(blk, Axes{"x"}); };
    return shard_map(body, current_mesh(), {P(None, "y")}, {P(None, "y")}, false)(b);
  };
  return shard_map(inner, m, {P("x", None)}, {P("x", None)}, false).axis_names({"x"});
}

// The same value with host loops: blocks of 2 rows over x, 4 columns over y.
std::vector<float> expected(const std::vector<float>& v) {
  std::vector<float> out(32);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 8; ++c) {
      const int rb = r % 2, cb = c % 4;
      float sq = 0, col = 0;
      for (int yb = 0; yb < 2; ++yb) sq += v[r * 8 + yb * 4 + cb] * v[r * 8 + yb * 4 + cb];
      for (int xb = 0; xb < 2; ++xb) col += v[(xb * 2 + rb) * 8 + c];
      out[r * 8 + c] = sq + col;
    }
  }
  return out;
}

TEST(NestedShardMap, EqualsTheHostComputation) {
  Mesh m = mesh222();
  Array x = data({4, 8});
  Array xs = device_put(x, NamedSharding(m, P("x", "y")));
  std::vector<float> want = expected(x.to_vector<float>());
  auto f = nested(m);
  EXPECT_EQ(jit(f)(xs).to_vector<float>(), want);
  EXPECT_EQ(f(xs).to_vector<float>(), want);  // eager
  // Passed in the outer map's layout, the inner operands are sliced out of the outer blocks
  // (no communication): one gather makes the inner result whole again, and the two psums.
  const std::string text = jit(f).lower(device_put(x, NamedSharding(m, P("x")))).as_text();
  EXPECT_EQ(testing_util::count_op(text, "axis_slice"), 1) << text;
  EXPECT_EQ(testing_util::count_op(text, "all_gather"), 1) << text;  // the inner result, whole
  EXPECT_EQ(testing_util::count_op(text, "all_reduce"), 2) << text;
}

TEST(NestedShardMap, GradientMatchesFiniteDifferences) {
  Mesh m = mesh222();
  auto f = nested(m);
  auto loss = [&](const Array& a) { return sum(f(a) * f(a)); };
  Array x = data({4, 8}) * 0.1;
  Array g = jit(grad(loss))(device_put(x, NamedSharding(m, P("x", "y"))));
  std::vector<float> gv = g.to_vector<float>(), xv = x.to_vector<float>();
  const float eps = 1e-2f;
  for (int i : {0, 5, 13, 31}) {
    std::vector<float> hi = xv, lo = xv;
    hi[i] += eps;
    lo[i] -= eps;
    const float num = (loss(from_vector(hi, {4, 8})).to_vector<float>()[0] -
                       loss(from_vector(lo, {4, 8})).to_vector<float>()[0]) /
                      (2 * eps);
    EXPECT_NEAR(gv[i], num, 2e-2f * std::max(1.0f, std::abs(num))) << i;
  }
}

TEST(NestedShardMap, RefusesAnotherMeshAndTheOuterAxes) {
  Mesh m = mesh222();
  Array xs = device_put(data({4, 8}), NamedSharding(m, P("x", "y")));
  // The outer mesh itself is not the mesh in context inside the body (JAX's error).
  auto wrong_mesh = shard_map(
                        [&](const Array& b) {
                          return shard_map([](const Array& c) { return c; }, m, {P()}, {P()})(b);
                        },
                        m, {P("x")}, {P("x")}, false)
                        .axis_names({"x"});
  EXPECT_PARTIX_ERROR(jit(wrong_mesh)(xs), "[shard_map]", "context mesh",
                      "should match the mesh passed to shard_map");
  auto outer_axis =
      shard_map(
          [](const Array& b) {
            return shard_map([](const Array& c) { return c; }, current_mesh(), {P()}, {P()})
                .axis_names({"x"})(b);
          },
          m, {P("x")}, {P("x")}, false)
          .axis_names({"x"});
  EXPECT_PARTIX_ERROR(jit(outer_axis)(xs), "[shard_map]", "'x'", "already manual");
}

}  // namespace
}  // namespace partix
