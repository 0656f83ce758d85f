// Arrays and NamedShardings, ported from JAX's tests/array_test.py (each test names the JAX
// test it comes from). Expected values are JAX's own (the literals of its tests) or computed
// here from the input, as numpy indexing would.
#include <algorithm>
#include <regex>

#include "jax_port/jax_port_util.h"

using namespace partix;
using jax_port::host_block;
using jax_port::iota_f32;
using jax_port::iota_values;

namespace {

Mesh mesh42() { return Mesh({4, 2}, {"x", "y"}); }

std::vector<int32_t> iota_i32(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i);
  return v;
}

// make_array_from_callback(shape, sharding, lambda idx: arange[idx]) in JAX's tests.
Array create_array(const Shape& shape, const NamedSharding& s) {
  return device_put(from_vector(iota_i32(jax_port::numel(shape)), shape), s);
}

struct SpecCase {
  std::string name;
  PartitionSpec spec;
};

std::string spec_case_name(const testing::TestParamInfo<SpecCase>& i) { return i.param.name; }

}  // namespace

// array_test.py JaxArrayTest.test_jax_array_value: every shard holds global[index], on one
// device; the whole value reads back.
class JaxArrayValue : public testing::TestWithParam<SpecCase> {};

TEST_P(JaxArrayValue, ShardsHoldTheirBlocks) {
  Array arr = create_array({8, 2}, NamedSharding(mesh42(), GetParam().spec));
  const std::vector<int32_t> global = iota_i32(16);
  for (const Shard& s : arr.addressable_shards()) {
    EXPECT_EQ(s.data.sharding().mesh().size(), 1);
    EXPECT_EQ(s.data.to_vector<int32_t>(), host_block(global, {8, 2}, s.index));
  }
  EXPECT_EQ(arr.to_vector<int32_t>(), global);
}

INSTANTIATE_TEST_SUITE_P(JaxPortArray, JaxArrayValue,
                         testing::Values(SpecCase{"mesh_x_y", P("x", "y")},
                                         SpecCase{"mesh_x", P("x")}, SpecCase{"mesh_y", P("y")},
                                         SpecCase{"mesh_none_y", P(None, "y")},
                                         SpecCase{"mesh_xy", P(Axes{"x", "y"})},
                                         SpecCase{"mesh_fully_replicated", P()}),
                         spec_case_name);

// array_test.py JaxArrayTest.test_array_2d_shard: the first two shards' indices, the shard
// shape, every replica id, device order and full replication, as JAX's test lists them.
struct Shard2dCase {
  std::string name;
  PartitionSpec spec;
  std::vector<Slice> index0, index1;
  Shape shard_shape;
  std::vector<int> replica_ids;
  bool fully_replicated;
};

class JaxArray2dShard : public testing::TestWithParam<Shard2dCase> {};

TEST_P(JaxArray2dShard, IndicesReplicaIdsAndShapes) {
  const Shard2dCase& c = GetParam();
  NamedSharding s(mesh42(), c.spec);
  Array arr = create_array({8, 2}, s);
  EXPECT_EQ(arr.ndim(), 2);
  EXPECT_EQ(arr.size(), 16);
  std::vector<Shard> shards = arr.addressable_shards();
  ASSERT_EQ(shards.size(), 8u);
  EXPECT_EQ(shards[0].index, c.index0);
  EXPECT_EQ(shards[1].index, c.index1);
  std::vector<int> ids, devs;
  for (const Shard& sh : shards) {
    ids.push_back(sh.replica_id);
    devs.push_back(sh.device.id);
    EXPECT_EQ(sh.data.shape(), c.shard_shape);
    EXPECT_EQ(sh.data.to_vector<int32_t>(), host_block(iota_i32(16), {8, 2}, sh.index));
  }
  EXPECT_EQ(ids, c.replica_ids);
  EXPECT_EQ(devs, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(s.is_fully_replicated(), c.fully_replicated);
}

INSTANTIATE_TEST_SUITE_P(JaxPortArray, JaxArray2dShard,
                         testing::Values(Shard2dCase{"mesh_x_y",
                                                     P("x", "y"),
                                                     {{0, 2}, {0, 1}},
                                                     {{0, 2}, {1, 2}},
                                                     {2, 1},
                                                     {0, 0, 0, 0, 0, 0, 0, 0},
                                                     false},
                                         Shard2dCase{"mesh_x",
                                                     P("x"),
                                                     {{0, 2}, {0, 2}},
                                                     {{0, 2}, {0, 2}},
                                                     {2, 2},
                                                     {0, 1, 0, 1, 0, 1, 0, 1},
                                                     false},
                                         Shard2dCase{"mesh_y",
                                                     P("y"),
                                                     {{0, 4}, {0, 2}},
                                                     {{4, 8}, {0, 2}},
                                                     {4, 2},
                                                     {0, 0, 1, 1, 2, 2, 3, 3},
                                                     false},
                                         Shard2dCase{"mesh_none_y",
                                                     P(None, "y"),
                                                     {{0, 8}, {0, 1}},
                                                     {{0, 8}, {1, 2}},
                                                     {8, 1},
                                                     {0, 0, 1, 1, 2, 2, 3, 3},
                                                     false},
                                         Shard2dCase{"mesh_xy",
                                                     P(Axes{"x", "y"}),
                                                     {{0, 1}, {0, 2}},
                                                     {{1, 2}, {0, 2}},
                                                     {1, 2},
                                                     {0, 0, 0, 0, 0, 0, 0, 0},
                                                     false},
                                         Shard2dCase{"mesh_fully_replicated",
                                                     P(),
                                                     {{0, 8}, {0, 2}},
                                                     {{0, 8}, {0, 2}},
                                                     {8, 2},
                                                     {0, 1, 2, 3, 4, 5, 6, 7},
                                                     true}),
                         [](const testing::TestParamInfo<Shard2dCase>& i) { return i.param.name; });

// array_test.py JaxArrayTest.test_addressable_data: with P(None) every device holds the whole.
TEST(JaxPortArray, AddressableDataOfReplicatedArray) {
  Array arr = create_array({8, 2}, NamedSharding(mesh42(), P(None)));
  for (const Shard& s : arr.addressable_shards())
    EXPECT_EQ(s.data.to_vector<int32_t>(), iota_i32(16));
}

// array_test.py JaxArrayTest.test_device_put: onto one device, the single shard is the whole
// array with index [0, n) and replica id 0.
TEST(JaxPortArray, DevicePutToOneDevice) {
  Array arr = device_put(from_vector(std::vector<int32_t>{1, 2, 3}, {3}), devices()[0]);
  EXPECT_EQ(arr.sharding(), single_device_sharding(devices()[0]));
  EXPECT_EQ(arr.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  std::vector<Shard> shards = arr.addressable_shards();
  ASSERT_EQ(shards.size(), 1u);
  EXPECT_EQ(shards[0].device.id, 0);
  EXPECT_EQ(shards[0].index, (std::vector<Slice>{{0, 3}}));
  EXPECT_EQ(shards[0].replica_id, 0);
  EXPECT_EQ(shards[0].data.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
}

// array_test.py JaxArrayTest.test_device_put_to_cpu: between two meshes over the same devices,
// each shard holds its block of the value.
TEST(JaxPortArray, DevicePutBetweenMeshes) {
  Mesh a({8}, {"x"});
  Mesh b({8}, {"x"},
         {devices()[7], devices()[6], devices()[5], devices()[4], devices()[3], devices()[2],
          devices()[1], devices()[0]});
  std::vector<float> x = iota_values(16);
  Array y = device_put(from_vector(x, {16}), NamedSharding(a, P("x")));
  Array z = device_put(y, NamedSharding(b, P("x")));
  jax_port::expect_shards_hold_blocks(z, x);
  for (const Shard& s : z.addressable_shards()) {
    // Device d is at mesh position 7 - d of the reversed mesh.
    const int64_t k = 7 - s.device.id;
    EXPECT_EQ(s.index, (std::vector<Slice>{{2 * k, 2 * k + 2}})) << "device " << s.device.id;
  }
}

// array_test.py JaxArrayTest.test_array_device_get: the global value of a sharded array.
TEST(JaxPortArray, ArrayDeviceGet) {
  Array arr = create_array({8, 2}, NamedSharding(mesh42(), P("x", "y")));
  EXPECT_EQ(arr.to_vector<int32_t>(), iota_i32(16));
}

// array_test.py JaxArrayTest.test_jnp_array_jit_add, test_jnp_array_jnp_add,
// test_jnp_array_normal_add: arrays created on the default device stay there through jit and
// eager ops.
TEST(JaxPortArray, UncommittedAddStaysOnDefaultDevice) {
  Array a = from_vector(std::vector<int32_t>{1, 2, 3}, {3});
  Array b = from_vector(std::vector<int32_t>{4, 5, 6}, {3});
  for (const Array& out : {jit([](const Array&x, const Array&y) { return x + y; })(a, b), a + b}) {
    EXPECT_EQ(out.to_vector<int32_t>(), (std::vector<int32_t>{5, 7, 9}));
    EXPECT_EQ(out.sharding(), single_device_sharding(devices()[0]));
  }
}

// array_test.py JaxArrayTest.test_array_sharded_astype / test_jnp_array_astype: astype keeps
// the eight shards, each converted.
TEST(JaxPortArray, ShardedAstype) {
  Array arr = create_array({8, 2}, NamedSharding(mesh42(), P("x", "y")));
  Array f = astype(arr, DType::F32);
  EXPECT_EQ(f.dtype(), DType::F32);
  EXPECT_EQ(f.addressable_shards().size(), 8u);
  jax_port::expect_shards_hold_blocks(f, iota_values(16));
  EXPECT_EQ(astype(from_vector(std::vector<int32_t>{1, 2, 3}, {3}), DType::F32).to_vector<float>(),
            (std::vector<float>{1, 2, 3}));
}

// array_test.py JaxArrayTest.test_sharded_add: P('x', 'y') + P('x') gives the sum, eight shards
// each holding their block.
TEST(JaxPortArray, ShardedAdd) {
  Array a = create_array({8, 2}, NamedSharding(mesh42(), P("x", "y")));
  Array b = create_array({8, 2}, NamedSharding(mesh42(), P("x")));
  Array out = a + b;
  std::vector<int32_t> want = iota_i32(16);
  for (int32_t& v : want) v *= 2;
  EXPECT_EQ(out.to_vector<int32_t>(), want);
  EXPECT_EQ(out.addressable_shards().size(), 8u);
  jax_port::expect_shards_hold_blocks(out, want);
}

// array_test.py JaxArrayTest.test_sharded_zeros_like and test_zeros_like: zeros created in a
// sharding are zero in every shard; without one they live on device 0.
TEST(JaxPortArray, ShardedZeros) {
  NamedSharding s(mesh42(), P("x", "y"));
  Array out = zeros({8, 2}, DType::I32, s);
  EXPECT_EQ(out.sharding(), s);
  EXPECT_EQ(out.addressable_shards().size(), 8u);
  jax_port::expect_shards_hold_blocks(out, std::vector<int32_t>(16, 0));
  Array z = zeros({3}, DType::I32);
  EXPECT_EQ(z.to_vector<int32_t>(), std::vector<int32_t>(3, 0));
  EXPECT_EQ(z.sharding().mesh().size(), 1);
}

// array_test.py JaxArrayTest.test_array_getitem_mesh_pspec_sharding_multi_device and
// test_array_getitem_replicated_multi_device: static slices of sharded and replicated arrays.
TEST(JaxPortArray, GetItemOfShardedAndReplicated) {
  for (const PartitionSpec& spec : {P("x", "y"), P(None)}) {
    SCOPED_TRACE(spec.to_string());
    Array arr = create_array({8, 2}, NamedSharding(mesh42(), spec));
    EXPECT_EQ(slice(arr, {2, 0}, {4, 1}).to_vector<int32_t>(), (std::vector<int32_t>{4, 6}));
    EXPECT_EQ(slice(arr, {0, 0}, {2, 2}).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
  }
  // A slice of a replicated array stays replicated over the same devices.
  Array rep = create_array({8, 2}, NamedSharding(mesh42(), P(None)));
  Array s = slice(rep, {2, 0}, {4, 1});
  EXPECT_TRUE(s.sharding().is_fully_replicated());
  EXPECT_EQ(s.sharding().mesh(), mesh42());
}

// array_test.py JaxArrayTest.test_array_getitem_compile_multi_device_sharding: numpy indexing of
// a (4, 4, 2) array split P('x', 'y', 'z') on a 2x2x2 mesh; values and the result's shard shape
// (JAX's expected shard shapes).
struct GetItemCase {
  std::string name;
  // One entry per leading dimension: an integer index (removes the dimension) or a slice.
  struct Index {
    bool integer;
    int64_t start, stop, step;
  };
  std::vector<Index> index;
  Shape shard_shape;
};

GetItemCase::Index at(int64_t i) { return {true, i, i + 1, 1}; }
GetItemCase::Index sl(int64_t start, int64_t stop, int64_t step = 1) {
  return {false, start, stop, step};
}

class JaxArrayGetItem : public testing::TestWithParam<GetItemCase> {};

TEST_P(JaxArrayGetItem, ValuesAndShardShape) {
  const GetItemCase& c = GetParam();
  Mesh mesh({2, 2, 2}, {"x", "y", "z"});
  const Shape shape{4, 4, 2};
  Array arr = create_array(shape, NamedSharding(mesh, P("x", "y", "z")));
  const std::vector<int32_t> host = iota_i32(32);
  // Apply the index: strided slices, a flip for step -1, then drop integer-indexed dimensions.
  Shape start(3, 0), stop = shape, strides(3, 1);
  std::vector<int> flips, drop;
  for (size_t d = 0; d < c.index.size(); ++d) {
    const auto& ix = c.index[d];
    if (ix.step < 0) {
      flips.push_back(static_cast<int>(d));
      continue;
    }
    start[d] = ix.start;
    stop[d] = std::min(ix.stop, shape[d]);
    strides[d] = ix.step;
    if (ix.integer) drop.push_back(static_cast<int>(d));
  }
  Array out = slice(arr, start, stop, strides);
  if (!flips.empty()) out = flip(out, flips);
  if (!drop.empty()) out = squeeze(out, drop);
  // numpy's answer, element by element.
  std::vector<int32_t> want;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t pos[3] = {i, j, k};
        bool keep = true;
        for (size_t d = 0; d < c.index.size() && keep; ++d) {
          const auto& ix = c.index[d];
          if (ix.step < 0) continue;
          keep = pos[d] >= ix.start && pos[d] < ix.stop && (pos[d] - ix.start) % ix.step == 0;
        }
        if (keep) want.push_back(static_cast<int32_t>((i * 4 + j) * 2 + k));
      }
    }
  }
  if (!flips.empty()) {  // only arr[::-1]: reverse the blocks of dimension 0
    std::vector<int32_t> r;
    for (int64_t i = 3; i >= 0; --i) {
      for (int64_t e = 0; e < 8; ++e) r.push_back(want[static_cast<size_t>(i * 8 + e)]);
    }
    want = r;
  }
  EXPECT_EQ(out.to_vector<int32_t>(), want);
  EXPECT_EQ(out.sharding().mesh().size(), 8);
  EXPECT_EQ(out.sharding().shard_shape(out.shape()), c.shard_shape)
      << "result sharding " << out.sharding().to_string();
}

INSTANTIATE_TEST_SUITE_P(
    JaxPortArray, JaxArrayGetItem,
    testing::Values(
        GetItemCase{"all_last_all", {sl(0, 4), at(3)}, {2, 1}},
        GetItemCase{"scalar_000", {at(0), at(0), at(0)}, {}},
        GetItemCase{"last_last_all", {at(3), at(3)}, {1}},
        GetItemCase{"all_1_0", {sl(0, 4), at(1), at(0)}, {2}},
        GetItemCase{"all_all_all", {sl(0, 4), sl(0, 4), sl(0, 2)}, {2, 2, 1}},
        GetItemCase{"3_all_all", {at(3)}, {2, 1}},
        GetItemCase{"scalar_last", {at(3), at(3), at(1)}, {}},
        GetItemCase{"2_last_all", {at(2), at(3)}, {1}},
        GetItemCase{"scalar_231", {at(2), at(3), at(1)}, {}}, GetItemCase{"last", {at(3)}, {2, 1}},
        GetItemCase{"colon", {sl(0, 4)}, {2, 2, 1}}, GetItemCase{"0_all_all", {at(0)}, {2, 1}},
        GetItemCase{"0_to2_1", {at(0), sl(0, 2), at(1)}, {2}},
        GetItemCase{"all_1_step2", {sl(0, 4), sl(1, 4, 2)}, {2, 2, 1}},
        GetItemCase{"all_lastslice_all", {sl(0, 4), sl(3, 4)}, {2, 1, 1}},
        GetItemCase{"0_6_1", {sl(0, 6, 1)}, {2, 2, 1}}, GetItemCase{"to4", {sl(0, 4)}, {2, 2, 1}},
        GetItemCase{"reversed", {sl(0, 4, -1)}, {2, 2, 1}}, GetItemCase{"1", {at(1)}, {2, 1}}),
    [](const testing::TestParamInfo<GetItemCase>& i) { return i.param.name; });

// array_test.py JaxArrayTest.test_shard_array_to_fully_replicated: an array on device 0 passed
// to jit with in_shardings P() comes out fully replicated.
TEST(JaxPortArray, ShardArrayToFullyReplicated) {
  NamedSharding s(mesh42(), P());
  Array arr = arange(16);
  EXPECT_EQ(arr.sharding(), single_device_sharding(devices()[0]));
  Array out = jit([](const Array& x) { return x * 2; }, {.in_shardings = {s}})(arr);
  EXPECT_TRUE(out.sharding().is_fully_replicated());
  std::vector<int32_t> want = iota_i32(16);
  for (int32_t& v : want) v *= 2;
  EXPECT_EQ(out.to_vector<int32_t>(), want);
}

// array_test.py JaxArrayTest.test_fully_replicated_donated_array_is_deleted: a donated
// argument cannot be used afterwards (JAX: "Array has been deleted").
TEST(JaxPortArray, DonatedArrayIsDeleted) {
  NamedSharding s(mesh42(), P());
  Array arr = arange(16);
  Array copy = arange(16);
  Array out =
      jit([](const Array& x) { return x * 2; }, {.in_shardings = {s}, .donate_argnums = {0}})(arr);
  EXPECT_TRUE(out.sharding().is_fully_replicated());
  std::vector<int32_t> want = copy.to_vector<int32_t>();
  for (int32_t& v : want) v *= 2;
  EXPECT_EQ(out.to_vector<int32_t>(), want);
  EXPECT_PARTIX_ERROR(arr.to_vector<int32_t>(), "donated");
  EXPECT_PARTIX_ERROR(arr + 1, "donated");
}

// array_test.py ShardingTest.test_mesh_pspec_sharding_interface: P('y', 'x') on mesh (4, 2):
// device 0 holds rows [0, 4) and column [0, 1); the tiles are 2 x 4.
TEST(JaxPortArray, MeshPspecShardingInterface) {
  NamedSharding s(mesh42(), P("y", "x"));
  auto m = s.devices_indices_map({8, 4});
  EXPECT_EQ(m[0], (std::vector<Slice>{{0, 4}, {0, 1}}));
  EXPECT_EQ(s.num_blocks(0), 2);
  EXPECT_EQ(s.num_blocks(1), 4);
  // XLA's tile assignment [0, 2, 4, 6, 1, 3, 5, 7]: the device of tile (r, c) is 2c + r.
  for (int64_t k = 0; k < 8; ++k) {
    const int64_t r = k % 2, c = k / 2;
    EXPECT_EQ(m[static_cast<size_t>(k)], (std::vector<Slice>{{4 * r, 4 * r + 4}, {c, c + 1}}));
  }
}

// array_test.py ShardingTest.test_shard_shape: shard shapes of (8, 4) on mesh (4, 2).
class JaxShardShape : public testing::TestWithParam<std::pair<SpecCase, Shape>> {};

TEST_P(JaxShardShape, MatchesJax) {
  EXPECT_EQ(NamedSharding(mesh42(), GetParam().first.spec).shard_shape({8, 4}), GetParam().second);
}

INSTANTIATE_TEST_SUITE_P(
    JaxPortArray, JaxShardShape,
    testing::Values(std::pair{SpecCase{"mesh_x_y", P("x", "y")}, Shape{2, 2}},
                    std::pair{SpecCase{"mesh_x", P("x")}, Shape{2, 4}},
                    std::pair{SpecCase{"mesh_y", P("y")}, Shape{4, 4}},
                    std::pair{SpecCase{"mesh_none_y", P(None, "y")}, Shape{8, 2}},
                    std::pair{SpecCase{"mesh_none_x", P(None, "x")}, Shape{8, 1}},
                    std::pair{SpecCase{"mesh_xy", P(Axes{"x", "y"})}, Shape{1, 4}},
                    std::pair{SpecCase{"mesh_fully_replicated", P()}, Shape{8, 4}}),
    [](const auto& i) { return i.param.first.name; });

// array_test.py ShardingTest.test_uneven_shard_error and test_devices_indices_map_good_error_
// message: JAX refuses shapes that do not divide; partix documents ceil-sized blocks instead
// (block i covers [i c, min(n, (i + 1) c)), c = ceil(n / k)), possibly empty.
TEST(JaxPortArray, UnevenShardShapeUsesCeilBlocks) {
  NamedSharding s(mesh42(), P("x", "y"));
  EXPECT_EQ(s.shard_shape({8, 3}), (Shape{2, 2}));
  auto m = s.devices_indices_map({8, 3});
  EXPECT_EQ(m[1], (std::vector<Slice>{{0, 2}, {2, 3}}));
  Mesh m22({2, 2}, {"x", "y"});
  NamedSharding t(m22, P("x", "y"));
  auto idx = t.devices_indices_map({1, 2});
  EXPECT_EQ(idx[0], (std::vector<Slice>{{0, 1}, {0, 1}}));
  EXPECT_EQ(idx[3], (std::vector<Slice>{{1, 1}, {1, 2}}));  // an empty block
  // device_put of an uneven shape is exact: the value reads back, blocks hold their rows.
  Array a = device_put(iota_f32({8, 3}), s);
  EXPECT_EQ(a.to_vector<float>(), iota_values(24));
  jax_port::expect_shards_hold_blocks(a, iota_values(24));
}

// array_test.py ShardingTest.test_is_compatible_error: a spec longer than the rank is refused.
TEST(JaxPortArray, SpecLongerThanRankIsAnError) {
  Mesh mesh({1, 1, 2}, {"replica", "data", "mdl"});
  NamedSharding s(mesh, P(None, Axes{"mdl"}, None, None));
  EXPECT_PARTIX_ERROR(s.check_shape({8, 2}), "P(None, 'mdl', None, None)");
  EXPECT_PARTIX_ERROR(device_put(iota_f32({8, 2}), s), "P(None, 'mdl', None, None)");
}

// array_test.py ShardingTest.test_scalar_input_wrong_pspec: a scalar takes only P().
TEST(JaxPortArray, ScalarWithSplitSpecIsAnError) {
  Mesh mesh({1}, {"x"});
  NamedSharding s(mesh, P("x"));
  EXPECT_PARTIX_ERROR(s.check_shape({}), "P('x')");
  EXPECT_PARTIX_ERROR(device_put(scalar(1.0f), s), "P('x')");
}

// array_test.py ShardingTest.test_is_fully_replicated_named_sharding: replicated exactly when
// every axis the spec names has size 1.
class JaxIsFullyReplicated
    : public testing::TestWithParam<std::tuple<std::string, Shape, PartitionSpec>> {};

TEST_P(JaxIsFullyReplicated, MatchesJax) {
  const auto& [name, mesh_shape, spec] = GetParam();
  std::vector<std::string> names = mesh_shape.size() == 2 ? std::vector<std::string>{"x", "y"}
                                                          : std::vector<std::string>{"x", "y", "z"};
  Mesh mesh(mesh_shape, names);
  NamedSharding s(mesh, spec);
  bool want = true;
  for (const std::string& a : spec.axes()) want = want && mesh.axis_size(a) == 1;
  EXPECT_EQ(s.is_fully_replicated(), want);
  // The same, seen from the layout: every device holds the whole (8, 2, 4) array.
  bool whole = true;
  for (const auto& idx : s.devices_indices_map({8, 2, 4})) {
    whole = whole && idx == std::vector<Slice>{{0, 8}, {0, 2}, {0, 4}};
  }
  EXPECT_EQ(whole, want);
}

INSTANTIATE_TEST_SUITE_P(
    JaxPortArray, JaxIsFullyReplicated,
    testing::Values(
        std::tuple{"2d_mesh_x", Shape{1, 1}, P("x", "y")},
        std::tuple{"2d_mesh_x_y", Shape{4, 2}, P("x", "y")},
        std::tuple{"2d_mesh_empty", Shape{2, 1}, P()},
        std::tuple{"2d_mesh_p_none", Shape{2, 1}, P(None)},
        std::tuple{"2d_mesh_none_none", Shape{2, 1}, P(None, None)},
        std::tuple{"2d_mesh_tuple_empty", Shape{2, 1}, P(Axes(std::vector<std::string>{}))},
        std::tuple{"2d_mesh_x_none", Shape{2, 1}, P(Axes{"x"}, None)},
        std::tuple{"2d_mesh_xy_none", Shape{2, 1}, P(Axes{"x", "y"}, None)},
        std::tuple{"2d_mesh_x_tuple_empty", Shape{2, 1},
                   P("x", Axes(std::vector<std::string>{}), Axes(std::vector<std::string>{}))},
        std::tuple{"2d_mesh_3_tuple_empty", Shape{2, 1}, P(None, None, None)},
        std::tuple{"3d_mesh2_x_none_none", Shape{1, 2, 4}, P("x", None, None)},
        std::tuple{"3d_mesh2_x_y_none", Shape{1, 1, 4}, P("x", "y", None)},
        std::tuple{"3d_mesh2_xy_none", Shape{1, 1, 4}, P(Axes{"x", "y"}, None)}),
    [](const auto& i) { return std::get<0>(i.param); });

// array_test.py ShardingTest.test_pspec_tuple: an empty tuple entry means None.
TEST(JaxPortArray, EmptyTupleEntryEqualsNone) {
  EXPECT_EQ(P(None, "x", "y", "z"), P(Axes(std::vector<std::string>{}), "x", "y", "z"));
  EXPECT_EQ(P(None, "x", "y", "z")[0], PartitionSpec::Entry{});
}

// array_test.py ShardingTest.test_mesh_str: the mesh prints its axes and sizes (partix's form
// has no axis types: every partix axis is of JAX's Auto kind).
TEST(JaxPortArray, MeshString) {
  EXPECT_EQ(Mesh({2, 2, 2}, {"x", "y", "z"}).to_string(), "Mesh('x': 2, 'y': 2, 'z': 2)");
}

// array_test.py ShardingTest.test_are_shardings_equivalent, the NamedSharding part: equal mesh
// and spec compare equal; a different spec or mesh does not.
TEST(JaxPortArray, NamedShardingEquality) {
  Mesh m1({1}, {"x"}), m2({2, 1}, {"x", "y"});
  EXPECT_EQ(NamedSharding(m2, P("x", "y")), NamedSharding(Mesh({2, 1}, {"x", "y"}), P("x", "y")));
  EXPECT_EQ(NamedSharding(m2, P("x")), NamedSharding(m2, P("x", None)));
  EXPECT_FALSE(NamedSharding(m2, P("x")) == NamedSharding(m2, P("y")));
  EXPECT_FALSE(NamedSharding(m1, P("x")) == NamedSharding(m2, P("x")));
}

// array_test.py RngShardingTest.test_random_bits_is_pure_map_1d and _2d: random values drawn
// under jit for a sharded argument are computed blockwise (no collective, no global-sized
// buffer) and equal the single-device values.
class JaxRandomIsPureMap
    : public testing::TestWithParam<std::tuple<std::string, Shape, PartitionSpec>> {};

TEST_P(JaxRandomIsPureMap, NoCommunicationAndSameValues) {
  const auto& [name, mesh_shape, spec] = GetParam();
  std::vector<std::string> names =
      mesh_shape.size() == 1 ? std::vector<std::string>{"x"} : std::vector<std::string>{"x", "y"};
  Mesh mesh(mesh_shape, names);
  Shape global;
  for (int64_t d : mesh_shape) global.push_back(d * d);
  const int64_t n = jax_port::numel(global);
  auto f = jit(
      [](const Array& x) { return random::randint(random::key(0), x.shape(), 0, 1 << 30) + x; });
  Array x = device_put(from_vector(iota_i32(n), global), NamedSharding(mesh, spec));
  Lowered l = f.lower(x);
  const std::string text = l.as_text();
  for (const char* c : {"all_reduce", "all_gather", "ppermute", "all_to_all"}) {
    EXPECT_EQ(text.find(c), std::string::npos) << c << " in\n" << text;
  }
  // No value of the per-device program has the global shape (an attribute may name it).
  std::string dims;
  for (int64_t d : global) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  EXPECT_FALSE(std::regex_search(text, std::regex("[a-z][0-9]+\\[" + dims + "\\]"))) << text;
  Array y = f(x);
  Array y1 = f(device_put(x, devices()[0]));
  EXPECT_EQ(y.to_vector<int32_t>(), y1.to_vector<int32_t>());
}

INSTANTIATE_TEST_SUITE_P(JaxPortArray, JaxRandomIsPureMap,
                         testing::Values(std::tuple{"1d_3", Shape{3}, P("x")},
                                         std::tuple{"1d_4", Shape{4}, P("x")},
                                         std::tuple{"1d_5", Shape{5}, P("x")},
                                         std::tuple{"2d_3x2_x_none", Shape{3, 2}, P("x", None)},
                                         std::tuple{"2d_3x2_none_y", Shape{3, 2}, P(None, "y")},
                                         std::tuple{"2d_3x2_x_y", Shape{3, 2}, P("x", "y")},
                                         std::tuple{"2d_4x2_x_none", Shape{4, 2}, P("x", None)},
                                         std::tuple{"2d_4x2_none_y", Shape{4, 2}, P(None, "y")},
                                         std::tuple{"2d_4x2_x_y", Shape{4, 2}, P("x", "y")},
                                         std::tuple{"2d_2x3_x_none", Shape{2, 3}, P("x", None)},
                                         std::tuple{"2d_2x3_none_y", Shape{2, 3}, P(None, "y")},
                                         std::tuple{"2d_2x3_x_y", Shape{2, 3}, P("x", "y")}),
                         [](const auto& i) { return std::get<0>(i.param); });

// array_test.py ShardingTest.test_uneven_shard_error, test_devices_indices_map_good_error_message
// and pjit_test.py ArrayPjitTest.test_device_put_sharding_nondivisible_sharding_error, over more
// meshes and shapes: JAX refuses these shapes; partix's documented layout is ceil-sized blocks,
// block b of a dimension of size n split k ways covering [min(n, b c), min(n, (b + 1) c)) with
// c = ceil(n / k). The layout, device_put's shards and an elementwise op and a reduction under
// jit are checked against that rule, computed here.
struct UnevenCase {
  std::string name;
  Shape mesh_shape;
  PartitionSpec spec;
  Shape shape;
};

class JaxUnevenLayout : public testing::TestWithParam<UnevenCase> {};

TEST_P(JaxUnevenLayout, CeilBlocks) {
  const UnevenCase& c = GetParam();
  std::vector<std::string> names{"x", "y", "z"};
  names.resize(c.mesh_shape.size());
  Mesh mesh(c.mesh_shape, names);
  NamedSharding s(mesh, c.spec);
  const size_t nd = c.shape.size();
  Shape nblocks(nd), chunk(nd);
  for (size_t d = 0; d < nd; ++d) {
    nblocks[d] = s.num_blocks(static_cast<int>(d));
    chunk[d] = (c.shape[d] + nblocks[d] - 1) / nblocks[d];
  }
  EXPECT_EQ(s.shard_shape(c.shape), chunk);
  auto idx = s.devices_indices_map(c.shape);
  for (int64_t k = 0; k < mesh.size(); ++k) {
    std::vector<int64_t> coords = mesh.coords(k);
    std::vector<Slice> want(nd);
    for (size_t d = 0; d < nd; ++d) {
      int64_t b = 0;
      for (const std::string& a : c.spec[static_cast<int>(d)]) {
        const int ai = mesh.axis_index(a);
        b = b * mesh.axis_sizes()[static_cast<size_t>(ai)] + coords[static_cast<size_t>(ai)];
      }
      want[d] = {std::min(c.shape[d], b * chunk[d]), std::min(c.shape[d], (b + 1) * chunk[d])};
    }
    EXPECT_EQ(idx[static_cast<size_t>(k)], want) << "mesh position " << k;
  }
  const int64_t n = jax_port::numel(c.shape);
  std::vector<float> host = iota_values(n);
  Array x = device_put(from_vector(host, c.shape), s);
  EXPECT_EQ(x.to_vector<float>(), host);
  jax_port::expect_shards_hold_blocks(x, host);
  // Padding never leaks: x * 2 keeps every value, the sum counts each element once.
  Array y = jit([](const Array& v) { return v * 2.0f; })(x);
  EXPECT_EQ(y.sharding(), s);
  EXPECT_EQ(y.to_vector<float>(), iota_values(n, 2.0f));
  EXPECT_EQ(jit([](const Array& v) { return sum(v); })(x).item<float>(),
            static_cast<float>(n * (n - 1) / 2));
}

INSTANTIATE_TEST_SUITE_P(
    JaxPortArray, JaxUnevenLayout,
    testing::Values(UnevenCase{"x4_of_30", {4}, P("x"), {30}},
                    UnevenCase{"x2_of_1", {2}, P("x"), {1}},
                    UnevenCase{"x8_of_3", {8}, P("x"), {3}},
                    UnevenCase{"xy_of_8x3", {4, 2}, P("x", "y"), {8, 3}},
                    UnevenCase{"xy_of_1x2", {2, 2}, P("x", "y"), {1, 2}},
                    UnevenCase{"x_of_3x2", {2}, P("x", None), {3, 2}},
                    UnevenCase{"xy_merged_of_13", {4, 2}, P(Axes{"x", "y"}), {13, 4}},
                    UnevenCase{"none_y_of_7x5", {4, 2}, P(None, "y"), {7, 5}},
                    UnevenCase{"z_xy_of_5x7", {2, 2, 2}, P("z", Axes{"x", "y"}), {5, 7}},
                    UnevenCase{"yx_of_7x9", {4, 2}, P("y", "x"), {7, 9}}),
    [](const testing::TestParamInfo<UnevenCase>& i) { return i.param.name; });
