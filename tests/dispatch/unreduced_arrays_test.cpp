// Unreduced Arrays in the C++ API: each device of an unreduced axis holds a partial sum and the
// array's value is their sum. device_put makes them (one device of each group keeps the value),
// jit returns the partial sums of a split contraction, reading the value needs a reshard first,
// and moving to another mesh sums on the way.
#include "test_util.h"

using namespace partix;

namespace {

Mesh explicit_mesh(std::vector<int64_t> shape, std::vector<std::string> names) {
  return make_mesh(shape, names, std::vector<AxisType>(shape.size(), AxisType::Explicit));
}

std::vector<float> block(const Shard& s) { return s.data.to_vector<float>(); }

}  // namespace

TEST(UnreducedArrays, DevicePutKeepsTheValueOnOneDeviceOfEachGroup) {
  Mesh m = explicit_mesh({2}, {"x"});
  Array x = from_vector<float>({1, 2, 3, 4}, {4});
  Array u = device_put(x, NamedSharding(m, P(), {"x"}));
  EXPECT_EQ(u.sharding(), NamedSharding(m, P(), {"x"}));
  auto shards = u.addressable_shards();
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(block(shards[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(block(shards[1]), (std::vector<float>{0, 0, 0, 0}));
  // The value is the sum of the blocks: read it after reducing.
  EXPECT_PARTIX_ERROR(u.to_vector<float>(), "[Array]", "is unreduced");
  EXPECT_EQ(device_put(u, NamedSharding(m, P())).to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
  // Onto another mesh: summed on its own mesh first, exactly.
  Mesh other = explicit_mesh({4, 2}, {"a", "b"});
  EXPECT_EQ(device_put(u, NamedSharding(other, P("a"))).to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
}

TEST(UnreducedArrays, JitReturnsTheContractionsPartialSums) {
  Mesh m = explicit_mesh({2}, {"x"});
  // [2,4] @ [4,2] with the contraction split over 'x': device k holds columns/rows 2k..2k+1.
  Array a = device_put(from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4}),
                       NamedSharding(m, P(None, "x")));
  Array b = device_put(from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2}),
                       NamedSharding(m, P("x", None)));
  MeshContext ctx(m);
  auto f = jit([](const Array& p, const Array& q) {
    return matmul(p, q, OutSharding{P(), {"x"}});
  });
  Array u = f(a, b);
  EXPECT_EQ(u.sharding(), NamedSharding(m, P(), {"x"}));
  auto shards = u.addressable_shards();
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(block(shards[0]), (std::vector<float>{2, 3, 10, 19}));
  EXPECT_EQ(block(shards[1]), (std::vector<float>{26, 31, 66, 79}));
  EXPECT_EQ(reshard(u, NamedSharding(m, P())).to_vector<float>(),
            (std::vector<float>{28, 34, 76, 98}));
  // A jit taking them: linear ops keep them, a nonlinear one is refused by name.
  Array twice = jit([](const Array& v) { return v * 2.0; })(u);
  EXPECT_EQ(twice.sharding(), NamedSharding(m, P(), {"x"}));
  EXPECT_EQ(reshard(twice, NamedSharding(m, P())).to_vector<float>(),
            (std::vector<float>{56, 68, 152, 196}));
  EXPECT_PARTIX_ERROR(jit([](const Array& v) { return sin(v); })(u), "[sin]",
                      "unreduced rule for sin is not implemented");
}
