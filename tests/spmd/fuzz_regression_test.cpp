// Regressions found by the differential fuzzer (scripts/fuzz_spmd.sh): each case, reduced,
// against the single-device run.
#include "test_util.h"

using namespace partix;

namespace {
void expect_near(const Array& got, const Array& want) {
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5f) << i;
}
}  // namespace

// Seed 1 case 59: a scatter into a table split over a size-1 axis took the sharded-scatter
// path, which did not mask the padding of updates split unevenly over another axis: each
// padded update (cotangent 1 - tanh(0)^2 = 1) was added to row 0.
TEST(FuzzRegression, ScatterIntoARowSplitTableMasksUnevenUpdates) {
  Mesh m = make_mesh({8, 1}, {"a", "b"});
  Array x0 = random::normal(random::key(1), {3});
  Array i1 = from_vector<int32_t>({2, 0, 1}, {3});
  Array x2 = random::normal(random::key(2), {3});
  Array i3 = from_vector<int32_t>({1, 2}, {2});
  auto f = [](const Array& v, const Array& a, const Array& u, const Array& b) {
    return sum(tanh(take_along_axis(scatter_add(v, a, u, 0), b, 0)));
  };
  Array want = grad(f)(x0, i1, x2, i3);
  auto g = jit([&](const Array& v, const Array& a, const Array& u, const Array& b) -> Array {
    return grad(f)(v, a, u, b);
  });
  expect_near(g(device_put(x0, NamedSharding(m, P("b"))), device_put(i1, NamedSharding(m, P("a"))),
                device_put(x2, NamedSharding(m, P(Axes{"b", "a"}))),
                device_put(i3, NamedSharding(m, P("a")))),
              want);
  // The same with the table split over a real axis.
  Mesh m2 = make_mesh({4, 2}, {"a", "b"});
  Array t = random::normal(random::key(3), {6, 5});
  Array ids = from_vector<int32_t>({5, 0, 3}, {3});
  Array upd = random::normal(random::key(4), {3, 5});
  auto h = [](const Array& v, const Array& i, const Array& u) {
    return sum(tanh(scatter_add(v, i, u, 0)));
  };
  Array want2 = grad(h, 2)(t, ids, upd);
  auto j = jit([&](const Array& v, const Array& i, const Array& u) -> Array { return grad(h, 2)(v, i, u); });
  expect_near(j(device_put(t, NamedSharding(m2, P("b"))), device_put(ids, NamedSharding(m2, P("a"))),
                device_put(upd, NamedSharding(m2, P("a")))),
              want2);
}

// Seed 3 cases 67 and 103: pad with a nonzero value was treated as linear, so a partial sum
// (a matmul over a split contraction) was padded on every device and the pad value summed
// once per device.
TEST(FuzzRegression, PaddingAPartialSumWithANonzeroValueReducesFirst) {
  Mesh m = make_mesh({2, 4}, {"a", "b"});
  Array x = random::normal(random::key(5), {4});
  Array w = random::normal(random::key(6), {4, 4});
  auto f = [](const Array& u, const Array& v) { return pad(matmul(u, v), {2}, {1}, 0.5); };
  Array want = f(x, w);
  Array got = jit(f)(device_put(x, NamedSharding(m, P(Axes{"a", "b"}))),
                     device_put(w, NamedSharding(m, P(None, "b"))));
  expect_near(got, want);
  // Padding with zero stays linear: the partial sum passes through and is reduced once.
  auto z = [](const Array& u, const Array& v) { return pad(matmul(u, v), {2}, {1}, 0.0); };
  expect_near(jit(z)(device_put(x, NamedSharding(m, P("b"))), device_put(w, NamedSharding(m, P("b")))),
              z(x, w));
}

// Seed 3 case 41: the same through softmax, flips and a gradient.
TEST(FuzzRegression, GradientThroughPaddedPartialSums) {
  Mesh m = make_mesh({2, 2, 2}, {"a", "b", "c"});
  Array x = random::normal(random::key(7), {12, 6, 6});
  Array w = random::normal(random::key(8), {6, 7});
  auto loss = [](const Array& u, const Array& v) {
    Array h = pad(matmul(max(u, {1}), v) * 0.3f, {0, 3}, {0, 3}, 0.5);
    return sum(tanh(softmax(flip(h, {1}), 1)));
  };
  Array want = grad(loss)(x, w);
  auto g = jit([&](const Array& u, const Array& v) -> Array { return grad(loss)(u, v); });
  expect_near(g(device_put(x, NamedSharding(m, P(None, None, Axes{"a", "c"}))),
                device_put(w, NamedSharding(m, P(Axes{"a", "c"})))),
              want);
}
