// SmolLM2-135M-Instruct with its GGUF weights kept quantized (Q4_1 matrices, Q8_0 embedding):
// the weights stay in their blocks, logits stay close to the dequantized model's (the f32
// path Hugging Face is compared with in llama_golden_test.cpp), and greedy generation of the
// plain golden prompt is identical on 1, 2, 4 and 8 devices and starts as Hugging Face's.
// Also bf16 weight matrices (LoadOptions::dtype).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "partix/checkpoint.h"
#include "partix/io.h"
#include "partix/models/llama.h"
#include "test_util.h"

using namespace partix;
namespace L = partix::models::llama;

namespace {

nlohmann::json golden_json() {
  std::ifstream in(std::string(PARTIX_TESTS_DIR) + "/golden/smollm2/golden.json");
  return nlohmann::json::parse(in);
}

#define REQUIRE_MODEL()                                                                    \
  if (!std::filesystem::exists(L::default_model_path())) {                                 \
    GTEST_SKIP() << "SmolLM2 is not in the cache: run scripts/fetch_smollm2.sh (setup.sh " \
                    "does)";                                                               \
  }

std::vector<float> last_logits(const L::Model& m, const Mesh& mesh,
                               const std::vector<int32_t>& ids) {
  const bool stacked = L::is_stacked(m.params);
  const int64_t T = static_cast<int64_t>(ids.size());
  NamedSharding rep(mesh, P());
  auto fwd = jit([&](const Params& p, const Array& t, const L::KVCache& kv) {
    return L::forward(p, m.config, t, scalar<int32_t>(0), zeros({1}, DType::I32), kv, {}, true)
        .logits;
  });
  Array logits = fwd(m.params, device_put(from_vector(ids, {1, T}), rep),
                     L::make_cache(m.config, 1, 48, mesh, L::sharding_rules(), stacked));
  EXPECT_EQ(logits.shape(), (Shape{1, 1, m.config.vocab_size}));
  return logits.to_vector<float>();
}

}  // namespace

TEST(LlamaQuantized, WeightsStayInTheirBlocksAndLogitsTrackTheDequantizedModel) {
  REQUIRE_MODEL();
  nlohmann::json g = golden_json();
  std::vector<int32_t> plain = g["prompts"]["plain"]["ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> chat = g["prompts"]["chat"]["ids"].get<std::vector<int32_t>>();
  Mesh mesh({1}, {"model"});
  auto rules = L::sharding_rules();
  L::Model q = L::load(L::default_model_path(), mesh, rules, {.quantized = true});
  // Stacked over the 30 layers in their blocks.
  EXPECT_EQ(q.params.at("model.layers.mlp.down_proj.weight").dtype(), DType::Q4_1);
  EXPECT_EQ(q.params.at("model.layers.mlp.down_proj.weight").shape(), (Shape{30, 576, 1536}));
  EXPECT_EQ(q.params.at("model.layers.self_attn.k_proj.weight").dtype(), DType::Q4_1);
  EXPECT_EQ(q.params.at("model.embed_tokens.weight").dtype(), DType::Q8_0);
  EXPECT_EQ(q.params.at("model.norm.weight").dtype(), DType::F32);
  int64_t bytes = 0;
  for (const auto& [k, v] : q.params) bytes += v.nbytes();
  // 135M parameters at ~4.6 bits (plus the 8.5-bit embedding), against ~540 MB in f32.
  EXPECT_LT(bytes, 110 << 20);
  L::Model f = L::load(L::default_model_path(), mesh, rules);
  auto top2 = [](const std::vector<float>& v) {
    std::vector<int64_t> i(v.size());
    std::iota(i.begin(), i.end(), 0);
    std::partial_sort(i.begin(), i.begin() + 2, i.end(),
                      [&](int64_t a, int64_t b) { return v[a] > v[b]; });
    return std::pair{i[0], i[1]};
  };
  // log softmax, in double.
  auto log_probs = [](const std::vector<float>& v) {
    const double top = *std::max_element(v.begin(), v.end());
    double z = 0;
    for (float a : v) z += std::exp(double(a) - top);
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = double(v[i]) - top - std::log(z);
    return out;
  };
  for (const auto& ids : {plain, chat}) {
    std::vector<float> got = last_logits(q, mesh, ids);
    std::vector<float> want = last_logits(f, mesh, ids);
    // 8-bit activations (as llama.cpp's) move the next-token distribution by a KL divergence
    // of 0.003 to 0.025 nats, whichever kernel runs (portable, AVX2, AVX-512: their f32
    // roundings differ, and rounding activations to 8 bits amplifies that over 30 layers).
    // Single logits (magnitude ~25) move by up to ~2, mostly a shift common to all of them,
    // which leaves the distribution as it is.
    const std::vector<double> lg = log_probs(got), lw = log_probs(want);
    double kl = 0;
    for (size_t i = 0; i < lw.size(); ++i) kl += std::exp(lw[i]) * (lw[i] - lg[i]);
    EXPECT_LT(kl, 0.06) << "KL divergence from the dequantized model's next-token distribution";
    // The chat prompt's two best first tokens are 0.08 apart in the f32 model ("The", "L"):
    // that noise may swap them, but not bring in another token.
    auto [g0, g1] = top2(got);
    auto [w0, w1] = top2(want);
    EXPECT_TRUE(g0 == w0 || (g0 == w1 && g1 == w0)) << g0 << " " << g1 << " vs " << w0 << " " << w1;
  }
  // Per layer, unrolled: the same blocks, so the same logits; and unstacking the stacked
  // blocks gives each layer's blocks back byte for byte (quantized slices and joins).
  L::Model per = L::load(L::default_model_path(), mesh, rules, {.quantized = true, .stacked = false});
  EXPECT_EQ(per.params.at("model.layers.3.self_attn.k_proj.weight").dtype(), DType::Q4_1);
  const std::vector<float> a = last_logits(q, mesh, plain), b = last_logits(per, mesh, plain);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-3) << i;
  const Params unstacked = L::unstack_layers(q.params, q.config);
  for (const char* name : {"model.layers.0.mlp.down_proj.weight", "model.layers.29.mlp.up_proj.weight",
                           "model.layers.7.self_attn.q_proj.weight"}) {
    const Array x = unstacked.at(name), y = per.params.at(name);
    ASSERT_EQ(x.dtype(), y.dtype());
    ASSERT_EQ(x.shape(), y.shape());
    EXPECT_EQ(astype(x, DType::F32).to_vector<float>(), astype(y, DType::F32).to_vector<float>())
        << name;
  }
  EXPECT_PARTIX_ERROR(concatenate({per.params.at("model.layers.0.mlp.up_proj.weight"),
                                   per.params.at("model.layers.1.mlp.up_proj.weight")},
                                  1),
                      "[concatenate] cannot join quantized", "last (block) dimension");
  EXPECT_PARTIX_ERROR(slice_axis(per.params.at("model.layers.0.mlp.up_proj.weight"), 1, 0, 64),
                      "[slice] cannot slice the last (block) dimension");
}

TEST(LlamaQuantized, GreedyGenerationIsIdenticalOnOneTwoFourAndEightDevices) {
  REQUIRE_MODEL();
  nlohmann::json g = golden_json();
  std::vector<int32_t> plain = g["prompts"]["plain"]["ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> hf = g["prompts"]["plain"]["greedy32"].get<std::vector<int32_t>>();
  std::vector<int32_t> first;
  for (int n : {1, 2, 4, 8}) {
    SCOPED_TRACE(n);
    Mesh mesh({n}, {"model"});
    auto rules = L::sharding_rules();
    L::Model m = L::load(L::default_model_path(), mesh, rules, {.quantized = true});
    if (n == 8) {  // the stacked blocks are split over heads like the per-layer ones
      EXPECT_EQ(m.params.at("model.layers.self_attn.q_proj.weight").sharding().spec(),
                P(None, "model"));
    }
    if (n > 1) {  // the tied lm_head keeps a vocab-split copy of the replicated embedding
      EXPECT_EQ(m.params.at("model.embed_tokens.weight").sharding().spec(), P());
      EXPECT_EQ(m.params.at("lm_head.weight").sharding().spec(), P("model"));
      EXPECT_EQ(m.params.at("lm_head.weight").dtype(), DType::Q8_0);
    }
    L::Generator gen(m, mesh, rules);
    L::GenerateOptions o;
    o.max_tokens = 8;
    o.stop_at_eos = false;
    // The plain prompt's continuation is the same on every mesh and starts as the dequantized
    // model's (and Hugging Face's). Rounding activations to 8 bits turns the last-bit
    // differences of sharded sums into whole steps now and then, so near-ties (the chat
    // prompt's first token: 0.03 apart) may differ between meshes; these tokens are not near.
    auto r = gen.generate({plain}, o);
    ASSERT_EQ(r.tokens[0].size(), 8u);
    if (first.empty()) first = r.tokens[0];
    EXPECT_EQ(r.tokens[0], first) << m.tokenizer->decode(r.tokens[0]);
    EXPECT_EQ(r.tokens[0], std::vector<int32_t>(hf.begin(), hf.begin() + 8))
        << m.tokenizer->decode(r.tokens[0]);
  }
}

// bf16 weight matrices (LoadOptions::dtype): half the bytes of f32, the products widen them
// exactly in registers, so the logits move only by bf16's rounding of the weights.
TEST(LlamaBf16, WeightsLoadInBf16AndLogitsTrackTheF32Model) {
  REQUIRE_MODEL();
  nlohmann::json g = golden_json();
  std::vector<int32_t> plain = g["prompts"]["plain"]["ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> hf = g["prompts"]["plain"]["greedy32"].get<std::vector<int32_t>>();
  Mesh mesh({2}, {"model"});
  auto rules = L::sharding_rules();
  L::Model b = L::load(L::default_model_path(), mesh, rules, {.dtype = DType::BF16});
  EXPECT_EQ(b.params.at("model.layers.self_attn.q_proj.weight").dtype(), DType::BF16);
  EXPECT_EQ(b.params.at("model.layers.mlp.down_proj.weight").dtype(), DType::BF16);
  EXPECT_EQ(b.params.at("model.embed_tokens.weight").dtype(), DType::BF16);
  EXPECT_EQ(b.params.at("model.layers.input_layernorm.weight").dtype(), DType::F32);
  EXPECT_EQ(b.params.at("model.embed_tokens.weight").sharding().spec(), P("model"));
  int64_t bytes = 0;
  for (const auto& [k, v] : b.params) bytes += v.nbytes();
  EXPECT_LT(bytes, 280 << 20);  // ~270 MB, against ~540 MB in f32
  L::Model f = L::load(L::default_model_path(), mesh, rules);
  std::vector<float> got = last_logits(b, mesh, plain), want = last_logits(f, mesh, plain);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  EXPECT_LT(worst, 0.5) << "largest logit difference";
  EXPECT_GT(worst, 0.0) << "bf16 weights should round something";
  L::Generator gen(b, mesh, rules);
  L::GenerateOptions o;
  o.max_tokens = 8;
  o.stop_at_eos = false;
  auto r = gen.generate({plain}, o);
  EXPECT_EQ(r.tokens[0], std::vector<int32_t>(hf.begin(), hf.begin() + 8))
      << b.tokenizer->decode(r.tokens[0]);
  EXPECT_PARTIX_ERROR(L::load(L::default_model_path(), mesh, rules, {.dtype = DType::I32}),
                      "LoadOptions::dtype", "i32");
}

// Stacked quantized weights through a checkpoint: saved from two devices, restored onto eight
// in the stacked shardings (blocks whole), they generate the same tokens as loading there;
// unstacked after the restore, too.
TEST(LlamaQuantized, StackedCheckpointsRestoreOntoAnotherMesh) {
  REQUIRE_MODEL();
  nlohmann::json g = golden_json();
  std::vector<int32_t> plain = g["prompts"]["plain"]["ids"].get<std::vector<int32_t>>();
  auto rules = L::sharding_rules();
  Mesh two({2}, {"model"}), eight({8}, {"model"});
  L::Model src = L::load(L::default_model_path(), two, rules, {.quantized = true});
  L::Model there = L::load(L::default_model_path(), eight, rules, {.quantized = true});
  test::TempDir dir;
  ckpt::save(dir.path().string(), 1, src.params);
  ckpt::wait();
  L::Model restored = there;
  restored.params = ckpt::restore(dir.path().string(), 1, there.params);
  EXPECT_EQ(restored.params.at("model.layers.mlp.up_proj.weight").dtype(), DType::Q4_1);
  EXPECT_EQ(restored.params.at("model.layers.mlp.up_proj.weight").sharding(),
            there.params.at("model.layers.mlp.up_proj.weight").sharding());
  L::GenerateOptions o;
  o.max_tokens = 6;
  o.stop_at_eos = false;
  const auto want = L::Generator(there, eight, rules).generate({plain}, o).tokens;
  EXPECT_EQ(L::Generator(restored, eight, rules).generate({plain}, o).tokens, want);
  L::Model per = restored;
  per.params = L::unstack_layers(restored.params, restored.config);
  EXPECT_EQ(L::Generator(per, eight, rules).generate({plain}, o).tokens, want);
}
