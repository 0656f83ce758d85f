// Logical axis rules and sharded initialisation.
#include "test_util.h"

using namespace partix;

namespace {
nn::LogicalRules rules() {
  return {{{"batch", Axes{"data"}}, {"mlp", Axes{"model"}}, {"heads", Axes{"model"}},
           {"vocab", Axes{"model"}}, {"embed", std::nullopt}, {"embed_fsdp", Axes{"data"}}}};
}

nn::ParamSpecs specs() {
  return {{"wte", {{64, 32}, {"vocab", "embed"}, nn::Init::kNormal, 0.02}},
          {"mlp.fc", {{32, 128}, {"embed_fsdp", "mlp"}, nn::Init::kTruncatedNormal, 0.5}},
          {"mlp.proj", {{128, 32}, {"mlp", "embed_fsdp"}, nn::Init::kUniform, 0.1}},
          {"ln.g", {{32}, {"embed"}, nn::Init::kOnes}},
          {"ln.b", {{32}, {"embed"}, nn::Init::kZeros}}};
}
}  // namespace

TEST(LogicalRules, MapNamesToMeshAxes) {
  Mesh m({4, 2}, {"data", "model"});
  EXPECT_EQ(nn::logical_to_spec({"batch", "embed"}, rules(), m), P("data"));
  EXPECT_EQ(nn::logical_to_spec({"embed_fsdp", "mlp"}, rules(), m), P("data", "model"));
  // 'model' is taken by the first dim: the second falls back to replicated.
  EXPECT_EQ(nn::logical_to_spec({"heads", "mlp"}, rules(), m), P("model"));
  // Axes missing from the mesh are skipped.
  Mesh dp({8}, {"data"});
  EXPECT_EQ(nn::logical_to_spec({"vocab", "embed"}, rules(), dp), P());
  // Several rules for one name: the first usable wins.
  nn::LogicalRules r{{{"mlp", Axes{"model"}}, {"mlp", Axes{"data"}}}};
  EXPECT_EQ(nn::logical_to_spec({"mlp"}, r, dp), P("data"));
  EXPECT_PARTIX_ERROR(nn::param_shardings({{"x", {{4, 4}, {"mlp"}}}}, rules(), m), "[init_params]", "'x'");
}

TEST(ShardedInit, SameKeyGivesBitIdenticalParametersOnEveryMesh) {
  Array key = random::key(2024);
  std::map<std::string, std::vector<float>> want;
  bool first = true;
  for (const Mesh& m : {Mesh({1}, {"data"}), Mesh({8}, {"data"}), Mesh({4, 2}, {"data", "model"}),
                        Mesh({1, 8}, {"data", "model"})}) {
    SCOPED_TRACE(m.to_string());
    Params p = nn::init_params(specs(), key, m, rules());
    auto sh = nn::param_shardings(specs(), rules(), m);
    for (const auto& [k, v] : p) {
      EXPECT_EQ(v.sharding(), sh.at(k)) << k;
      if (first) want[k] = v.to_vector<float>();
      else EXPECT_EQ(v.to_vector<float>(), want.at(k)) << k;
    }
    first = false;
  }
  // The distributions are what the specs say.
  auto ln = want.at("ln.g");
  EXPECT_EQ(ln, std::vector<float>(32, 1.0f));
  for (float v : want.at("mlp.fc")) EXPECT_LE(std::abs(v), 1.0f);  // truncated at 2 sigma
  for (float v : want.at("mlp.proj")) EXPECT_LE(std::abs(v), 0.1f);
}

TEST(ShardedInit, NoDeviceMaterialisesAWholeParameter) {
  Mesh m({8}, {"data"});
  nn::ParamSpecs big{{"w", {{2048, 512}, {"embed_fsdp", "mlp"}, nn::Init::kNormal, 0.02}}};
  const int64_t full = 2048 * 512 * 4, shard = full / 8;
  nn::init_params(big, random::key(1), m, rules());  // compile once
  reset_peak_memory_stats();
  std::vector<int64_t> before;
  for (int d = 0; d < 8; ++d) before.push_back(memory_stats(d).bytes_in_use);
  Params p = nn::init_params(big, random::key(1), m, rules());
  for (int d = 0; d < 8; ++d) {
    int64_t peak = memory_stats(d).peak_bytes_in_use - before[static_cast<size_t>(d)];
    // The shard itself plus a few bytes of keys: bits, normal transform and scale run in place.
    EXPECT_LE(peak, shard + 1024) << "device " << d << " peaked at " << peak << " bytes";
    EXPECT_LT(peak, full / 2) << "device " << d;
  }
}
