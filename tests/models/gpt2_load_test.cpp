// Hostile GPT-2 checkpoints (copies of the tiny golden checkpoint with one thing changed) and
// checkpoint writing: a stored shape that differs from the config (c_attn transposed or
// reshaped), unused or missing tensors, bad config.json values; saving replaces a checkpoint
// whole and refuses folders it did not write.
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "partix/models/gpt2.h"
#include "test_util.h"

using namespace partix;
namespace g2 = partix::models::gpt2;
namespace fs = std::filesystem;

namespace {

std::string golden_dir() { return std::string(PARTIX_TESTS_DIR) + "/golden/gpt2_tiny"; }

g2::Checkpoint load(const std::string& dir) {
  return g2::load_hf(dir, Mesh({1, 1}, {"data", "model"}), g2::sharding_rules(false));
}

// A copy of the golden checkpoint with its tensors passed through `edit`.
std::string copy_with(const test::TempDir& tmp, const std::function<void(Params&)>& edit) {
  const std::string dir = tmp.file("ckpt");
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(golden_dir() + "/config.json", dir + "/config.json");
  Params p = Safetensors::open(golden_dir() + "/model.safetensors").load_all();
  edit(p);
  save_safetensors(dir + "/model.safetensors", p);
  return dir;
}

// A copy of the golden checkpoint with config.json keys replaced.
std::string config_with(const test::TempDir& tmp, const nlohmann::json& changes) {
  const std::string dir = copy_with(tmp, [](Params&) {});
  nlohmann::json j = nlohmann::json::parse(test::read_bytes(golden_dir() + "/config.json"));
  j.update(changes);
  test::write_bytes(dir + "/config.json", j.dump());
  return dir;
}

}  // namespace

TEST(Gpt2Load, StoredShapesMustMatchTheConfig) {
  test::TempDir tmp;
  const std::string w = "transformer.h.0.attn.c_attn.weight";
  // [32, 96] transposed, or reshaped to the same element count: refused, not reshaped.
  std::string d = copy_with(tmp, [&](Params& p) { p[w] = transpose(p.at(w), {1, 0}); });
  EXPECT_PARTIX_ERROR(load(d), "[gpt2.load_hf]", w, "has shape [96,32]", "needs [32,96]");
  d = copy_with(tmp, [&](Params& p) { p[w] = reshape(p.at(w), {16, 192}); });
  EXPECT_PARTIX_ERROR(load(d), "has shape [16,192]", "needs [32,96]");
  d = copy_with(tmp, [&](Params& p) { p[w] = reshape(p.at(w), {32 * 96}); });
  EXPECT_PARTIX_ERROR(load(d), "has shape [3072]");
  const std::string b = "transformer.h.1.attn.c_attn.bias";
  d = copy_with(tmp, [&](Params& p) { p[b] = reshape(p.at(b), {3, 32}); });
  EXPECT_PARTIX_ERROR(load(d), b, "has shape [3,32]", "needs [96]");
}

TEST(Gpt2Load, EveryTensorIsAccountedFor) {
  test::TempDir tmp;
  std::string d = copy_with(tmp, [](Params& p) { p["transformer.h.2.ln_1.weight"] = ones({32}); });
  EXPECT_PARTIX_ERROR(load(d), "does not use", "'transformer.h.2.ln_1.weight'");
  d = copy_with(tmp, [](Params& p) { p["lm_head.weight"] = zeros({256, 32}); });
  EXPECT_PARTIX_ERROR(load(d), "does not use", "'lm_head.weight'");
  d = copy_with(tmp, [](Params& p) { p.erase("transformer.h.1.mlp.c_fc.bias"); });
  EXPECT_PARTIX_ERROR(load(d), "lacks 1 tensor(s)", "'transformer.h.1.mlp.c_fc.bias'");
  // n_layer 1 leaves layer 1's tensors unused.
  d = config_with(tmp, {{"n_layer", 1}});
  EXPECT_PARTIX_ERROR(load(d), "(n_layer 1, tied embeddings) does not use",
                      "'transformer.h.1.attn.c_attn.bias'");
  // The causal-mask buffers older transformers saved are known and ignored.
  d = copy_with(tmp, [](Params& p) {
    p["transformer.h.0.attn.bias"] = ones({1, 1, 32, 32});
    p["transformer.h.1.attn.masked_bias"] = scalar<float>(-1e4f);
  });
  EXPECT_EQ(load(d).params.size(), 2u + 2 * 12 + 2);
  // But only with their own shape.
  d = copy_with(tmp, [](Params& p) { p["transformer.h.0.attn.bias"] = ones({4}); });
  EXPECT_PARTIX_ERROR(load(d), "'transformer.h.0.attn.bias'");
}

TEST(Gpt2Load, ConfigValuesAreValidated) {
  test::TempDir tmp;
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"n_head", 0}})), "[gpt2.config]", "config.json",
                      "n_head is 0, must be in [1, 32]");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"n_head", 5}})),
                      "n_embd is 32, not a multiple of n_head (5)");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"n_layer", 4294967296}})),
                      "n_layer is 4294967296, must be in [1, 1024]");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"n_embd", 32.5}})),
                      "n_embd is 32.5 (number), not an integer");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"layer_norm_epsilon", -1}})),
                      "layer_norm_epsilon is -1");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"layer_norm_epsilon", "1e-5"}})),
                      "layer_norm_epsilon is \"1e-5\" (string), not a number");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"resid_pdrop", 1.5}})), "resid_pdrop is 1.5");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"n_inner", 100}})), "n_inner is 100");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"activation_function", "relu"}})),
                      "activation_function is 'relu'");
  EXPECT_PARTIX_ERROR(load(config_with(tmp, {{"tie_word_embeddings", false}})),
                      "tie_word_embeddings true");
  g2::Config c = g2::tiny();
  c.layer_norm_epsilon = std::nan("");
  EXPECT_PARTIX_ERROR(g2::param_specs(c), "[gpt2.config] layer_norm_epsilon is nan");
}

TEST(Gpt2Save, ReplacesACheckpointWholeAndCleansStaleTemporaries) {
  test::TempDir tmp;
  g2::Checkpoint ck = load(golden_dir());
  const std::string dir = tmp.file("out");
  g2::save_hf(dir, ck.params, ck.config);
  // A temporary left by a process that no longer runs (pid far above pid_max).
  const std::string stale = dir + ".tmp-999999999";
  fs::create_directories(stale);
  test::write_bytes(stale + "/model.safetensors", "partial");
  g2::Config other = ck.config;
  other.layer_norm_epsilon = 2e-5;
  g2::save_hf(dir, ck.params, other);
  EXPECT_EQ(load(dir).config.layer_norm_epsilon, 2e-5);
  EXPECT_FALSE(fs::exists(stale));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path())) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"out"});  // nothing left beside it
}

TEST(Gpt2Save, RefusesToReplaceAFolderItDidNotWrite) {
  test::TempDir tmp;
  g2::Checkpoint ck = load(golden_dir());
  const std::string dir = tmp.file("home");
  fs::create_directories(dir);
  test::write_bytes(dir + "/notes.txt", "precious");
  EXPECT_PARTIX_ERROR(g2::save_hf(dir, ck.params, ck.config), "[gpt2.save_hf]", "notes.txt",
                      "refusing to replace it");
  EXPECT_EQ(test::read_bytes(dir + "/notes.txt"), "precious");
  EXPECT_PARTIX_ERROR(g2::check_save_path(dir), "notes.txt");
  // A file where the folder should be, or a place no file can be created.
  test::write_bytes(tmp.file("file"), "x");
  EXPECT_PARTIX_ERROR(g2::check_save_path(tmp.file("file")), "it exists and is not a folder");
  EXPECT_PARTIX_ERROR(g2::check_save_path("/proc/partix-ckpt"), "cannot create files in '/proc'");
}
