// Semantics a JAX user relies on: shard_map needs even blocks (refused otherwise, naming the
// argument and dimension), committed arrays are never moved silently, collectives over
// size-1 mesh axes do not exist, one out_sharding serves every result, addressable shards
// alias device memory.
#include "test_util.h"

using namespace partix;

TEST(Semantics, ShardMapRefusesUnevenBlocksNamingArgumentAndDimension) {
  Mesh m = make_mesh({4}, {"x"});
  auto ident = shard_map([](const Array& b) { return b; }, m, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(ident(arange(30, DType::F32)), "[shard_map] argument 0 (f32[30])",
                      "dimension 0 of size 30", "4 blocks", "'x'");
  auto mx = shard_map([](const Array& b) { return pmax(max(b, {0}), "x"); }, m, {P("x")}, {P()});
  EXPECT_PARTIX_ERROR(mx(arange(30, DType::F32) - 100.0f), "dimension 0 of size 30");
  // The same inside jit, and for a second argument split on dimension 1.
  auto two = jit(shard_map([](const Array& a, const Array& b) { return a + sum(b); }, m,
                           {P("x"), P(None, "x")}, {P("x")}));
  EXPECT_PARTIX_ERROR(two(arange(8, DType::F32), ones({2, 6})), "argument 1 (f32[2,6])",
                      "dimension 1 of size 6");
  // Even blocks give exact values: the identity over arange(32) is arange(32).
  std::vector<float> want(32);
  for (int i = 0; i < 32; ++i) want[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(ident(arange(32, DType::F32)).to_vector<float>(), want);
  EXPECT_EQ(mx(arange(32, DType::F32) - 100.0f).item<float>(), -69.0f);
}

TEST(Semantics, ShardMapOnAnotherMeshNamesTheArgumentAndBothMeshes) {
  Mesh m8 = make_mesh({8}, {"x"});
  Mesh m4 = make_mesh({4}, {"x"});
  Array a = device_put(arange(32, DType::F32), NamedSharding(m8, P("x")));
  auto f = shard_map([](const Array& b) { return b * 2.0f; }, m4, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(f(a), "argument 0 (f32[32]) is committed to Mesh('x': 8)",
                      "this shard_map runs on Mesh('x': 4)");
  // Under jit, as JAX words it: the argument's devices against the shard_map's.
  EXPECT_PARTIX_ERROR(jit(f)(a), "[jit] Received incompatible devices for jitted computation",
                      "argument args[0] of jit with shape float32[32]",
                      "device ids [0, 1, 2, 3, 4, 5, 6, 7]",
                      "shard_map inside jit with device ids [0, 1, 2, 3]");
  // Uncommitted arrays simply move there.
  EXPECT_EQ(f(arange(32, DType::F32)).to_vector<float>()[31], 62.0f);
}

TEST(Semantics, CommittedArgumentDifferingFromInShardingsIsAnError) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array a = device_put(ones({8, 4}), NamedSharding(m, P("x")));
  auto f = jit([](const Array& v) { return v * 2.0f; },
               {.in_shardings = {NamedSharding(m, P(None, "y"))}});
  EXPECT_PARTIX_ERROR(f(a), "argument args[0] (f32[8,4]) is committed to", "P('x')",
                      "differs from in_shardings'", "P(None, 'y')");
  // Uncommitted arrays are placed by in_shardings; matching committed ones are accepted.
  EXPECT_EQ(f(ones({8, 4})).sharding(), NamedSharding(m, P(None, "y")));
  EXPECT_EQ(f(device_put(ones({8, 4}), NamedSharding(m, P(None, "y")))).to_vector<float>(),
            std::vector<float>(32, 2.0f));
}

TEST(Semantics, CollectivesOverSizeOneAxesDoNotAppear) {
  Mesh m = make_mesh({8, 1}, {"data", "model"});
  Array a = device_put(arange(64, DType::F32), NamedSharding(m, P("data")));
  auto f = jit(shard_map(
      [](const Array& b) {
        return psum(b, "model") + all_gather(b, "model", 0, true) +
               psum_scatter(b, "model", 0, true) + ppermute(b, "model", {{0, 0}}) +
               all_to_all(b, "model", 0, 0, true);
      },
      m, {P("data")}, {P(Axes{"data", "model"})}));
  Lowered l = f.lower(a);
  for (const char* c : {"all_reduce", "all_gather", "reduce_scatter", "ppermute", "all_to_all"}) {
    EXPECT_EQ(l.as_text().find(c), std::string::npos) << c << " in\n" << l.as_text();
  }
  std::vector<float> got = f(a).to_vector<float>();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], 5.0f * i) << i;
  // The partitioner does not insert them either: a contraction split over 'model' (size 1).
  Array w = device_put(ones({64, 16}), NamedSharding(m, P("model")));
  Array x = device_put(ones({8, 64}), NamedSharding(m, P("data", "model")));
  Lowered g = jit([](const Array& u, const Array& v) { return matmul(u, v); }).lower(x, w);
  EXPECT_EQ(g.as_text().find("all_reduce"), std::string::npos) << g.as_text();
  EXPECT_EQ(g.as_text().find("unreduced"), std::string::npos) << g.as_text();
}

TEST(Semantics, OneOutShardingAppliesToEveryResult) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  NamedSharding s(m, P("y"));
  auto f = jit([](const Array& a) { return std::make_tuple(a + 1.0f, a * 2.0f, a - 3.0f); },
               {.out_shardings = {s}});
  auto [p, q, r] = f(ones({8, 8}));
  EXPECT_EQ(p.sharding(), s);
  EXPECT_EQ(q.sharding(), s);
  EXPECT_EQ(r.sharding(), s);
  auto g = jit([](const Array& a) { return std::make_tuple(a + 1.0f, a * 2.0f, a - 3.0f); },
               {.out_shardings = {s, s}});
  EXPECT_PARTIX_ERROR(g(ones({8, 8})), "out_shardings has 2 entries for 3 results");
}

TEST(Semantics, AddressableShardsAliasDeviceMemory) {
  Mesh m = make_mesh({8}, {"x"});
  Array a = device_put(arange(1 << 16, DType::F32), NamedSharding(m, P("x")));
  std::vector<int64_t> before;
  for (int d = 0; d < 8; ++d) before.push_back(memory_stats(d).num_allocs);
  std::vector<Shard> shards = a.addressable_shards();
  ASSERT_EQ(shards.size(), 8u);
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(memory_stats(d).num_allocs, before[static_cast<size_t>(d)]) << "device " << d;
    EXPECT_EQ(shards[static_cast<size_t>(d)].data.to_vector<float>()[0], d * 8192.0f);
  }
  // Padded (uneven) blocks hold only the valid part.
  Array u = device_put(arange(30, DType::F32), NamedSharding(m, P("x")));
  std::vector<Shard> us = u.addressable_shards();
  EXPECT_EQ(us[7].data.shape(), (Shape{2}));
  EXPECT_EQ(us[7].data.to_vector<float>(), (std::vector<float>{28, 29}));
}

TEST(Semantics, AnArgumentReshardedOnEveryCallIsWarnedByName) {
  Mesh m = make_mesh({8}, {"x"});
  Params p{{"k_proj", device_put(ones({64, 16}), NamedSharding(m, P("x")))}};
  Array h = device_put(ones({4, 64}), NamedSharding(m, P()));
  // The weight arrives split on rows but is used split on columns: an all_to_all per call.
  auto f = jit([&](const Params& q, const Array& x) {
    return matmul(x, with_sharding_constraint(q.at("k_proj"), NamedSharding(m, P(None, "x"))));
  });
  Lowered l = f.lower(p, h);
  bool warned = false;
  for (const std::string& w : l.warnings()) {
    warned = warned || (w.find("argument args[0]['k_proj']") != std::string::npos &&
                        w.find("from P('x') to P(None, 'x') on every call") != std::string::npos &&
                        w.find("bytes sent per device") != std::string::npos);
  }
  EXPECT_TRUE(warned) << l.as_text();
  // Gathering a split weight whole (FSDP) is by design, and slicing a replicated argument
  // moves nothing: no such warning.
  auto g = jit([&](const Params& q, const Array& x) {
    return matmul(x, with_sharding_constraint(q.at("k_proj"), NamedSharding(m, P())));
  });
  Lowered gl = g.lower(p, h);
  EXPECT_NE(gl.as_text().find("all_gather"), std::string::npos) << gl.as_text();
  for (const std::string& w : gl.warnings()) EXPECT_EQ(w.find("on every call"), std::string::npos) << w;
  auto s = jit([](const Params& q, const Array& x) { return matmul(x, q.at("k_proj")); });
  for (const std::string& w : s.lower(p, h).warnings()) {
    EXPECT_EQ(w.find("on every call"), std::string::npos) << w;
  }
}

// Reductions over unevenly split dimensions see only the valid elements: the padding is
// masked with each reduction's exact identity, also at the integer limits (a max of INT32_MIN
// values is INT32_MIN, not the padding's value), eager and under jit, for every dtype.
TEST(Semantics, UnevenReductionsAtTheDtypeLimitsSeeOnlyValidElements) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  NamedSharding split(m, P("x"));
  struct Case {
    DType dtype;
    double lo, hi;
  };
  const double i64_lo = -9223372036854775808.0;
  for (Case k : {Case{DType::I32, -2147483648.0, 2147483647.0}, Case{DType::I64, i64_lo, 4e18},
                 Case{DType::F32, -3e38, 3e38}, Case{DType::F64, -1e308, 1e308},
                 Case{DType::F16, -65504, 65504}, Case{DType::BF16, -3e38, 3e38}}) {
    SCOPED_TRACE(std::string(dtype_name(k.dtype)));
    // 30 elements over 4 blocks of 8: the last block holds 6 and 2 rows of padding.
    Array lows = device_put(full({30}, k.lo, k.dtype), split);
    Array highs = device_put(full({30}, k.hi, k.dtype), split);
    auto mx = [](const Array& a) { return max(a); };
    auto mn = [](const Array& a) { return min(a); };
    for (bool jitted : {false, true}) {
      Array a = jitted ? jit(mx)(lows) : mx(lows);
      Array b = jitted ? jit(mn)(highs) : mn(highs);
      EXPECT_EQ(a.dtype(), k.dtype);
      if (k.dtype == DType::I64) {
        EXPECT_EQ(a.item<int64_t>(), std::numeric_limits<int64_t>::min());
        EXPECT_EQ(b.item<int64_t>(), 4000000000000000000);
      } else {
        EXPECT_EQ(astype(a, DType::F64).item<double>(), astype(full({}, k.lo, k.dtype), DType::F64).item<double>());
        EXPECT_EQ(astype(b, DType::F64).item<double>(), astype(full({}, k.hi, k.dtype), DType::F64).item<double>());
      }
    }
  }
  // An exact integer sum over the same uneven split, and the 2-D case split on both axes.
  Array ones32 = device_put(full({30, 7}, 1, DType::I32), NamedSharding(m, P("x", "y")));
  EXPECT_EQ(jit([](const Array& a) { return sum(a); })(ones32).item<int32_t>(), 210);
  Array mins = device_put(full({30, 7}, -2147483648.0, DType::I32), NamedSharding(m, P("x", "y")));
  EXPECT_EQ(jit([](const Array& a) { return max(a, {0, 1}); })(mins).item<int32_t>(),
            std::numeric_limits<int32_t>::min());
}

// A maximum or minimum over an empty axis has no value: max and min refuse it as numpy and JAX
// do (a sum is 0, a mean NaN); the primitives, as lax's, give the identity.
TEST(Semantics, MaxAndMinOfAnEmptyAxisAreRefused) {
  Array e = zeros({3, 0});
  EXPECT_PARTIX_ERROR(max(e), "[max] cannot reduce the empty axis 1 of f32[3,0]");
  EXPECT_PARTIX_ERROR(min(e, {1}), "[min] cannot reduce the empty axis 1");
  EXPECT_PARTIX_ERROR(jit([](const Array& a) { return max(a, {1}); })(e), "empty axis 1");
  EXPECT_EQ(max(e, {0}).shape(), (Shape{0}));  // reducing a non-empty axis is fine
  EXPECT_EQ(sum(e).item<float>(), 0.0f);
}

// A 16-bit float mean accumulates in f32 (as JAX): 8192 values of 16 sum to 131072, past
// f16's 65504, and the mean is still 16 in the input's dtype.
TEST(Semantics, HalfPrecisionMeanAndVarianceAccumulateInF32) {
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Array x = full({8192}, 16.0, dt);
    Array mu = mean(x);
    EXPECT_EQ(mu.dtype(), dt);
    EXPECT_EQ(astype(mu, DType::F32).item<float>(), 16.0f);
    Array v = var(x, {0});
    EXPECT_EQ(v.dtype(), dt);
    EXPECT_EQ(astype(v, DType::F32).item<float>(), 0.0f);
    Mesh m = make_mesh({8}, {"x"});
    Array xs = device_put(x, NamedSharding(m, P("x")));
    EXPECT_EQ(astype(jit([](const Array& a) { return mean(a); })(xs), DType::F32).item<float>(),
              16.0f);
  }
  EXPECT_EQ(mean(full({4}, 3, DType::I32)).dtype(), DType::F32);
}
