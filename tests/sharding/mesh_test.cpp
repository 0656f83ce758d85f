#include "test_util.h"

using namespace partix;

TEST(Mesh, RowMajorDevicesAndCoords) {
  Mesh m({4, 2}, {"x", "y"});
  EXPECT_EQ(m.size(), 8);
  EXPECT_EQ(m.axis_size("x"), 4);
  EXPECT_EQ(m.axis_size("y"), 2);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 2; ++j) {
      int k = 2 * i + j;
      EXPECT_EQ(m.devices()[static_cast<size_t>(k)].id, k);
      EXPECT_EQ(m.coords(k), (std::vector<int64_t>{i, j}));
    }
  }
  EXPECT_EQ(m.to_string(), "Mesh('x': 4, 'y': 2)");
  EXPECT_EQ(make_mesh({4, 2}, {"data", "model"}).to_string(), "Mesh('data': 4, 'model': 2)");
}

TEST(Mesh, ExplicitDevicesAndEquality) {
  Mesh a({2}, {"x"}, {Device{5}, Device{2}});
  EXPECT_EQ(a.device_ids(), (std::vector<int>{5, 2}));
  EXPECT_EQ(a.position_of(2), 1);
  EXPECT_EQ(a.position_of(0), -1);
  EXPECT_TRUE(a == Mesh({2}, {"x"}, {Device{5}, Device{2}}));
  EXPECT_FALSE(a == Mesh({2}, {"x"}, {Device{2}, Device{5}}));
  EXPECT_FALSE(Mesh({2}, {"x"}) == Mesh({2}, {"y"}));
  EXPECT_TRUE(Mesh({4, 2}, {"x", "y"}) == make_mesh({4, 2}, {"x", "y"}));
}

TEST(Mesh, BadInput) {
  EXPECT_PARTIX_ERROR(Mesh({4, 2}, {"x"}), "[Mesh]", "2 axis sizes", "1 axis names");
  EXPECT_PARTIX_ERROR(Mesh({4, 4}, {"x", "y"}), "[Mesh]", "16 devices", "8");
  EXPECT_PARTIX_ERROR(Mesh({2}, {"x"}, {Device{1}, Device{1}}), "[Mesh]", "device 1 appears twice");
  EXPECT_PARTIX_ERROR(Mesh({2}, {"x"}, {Device{1}, Device{9}}), "[Mesh]", "device 9");
  EXPECT_PARTIX_ERROR(Mesh({2}, {"x"}, {Device{1}}), "[Mesh]", "2 devices", "1 were given");
  EXPECT_PARTIX_ERROR(Mesh({0, 2}, {"x", "y"}), "[Mesh]", "'x'", "size 0");
  EXPECT_PARTIX_ERROR(Mesh({2, -1}, {"x", "y"}), "[Mesh]", "'y'", "size -1");
  EXPECT_PARTIX_ERROR(Mesh({2, 2}, {"x", "x"}), "[Mesh]", "'x' appears twice");
  EXPECT_PARTIX_ERROR(Mesh({2}, {""}), "[Mesh]", "empty name");
  EXPECT_PARTIX_ERROR(Mesh({2}, {"x"}).axis_size("z"), "[Mesh.axis_size]", "'z'");
}

TEST(Mesh, DifferentMeshesNeverPrintTheSame) {
  std::vector<Device> reversed(devices().rbegin(), devices().rend());
  Mesh r({8}, {"x"}, reversed);
  EXPECT_EQ(r.to_string(), "Mesh('x': 8, devices=[7,6,5,4,3,2,1,0])");
  EXPECT_EQ(Mesh({2}, {"x"}, {Device{5}, Device{2}}).to_string(), "Mesh('x': 2, devices=[5,2])");
  // The error for arguments on two meshes tells them apart.
  Array a = device_put(ones({8}), NamedSharding(make_mesh({8}, {"x"}), P("x")));
  Array b = device_put(ones({8}), NamedSharding(r, P("x")));
  EXPECT_PARTIX_ERROR(jit([](const Array& u, const Array& v) { return u + v; })(a, b),
                      "Mesh('x': 8)", "Mesh('x': 8, devices=[7,6,5,4,3,2,1,0])");
  // Eager ops on the two meshes compile separately (device order differs): each result
  // lives on its operand's mesh.
  EXPECT_TRUE((a * 2.0f).sharding().mesh() == a.sharding().mesh());
  EXPECT_TRUE((b * 2.0f).sharding().mesh() == r);
  EXPECT_EQ((b * 2.0f).to_vector<float>(), std::vector<float>(8, 2.0f));
}
