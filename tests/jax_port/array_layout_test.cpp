// Device layouts of NamedShardings against JAX (tools/golden/sharding_layouts.py): shard
// shapes, is_fully_replicated, devices_indices_map, and device_put's addressable shards
// (device, index, replica id, data) for every mesh and spec of the golden file, including
// meshes whose devices are not in order.
//
// Ported from JAX's tests/array_test.py: JaxArrayTest.test_array_2d_shard,
// test_jax_array_value, ShardingTest.test_shard_shape, test_op_sharding_indices,
// test_is_fully_replicated_named_sharding and test_mesh_pspec_sharding_interface, run over the
// golden file's meshes and specs.
#include <cctype>

#include "jax_port/jax_port_util.h"

using namespace partix;

namespace {

const nlohmann::json& golden() {
  static const nlohmann::json g = jax_port::load_golden("sharding_layouts.json");
  return g;
}

Mesh mesh_of(const nlohmann::json& m) {
  std::vector<Device> devs;
  for (int id : m["devices"].get<std::vector<int>>())
    devs.push_back(devices()[static_cast<size_t>(id)]);
  return Mesh(m["shape"].get<Shape>(), m["names"].get<std::vector<std::string>>(), devs);
}

std::vector<Slice> slices_of(const nlohmann::json& index) {
  std::vector<Slice> out;
  for (const auto& s : index) out.push_back(Slice{s[0].get<int64_t>(), s[1].get<int64_t>()});
  return out;
}

std::string case_name(const nlohmann::json& c, size_t i) {
  std::string s = "case" + std::to_string(i) + "_mesh";
  for (int64_t d : c["mesh"]["shape"].get<Shape>()) s += "_" + std::to_string(d);
  s += "_P";
  for (const auto& e : c["spec"]) {
    s += "_";
    if (e.is_null())
      s += "None";
    else if (e.is_string())
      s += e.get<std::string>();
    else
      for (const auto& a : e) s += a.get<std::string>();
  }
  s += "_shape";
  for (int64_t d : c["shape"].get<Shape>()) s += "_" + std::to_string(d);
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

class ArrayLayoutVsJax : public testing::TestWithParam<size_t> {};

TEST_P(ArrayLayoutVsJax, MatchesJax) {
  const nlohmann::json& c = jax_port::golden_list(golden(), "cases")[GetParam()];
  Mesh mesh = mesh_of(c["mesh"]);
  NamedSharding s(mesh, jax_port::spec_from_json(c["spec"]));
  const Shape shape = c["shape"].get<Shape>();
  EXPECT_EQ(s.shard_shape(shape), c["shard_shape"].get<Shape>());
  EXPECT_EQ(s.is_fully_replicated(), c["fully_replicated"].get<bool>());
  auto indices = s.devices_indices_map(shape);
  const auto& shards = c["shards"];
  ASSERT_EQ(indices.size(), shards.size());
  std::map<int, const nlohmann::json*> by_device;
  for (size_t k = 0; k < shards.size(); ++k) {
    EXPECT_EQ(mesh.devices()[k].id, shards[k]["device"].get<int>());
    EXPECT_EQ(indices[k], slices_of(shards[k]["index"])) << "mesh position " << k;
    EXPECT_EQ(s.replica_id(static_cast<int64_t>(k)), shards[k]["replica_id"].get<int>())
        << "mesh position " << k;
    by_device[shards[k]["device"].get<int>()] = &shards[k];
  }
  // device_put of np.arange(n): every shard holds its block, with JAX's index and replica id.
  std::vector<int32_t> host(static_cast<size_t>(jax_port::numel(shape)));
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int32_t>(i);
  Array x = device_put(from_vector(host, shape), s);
  EXPECT_EQ(x.sharding(), s);
  EXPECT_EQ(x.to_vector<int32_t>(), host);
  std::vector<Shard> got = x.addressable_shards();
  ASSERT_EQ(got.size(), shards.size());
  for (const Shard& sh : got) {
    ASSERT_TRUE(by_device.count(sh.device.id)) << "device " << sh.device.id;
    const nlohmann::json& want = *by_device[sh.device.id];
    EXPECT_EQ(sh.index, slices_of(want["index"])) << "device " << sh.device.id;
    EXPECT_EQ(sh.replica_id, want["replica_id"].get<int>()) << "device " << sh.device.id;
    EXPECT_EQ(sh.data.shape(), c["shard_shape"].get<Shape>());
    EXPECT_EQ(sh.data.to_vector<int32_t>(), jax_port::host_block(host, shape, sh.index))
        << "device " << sh.device.id;
  }
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v(jax_port::golden_list(golden(), "cases").size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(JaxPortArray, ArrayLayoutVsJax, testing::ValuesIn(case_indices()),
                         [](const testing::TestParamInfo<size_t>& i) {
                           return case_name(jax_port::golden_list(golden(), "cases")[i.param],
                                            i.param);
                         });

}  // namespace

TEST(JaxPortArray, LayoutGoldenFileLoads) {
  EXPECT_GT(jax_port::golden_list(golden(), "cases").size(), 100u)
      << "tests/golden/jax_port/sharding_layouts.json is missing or unreadable: regenerate it "
         "with tools/golden/sharding_layouts.py";
}
