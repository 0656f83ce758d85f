// GPT-2 training: the same loss curve whatever the parallelism (the mesh shape alone switches
// between data, tensor and hybrid parallelism; FSDP on top), and the loss falls.
#include "partix/models/gpt2.h"
#include <fmt/format.h>

#include "test_util.h"

using namespace partix;
namespace g2 = partix::models::gpt2;

namespace {

std::vector<double> curve(int64_t data, int64_t model, bool fsdp, int steps) {
  g2::TrainOptions o;
  o.model = g2::tiny();
  o.model.dropout = 0.1;  // dropout masks depend only on the key and the global position
  o.data = data;
  o.model_parallel = model;
  o.fsdp = fsdp;
  o.steps = steps;
  o.batch = 8;
  o.seq = 32;
  o.lr = 3e-3;
  o.warmup = 5;
  g2::Trainer t(o);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(t.step().loss);
  return losses;
}

}  // namespace

TEST(Gpt2Train, LossCurvesAgreeOnEveryMeshAndWithFsdp) {
  const int steps = 50;
  std::vector<double> base = curve(1, 1, false, steps);
  EXPECT_LT(base.back(), base.front() - 1.0) << "the loss should fall";
  struct Layout { int64_t d, m; bool fsdp; };
  for (Layout l : {Layout{8, 1, false}, Layout{4, 2, false}, Layout{2, 4, false}, Layout{1, 8, false},
                   Layout{8, 1, true}, Layout{4, 2, true}}) {
    SCOPED_TRACE(fmt::format("mesh {}x{}{}", l.d, l.m, l.fsdp ? " fsdp" : ""));
    std::vector<double> c = curve(l.d, l.m, l.fsdp, steps);
    for (int s = 0; s < steps; ++s) ASSERT_NEAR(c[static_cast<size_t>(s)], base[static_cast<size_t>(s)], 1e-4) << "step " << s;
  }
}

TEST(Gpt2Train, TrainerReportsItsShardingsAndRejectsBadMeshes) {
  g2::TrainOptions o;
  o.data = 4;
  o.model_parallel = 2;
  o.batch = 8;
  o.seq = 16;
  g2::Trainer t(o);
  std::string table = t.sharding_table();
  // The blocks' parameters are stacked over layers (the first dimension, never split).
  EXPECT_NE(table.find("transformer.h.mlp.c_fc.weight"), std::string::npos) << table;
  EXPECT_NE(table.find("P(None, None, 'model')"), std::string::npos) << table;
  EXPECT_NE(table.find("P(None, 'model')"), std::string::npos) << table;
  g2::TrainOptions bad = o;
  bad.batch = 6;
  EXPECT_PARTIX_ERROR(g2::Trainer{bad}, "[train]", "batch 6");
  bad = o;
  bad.seq = 1000;
  EXPECT_PARTIX_ERROR(g2::Trainer{bad}, "[train]", "seq 1000");
}

TEST(Gpt2Train, InitDrawsEachParameterInItsShardingWithTheSameValuesOnEveryMesh) {
  g2::Config c = g2::tiny();
  Params one = g2::init(c, random::key(5), Mesh({1, 1}, {"data", "model"}), g2::sharding_rules(false));
  Mesh mesh({4, 2}, {"data", "model"});
  auto rules = g2::sharding_rules(/*fsdp=*/true);
  Params split = g2::init(c, random::key(5), mesh, rules);
  auto want = nn::param_shardings(g2::param_specs(c), rules, mesh);
  ASSERT_EQ(split.size(), want.size());
  for (const auto& [name, a] : split) {
    EXPECT_EQ(a.sharding(), want.at(name)) << name;
    EXPECT_EQ(a.to_vector<float>(), one.at(name).to_vector<float>()) << name;
  }
  // FSDP x tensor parallel: the MLP's input weight is split over both axes.
  EXPECT_EQ(split.at("transformer.h.0.mlp.c_fc.weight").sharding().spec(), P("data", "model"));
  // The Trainer starts from the same parameters for the same seed.
  g2::TrainOptions o;
  o.data = 4;
  o.model_parallel = 2;
  o.fsdp = true;
  o.seed = 5;
  g2::Trainer t(o);
  const Params per_layer = g2::unstack_layers(t.params(), c);
  ASSERT_EQ(per_layer.size(), one.size());
  for (const auto& [name, a] : per_layer) EXPECT_EQ(a.to_vector<float>(), one.at(name).to_vector<float>()) << name;
}
