// shard_map values for each collective and spec combination, out_specs checks and errors,
// ported from JAX's tests/shard_map_test.py (each test names the JAX test it comes from).
// Expected values are computed here from the inputs, as numpy would.
#include "jax_port/jax_port_util.h"

using namespace partix;
using jax_port::host_block;
using jax_port::iota_f32;
using jax_port::iota_values;

namespace {

// create_inputs of shard_map_test.py: 8x8 arange matrices on a 2x2x2 mesh ('x', 'y', 'z').
Mesh mesh222() { return Mesh({2, 2, 2}, {"x", "y", "z"}); }

Array input(const PartitionSpec& spec) {
  return device_put(iota_f32({8, 8}), NamedSharding(mesh222(), spec));
}

std::vector<float> matmul_host(const std::vector<float>& a, const std::vector<float>& b, size_t n) {
  std::vector<float> c(n * n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      double s = 0;
      for (size_t k = 0; k < n; ++k) s += static_cast<double>(a[i * n + k]) * b[k * n + j];
      c[i * n + j] = static_cast<float>(s);
    }
  }
  return c;
}

}  // namespace

// shard_map_test.py ShardMapTest.test_identity: P('z', ('x', 'y')) blocks are (4, 2) in and
// out.
TEST(JaxPortShardMap, Identity) {
  Array a = input(P("z", Axes{"x", "y"}));
  ASSERT_EQ(a.addressable_shards()[0].data.shape(), (Shape{4, 2}));
  auto fwd = jit(shard_map([](const Array& x) { return x; }, mesh222(), {P("z", Axes{"x", "y"})},
                           {P("z", Axes{"x", "y"})}));
  Array c = fwd(a);
  EXPECT_EQ(c.addressable_shards()[0].data.shape(), (Shape{4, 2}));
  EXPECT_EQ(c.to_vector<float>(), iota_values(64));
}

// shard_map_test.py ShardMapTest.test_all_gather: all_gather over 'z' on axis 0 and over
// ('x', 'y') on the last axis, tiled; device 2i holds column block i of a (8 x 2), device i
// row block i (4 x 8).
TEST(JaxPortShardMap, AllGather) {
  Array a = input(P("z", Axes{"x", "y"}));
  auto fwd = jit(shard_map(
      [](const Array& x) {
        return std::make_tuple(all_gather(x, "z", 0, true),
                               all_gather(x, Axes{"x", "y"}, -1, true));
      },
      mesh222(), {P("z", Axes{"x", "y"})}, {P("z", Axes{"x", "y"})}));
  auto [c, d] = fwd(a);
  const std::vector<float> av = iota_values(64);
  std::vector<Shard> cs = c.addressable_shards(), ds = d.addressable_shards();
  EXPECT_EQ(cs[0].data.shape(), (Shape{8, 2}));
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(cs[static_cast<size_t>(2 * i)].data.to_vector<float>(),
              host_block(av, {8, 8}, {{0, 8}, {2 * i, 2 * i + 2}}));
  }
  EXPECT_EQ(ds[0].data.shape(), (Shape{4, 8}));
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ds[static_cast<size_t>(i)].data.to_vector<float>(),
              host_block(av, {8, 8}, {{4 * i, 4 * i + 4}, {0, 8}}));
  }
}

// shard_map_test.py ShardMapTest.test_with_static_arg: adding ones of the block's shape.
TEST(JaxPortShardMap, WithStaticArg) {
  Array a = input(P("x", "y"));
  ASSERT_EQ(a.addressable_shards()[0].data.shape(), (Shape{4, 4}));
  Shape block = a.addressable_shards()[0].data.shape();
  auto fun = jit(shard_map([&](const Array& x) { return x + ones(block); }, mesh222(),
                           {P("x", "y")}, {P("x", "y")}));
  EXPECT_EQ(fun(a).to_vector<float>(), iota_values(64, 1.0f, 1.0f));
}

// shard_map_test.py ShardMapTest.test_matmul_reduce_scatter: the local matmul of P('z', 'y')
// and P('y', None) blocks is a partial sum over 'y'; psum_scatter over 'y' gives a @ b split in
// row blocks of 2, over ('z', 'y') the sum of its two halves split in rows of 1.
TEST(JaxPortShardMap, MatmulReduceScatter) {
  Array a = input(P("z", "y"));
  Array b = input(P("y", None));
  ASSERT_EQ(a.addressable_shards()[0].data.shape(), (Shape{4, 4}));
  auto fwd = jit(shard_map(
      [](const Array& x, const Array& y) {
        Array c = matmul(x, y);
        return std::make_tuple(psum_scatter(c, "y", 0, true),
                               psum_scatter(c, Axes{"z", "y"}, 0, true));
      },
      mesh222(), {P("z", "y"), P("y", None)}, {P(Axes{"z", "y"}, None)}));
  auto [c, d] = fwd(a, b);
  const std::vector<float> expected = matmul_host(iota_values(64), iota_values(64), 8);
  EXPECT_EQ(c.addressable_shards()[0].data.shape(), (Shape{2, 8}));
  jax_port::expect_close(c.to_vector<float>(), {expected.begin(), expected.end()}, 1e-6, "c");
  EXPECT_EQ(d.addressable_shards()[0].data.shape(), (Shape{1, 8}));
  std::vector<double> halves(32);
  for (size_t i = 0; i < 32; ++i) halves[i] = static_cast<double>(expected[i]) + expected[i + 32];
  jax_port::expect_close(d.to_vector<float>(), halves, 1e-6, "d");
}

// shard_map_test.py ShardMapTest.test_collective_permute: rows shift down by one over 'x'.
TEST(JaxPortShardMap, CollectivePermute) {
  Mesh mesh({8}, {"x"});
  Array a = device_put(reshape(arange(64), {8, 8}), NamedSharding(mesh, P("x", None)));
  auto fwd = jit(shard_map(
      [](const Array& x) {
        const int n = static_cast<int>(axis_size("x"));
        std::vector<std::pair<int, int>> perm;
        for (int j = 0; j < n; ++j) perm.emplace_back(j, (j + 1) % n);
        return ppermute(x, "x", perm);
      },
      mesh, {P("x", None)}, {P("x", None)}));
  std::vector<int32_t> c = fwd(a).to_vector<int32_t>(), av = a.to_vector<int32_t>();
  for (size_t r = 0; r < 8; ++r) {
    for (size_t col = 0; col < 8; ++col) EXPECT_EQ(c[((r + 1) % 8) * 8 + col], av[r * 8 + col]);
  }
}

// shard_map_test.py ShardMapTest.test_collective_permute_with_multiple_axis_names: shifts over
// ('x', 'y') (by two devices) and over ('y', 'z') (within each group of four).
TEST(JaxPortShardMap, CollectivePermuteWithMultipleAxisNames) {
  Array a =
      device_put(reshape(arange(64), {4, 16}), NamedSharding(mesh222(), P("x", Axes{"y", "z"})));
  auto shift = [](Axes axes) {
    const int n = static_cast<int>(axis_size(axes));
    std::vector<std::pair<int, int>> perm;
    for (int j = 0; j < n; ++j) perm.emplace_back(j, (j + 1) % n);
    return perm;
  };
  auto fwd = jit(shard_map(
      [&](const Array& x) {
        return std::make_tuple(ppermute(x, Axes{"x", "y"}, shift(Axes{"x", "y"})),
                               ppermute(x, Axes{"y", "z"}, shift(Axes{"y", "z"})));
      },
      mesh222(), {P("x", Axes{"y", "z"})}, {P("x", Axes{"y", "z"})}));
  auto [c, d] = fwd(a);
  std::vector<Shard> as = a.addressable_shards(), cs = c.addressable_shards(),
                     ds = d.addressable_shards();
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(cs[(i + 2) % 8].data.to_vector<int32_t>(), as[i].data.to_vector<int32_t>()) << i;
    EXPECT_EQ(ds[4 * (i / 4) + (i + 1) % 4].data.to_vector<int32_t>(),
              as[i].data.to_vector<int32_t>())
        << i;
  }
}

// shard_map_test.py ShardMapTest.test_all_to_all (_single_axis_name, _multiple_axis_names):
// row blocks to column blocks: the result (1, 64) is a transposed, flattened.
TEST(JaxPortShardMap, AllToAll) {
  for (auto [mesh, axes] : {std::pair{Mesh({8}, {"x"}), Axes("x")},
                            std::pair{Mesh({4, 2}, {"x", "y"}), Axes{"x", "y"}}}) {
    SCOPED_TRACE(axes.to_string());
    PartitionSpec in(std::vector<PartitionSpec::Entry>{axes.names(), {}});
    PartitionSpec out(std::vector<PartitionSpec::Entry>{{}, axes.names()});
    Array a = device_put(reshape(arange(64), {8, 8}), NamedSharding(mesh, in));
    auto fwd = jit(shard_map([&](const Array& x) { return all_to_all(x, axes, 1, 1, true); }, mesh,
                             {in}, {out}));
    Array c = fwd(a);
    ASSERT_EQ(c.shape(), (Shape{1, 64}));
    std::vector<int32_t> cv = c.to_vector<int32_t>(), av = a.to_vector<int32_t>();
    for (size_t i = 0; i < 8; ++i) {
      for (size_t j = 0; j < 8; ++j) EXPECT_EQ(cv[j * 8 + i], av[i * 8 + j]);
    }
  }
}

// shard_map_test.py ShardMapTest.test_replication_checker_eager and
// test_replication_checker_jit: out_specs P(None, 'y') for a value varying over 'x' is refused;
// after psum over 'x' it is accepted.
TEST(JaxPortShardMap, ReplicationChecker) {
  Mesh mesh({2, 2}, {"x", "y"});
  Array x = iota_f32({8, 8});
  auto bad =
      shard_map([](const Array& v) { return v * 2.0f; }, mesh, {P("x", "y")}, {P(None, "y")});
  EXPECT_PARTIX_ERROR(bad(x), "[shard_map]", "out_specs[0]", "'x'");
  EXPECT_PARTIX_ERROR(jit(bad)(x), "[shard_map]", "'x'");
  auto good =
      shard_map([](const Array& v) { return psum(v, "x"); }, mesh, {P("x", "y")}, {P(None, "y")});
  std::vector<float> got = good(x).to_vector<float>();
  ASSERT_EQ(got.size(), 32u);
  for (size_t i = 0; i < 32; ++i)
    EXPECT_EQ(got[i], static_cast<float>(i) + static_cast<float>(i + 32));
  EXPECT_EQ(jit(good)(x).to_vector<float>(), got);
}

// shard_map_test.py ShardMapTest.test_vma_out_specs_error_check: x * 2 varies over 'x', 'y',
// 'z'; out_specs P('x') claims replication over 'y' and 'z'.
TEST(JaxPortShardMap, VmaOutSpecsErrorCheck) {
  auto f = shard_map([](const Array& v) { return v * 2; }, mesh222(), {P("x", "y", "z")}, {P("x")});
  EXPECT_PARTIX_ERROR(f(reshape(arange(16), {4, 2, 2})), "out_specs[0] = P('x')", "'y', 'z'");
}

// shard_map_test.py ShardMapTest.test_outer_jit_detects_shard_map_mesh: a scalar made into a
// block of one, returned split over 'x'.
TEST(JaxPortShardMap, OuterJitOfShardMapOfScalar) {
  Mesh mesh({2, 2}, {"x", "y"});
  auto f = shard_map([](const Array& v) { return reshape(v, {1}); }, mesh, {P()}, {P("x")});
  EXPECT_EQ(jit(f)(scalar(2.0f)).to_vector<float>(), (std::vector<float>{2, 2}));
}

// shard_map_test.py ShardMapTest.test_tree_prefix_error and test_rank_errors: specs that do
// not match the arguments or results.
TEST(JaxPortShardMap, SpecCountAndRankErrors) {
  Mesh mesh({2, 2}, {"x", "y"});
  // One in_spec for two arguments.
  auto two = shard_map([](const Array& a, const Array& b) { return a + b; }, mesh, {P("x", "y")},
                       {P("x", "y")});
  EXPECT_PARTIX_ERROR(two(iota_f32({8, 8}), iota_f32({8, 8})), "[shard_map]", "in_specs");
  // out_specs P('x') for a scalar result.
  auto scalar_out = shard_map([](const Array& a) { return sum(a); }, mesh, {P()}, {P("x")});
  EXPECT_PARTIX_ERROR(scalar_out(iota_f32({4})), "[", "P('x')");
  // in_specs P(None) for a scalar argument (JAX: "consider using an in_specs entry of P()").
  auto scalar_in = shard_map([](const Array& a) { return a; }, mesh, {P(None)}, {P()});
  EXPECT_PARTIX_ERROR(scalar_in(scalar(3.0f)), "[shard_map]", "P(None)");
}

// shard_map_test.py ShardMapTest.test_functools_partial_rank_error: in_spec P('x', None) for a
// one-dimensional argument.
TEST(JaxPortShardMap, InSpecLongerThanRank) {
  Mesh mesh({4}, {"x"});
  auto g = shard_map([](const Array& a) { return a; }, mesh, {P("x", None)}, {P("x")});
  EXPECT_PARTIX_ERROR(g(arange(4)), "[shard_map]", "P('x', None)");
}

// shard_map_test.py ShardMapTest.test_in_specs_none_error: P() in_specs for a scalar is fine.
TEST(JaxPortShardMap, ReplicatedScalarArgument) {
  Mesh mesh({4}, {"x"});
  EXPECT_EQ(
      shard_map([](const Array& a) { return a; }, mesh, {P()}, {P()})(scalar(3.0f)).item<float>(),
      3.0f);
}

// shard_map_test.py ShardMapTest.test_axis_index_basic (jit and not): each device's index.
TEST(JaxPortShardMap, AxisIndexBasic) {
  Mesh mesh({4}, {"x"});
  auto foo = shard_map([]() { return reshape(axis_index("x"), {1}); }, mesh, {}, {P("x")});
  EXPECT_EQ(foo().to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(jit(foo)().to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
}

// shard_map_test.py ShardMapTest.test_axis_index_twoaxes (jit and not): indices over 'i', 'j'
// and ('i', 'j') laid out on a (4, 2) grid.
TEST(JaxPortShardMap, AxisIndexTwoAxes) {
  Mesh mesh({4, 2}, {"i", "j"});
  auto foo = shard_map(
      []() {
        return std::make_tuple(reshape(axis_index("i"), {1, 1}), reshape(axis_index("j"), {1, 1}),
                               reshape(axis_index(Axes{"i", "j"}), {1, 1}));
      },
      mesh, {}, {P("i", "j")});
  for (bool jitted : {false, true}) {
    auto [a1, a2, a3] = jitted ? jit(foo)() : foo();
    std::vector<int32_t> e1, e2, e3;
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 2; ++c) {
        e1.push_back(r);
        e2.push_back(c);
        e3.push_back(2 * r + c);
      }
    }
    EXPECT_EQ(a1.to_vector<int32_t>(), e1);
    EXPECT_EQ(a2.to_vector<int32_t>(), e2);
    EXPECT_EQ(a3.to_vector<int32_t>(), e3);
  }
}

// shard_map_test.py ShardMapTest.test_axis_index_eager: psum of the indices over 'x' is
// 0 + 1 + 2 + 3, positive.
TEST(JaxPortShardMap, PsumOfAxisIndex) {
  Mesh mesh({4}, {"x"});
  auto foo = shard_map([]() { return psum(axis_index("x"), "x"); }, mesh, {}, {P()});
  EXPECT_EQ(foo().item<int32_t>(), 6);
}

// shard_map_test.py ShardMapTest.test_pmin and test_pmax: over four blocks of arange(8).
TEST(JaxPortShardMap, PminAndPmax) {
  Mesh mesh({4}, {"i"});
  Array x = iota_f32({8});
  EXPECT_EQ(shard_map([](const Array& v) { return pmin(v, "i"); }, mesh, {P("i")}, {P()})(x)
                .to_vector<float>(),
            (std::vector<float>{0, 1}));
  EXPECT_EQ(shard_map([](const Array& v) { return pmax(v, "i"); }, mesh, {P("i")}, {P()})(x)
                .to_vector<float>(),
            (std::vector<float>{6, 7}));
}

// shard_map_test.py ShardMapTest.test_pmax_vma_in_types: pmax of a replicated value is the
// value (it is first marked varying).
TEST(JaxPortShardMap, PmaxOfReplicatedValue) {
  Mesh mesh({4}, {"i"});
  auto f = jit(shard_map([](const Array& v) { return pmax(v, "i"); }, mesh, {P()}, {P()}));
  EXPECT_EQ(f(iota_f32({8})).to_vector<float>(), iota_values(8));
  EXPECT_NE(f.lower(iota_f32({8})).global_text().find("pvary"), std::string::npos);
}

// shard_map_test.py ShardMapTest.test_mul_with_vma_in_types and test_rewrite_binops: x * 2
// of a varying block; a replicated operand meeting a varying one is marked varying first.
TEST(JaxPortShardMap, BinaryOpsOfVaryingAndReplicated) {
  Mesh mesh({2}, {"x"});
  auto f = jit(shard_map([](const Array& v) { return v * 2.0f; }, mesh, {P("x")}, {P("x")}));
  EXPECT_EQ(f(iota_f32({8})).to_vector<float>(), iota_values(8, 2.0f));
  Mesh m4({4}, {"x"});
  auto g = jit(
      shard_map([](const Array& a, const Array& b) { return a * b; }, m4, {P(), P("x")}, {P("x")}));
  EXPECT_EQ(g(scalar(3.0f) * ones({1}), iota_f32({4})).to_vector<float>(), iota_values(4, 3.0f));
  EXPECT_NE(g.lower(ones({1}), iota_f32({4})).global_text().find("pvary"), std::string::npos);
}

// shard_map_test.py ShardMapTest.test_all_gather_with_vma_in_types: all_gather of a replicated
// block (marked varying first) returned split over 'x': two copies of the gathered rows.
TEST(JaxPortShardMap, AllGatherOfReplicatedValue) {
  Mesh mesh({2}, {"x"});
  auto f = jit(shard_map([](const Array& v) { return all_gather(v, "x"); }, mesh, {P()}, {P("x")}));
  Array out = f(iota_f32({8}));
  ASSERT_EQ(out.shape(), (Shape{4, 8}));
  std::vector<float> want;
  for (int k = 0; k < 4; ++k) {
    for (float v : iota_values(8)) want.push_back(v);
  }
  EXPECT_EQ(out.to_vector<float>(), want);
}

// shard_map_test.py ShardMapTest.test_same_pspec_eager_shard_map: the result has the out_spec.
TEST(JaxPortShardMap, ResultShardingIsTheOutSpec) {
  Mesh mesh({1, 4, 1}, {"data", "seq", "model"});
  PartitionSpec spec = P("data", "seq", "model");
  Array x = device_put(ones({2, 16, 4}), NamedSharding(mesh, spec));
  Array y = shard_map([](const Array& v) { return v * v + 2.0f; }, mesh, {spec}, {spec})(x);
  EXPECT_EQ(y.sharding().spec(), spec);
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(128, 3.0f));
}

// shard_map_test.py ShardMapTest.test_psum_not_under_shmap_error: a collective outside
// shard_map names the unbound axis; inside shard_map the same function works.
TEST(JaxPortShardMap, PsumOutsideShardMapIsAnError) {
  Mesh mesh({2}, {"x"});
  auto f = [](const Array& v) { return psum(v, "x"); };
  EXPECT_PARTIX_ERROR(jit(f)(iota_f32({8})), "[psum]", "'x'", "outside shard_map");
  EXPECT_EQ(shard_map(f, mesh, {P("x")}, {P()})(iota_f32({8})).to_vector<float>(),
            (std::vector<float>{4, 6, 8, 10}));
}

// shard_map_test.py ShardMapTest.test_ppermute_different_axis_order_error: JAX refuses a
// ppermute over ('y', 'x') of P(('y', 'x')) blocks; partix numbers the group in the order
// given, so the shift moves block k to k + 1 of the ('y', 'x') order.
TEST(JaxPortShardMap, PpermuteOverAxesInAnotherOrder) {
  Mesh mesh({2, 2}, {"x", "y"});
  Array inp = device_put(arange(4), NamedSharding(mesh, P(Axes{"y", "x"})));
  auto f = jit(shard_map(
      [](const Array& v) {
        return ppermute(v, Axes{"y", "x"}, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
      },
      mesh, {P(Axes{"y", "x"})}, {P(Axes{"y", "x"})}));
  EXPECT_EQ(f(inp).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, 1, 2}));
}

// shard_map_test.py ShardMapTest.test_remove_one_sized_mesh_axis_from_vma: on mesh (2, 1),
// psum over 'x' of P('x', 'y') blocks returned with P(). JAX's test turns on
// remove_size_one_mesh_axis_from_type, which is off by default; by default JAX, like partix,
// takes the value to vary over the size-one 'y' and refuses out_specs P(). With P(None, 'y')
// the value is the sum of the two row halves.
TEST(JaxPortShardMap, SizeOneAxisStillCountsAsVarying) {
  Mesh mesh({2, 1}, {"x", "y"});
  Array arr = device_put(reshape(arange(16), {8, 2}), NamedSharding(mesh, P("x", "y")));
  auto f = jit(shard_map([](const Array& v) { return psum(v, "x"); }, mesh, {P("x", "y")}, {P()}));
  EXPECT_PARTIX_ERROR(f(arr), "out_specs[0] = P()", "'y'");
  auto g = jit(
      shard_map([](const Array& v) { return psum(v, "x"); }, mesh, {P("x", "y")}, {P(None, "y")}));
  std::vector<int32_t> want;
  for (int i = 0; i < 8; ++i) want.push_back(i + (i + 8));
  Array out = g(arr);
  EXPECT_EQ(out.shape(), (Shape{4, 2}));
  EXPECT_EQ(out.to_vector<int32_t>(), want);
}

// shard_map_test.py ShardMapTest.test_all_reduce_rgv3, test_reduce_scatter_rgv3 (_simple,
// _multidim_mesh, _multidim_mesh_tuple_sharding), test_all_gather_rgv3, test_all_to_all_rgv3:
// the values of each collective on ones.
TEST(JaxPortShardMap, CollectivesOnOnes) {
  Mesh m22({2, 2}, {"x", "y"});
  auto ar = jit(
      shard_map([](const Array& v) { return psum(v, "x"); }, m22, {P("x", "y")}, {P("x", "y")}));
  EXPECT_EQ(ar(ones({2, 2})).to_vector<float>(), std::vector<float>(4, 2.0f));
  struct RsCase {
    Shape mesh_shape;
    std::vector<std::string> names;
    PartitionSpec spec;
    std::string axis;
    int dim;
    Shape x, out;
  };
  for (const RsCase& c : {RsCase{{2, 2}, {"x", "y"}, P("x", "y"), "x", 0, {4, 2}, {2, 2}},
                          RsCase{{1, 1, 2, 1},
                                 {"replica", "data", "seq", "model"},
                                 P(None, "seq", None),
                                 "seq",
                                 1,
                                 {1, 4, 8},
                                 {1, 2, 8}},
                          RsCase{{1, 1, 2, 1},
                                 {"replica", "data", "seq", "model"},
                                 P(Axes{"replica", "data"}, "seq", None),
                                 "seq",
                                 1,
                                 {1, 4, 8},
                                 {1, 2, 8}}}) {
    Mesh mesh(c.mesh_shape, c.names);
    SCOPED_TRACE(c.spec.to_string());
    auto rs = jit(shard_map([&](const Array& v) { return psum_scatter(v, c.axis, c.dim, true); },
                            mesh, {c.spec}, {c.spec}));
    Array out = rs(ones(c.x));
    EXPECT_EQ(out.shape(), c.out);
    EXPECT_EQ(out.to_vector<float>(),
              std::vector<float>(static_cast<size_t>(jax_port::numel(c.out)), 2.0f));
  }
  auto ag = jit(shard_map([](const Array& v) { return all_gather(v, "x", 0, true); }, m22,
                          {P("x", "y")}, {P(None, "y")}));
  EXPECT_EQ(ag(ones({2, 2})).to_vector<float>(), std::vector<float>(4, 1.0f));
  Mesh m2({2}, {"x"});
  auto a2a = jit(shard_map([](const Array& v) { return all_to_all(v, "x", 1, 1, true); }, m2,
                           {P("x", None)}, {P(None, "x")}));
  Array o = a2a(ones({4, 4}));
  EXPECT_EQ(o.shape(), (Shape{2, 8}));
  EXPECT_EQ(o.to_vector<float>(), std::vector<float>(16, 1.0f));
}

// shard_map_test.py ShardMapTest.test_all_reduce_rgv3_multiple_meshes: two shard_maps on two
// meshes (other axis names, same devices) inside one jit: psum over 'x1' then over 'x2'.
TEST(JaxPortShardMap, TwoMeshesInOneJit) {
  Mesh mesh1({2, 2}, {"x1", "y1"}), mesh2({2, 2}, {"x2", "y2"});
  auto inner1 = shard_map([](const Array& a) { return psum(a, "x1"); }, mesh1, {P("x1", "y1")},
                          {P("x1", "y1")});
  auto inner2 = shard_map([](const Array& a) { return psum(a, "x2"); }, mesh2, {P("x2", "y2")},
                          {P("x2", "y2")});
  auto f = jit([&](const Array& x) { return inner2(inner1(x)); });
  try {
    EXPECT_EQ(f(ones({4, 4})).to_vector<float>(), std::vector<float>(16, 4.0f));
  } catch (const Error& e) {
    GTEST_SKIP() << "divergence: two shard_maps on two meshes over the same devices in one "
                    "jit: "
                 << e.what();
  }
}

// shard_map_test.py ShardMapTest.test_shmap_close_over_unused_params: a body that closes over
// an outer array and differentiates with respect to it.
TEST(JaxPortShardMap, CloseOverUnusedParams) {
  Mesh mesh({2}, {"data"});
  Array arr = device_put(reshape(iota_f32({32}), {4, 8}), NamedSharding(mesh, P()));
  Array params = arr * 1.0f;
  auto update = jit([&](const Array& p, const Array& batch) {
    return shard_map(
        [&](const Array& b) {
          return value_and_grad([](const Array&, const Array& bb) { return sum(bb); })(p, b);
        },
        mesh, {P("data")}, {P()}, /*check_vma=*/false)(batch);
  });
  auto [loss, g] = update(params, arr);
  // Device 0 holds rows 0-1 (sum 120), device 1 rows 2-3; P() keeps device 0's.
  EXPECT_EQ(loss.item<float>(), 120.0f);
  EXPECT_EQ(Array(g).to_vector<float>(), std::vector<float>(32, 0.0f));
}

// shard_map_test.py ShardMapTest.test_partial_auto / test_partial_auto_axis_index (axis_names=):
// manual over 'i' only on a (4, 2) mesh ('i', 'j'); the body's blocks are split over 'i' and
// whole along 'j'; its psum and axis_index see 'i'; specs and collectives naming 'j' are errors.
TEST(JaxPortShardMap, PartialManualAxisNames) {
  Mesh mesh({4, 2}, {"i", "j"});
  Array x = device_put(iota_f32({8, 8}), NamedSharding(mesh, P()));
  auto sum_over_i = shard_map(
      [](const Array& b) {
        EXPECT_EQ(b.shape(), (Shape{2, 8}));
        return psum(b, "i") * 1.0f;
      },
      mesh, {P("i")}, {P()}).axis_names({"i"});
  Array s = jit(sum_over_i)(x);
  const std::vector<float> xv = iota_values(64);
  std::vector<float> want(16, 0.0f);
  for (size_t r = 0; r < 8; ++r) {
    for (size_t c = 0; c < 8; ++c) want[(r % 2) * 8 + c] += xv[r * 8 + c];
  }
  EXPECT_EQ(s.shape(), (Shape{2, 8}));
  EXPECT_EQ(s.to_vector<float>(), want);
  auto index = shard_map(
      [](const Array& b) { return b * 0.0f + astype(axis_index("i"), DType::F32); }, mesh,
                         {P("i")}, {P("i")})
                   .axis_names({"i"});
  std::vector<float> iv = jit(index)(x).to_vector<float>();
  for (size_t r = 0; r < 8; ++r) EXPECT_EQ(iv[r * 8], static_cast<float>(r / 2)) << r;
  auto over_j = shard_map([](const Array& b) { return psum(b, "j"); }, mesh, {P("i")}, {P("i")})
                    .axis_names({"i"});
  EXPECT_THROW(jit(over_j)(x), Error);
  auto spec_j = shard_map([](const Array& b) { return b; }, mesh, {P("j")}, {P("j")})
                    .axis_names({"i"});
  EXPECT_THROW(spec_j(x), Error);
  auto unknown = shard_map([](const Array& b) { return b; }, mesh, {P()}, {P()})
                     .axis_names({"k"});
  EXPECT_THROW(unknown(x), Error);
}
