// Reshapes that split or merge a sharded dimension stay sharded with no communication: the
// mesh axis is split into sub-axes (Shardy's 'data:(1)4', 'data:(4)2'). Golden partitions,
// layouts of sub-axis shardings, resharding between them, and equivalence with the unsharded
// run for even and uneven shapes.
#include "spmd_test_util.h"

using namespace partix;
using testing_util::count_op;
using testing_util::partition_text;

TEST(SubAxes, ReshapeSplittingAShardedDimensionMovesNothing) {
  const std::string out = partition_text(
      "program @f mesh<'data': 8> (%0: f32[64,32] P('data')) -> (%2) {\n"
      "  %1 = reshape(%0) {shape=[4,16,32]} : f32[4,16,32]\n"
      "  %2 = reduce_sum(%1) {axes=[2]} : f32[4,16]\n"
      "}\n");
  EXPECT_EQ(out,
            "program @f mesh<'data': 8> (%0: f32[8,32] P('data')) -> (%2) {\n"
            "  %1 = reshape(%0) {shape=[1,8,32]} : f32[1,8,32] P('data:(1)4', 'data:(4)2')\n"
            "  %2 = reduce_sum(%1) {axes=[2]} : f32[1,8] P('data:(1)4', 'data:(4)2')\n"
            "}\n");
}

TEST(SubAxes, MergingTheSubAxesBackGivesTheWholeAxis) {
  const std::string out = partition_text(
      "program @f mesh<'data': 8> (%0: f32[64,32] P('data')) -> (%3) {\n"
      "  %1 = reshape(%0) {shape=[4,16,32]} : f32[4,16,32]\n"
      "  %2 = tanh(%1) : f32[4,16,32]\n"
      "  %3 = reshape(%2) {shape=[64,32]} : f32[64,32]\n"
      "}\n",
      {P("data")});
  EXPECT_EQ(count_op(out, "all_gather") + count_op(out, "all_to_all") +
                count_op(out, "all_reduce") + count_op(out, "ppermute"),
            0)
      << out;
  EXPECT_NE(out.find("%3 = reshape(%2) {shape=[8,32]} : f32[8,32] P('data')"), std::string::npos)
      << out;
}

TEST(SubAxes, LayoutOfASubAxisSharding) {
  Mesh m = make_mesh({8}, {"data"});
  NamedSharding s(m, P("data:(1)4", "data:(4)2"));
  EXPECT_EQ(s.shard_shape({4, 16}), (Shape{1, 8}));
  for (int64_t k = 0; k < 8; ++k) {
    auto idx = s.device_index({4, 16}, k);
    EXPECT_EQ(idx[0].start, k / 2) << k;
    EXPECT_EQ(idx[1].start, 8 * (k % 2)) << k;
    EXPECT_EQ(s.replica_id(k), 0);
  }
  EXPECT_EQ(m.axis_size("data:(4)2"), 2);
  EXPECT_EQ(m.axis_coord({5}, "data:(1)4"), 2);
  EXPECT_EQ(m.axis_coord({5}, "data:(4)2"), 1);
  // Adjacent parts of one axis in one dimension are that axis.
  EXPECT_EQ(NamedSharding(m, P(Axes{"data:(1)4", "data:(4)2"})), NamedSharding(m, P("data")));
  // Replicas over the part a sharding leaves unused.
  NamedSharding half(m, P("data:(1)4"));
  EXPECT_EQ(half.num_replicas(), 2);
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(half.replica_id(k), k % 2) << k;
  // Overlapping parts are an axis used twice; malformed parts are not axes.
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("data", "data:(4)2")), "used twice");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("data:(1)4", "data:(2)2")), "used twice");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("data:(3)2")), "is not in");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("data:(1)16")), "is not in");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("model:(1)2")), "is not in");
  EXPECT_NO_THROW(NamedSharding(m, P("data:(1)2", "data:(4)2")));
}

TEST(SubAxes, DevicePutAndReshardBetweenAxesAndTheirParts) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  std::vector<float> v(8 * 12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Array a = from_vector(v, {8, 12});
  const std::vector<PartitionSpec> specs = {
      P("x"), P("x:(1)2", "x:(2)2"), P("x:(2)2", "y"), P(Axes{"y", "x:(1)2"}, "x:(2)2"),
      P(None, Axes{"x:(2)2", "y"}), P("y", "x:(1)2"), P()};
  for (const auto& from : specs) {
    Array s = device_put(a, NamedSharding(m, from));
    EXPECT_EQ(s.to_vector<float>(), v) << from.to_string();
    for (const auto& to : specs) {
      Array t = jit([](const Array& u) { return u + 0.0f; },
                    {.out_shardings = {NamedSharding(m, to)}})(s);
      EXPECT_EQ(t.sharding(), NamedSharding(m, to));
      EXPECT_EQ(t.to_vector<float>(), v) << from.to_string() << " -> " << to.to_string();
    }
  }
}

TEST(SubAxes, SplitAndMergeReshapesMatchTheUnshardedRun) {
  struct Case {
    Shape in, mid;
    Shape mesh;
    std::vector<std::string> names;
    PartitionSpec spec;
  };
  const std::vector<Case> cases = {
      {{64, 32}, {4, 16, 32}, {8}, {"d"}, P("d")},
      {{64, 32}, {2, 32, 32}, {8}, {"d"}, P("d")},
      {{64, 6}, {8, 8, 2, 3}, {4, 2}, {"x", "y"}, P(Axes{"x", "y"})},
      {{4, 16, 32}, {64, 32}, {4, 2}, {"x", "y"}, P("x", "y")},
      {{16, 12}, {4, 4, 12}, {2, 4}, {"x", "y"}, P(Axes{"y", "x"})},
      // Uneven: 60 rows over 8 devices, reshaped to [4, 15, 32] and [6, 10, 32].
      {{60, 32}, {4, 15, 32}, {8}, {"d"}, P("d")},
      {{60, 32}, {6, 10, 32}, {8}, {"d"}, P("d")},
      {{30, 7}, {5, 6, 7}, {4, 2}, {"x", "y"}, P("x", "y")},
  };
  for (const Case& c : cases) {
    Mesh m(c.mesh, c.names);
    Array x = random::normal(random::key(3), c.in);
    auto f = [&](const Array& a) {
      Array y = reshape(a, c.mid);
      Array s = sum(tanh(y), {static_cast<int>(c.mid.size()) - 1}, true);
      return reshape(y * s, c.in);
    };
    const std::vector<float> want = f(x).to_vector<float>();
    Array xs = device_put(x, NamedSharding(m, c.spec));
    const std::vector<float> got = jit(f)(xs).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4f) << shape_to_string(c.in) << " -> " << shape_to_string(c.mid)
                                          << " on " << c.spec.to_string() << " at " << i;
    }
  }
}

TEST(SubAxes, CollectivesOverASubAxisGroup) {
  // A sum over the split dimension's minor part is an all_reduce over 'd:(4)2' only.
  Mesh m = make_mesh({8}, {"d"});
  Array x = device_put(random::normal(random::key(4), {64, 8}), NamedSharding(m, P("d")));
  auto f = jit([](const Array& a) { return sum(reshape(a, {4, 16, 8}), {1}); },
               {.out_shardings = {NamedSharding(m, P("d:(1)4"))}});
  Lowered l = f.lower(x);
  EXPECT_NE(l.as_text().find("all_reduce(%"), std::string::npos) << l.as_text();
  EXPECT_NE(l.as_text().find("axes=['d:(4)2'], group=2"), std::string::npos) << l.as_text();
  std::vector<float> want = sum(reshape(device_put(x, devices()[0]), {4, 16, 8}), {1}).to_vector<float>();
  std::vector<float> got = f(x).to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4f) << i;
  // The cost counts the group of 2: 2 (n-1)/n of the local [1, 8] f32 result.
  EXPECT_DOUBLE_EQ(l.cost_analysis().bytes_per_device["all_reduce"], 2 * 0.5 * 32);
}

TEST(SubAxes, ProgramTextWithSubAxesParsesAndPartitions) {
  // An argument already in sub-axis layout reshaped back: no collective.
  const std::string out = partition_text(
      "program @f mesh<'data': 8> (%0: f32[4,16,32] P('data:(1)4', 'data:(4)2')) -> (%1) {\n"
      "  %1 = reshape(%0) {shape=[64,32]} : f32[64,32]\n"
      "}\n",
      {P("data")});
  EXPECT_EQ(out,
            "program @f mesh<'data': 8> (%0: f32[1,8,32] P('data:(1)4', 'data:(4)2')) -> (%1) {\n"
            "  %1 = reshape(%0) {shape=[8,32]} : f32[8,32] P('data')\n"
            "}\n");
}
