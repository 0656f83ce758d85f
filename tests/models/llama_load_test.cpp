// Hostile Llama checkpoints: mutated copies of the real SmolLM2 GGUF (hyperparameters that
// divide by zero or index out of range, wrong tensor shapes, layer counts that do not match the
// tensors, changed quantization types) and config.json files. Each must be a partix::Error
// naming the key or tensor, before any weight is loaded.
#include <cmath>
#include <filesystem>
#include <limits>

#include "io/gguf_mutator.h"
#include "io/io_test_util.h"
#include "partix/models/llama.h"
#include "test_util.h"

using namespace partix;
namespace L = partix::models::llama;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint32_t kQ4_0 = 2, kQ8_0 = 8, kF16 = 1;

// Loads `path` on one device.
void load(const std::string& path) {
  Mesh mesh({1}, {"model"});
  L::load(path, mesh, L::sharding_rules());
}

// The real file cut to two layers: every case below starts from a small valid model.
test::GgufMutator two_layers(const std::string& real) {
  test::GgufMutator m(real);
  m.keep_layers(2);
  return m;
}

}  // namespace

TEST(LlamaLoad, TwoLayerCopyOfTheRealFileLoads) {
  PARTIX_REQUIRE_SMOLLM2(real);
  test::TempDir dir;
  two_layers(real).write(dir.file("m.gguf"));
  Mesh mesh({1}, {"model"});
  L::Model m = L::load(dir.file("m.gguf"), mesh, L::sharding_rules());
  EXPECT_EQ(m.config.num_layers, 2);
  // Stacked at load (the default): nine layer parameters [2, ...], the embedding, the norm.
  EXPECT_EQ(m.params.size(), 9u + 2);
  EXPECT_EQ(m.params.at("model.layers.mlp.up_proj.weight").shape(),
            (Shape{2, m.config.intermediate_size, m.config.hidden_size}));
  L::Model per = L::load(dir.file("m.gguf"), mesh, L::sharding_rules(), {.stacked = false});
  EXPECT_EQ(per.params.size(), 2u * 9 + 2);
  // The same weights either way.
  for (const auto& [name, a] : L::unstack_layers(m.params, m.config)) {
    EXPECT_EQ(a.to_vector<float>(), per.params.at(name).to_vector<float>()) << name;
  }
}

TEST(LlamaLoad, ZeroHeadCountsAreErrorsNotDivisionByZero) {
  PARTIX_REQUIRE_SMOLLM2(real);
  test::TempDir dir;
  const std::string p = dir.file("m.gguf");
  // The head size is present, so no default that divides may be evaluated either.
  two_layers(real).set_u32("llama.attention.head_count", 0).write(p);
  EXPECT_PARTIX_ERROR(load(p), "[llama.load]", p, "llama.attention.head_count is 0");
  two_layers(real).set_u32("llama.attention.head_count_kv", 0).write(p);
  EXPECT_PARTIX_ERROR(load(p), "llama.attention.head_count_kv is 0");
  two_layers(real)
      .set_u32("llama.attention.head_count", 0)
      .remove_key("llama.rope.dimension_count")
      .write(p);
  EXPECT_PARTIX_ERROR(load(p), "llama.attention.head_count is 0");
}

TEST(LlamaLoad, HeadCountsMustDivide) {
  PARTIX_REQUIRE_SMOLLM2(real);
  test::TempDir dir;
  const std::string p = dir.file("m.gguf");
  two_layers(real).set_u32("llama.attention.head_count_kv", 2).write(p);
  EXPECT_PARTIX_ERROR(load(p), "llama.attention.head_count_kv is 2, must divide",
                      "llama.attention.head_count (9)");
  two_layers(real).set_u32("llama.attention.head_count_kv", 18).write(p);
  EXPECT_PARTIX_ERROR(load(p), "llama.attention.head_count_kv is 18, must be in [1, 9]");
  // Without an explicit head size, hidden / heads must divide.
  two_layers(real)
      .set_u32("llama.attention.head_count", 7)
      .set_u32("llama.attention.head_count_kv", 7)
      .remove_key("llama.rope.dimension_count")
      .write(p);
  EXPECT_PARTIX_ERROR(load(p), "llama.embedding_length is 576, not a multiple of",
                      "llama.attention.head_count (7)");
  two_layers(real).set_u32("llama.rope.dimension_count", 63).write(p);
  EXPECT_PARTIX_ERROR(load(p), "llama.rope.dimension_count is 63, must be even");
}

TEST(LlamaLoad, FloatHyperparametersMustBeFiniteAndInRange) {
  PARTIX_REQUIRE_SMOLLM2(real);
  test::TempDir dir;
  const std::string p = dir.file("m.gguf");
  for (float eps : {kNaN, -1e-5f, 0.0f, INFINITY}) {
    two_layers(real).set_f32("llama.attention.layer_norm_rms_epsilon", eps).write(p);
    EXPECT_PARTIX_ERROR(load(p), "llama.attention.layer_norm_rms_epsilon is",
                        "must be finite and in (0, 1)");
  }
  for (float base : {kNaN, 0.0f, -10000.0f, 1.0f, INFINITY}) {
    two_layers(real).set_f32("llama.rope.freq_base", base).write(p);
    EXPECT_PARTIX_ERROR(load(p), "llama.rope.freq_base is", "must be finite and greater than 1");
  }
  two_layers(real).set_u32("tokenizer.ggml.eos_token_id", 49152).write(p);
  EXPECT_PARTIX_ERROR(load(p), "tokenizer.ggml.eos_token_id is 49152, must be in [0, 49151]");
}

TEST(LlamaLoad, LayerCountsAreBoundedAndMatchTheTensors) {
  PARTIX_REQUIRE_SMOLLM2(real);
  test::TempDir dir;
  const std::string p = dir.file("m.gguf");
  // 4 billion layers: refused at once, not after building names for each.
  two_layers(real).set_u32("llama.block_count", 0xFFFFFFFFu).write(p);
  EXPECT_PARTIX_ERROR(load(p), "llama.block_count is 4294967295, must be in [1, 1024]");
  two_layers(real).set_u32("llama.block_count", 0).write(p);
  EXPECT_PARTIX_ERROR(load(p), "llama.block_count is 0");
  // More layers than the file holds.
  two_layers(real).set_u32("llama.block_count", 3).write(p);
  EXPECT_PARTIX_ERROR(load(p), "lacks 9 tensor(s)", "llama.block_count 3",
                      "'blk.2.attn_norm.weight'");
  // Fewer: the last layer's tensors would be silently ignored.
  two_layers(real).set_u32("llama.block_count", 1).write(p);
  EXPECT_PARTIX_ERROR(load(p), "holds 9 tensor(s) the configuration (llama.block_count 1",
                      "does not use", "'blk.1.attn_k.weight'");
  // A tensor the model has no place for (a bias) is not silently ignored.
  two_layers(real).add_f32("blk.0.attn_q.bias", {576}, 0.0f).write(p);
  EXPECT_PARTIX_ERROR(load(p), "holds 1 tensor(s)", "does not use", "'blk.0.attn_q.bias'");
  // Llama 3.1's rope frequency factors would change every rotation: refused by name.
  two_layers(real).add_f32("rope_freqs.weight", {32}, 1.0f).write(p);
  EXPECT_PARTIX_ERROR(load(p), "rope_freqs.weight", "does not apply");
  // A missing tensor is named.
  two_layers(real).drop_tensor("blk.1.ffn_up.weight").write(p);
  EXPECT_PARTIX_ERROR(load(p), "lacks 1 tensor(s)", "'blk.1.ffn_up.weight'");
}

TEST(LlamaLoad, EveryTensorShapeIsCheckedAgainstTheConfig) {
  PARTIX_REQUIRE_SMOLLM2(real);
  test::TempDir dir;
  const std::string p = dir.file("m.gguf");
  // attn_q as rank 1 (same byte size): would overrun a [9, 64, 576] reshape.
  two_layers(real).set_dims("blk.0.attn_q.weight", {576 * 576}).write(p);
  EXPECT_PARTIX_ERROR(load(p), "tensor 'blk.0.attn_q.weight' has shape [331776]",
                      "needs [576,576]");
  // attn_k transposed (Q4_1 rows of 192 are whole blocks).
  two_layers(real).set_dims("blk.1.attn_k.weight", {192, 576}).write(p);
  EXPECT_PARTIX_ERROR(load(p), "tensor 'blk.1.attn_k.weight' has shape [576,192]",
                      "needs [192,576]");
  // A hidden size that disagrees with every tensor.
  two_layers(real).set_u32("llama.embedding_length", 640).write(p);
  EXPECT_PARTIX_ERROR(load(p), "has shape", "llama.embedding_length 640");
  // A vocabulary that disagrees with the embedding.
  two_layers(real).set_u32("llama.vocab_size", 1000).write(p);
  EXPECT_PARTIX_ERROR(load(p), "tensor 'token_embd.weight' has shape [49152,576]",
                      "llama.vocab_size 1000", "needs [1000,576]");
}

TEST(LlamaLoad, ChangedQuantizationTypesAreDetected) {
  PARTIX_REQUIRE_SMOLLM2(real);
  test::TempDir dir;
  const std::string p = dir.file("m.gguf");
  // Q4_1 -> Q4_0: 18 bytes a block instead of 20, leaving bytes no tensor claims.
  two_layers(real).set_type("blk.0.attn_q.weight", kQ4_0).write(p);
  EXPECT_PARTIX_ERROR(GgufFile::open(p), "[gguf]", p, "belong to no tensor",
                      "'blk.0.attn_q.weight'");
  // Q4_1 -> Q8_0: 34 bytes a block, running into the next tensor.
  two_layers(real).set_type("blk.0.attn_q.weight", kQ8_0).write(p);
  EXPECT_PARTIX_ERROR(GgufFile::open(p), "overlap", "'blk.0.attn_q.weight'");
  // F32 -> F16 of the last tensor: the file ends in bytes no tensor claims.
  two_layers(real).set_type("output_norm.weight", kF16).write(p);
  EXPECT_PARTIX_ERROR(GgufFile::open(p), "after the last tensor's data belong to no tensor");
}

TEST(LlamaLoad, ConfigJsonHyperparametersAreValidatedBeforeUse) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  // The tiny configuration with one key replaced.
  auto config = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = {{"model_type", "llama"},   {"vocab_size", 96},
                        {"hidden_size", 48},       {"intermediate_size", 64},
                        {"num_hidden_layers", 2},  {"num_attention_heads", 6},
                        {"num_key_value_heads", 2}};
    if (!key.empty()) j[key] = value;
    test::write_bytes(dir.file("config.json"), j.dump());
  };
  config("num_attention_heads", 0);
  EXPECT_PARTIX_ERROR(load(d), "[llama.load]", "config.json", "num_attention_heads is 0");
  config("num_key_value_heads", 0);
  EXPECT_PARTIX_ERROR(load(d), "num_key_value_heads is 0");
  config("head_dim", 8.5);
  EXPECT_PARTIX_ERROR(load(d), "head_dim is 8.5 (number), not an integer");
  config("rms_norm_eps", -1e-6);
  EXPECT_PARTIX_ERROR(load(d), "rms_norm_eps is -1e-06, must be finite and in (0, 1)");
  config("rope_theta", 0);
  EXPECT_PARTIX_ERROR(load(d), "rope_theta is 0");
  config("rope_theta", "10000");
  EXPECT_PARTIX_ERROR(load(d), "rope_theta is \"10000\" (string), not a number");
  config("num_hidden_layers", 4294967295u);
  EXPECT_PARTIX_ERROR(load(d), "num_hidden_layers is 4294967295, must be in [1, 1024]");
  config("hidden_act", "gelu");
  EXPECT_PARTIX_ERROR(load(d), "hidden_act is 'gelu'");
  config("rope_scaling", {{"rope_type", "llama3"},
                          {"factor", 8},
                          {"low_freq_factor", 4},
                          {"high_freq_factor", 4},
                          {"original_max_position_embeddings", 8192}});
  EXPECT_PARTIX_ERROR(load(d), "rope_scaling.high_freq_factor is 4, must be finite and greater");
  // A valid configuration gets as far as the missing weights.
  config("", nullptr);
  EXPECT_PARTIX_ERROR(load(d), "[safetensors]", "holds neither model.safetensors");
}

TEST(LlamaLoad, ConfigsBuiltInCodeAreValidatedToo) {
  L::Config c = L::tiny();
  c.num_kv_heads = 0;
  EXPECT_PARTIX_ERROR(L::param_shapes(c), "[llama.config] num_kv_heads is 0");
  c = L::tiny();
  c.rms_norm_eps = std::nan("");
  EXPECT_PARTIX_ERROR(L::param_shapes(c), "rms_norm_eps is nan");
}

TEST(LlamaLoad, HuggingFaceFoldersAreCheckedTensorByTensor) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const L::Config c = L::tiny();
  nlohmann::json j = {{"model_type", "llama"},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size},
                      {"num_hidden_layers", c.num_layers},
                      {"num_attention_heads", c.num_heads},
                      {"num_key_value_heads", c.num_kv_heads},
                      {"head_dim", c.head_dim},
                      {"tie_word_embeddings", true}};
  test::write_bytes(dir.file("config.json"), j.dump());
  // Tensors in the stored layouts, with `edit` applied.
  auto write = [&](const std::function<void(Params&)>& edit) {
    Params p;
    for (const auto& [name, shape] : L::stored_shapes(c)) p[name] = ones(shape);
    edit(p);
    save_safetensors(dir.file("model.safetensors"), p);
  };
  write([](Params&) {});
  Mesh mesh({2}, {"model"});
  L::Model m = L::load(d, mesh, L::sharding_rules(), {.stacked = false});
  EXPECT_EQ(m.params.at("model.layers.1.self_attn.k_proj.weight").shape(),
            (Shape{c.num_kv_heads, c.head_dim, c.hidden_size}));
  EXPECT_EQ(m.params.at("model.layers.1.self_attn.q_proj.weight").shape(),
            (Shape{c.num_kv_heads, c.num_heads / c.num_kv_heads, c.head_dim, c.hidden_size}));
  const std::string k = "model.layers.1.self_attn.k_proj.weight";
  write([&](Params& p) { p[k] = ones({c.hidden_size, c.num_kv_heads * c.head_dim}); });
  EXPECT_PARTIX_ERROR(load(d), "tensor '" + k + "' has shape [48,16]", "needs [16,48]");
  write([](Params& p) { p["lm_head.weight"] = ones({96, 48}); });
  EXPECT_PARTIX_ERROR(load(d), "tied embeddings", "does not use", "'lm_head.weight'");
  // The rotary buffer older transformers saved is recomputed, so it may be there.
  write([](Params& p) { p["model.layers.0.self_attn.rotary_emb.inv_freq"] = ones({4}); });
  EXPECT_NO_THROW(load(d));
  write([](Params& p) { p["model.layers.0.self_attn.rotary_emb.inv_freq"] = ones({5}); });
  EXPECT_PARTIX_ERROR(load(d), "'model.layers.0.self_attn.rotary_emb.inv_freq'");
}
