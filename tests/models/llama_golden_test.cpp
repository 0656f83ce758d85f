// SmolLM2-135M-Instruct (the real model, Q4_1 GGUF) against Hugging Face transformers
// (tools/golden/llama_smollm2.py): logits on one device and tensor-parallel on 8, greedy
// generation identical on 1, 2, 4 and 8 devices, two all-reduces per layer.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "partix/models/llama.h"
#include "partix/io.h"
#include "test_util.h"

using namespace partix;
namespace L = partix::models::llama;

namespace {

std::string golden(const std::string& f) { return std::string(PARTIX_TESTS_DIR) + "/golden/smollm2/" + f; }

nlohmann::json golden_json() {
  std::ifstream in(golden("golden.json"));
  return nlohmann::json::parse(in);
}

#define REQUIRE_MODEL()                                                                    \
  if (!std::filesystem::exists(L::default_model_path())) {                                 \
    GTEST_SKIP() << "SmolLM2 is not in the cache: run scripts/fetch_smollm2.sh (setup.sh " \
                    "does)";                                                               \
  }

}  // namespace

TEST(LlamaGolden, LogitsMatchTransformersOnOneAndEightDevices) {
  REQUIRE_MODEL();
  nlohmann::json g = golden_json();
  Safetensors gs = Safetensors::open(golden("golden.safetensors"));
  for (int n : {1, 8}) {
    SCOPED_TRACE(n);
    Mesh mesh({n}, {"model"});
    auto rules = L::sharding_rules();
    L::Model m = L::load(L::default_model_path(), mesh, rules);
    // The tokenizer reproduces Hugging Face's ids, chat template included.
    std::string text = g["prompts"]["chat"]["text"];
    std::vector<int32_t> ids = g["prompts"]["chat"]["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(m.tokenizer->encode(text), ids);
    EXPECT_EQ(m.tokenizer->apply_chat_template({{"user", "What is the capital of France?"}}, true), text);
    const int64_t T = static_cast<int64_t>(ids.size());
    NamedSharding rep(mesh, P());
    auto fwd = jit([&](const Params& p, const Array& t, const L::KVCache& kv) {
      auto r = L::forward(p, m.config, t, scalar<int32_t>(0), zeros({1}, DType::I32), kv);
      return r.logits;
    });
    Array logits = fwd(m.params, device_put(from_vector(ids, {1, T}), rep),
                       L::make_cache(m.config, 1, 48, mesh, rules));
    auto got = reshape(slice_axis(logits, 1, T - 1, T), {m.config.vocab_size}).to_vector<float>();
    auto want = gs.load("chat.last_logits").to_vector<float>();
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    // Logits reach about 25: f32 sums over 30 layers in another order agree to ~1e-4.
    EXPECT_LT(worst, 2e-3) << "largest logit difference";
    // Every position's top-20 of the plain prompt, too.
    std::vector<int32_t> plain = g["prompts"]["plain"]["ids"].get<std::vector<int32_t>>();
    Array pl = fwd(m.params, device_put(from_vector(plain, {1, static_cast<int64_t>(plain.size())}), rep),
                   L::make_cache(m.config, 1, 32, mesh, rules));
    auto lv = pl.to_vector<float>();
    for (size_t t = 0; t < plain.size(); ++t) {
      auto ids20 = g["prompts"]["plain"]["top20_ids"][t].get<std::vector<int64_t>>();
      auto val20 = g["prompts"]["plain"]["top20_logits"][t].get<std::vector<double>>();
      for (size_t k = 0; k < 5; ++k) {
        EXPECT_NEAR(lv[t * static_cast<size_t>(m.config.vocab_size) + static_cast<size_t>(ids20[k])], val20[k], 2e-3)
            << "position " << t << " rank " << k;
      }
    }
  }
}

TEST(LlamaGolden, GreedyGenerationIsIdenticalOnOneTwoFourAndEightDevices) {
  REQUIRE_MODEL();
  nlohmann::json g = golden_json();
  std::vector<int32_t> ids = g["prompts"]["chat"]["ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> hf = g["prompts"]["chat"]["greedy32"].get<std::vector<int32_t>>();
  std::vector<int32_t> first;
  for (int n : {1, 2, 4, 8}) {
    SCOPED_TRACE(n);
    Mesh mesh({n}, {"model"});
    auto rules = L::sharding_rules();
    L::Model m = L::load(L::default_model_path(), mesh, rules);
    L::Generator gen(m, mesh, rules);
    L::GenerateOptions o;
    o.max_tokens = 32;
    o.stop_at_eos = false;
    auto r = gen.generate({ids}, o);
    ASSERT_EQ(r.tokens[0].size(), 32u);
    if (first.empty()) first = r.tokens[0];
    EXPECT_EQ(r.tokens[0], first);
    EXPECT_EQ(r.tokens[0], hf) << m.tokenizer->decode(r.tokens[0]);
  }
}

TEST(LlamaGolden, TensorParallelForwardHasTwoAllReducesPerLayerAndGathersNoWeights) {
  REQUIRE_MODEL();
  Mesh mesh({8}, {"model"});
  auto rules = L::sharding_rules();
  reset_peak_memory_stats();
  std::vector<int64_t> before;
  for (int d = 0; d < 8; ++d) before.push_back(memory_stats(d).bytes_in_use);
  L::Model m = L::load(L::default_model_path(), mesh, rules);
  // Loading is sharded: no device ever held more than a fraction of the model.
  int64_t total = 0;
  for (const auto& [k, v] : m.params) total += v.nbytes();
  for (int d = 0; d < 8; ++d) {
    EXPECT_LT(memory_stats(d).peak_bytes_in_use - before[static_cast<size_t>(d)], total / 4) << "device " << d;
  }
  L::Generator gen(m, mesh, rules);
  for (Lowered l : {gen.lower_prefill(1, 16, 32), gen.lower_decode(1, 32)}) {
    std::string text = l.as_text();
    int all_reduce = 0, counts = 0;
    for (size_t p = text.find("= all_reduce("); p != std::string::npos; p = text.find("= all_reduce(", p + 1)) {
      all_reduce++;
      counts += text.substr(p, text.find('\n', p) - p).find("i32[1]") != std::string::npos;
    }
    // One per layer after attention (o_proj), one after the MLP (down_proj), one for the
    // vocab-parallel embedding lookup, and one of the non-finite logit counts each device
    // made over its block of the vocabulary (i32[B]): in the program, the two of the scanned
    // layer, the lookup's and the count's; run, 2 per layer and 2.
    EXPECT_EQ(all_reduce, 4);
    EXPECT_EQ(counts, 1);
    EXPECT_EQ(l.cost_analysis().collectives_per_device.at("all_reduce"),
              2 * m.config.num_layers + 2);
    // The only gather is of the logits for sampling ([B, V] split over the vocab).
    for (size_t p = text.find("= all_gather("); p != std::string::npos; p = text.find("= all_gather(", p + 1)) {
      std::string line = text.substr(p, text.find('\n', p) - p);
      EXPECT_NE(line.find("f32[1,49152]"), std::string::npos) << line;
    }
    EXPECT_EQ(text.find("all_to_all"), std::string::npos);
  }
}
