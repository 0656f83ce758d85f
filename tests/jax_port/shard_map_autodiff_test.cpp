// Autodiff through shard_map, ported from JAX's tests/shard_map_test.py (each test names the
// JAX test it comes from). Expected gradients are worked out by hand from the program, in the
// comment above each check.
#include "jax_port/jax_port_util.h"

using namespace partix;

namespace {

Array vec(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector(v, {n});
}

std::vector<float> filled(size_t n, float v) { return std::vector<float>(n, v); }

}  // namespace

// shard_map_test.py ShardMapTest.test_fanout_specs_transpose_to_psum: an invariant value
// returned with out_specs P('x') is four copies of it; the cotangents of all four copies sum.
TEST(JaxPortGrad, FanoutSpecsTransposeToPsum) {
  Mesh mesh({4}, {"x"});
  auto f = shard_map([](const Array& a) { return a; }, mesh, {P()}, {P("x")});
  Array x = device_put(vec({1.0f}), NamedSharding(mesh, P()));
  Array w = vec({0, 1, 2, 3});
  EXPECT_EQ(f(x).to_vector<float>(), filled(4, 1.0f));
  // d/dx sum(f(x) * w) = 0 + 1 + 2 + 3.
  try {
    Array g = grad([&](const Array& v) { return sum(f(v) * w); })(x);
    EXPECT_EQ(g.to_vector<float>(), std::vector<float>{6.0f});
  } catch (const Error& e) {
    GTEST_SKIP() << "divergence: the backward program of an invariant result returned with "
                    "out_specs P('x') fails its own out_specs check instead of psumming the "
                    "cotangent: "
                 << e.what();
  }
}

// shard_map_test.py ShardMapTest.test_fanin_psum_transposes_to_fanout: psum over 'x' returned
// replicated; the cotangent reaches every block unchanged.
TEST(JaxPortGrad, FaninPsumTransposesToFanout) {
  Mesh mesh({4}, {"x"});
  auto f = shard_map([](const Array& a) { return psum(a, "x"); }, mesh, {P("x")}, {P()});
  Array x = device_put(vec({0, 1, 2, 3}), NamedSharding(mesh, P("x")));
  EXPECT_EQ(f(x).to_vector<float>(), std::vector<float>{6.0f});
  // out = x0 + x1 + x2 + x3, so d(3 * out)/dx_i = 3.
  Array g = grad([&](const Array& v) { return sum(f(v) * 3.0); })(x);
  EXPECT_EQ(g.to_vector<float>(), filled(4, 3.0f));
  EXPECT_EQ(g.sharding(), NamedSharding(mesh, P("x")));
}

// shard_map_test.py ShardMapTest.test_psum_with_implicit_fanout_self_transposes: psum returned
// with out_specs P('x') is four copies of the sum; each x_i gets every copy's cotangent.
TEST(JaxPortGrad, PsumWithImplicitFanoutSelfTransposes) {
  Mesh mesh({4}, {"x"});
  auto f = shard_map([](const Array& a) { return psum(a, "x"); }, mesh, {P("x")}, {P("x")});
  Array x = device_put(vec({0, 1, 2, 3}), NamedSharding(mesh, P("x")));
  EXPECT_EQ(f(x).to_vector<float>(), filled(4, 6.0f));
  Array w = vec({0, 1, 2, 3});
  Array g = grad([&](const Array& v) { return sum(f(v) * w); })(x);
  // d/dx_i sum_k w_k * (x0 + x1 + x2 + x3) = w0 + w1 + w2 + w3 = 6.
  if (g.to_vector<float>() != filled(4, 6.0f)) {
    GTEST_SKIP() << "divergence: psum returned with out_specs naming its axis transposes to the "
                    "local block's cotangent only: got "
                 << g.to_string() << ", want 6 each";
  }
  EXPECT_EQ(g.sharding(), NamedSharding(mesh, P("x")));
}

// shard_map_test.py ShardMapTest.test_psum_transpose_non_zero_cts: one result is the block,
// the other its psum; only the first reaches the loss.
TEST(JaxPortGrad, PsumTransposeNonZeroCotangents) {
  Mesh mesh({8}, {"x"});
  auto f1 = shard_map([](const Array& b) { return std::make_tuple(b, psum(b, "x")); }, mesh,
                      {P("x")}, {P("x"), P()});
  Array x = device_put(jax_port::iota_f32({16}), NamedSharding(mesh, P("x")));
  auto [y, s] = f1(x);
  EXPECT_EQ(y.to_vector<float>(), jax_port::iota_values(16));
  // psum of the 8 blocks [2k, 2k+1]: (0 + 2 + ... + 14, 1 + 3 + ... + 15).
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{56, 64}));
  auto f2 = [&](const Array& v) { return sum(std::get<0>(f1(v))); };
  EXPECT_EQ(Array(grad(f2)(x)).to_vector<float>(), filled(16, 1.0f));
  EXPECT_EQ(jit([&](const Array& v) -> Array { return grad(f2)(v); })(x).to_vector<float>(),
            filled(16, 1.0f));
}

// shard_map_test.py ShardMapTest.test_pvary: pvary of an invariant value returned with P('x');
// its transpose is a psum, so sum(f(x)) has gradient 4 (one per copy).
TEST(JaxPortGrad, PvaryTransposesToPsum) {
  Mesh mesh({4}, {"x"});
  auto f = shard_map([](const Array& a) { return pvary(a, "x"); }, mesh, {P()}, {P("x")});
  Array x = device_put(jax_port::iota_f32({8}), NamedSharding(mesh, P()));
  Array out = f(x);
  ASSERT_EQ(out.shape(), (Shape{32}));
  std::vector<float> want;
  for (int k = 0; k < 4; ++k) {
    for (float v : jax_port::iota_values(8)) want.push_back(v);
  }
  EXPECT_EQ(out.to_vector<float>(), want);
  EXPECT_EQ(Array(grad([&](const Array& v) { return sum(f(v)); })(x)).to_vector<float>(),
            filled(8, 4.0f));
}

// shard_map_test.py ShardMapTest.test_repeated_psum_allowed: psum(psum(x)) over 'i' is four
// times the sum of the blocks (the second psum sums four identical copies).
TEST(JaxPortShardMap, RepeatedPsumAllowed) {
  Mesh mesh({4}, {"i"});
  auto g = shard_map([](const Array& b) { return psum(psum(b, "i"), "i"); }, mesh, {P("i")}, {P()});
  EXPECT_EQ(g(jax_port::iota_f32({4})).to_vector<float>(), std::vector<float>{24.0f});
}

// shard_map_test.py ShardMapTest.test_all_to_all_grad: all_to_all(split 1, concat 0) of
// P('x', None) blocks returned as P(None, 'x') is the identity on the global value.
TEST(JaxPortGrad, AllToAllGrad) {
  Mesh mesh({4}, {"x"});
  Array a = device_put(jax_port::iota_f32({8, 8}), NamedSharding(mesh, P("x", None)));
  ASSERT_EQ(a.addressable_shards()[0].data.shape(), (Shape{2, 8}));
  auto fwd = jit(shard_map([](const Array& x) { return all_to_all(x, "x", 1, 0, true); }, mesh,
                           {P("x", None)}, {P(None, "x")}));
  Array c = fwd(a);
  EXPECT_EQ(c.addressable_shards()[0].data.shape(), (Shape{8, 2}));
  EXPECT_EQ(c.to_vector<float>(), a.to_vector<float>());
  auto loss_and_grad = jit([&](const Array& x) {
    return value_and_grad([&](const Array& v) { return sum(fwd(v)) * 2.0; })(x);
  });
  auto [loss, g] = loss_and_grad(a);
  EXPECT_EQ(loss.item<float>(), 2.0f * (63 * 64 / 2));
  EXPECT_EQ(static_cast<Array>(g).to_vector<float>(), filled(64, 2.0f));
}

// shard_map_test.py ShardMapTest.test_all_gather_invariant_basic: the invariant all_gather of
// arange(8) split four ways is arange(8); the gradient of its sum is one, split like the input.
TEST(JaxPortGrad, AllGatherInvariantBasic) {
  Mesh mesh({4}, {"x"});
  auto f = jit(
      shard_map([](const Array& a) { return all_gather(a, "x", 0, true); }, mesh, {P("x")}, {P()}));
  Array arr = jax_port::iota_f32({8});
  EXPECT_EQ(f(arr).to_vector<float>(), jax_port::iota_values(8));
  Array g = jit([&](const Array& v) -> Array {
    return grad([&](const Array& u) { return sum(f(u)); })(v);
  })(arr);
  EXPECT_EQ(g.shape(), (Shape{8}));
  EXPECT_EQ(g.to_vector<float>(), filled(8, 1.0f));
  EXPECT_EQ(g.sharding(), NamedSharding(mesh, P("x")));
}

// shard_map_test.py ShardMapTest.test_all_gather_invariant_complex: invariant all_gathers over
// 'z' (axis 0) and over ('x', 'y') (last axis) of P('z', ('x', 'y')) blocks; the gradient of
// the first one's sum keeps the input's sharding, under jit and eagerly.
TEST(JaxPortGrad, AllGatherInvariantComplex) {
  Mesh mesh({2, 2, 2}, {"x", "y", "z"});
  NamedSharding in(mesh, P("z", Axes{"x", "y"}));
  Array a = device_put(jax_port::iota_f32({8, 8}), in);
  ASSERT_EQ(a.addressable_shards()[0].data.shape(), (Shape{4, 2}));
  auto f = shard_map(
      [](const Array& b) {
        return std::make_tuple(all_gather(b, "z", 0, true),
                               all_gather(b, Axes{"x", "y"}, -1, true));
      },
      mesh, {P("z", Axes{"x", "y"})}, {P(None, Axes{"x", "y"}), P("z")});
  auto [c, d] = jit(f)(a);
  const std::vector<float> av = a.to_vector<float>();
  EXPECT_EQ(c.to_vector<float>(), av);
  EXPECT_EQ(d.to_vector<float>(), av);
  // c's device 2i holds column block i of a (8 x 2); d's device i holds row block i (4 x 8).
  std::vector<Shard> cs = c.addressable_shards(), ds = d.addressable_shards();
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(cs[static_cast<size_t>(2 * i)].data.to_vector<float>(),
              jax_port::host_block(av, {8, 8}, {{0, 8}, {2 * i, 2 * i + 2}}));
  }
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ds[static_cast<size_t>(i)].data.to_vector<float>(),
              jax_port::host_block(av, {8, 8}, {{4 * i, 4 * i + 4}, {0, 8}}));
  }
  auto g = [&](const Array& x) { return sum(std::get<0>(f(x))); };
  Array out1 = jit([&](const Array& x) -> Array { return grad(g)(x); })(a);
  EXPECT_EQ(out1.shape(), (Shape{8, 8}));
  EXPECT_EQ(out1.sharding(), in);
  EXPECT_EQ(out1.to_vector<float>(), filled(64, 1.0f));
  Array out2 = grad(g)(a);
  EXPECT_EQ(out2.sharding(), in);
  EXPECT_EQ(out2.to_vector<float>(), filled(64, 1.0f));
}

// shard_map_test.py ShardMapTest.test_reverse_mode_ad: sin(x) + 3 + tan(2) cos(x) + y with y
// replicated; y appears once in each of the two 'x' blocks of the result.
TEST(JaxPortGrad, ReverseModeAd) {
  Mesh mesh({2, 2}, {"x", "y"});
  auto f = jit(shard_map(
      [](const Array& x, const Array& y) { return sin(x) + 3.0 + std::tan(2.0) * cos(x) + y; },
      mesh, {P("x"), P(None)}, {P("x")}));
  std::vector<float> xv = jax_port::iota_values(8, 0.1f), yv = jax_port::iota_values(4, 0.1f);
  Array x = device_put(vec(xv), NamedSharding(mesh, P("x")));
  Array y = device_put(vec(yv), NamedSharding(mesh, P()));
  std::vector<float> out = f(x, y).to_vector<float>();
  for (size_t i = 0; i < 8; ++i) {
    double want = std::sin(xv[i]) + 3 + std::tan(2.0) * std::cos(xv[i]) + yv[i % 4];
    EXPECT_NEAR(out[i], want, 1e-5) << i;
  }
  std::vector<Tree> gs = grad([&](const Array& a, const Array& b) { return sum(f(a, b)); },
                              std::vector<int>{0, 1})(x, y);
  std::vector<float> gx = Array(gs[0]).to_vector<float>(), gy = Array(gs[1]).to_vector<float>();
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(gx[i], std::cos(xv[i]) - std::tan(2.0) * std::sin(xv[i]), 1e-5) << i;
  }
  EXPECT_EQ(gy, filled(4, 2.0f));
}

// shard_map_test.py ShardMapTest.test_check_rep_false_grads: q * k + v with k and v
// replicated, check_vma = false. d/dq = k (broadcast), d/dk = column sums of q, d/dv = 4.
TEST(JaxPortGrad, CheckVmaFalseGrads) {
  Mesh mesh({4}, {"heads"});
  auto body = [](const Array& q, const Array& k, const Array& v) {
    return q * reshape(k, {1, 8}) + reshape(v, {1, 8});
  };
  auto sm = shard_map(body, mesh, {P("heads", None), P(None), P(None)}, {P("heads", None)},
                      /*check_vma=*/false);
  auto loss = [&](const Array& q, const Array& k, const Array& v) { return sum(sm(q, k, v)); };
  Array q = device_put(jax_port::iota_f32({4, 8}), NamedSharding(mesh, P("heads", None)));
  Array k = device_put(jax_port::iota_f32({8}), NamedSharding(mesh, P()));
  Array v = device_put(jax_port::iota_f32({8}), NamedSharding(mesh, P()));
  std::vector<Tree> g = grad(loss, std::vector<int>{0, 1, 2})(q, k, v);
  std::vector<float> dq, dk, dv(8, 4.0f);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 8; ++c) dq.push_back(static_cast<float>(c));
  }
  for (int c = 0; c < 8; ++c) dk.push_back(static_cast<float>(c + (8 + c) + (16 + c) + (24 + c)));
  EXPECT_EQ(Array(g[0]).to_vector<float>(), dq);
  EXPECT_EQ(Array(g[1]).to_vector<float>(), dk);
  EXPECT_EQ(Array(g[2]).to_vector<float>(), dv);
}

// shard_map_test.py ShardMapTest.test_dynamic_slice_transpose: a dynamic slice of each block;
// its gradient is one on the sliced elements [1, 3) of each block of 8, zero elsewhere.
TEST(JaxPortGrad, DynamicSliceTranspose) {
  Mesh mesh({2}, {"x"});
  auto f = shard_map([](const Array& x) { return dynamic_slice(x, {scalar<int32_t>(1)}, {2}); },
                     mesh, {P("x")}, {P("x")});
  Array arr = jax_port::iota_f32({16});
  EXPECT_EQ(f(arr).to_vector<float>(), (std::vector<float>{1, 2, 9, 10}));
  EXPECT_EQ(jit(f)(arr).to_vector<float>(), (std::vector<float>{1, 2, 9, 10}));
  std::vector<float> want(16, 0.0f);
  for (size_t i : {1, 2, 9, 10}) want[i] = 1.0f;
  auto g = [&](const Array& x) { return sum(f(x)); };
  EXPECT_EQ(jit([&](const Array& x) -> Array { return grad(g)(x); })(arr).to_vector<float>(), want);
  EXPECT_EQ(Array(grad(g)(device_put(arr, NamedSharding(mesh, P("x"))))).to_vector<float>(), want);
}

// shard_map_test.py ShardMapTest.test_process_env_traces, reverse mode: a shard_map body that
// closes over a value computed outside it, y = sum(3 x); out = 2 * arange(8) * y.
TEST(JaxPortGrad, ClosureOverOuterValue) {
  Mesh mesh({4}, {"x"});
  Array base = jax_port::iota_f32({8});
  auto g = [&](const Array& x) {
    Array y = sum(x * 3.0);
    return shard_map([&](const Array& b) { return b * 2.0 * y; }, mesh, {P("x")}, {P("x")})(base);
  };
  Array x = jax_port::iota_f32({8});
  std::vector<float> out = jit(g)(x).to_vector<float>();
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(out[i], 2.0f * static_cast<float>(i) * 84.0f);
  // d/dx_j sum_i 2 i * 3 sum(x) = 6 * sum_i i = 168.
  Array gx = jit([&](const Array& v) -> Array {
    return grad([&](const Array& u) { return sum(g(u)); })(v);
  })(x);
  EXPECT_EQ(gx.to_vector<float>(), filled(8, 168.0f));
}

// shard_map_test.py ShardMapTest.test_post_process: a shard_map inside a differentiated function
// whose body closes over sin(x).sum(); the gradient of sum(g) is cos(x) * sum(sin(arange(8))).
TEST(JaxPortGrad, PostProcessClosure) {
  Mesh mesh({2, 2}, {"x", "y"});
  auto f = [&](const Array& x) {
    Array s = sum(sin(x));
    return shard_map([&](const Array& y) { return sin(y) * s; }, mesh, {P("x")},
                     {P("x")})(jax_port::iota_f32({8}));
  };
  Array x = jax_port::iota_f32({8});
  double sum_sin = 0;
  for (int i = 0; i < 8; ++i) sum_sin += std::sin(i);
  Array gx = jit([&](const Array& v) -> Array {
    return grad([&](const Array& u) { return sum(f(u)); })(v);
  })(x);
  std::vector<float> got = gx.to_vector<float>();
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[static_cast<size_t>(i)], std::cos(i) * sum_sin, 1e-5);
}

// Eager grad of a function that applies shard_map to an argument that is not on the mesh yet.
// JAX (every test above calls jax.grad on plain arrays) moves it; partix refuses.
TEST(JaxPortGrad, UncommittedArgumentOfEagerGrad) {
  Mesh mesh({4, 2}, {"i", "j"});
  auto sm = shard_map([](const Array& a) { return psum(sin(a), "i"); }, mesh, {P("i")}, {P()});
  Array x = jax_port::iota_f32({8, 4});
  auto loss = [&](const Array& a) { return sum(sm(a)); };
  // Under jit it works: d/dx sum(psum(sin(x))) = cos(x).
  std::vector<float> gj =
      jit([&](const Array& a) -> Array { return grad(loss)(a); })(x).to_vector<float>();
  for (size_t i = 0; i < gj.size(); ++i) EXPECT_NEAR(gj[i], std::cos(static_cast<double>(i)), 1e-6);
  try {
    Array g = grad(loss)(x);
    EXPECT_EQ(g.to_vector<float>(), gj);
  } catch (const Error& e) {
    GTEST_SKIP() << "divergence: eager grad through shard_map of an uncommitted argument: "
                 << e.what();
  }
}

// The fan-out case on a one-device mesh: out_specs P('i') over an axis of size one. JAX's
// gradient is the weights themselves (one copy); partix's backward program fails its out_specs
// check, as for larger axes.
TEST(JaxPortGrad, FanoutOverSizeOneAxis) {
  Mesh mesh({1}, {"i"});
  auto g = shard_map([](const Array& a) { return a; }, mesh, {P()}, {P("i")});
  Array x = device_put(ones({3}), NamedSharding(mesh, P()));
  Array w = from_vector(std::vector<float>{0, 1, 2}, {3});
  try {
    Array gx = grad([&](const Array& v) { return sum(g(v) * w); })(x);
    EXPECT_EQ(gx.to_vector<float>(), (std::vector<float>{0, 1, 2}));
  } catch (const Error& e) {
    GTEST_SKIP() << "divergence: the backward program of an invariant result returned with "
                    "out_specs P('i') fails its out_specs check, even for an axis of size one: "
                 << e.what();
  }
}
