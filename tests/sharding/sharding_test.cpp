#include "test_util.h"

using namespace partix;

namespace {

Mesh mesh42() { return Mesh({4, 2}, {"x", "y"}); }

// Independent oracle for the block layout: on mesh (4,2) the device at (i,j) is 2i+j; a dimension
// split k ways uses chunk ceil(n/k); block b covers [b*c, min(n,(b+1)*c)).
Slice oracle_slice(int64_t n, int64_t k, int64_t b) {
  int64_t c = (n + k - 1) / k;
  return Slice{std::min(n, b * c), std::min(n, (b + 1) * c)};
}

struct Case {
  PartitionSpec spec;
  // Block index and block count of dimension d for the device at (i, j).
  std::function<std::pair<int64_t, int64_t>(int d, int64_t i, int64_t j)> block;
};

std::vector<Case> cases42() {
  return {
      {P("x", "y"), [](int d, int64_t i, int64_t j) {
         return d == 0 ? std::pair<int64_t, int64_t>{i, 4} : std::pair<int64_t, int64_t>{j, 2};
       }},
      {P("x"), [](int d, int64_t i, int64_t) {
         return d == 0 ? std::pair<int64_t, int64_t>{i, 4} : std::pair<int64_t, int64_t>{0, 1};
       }},
      {P("y"), [](int d, int64_t, int64_t j) {
         return d == 0 ? std::pair<int64_t, int64_t>{j, 2} : std::pair<int64_t, int64_t>{0, 1};
       }},
      {P(None, "y"), [](int d, int64_t, int64_t j) {
         return d == 1 ? std::pair<int64_t, int64_t>{j, 2} : std::pair<int64_t, int64_t>{0, 1};
       }},
      {P(Axes{"x", "y"}), [](int d, int64_t i, int64_t j) {
         return d == 0 ? std::pair<int64_t, int64_t>{2 * i + j, 8}
                       : std::pair<int64_t, int64_t>{0, 1};
       }},
      {P(), [](int, int64_t, int64_t) { return std::pair<int64_t, int64_t>{0, 1}; }},
  };
}

// The replica id: row-major index over the mesh axes the spec does not use.
int oracle_replica(const PartitionSpec& spec, int64_t i, int64_t j) {
  auto axes = spec.axes();
  bool ux = std::find(axes.begin(), axes.end(), "x") != axes.end();
  bool uy = std::find(axes.begin(), axes.end(), "y") != axes.end();
  if (ux && uy) return 0;
  if (ux) return static_cast<int>(j);
  if (uy) return static_cast<int>(i);
  return static_cast<int>(2 * i + j);
}

}  // namespace

TEST(PartitionSpec, PrintingAndEquality) {
  EXPECT_EQ(P("data", None).to_string(), "P('data', None)");
  EXPECT_EQ(P(None, "model").to_string(), "P(None, 'model')");
  EXPECT_EQ(P(Axes{"data", "model"}).to_string(), "P(('data', 'model'))");
  EXPECT_EQ(P().to_string(), "P()");
  EXPECT_EQ(P("x", None), P("x"));
  EXPECT_EQ(P(Axes{"x"}), P("x"));
  EXPECT_FALSE(P("x", "y") == P("y", "x"));
  EXPECT_FALSE(P(Axes{"x", "y"}) == P("x", "y"));
  EXPECT_EQ(P(std::string("x"))[0], (PartitionSpec::Entry{"x"}));
  EXPECT_TRUE(P("x")[5].empty());
}

TEST(NamedSharding, ShardShapesIndicesAndReplicaIdsEvenAndUneven) {
  Mesh m = mesh42();
  for (const Shape& shape : {Shape{8, 4}, Shape{13, 5}, Shape{1, 1}, Shape{16, 2}, Shape{3, 7}}) {
    for (const Case& c : cases42()) {
      NamedSharding s(m, c.spec);
      SCOPED_TRACE(c.spec.to_string() + " on " + shape_to_string(shape));
      auto map = s.devices_indices_map(shape);
      ASSERT_EQ(map.size(), 8u);
      Shape expect_shard(2);
      for (int d = 0; d < 2; ++d) {
        int64_t k = c.block(d, 0, 0).second;
        expect_shard[static_cast<size_t>(d)] = (shape[static_cast<size_t>(d)] + k - 1) / k;
      }
      EXPECT_EQ(s.shard_shape(shape), expect_shard);
      for (int64_t i = 0; i < 4; ++i) {
        for (int64_t j = 0; j < 2; ++j) {
          int64_t dev = 2 * i + j;
          for (int d = 0; d < 2; ++d) {
            auto [b, k] = c.block(d, i, j);
            EXPECT_EQ(map[static_cast<size_t>(dev)][static_cast<size_t>(d)],
                      oracle_slice(shape[static_cast<size_t>(d)], k, b))
                << "device " << dev << " dim " << d;
          }
          EXPECT_EQ(s.replica_id(dev), oracle_replica(c.spec, i, j)) << "device " << dev;
        }
      }
      EXPECT_EQ(s.is_fully_replicated(), c.spec == P());
    }
  }
}

TEST(NamedSharding, UnevenBlocksFollowTheCeilRule) {
  Mesh m = mesh42();
  // 13 over 4 gives blocks 4, 4, 4, 1.
  auto map = NamedSharding(m, P("x")).devices_indices_map({13});
  std::vector<int64_t> sizes;
  for (int k = 0; k < 8; k += 2) sizes.push_back(map[static_cast<size_t>(k)][0].size());
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 4, 1}));
  EXPECT_EQ(NamedSharding(m, P("x")).shard_shape({13}), (Shape{4}));
  // 1 over 2 gives an empty second block.
  auto map2 = NamedSharding(m, P("y")).devices_indices_map({1});
  EXPECT_EQ(map2[0][0], (Slice{0, 1}));
  EXPECT_EQ(map2[1][0], (Slice{1, 1}));
  EXPECT_EQ(map2[1][0].size(), 0);
  // 5 over 4: chunk 2 gives blocks 2, 2, 1, 0.
  auto map3 = NamedSharding(m, P("x")).devices_indices_map({5});
  EXPECT_EQ(map3[4][0], (Slice{4, 5}));
  EXPECT_EQ(map3[6][0], (Slice{5, 5}));
}

TEST(NamedSharding, FullyReplicatedWhenSplitAxesHaveSizeOne) {
  Mesh m({1, 8}, {"a", "b"});
  EXPECT_TRUE(NamedSharding(m, P("a")).is_fully_replicated());
  EXPECT_FALSE(NamedSharding(m, P("b")).is_fully_replicated());
}

TEST(NamedSharding, PrintingAndEquality) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  NamedSharding s(m, P("data", None));
  EXPECT_EQ(s.to_string(), "NamedSharding(Mesh('data': 4, 'model': 2), P('data', None))");
  EXPECT_EQ(s, NamedSharding(m, P("data")));
  EXPECT_FALSE(s == NamedSharding(m, P("model")));
  EXPECT_FALSE(s == NamedSharding(Mesh({2, 4}, {"data", "model"}), P("data")));
}

TEST(NamedSharding, ReducedAxesAreATypeOverReplicatedStorage) {
  Mesh m = mesh42();
  NamedSharding r(m, P("y"), {}, {"x"});
  EXPECT_EQ(r.to_string(), "NamedSharding(Mesh('x': 4, 'y': 2), P('y'), reduced={'x'})");
  EXPECT_FALSE(r == NamedSharding(m, P("y")));
  EXPECT_EQ(r.layout(), NamedSharding(m, P("y")));
  EXPECT_EQ(r.shard_shape({8, 6}), (Shape{4, 6}));
  EXPECT_EQ(r.num_replicas(), 4);  // stored on every device of 'x'
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("x"), {}, {"x"}), "[NamedSharding]",
                      "'x' is both reduced and used");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P(), {"x"}, {"x"}), "[NamedSharding]",
                      "'x' is both reduced and used");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P(), {}, {"q"}), "[NamedSharding]", "reduced axis 'q'");
  // Placing values as reduced moves nothing: each device holds the whole value.
  Mesh e = make_mesh({4, 2}, {"x", "y"}, {AxisType::Explicit, AxisType::Explicit});
  Array v = from_vector<float>({1, 2, 3, 4}, {4});
  Array a = device_put(v, NamedSharding(e, P()));
  Array b = device_put(a, NamedSharding(e, P(), {}, {"x", "y"}));
  EXPECT_EQ(b.sharding(), NamedSharding(e, P(), {}, {"x", "y"}));
  for (const Shard& s : b.addressable_shards()) {
    EXPECT_EQ(s.data.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  }
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(NamedSharding, BadInput) {
  Mesh m = mesh42();
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("q")), "[NamedSharding]", "mesh axis 'q'",
                      "Mesh('x': 4, 'y': 2)");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("x", "x")), "[NamedSharding]", "'x' is used twice");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P(Axes{"x", "y"}, "y")), "[NamedSharding]",
                      "'y' is used twice");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P(Axes{"x", "x"})), "[NamedSharding]", "'x' is used twice");
  NamedSharding s(m, P("x", "y"));
  EXPECT_PARTIX_ERROR(s.shard_shape({8}), "[NamedSharding]", "P('x', 'y')", "rank 1");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("x")).shard_shape({}), "[NamedSharding]", "scalar");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P(None)).shard_shape({}), "[NamedSharding]", "scalar");
  EXPECT_PARTIX_ERROR(PartitionSpec({{""}}), "[PartitionSpec]", "empty axis name");
}
