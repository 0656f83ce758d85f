// The API a JAX user reaches for: mesh context with bare specs, sharded creation and random
// draws, make_array_from_callback, trees (tree_map, paths, device_put of trees), and the ops
// roll, %, //, *_in_dim and all-axes reductions with kept dimensions, each sharded on 8
// devices against the one-device result.
#include <functional>
#include <thread>

#include "test_util.h"

using namespace partix;

namespace {
std::vector<float> values(const Array& a) { return astype(a, DType::F32).to_vector<float>(); }
}  // namespace

TEST(Ergonomics, MeshContextAcceptsBareSpecs) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  EXPECT_PARTIX_ERROR(NamedSharding s = P("data"), "needs a mesh", "MeshContext");
  {
    MeshContext ctx(m);
    Array x = device_put(arange(16, DType::F32), P("data"));
    EXPECT_EQ(x.sharding(), NamedSharding(m, P("data")));
    auto f = jit([](const Array& a) { return with_sharding_constraint(a * 2.0f, P("model")); },
                 {.out_shardings = {P(Axes{"data", "model"})}});
    Array y = f(x);
    EXPECT_EQ(y.sharding(), NamedSharding(m, P(Axes{"data", "model"})));
    EXPECT_EQ(y.to_vector<float>()[15], 30.0f);
    // Nested contexts: the innermost wins.
    Mesh m8 = make_mesh({8}, {"x"});
    MeshContext inner(m8);
    EXPECT_EQ(current_mesh(), m8);
  }
  EXPECT_FALSE(has_current_mesh());
  set_mesh(m);
  EXPECT_EQ(NamedSharding(P("model")), NamedSharding(m, P("model")));
  clear_mesh();
}

TEST(Ergonomics, ShardedRandomDrawsEqualUnshardedOnesAndStayBlockwise) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  Array k = random::key(11);
  Array want = random::normal(k, {100, 30});
  Array got = random::normal(k, {100, 30}, DType::F32, NamedSharding(m, P("data", "model")));
  EXPECT_EQ(got.sharding(), NamedSharding(m, P("data", "model")));
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
  EXPECT_EQ(random::uniform(k, {33}, DType::F32, -1, 1, NamedSharding(m, P("data"))).to_vector<float>(),
            random::uniform(k, {33}, DType::F32, -1, 1).to_vector<float>());
  EXPECT_EQ(random::randint(k, {9, 8}, 0, 50, DType::I32, NamedSharding(m, P(None, "data")))
                .to_vector<int32_t>(),
            random::randint(k, {9, 8}, 0, 50).to_vector<int32_t>());
}

TEST(Ergonomics, MakeArrayFromCallbackBuildsBlockByBlock) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  int calls = 0;
  Array a = make_array_from_callback({10, 6}, NamedSharding(m, P("data")),
                                     [&](const std::vector<Slice>& idx) {
                                       calls++;
                                       std::vector<float> v;
                                       for (int64_t i = idx[0].start; i < idx[0].stop; ++i)
                                         for (int64_t j = idx[1].start; j < idx[1].stop; ++j)
                                           v.push_back(static_cast<float>(10 * i + j));
                                       return from_vector(v, {idx[0].size(), idx[1].size()});
                                     });
  EXPECT_EQ(calls, 4);  // one per distinct block (the 'model' replicas share theirs)
  std::vector<float> got = a.to_vector<float>();
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(got[static_cast<size_t>(6 * i + j)], 10.0f * i + j);
  EXPECT_PARTIX_ERROR(make_array_from_callback({10, 6}, NamedSharding(m, P("data")),
                                               [](const std::vector<Slice>&) { return ones({2}); }),
                      "[make_array_from_callback]", "Expected shard shape (3, 6) doesn't match",
                      "array shape (2,)");
}

TEST(Ergonomics, HostValuesGoStraightToTheirDevices) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  const NamedSharding s(m, P("data", "model"));
  std::vector<float> v(512 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const int64_t block = static_cast<int64_t>(v.size() * sizeof(float)) / 8;
  // What a step adds to each device's peak over what the device held before it.
  auto peak_growth = [](const std::function<void()>& step) {
    std::vector<int64_t> before;
    for (int d = 0; d < 8; ++d) before.push_back(memory_stats(d).bytes_in_use);
    reset_peak_memory_stats();
    step();
    std::vector<int64_t> grew;
    for (int d = 0; d < 8; ++d) grew.push_back(memory_stats(d).peak_bytes_in_use - before[static_cast<size_t>(d)]);
    return grew;
  };
  Array x;
  for (int64_t g : peak_growth([&] { x = from_vector(v, {512, 64}, s); })) EXPECT_LE(g, block);
  EXPECT_EQ(x.sharding(), s);
  EXPECT_EQ(x.to_vector<float>(), v);
  // Its blocks as the sharding says, and committed: a jit keeps them where they are.
  EXPECT_EQ(x.addressable_shards()[3].data.to_vector<float>()[0], v[128 * 64 + 32]);
  EXPECT_EQ(jit([](const Array& a) { return a * 2.0f; })(x).sharding(), s);
  // By blocks from the host: nothing is held anywhere else on the way.
  int calls = 0;
  Array y;
  for (int64_t g : peak_growth([&] {
         y = make_array_from_host_callback({512, 64}, s, [&](const std::vector<Slice>& idx) {
           ++calls;
           HostBlock b{DType::F32, {idx[0].size(), idx[1].size()}, {}};
           for (int64_t i = idx[0].start; i < idx[0].stop; ++i) {
             const char* row = reinterpret_cast<const char*>(&v[static_cast<size_t>(i * 64 + idx[1].start)]);
             b.bytes.insert(b.bytes.end(), row, row + idx[1].size() * 4);
           }
           return b;
         });
       })) {
    EXPECT_LE(g, block);
  }
  EXPECT_EQ(calls, 8);
  EXPECT_EQ(y.to_vector<float>(), v);
  // Uneven blocks are padded as any sharded array's.
  Array u = from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}, {7}, NamedSharding(m, P("data")));
  EXPECT_EQ(u.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}));
  // Bad input names the API and the value.
  EXPECT_PARTIX_ERROR(from_vector(std::vector<float>(5), {2, 3}, s), "[from_vector]", "5 values");
  EXPECT_PARTIX_ERROR(from_vector(std::vector<float>(6), {6}, s), "P('data', 'model')");
  EXPECT_PARTIX_ERROR(make_array_from_host_callback({8, 4}, s,
                                                    [](const std::vector<Slice>&) {
                                                      return HostBlock{DType::F32, {2, 2}, std::vector<char>(12)};
                                                    }),
                      "[make_array_from_host_callback]", "12 bytes");
  EXPECT_PARTIX_ERROR(make_array_from_host_callback({8, 4}, s,
                                                    [](const std::vector<Slice>&) {
                                                      return HostBlock{DType::F32, {8, 4}, std::vector<char>(128)};
                                                    }),
                      "[make_array_from_host_callback]", "Expected shard shape (2, 2)",
                      "single device array shape (8, 4)");
}

TEST(Ergonomics, ThreadMeshIsThisThreadsOnly) {
  Mesh m42 = make_mesh({4, 2}, {"x", "y"}), m8 = make_mesh({8}, {"x"});
  set_thread_mesh(m42);
  EXPECT_EQ(current_mesh(), m42);
  bool other_has = true;
  std::thread([&] { other_has = has_current_mesh(); }).join();
  EXPECT_FALSE(other_has);
  {
    MeshContext ctx(m8);  // a scope on this thread wins over its default
    EXPECT_EQ(current_mesh(), m8);
  }
  set_mesh(m8);  // the process default: under this thread's own
  EXPECT_EQ(current_mesh(), m42);
  Mesh seen = m42;
  std::thread([&] { seen = current_mesh(); }).join();
  EXPECT_EQ(seen, m8);
  clear_thread_mesh();
  EXPECT_EQ(current_mesh(), m8);
  clear_mesh();
  EXPECT_FALSE(has_current_mesh());
}

TEST(Ergonomics, TreesMapZipAndKnowTheirPaths) {
  Params p{{"w", ones({2, 3})}, {"b", zeros({3})}};
  Params q = tree_map([](const Array& a) { return a + 1.0f; }, p);
  EXPECT_EQ(q.at("b").to_vector<float>(), std::vector<float>(3, 1.0f));
  Params r = tree_map([](const Array& a, const Array& b) { return a * b; }, q, q);
  EXPECT_EQ(r.at("w").to_vector<float>(), std::vector<float>(6, 4.0f));
  EXPECT_PARTIX_ERROR(tree_map([](const Array& a, const Array& b) { return a + b; }, p,
                               Params{{"w", ones({2, 3})}}),
                      "[tree_map] trees of different structure");
  auto nested = std::make_tuple(p, std::vector<Array>{ones({1}), ones({2})});
  EXPECT_EQ(tree_leaf_paths(nested),
            (std::vector<std::string>{"[0]['b']", "[0]['w']", "[1][0]", "[1][1]"}));
  std::vector<std::string> seen;
  tree_map_with_path([&](const std::string& path, const Array& a) {
    seen.push_back(path);
    return a;
  }, nested);
  EXPECT_EQ(seen, tree_leaf_paths(nested));
  EXPECT_EQ(tree_structure(p), tree_structure(q));
  EXPECT_NE(tree_structure(p), tree_structure(Params{{"w", ones({1})}}));
  // device_put of a tree: one sharding, or one per parameter name.
  Mesh m = make_mesh({8}, {"x"});
  Params put = device_put(p, NamedSharding(m, P()));
  EXPECT_EQ(put.at("w").sharding(), NamedSharding(m, P()));
  Params each = device_put(p, std::map<std::string, NamedSharding>{
                                  {"w", NamedSharding(m, P(None, "x"))}, {"b", NamedSharding(m, P("x"))}});
  EXPECT_EQ(each.at("w").sharding(), NamedSharding(m, P(None, "x")));
  EXPECT_PARTIX_ERROR(device_put(p, std::map<std::string, NamedSharding>{{"w", NamedSharding(m, P())}}),
                      "no sharding for parameter 'b'");
}

TEST(Ergonomics, PythonModuloAndFloorDivision) {
  Array a = from_vector<int32_t>({7, -7, 7, -7, 0, 6}, {6});
  Array b = from_vector<int32_t>({3, 3, -3, -3, 5, -4}, {6});
  // Python: 7%3=1, -7%3=2, 7%-3=-2, -7%-3=-1, 0%5=0, 6%-4=-2; 7//3=2, -7//3=-3, 7//-3=-3,
  // -7//-3=2, 0//5=0, 6//-4=-2.
  EXPECT_EQ((a % b).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, -2, -1, 0, -2}));
  EXPECT_EQ(floor_divide(a, b).to_vector<int32_t>(), (std::vector<int32_t>{2, -3, -3, 2, 0, -2}));
  Array x = from_vector<float>({7.5f, -7.5f, 7.5f, -7.5f}, {4});
  Array y = from_vector<float>({2, 2, -2, -2}, {4});
  EXPECT_EQ((x % y).to_vector<float>(), (std::vector<float>{1.5f, 0.5f, -0.5f, -1.5f}));
  EXPECT_EQ(floor_divide(x, y).to_vector<float>(), (std::vector<float>{3, -4, -4, 3}));
  EXPECT_EQ((x % 2.0).to_vector<float>(), (std::vector<float>{1.5f, 0.5f, 1.5f, 0.5f}));
  EXPECT_EQ((10.0 % from_vector<float>({3, -3}, {2})).to_vector<float>(), (std::vector<float>{1, -2}));
  // The gradient of a % b with respect to a is 1.
  EXPECT_EQ(Array(grad([](const Array& v) { return sum(v % 2.0); })(x)).to_vector<float>(),
            std::vector<float>(4, 1.0f));
}

TEST(Ergonomics, NewOpsShardedMatchOneDevice) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array v = random::normal(random::key(5), {12, 10});
  Array iv = random::randint(random::key(6), {12, 10}, -20, 20);
  auto f = [](const Array& a, const Array& i) {
    Array r = roll(a, 3, 0) + roll(a, -2, 1) + astype(i % 7, DType::F32) +
              astype(floor_divide(i, 3.0), DType::F32);
    Array d = dynamic_slice_in_dim(r, scalar<int32_t>(2), 5, 0);
    Array u = dynamic_update_slice_in_dim(r, d * 0.0f, scalar<int32_t>(4), 0);
    return u + mean(r, KeepDims{}) + max(r, KeepDims{}) - min(r, KeepDims{}) + sum(r, KeepDims{}) * 0.01f;
  };
  const std::vector<float> want = values(f(v, iv));
  for (const auto& spec : {P("x"), P(None, "y"), P("x", "y"), P(Axes{"x", "y"})}) {
    Array got = jit(f)(device_put(v, NamedSharding(m, spec)), device_put(iv, NamedSharding(m, spec)));
    std::vector<float> g = values(got);
    ASSERT_EQ(g.size(), want.size());
    for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], want[k], 1e-4f) << spec.to_string() << k;
  }
  EXPECT_EQ(mean(ones({2, 3}), KeepDims{}).shape(), (Shape{1, 1}));
  EXPECT_EQ(roll(arange(5), 2, 0).to_vector<int32_t>(), (std::vector<int32_t>{3, 4, 0, 1, 2}));
  EXPECT_PARTIX_ERROR(roll(scalar(1.0f), 1, 0), "[roll]");
  // roll's gradient is the opposite roll.
  Array w = from_vector<float>({1, 2, 3, 4}, {4});
  EXPECT_EQ(Array(grad([&](const Array& a) { return sum(roll(a, 1, 0) * w); })(zeros({4}))).to_vector<float>(),
            (std::vector<float>{2, 3, 4, 1}));
}
