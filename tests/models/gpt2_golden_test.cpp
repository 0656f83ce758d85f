// A tiny GPT-2 against Hugging Face transformers (tools/golden/gpt2_tiny.py): logits, loss and
// the gradient of every parameter, on one device and sharded on 8.
#include <filesystem>

#include "partix/models/gpt2.h"
#include "partix/io.h"
#include "test_util.h"

using namespace partix;
namespace g2 = partix::models::gpt2;

namespace {

std::string golden_dir() { return std::string(PARTIX_TESTS_DIR) + "/golden/gpt2_tiny"; }

void expect_close(const Array& got, const Array& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  auto g = astype(got, DType::F32).to_vector<float>();
  auto w = astype(want, DType::F32).to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double err = std::abs(static_cast<double>(g[i]) - w[i]) - rtol * std::abs(w[i]);
    worst = std::max(worst, err);
    ASSERT_LE(err, atol) << what << " at " << i << ": " << g[i] << " vs " << w[i];
  }
}

struct Case {
  std::string name;
  Mesh mesh;
  bool fsdp;
  PartitionSpec batch;
};

}  // namespace

TEST(Gpt2Golden, LogitsLossAndGradientsMatchTransformers) {
  Safetensors golden = Safetensors::open(golden_dir() + "/golden.safetensors");
  Array ids = golden.load("ids"), targets = golden.load("targets");
  for (const Case& c : {Case{"one device", Mesh({1, 1}, {"data", "model"}), false, P("data")},
                        Case{"data x tensor parallel", Mesh({4, 2}, {"data", "model"}), false, P("data")},
                        Case{"tensor parallel", Mesh({1, 8}, {"data", "model"}), false, P()},
                        Case{"fsdp", Mesh({2, 1}, {"data", "model"}), true, P("data")}}) {
    SCOPED_TRACE(c.name);
    auto rules = g2::sharding_rules(c.fsdp);
    g2::Checkpoint ck = g2::load_hf(golden_dir(), c.mesh, rules);
    EXPECT_EQ(ck.config.n_embd, 32);
    Array i = device_put(ids, NamedSharding(c.mesh, c.batch));
    Array t = device_put(targets, NamedSharding(c.mesh, c.batch));
    auto f = jit([&](const Params& p, const Array& x, const Array& y) {
      g2::ForwardOptions o{std::nullopt, &c.mesh, &rules};
      Array logits = g2::forward(p, x, ck.config, o);
      auto [loss, g] = value_and_grad([&](const Params& q) { return g2::loss(q, x, y, ck.config, o); })(p);
      return std::make_tuple(logits, loss, Params(g));
    });
    auto [logits, loss, grads] = f(ck.params, i, t);
    expect_close(logits, golden.load("logits"), 2e-5, 1e-5, "logits");
    EXPECT_NEAR(loss.item<float>(), golden.load("loss").item<float>(), 1e-5);
    for (const auto& [name, g] : grads) {
      EXPECT_EQ(g.sharding(), ck.params.at(name).sharding()) << name << " " << g.sharding().to_string() << " vs " << ck.params.at(name).sharding().to_string();
      Array want = golden.load("grad." + name);
      expect_close(reshape(g, want.shape()), want, 1e-6, 1e-4, "grad " + name);
    }
  }
}

TEST(Gpt2Golden, SavedCheckpointsRoundTrip) {
  Mesh mesh({4, 2}, {"data", "model"});
  auto rules = g2::sharding_rules(false);
  g2::Checkpoint ck = g2::load_hf(golden_dir(), mesh, rules);
  std::string dir = ::testing::TempDir() + "/gpt2_saved";
  g2::save_hf(dir, ck.params, ck.config);
  // The saved file has the Hugging Face layout and the same values.
  Safetensors saved = Safetensors::open(dir + "/model.safetensors");
  Safetensors original = Safetensors::open(golden_dir() + "/model.safetensors");
  for (const std::string& name : original.names()) {
    std::string key = saved.contains(name) ? name : "transformer." + name;
    ASSERT_TRUE(saved.contains(key)) << name;
    EXPECT_EQ(saved.shape(key), original.shape(name)) << name;
    EXPECT_EQ(saved.load(key).to_vector<float>(), original.load(name).to_vector<float>()) << name;
  }
  g2::Checkpoint again = g2::load_hf(dir, Mesh({1}, {"data"}), rules);
  EXPECT_EQ(again.config.n_layer, ck.config.n_layer);
}
