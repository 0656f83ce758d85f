// Llama checkpoints: GGUF files and Hugging Face directories, loaded into head-major layouts
// and the shardings of a rule table.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "models/llama/llama.h"
#include "partix/io.h"
#include "partix/ops.h"

namespace partix::models::llama {

namespace fs = std::filesystem;

std::string default_model_path() {
  const char* cache = std::getenv("PARTIX_CACHE");
  std::string base = cache ? cache : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/partix";
  return base + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

namespace {

std::string layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

// Source tensors by Hugging Face name, in Hugging Face layouts ([out, in] Linear weights).
struct Source {
  std::function<bool(const std::string&)> has;
  // Loads in `sharding` (a mesh of one device for tensors that are re-laid out first).
  std::function<Array(const std::string&, const NamedSharding&)> load;
  // GGUF stores q and k rows in llama.cpp's interleaved rotary order.
  bool interleaved_qk = false;
};

// [H*D, C] rows -> [H, D, C]; llama.cpp's interleaved halves restored when needed.
Array heads_of(const Array& w, int64_t heads, int64_t d, bool interleaved) {
  const int64_t c = w.shape()[1];
  if (!interleaved) return reshape(w, {heads, d, c});
  return reshape(transpose(reshape(w, {heads, d / 2, 2, c}), {0, 2, 1, 3}), {heads, d, c});
}

Model load_into(const Config& cfg, const Source& src, const Mesh& mesh,
                const std::vector<ShardingRule>& rules) {
  Model m;
  m.config = cfg;
  const int64_t H = cfg.num_heads, KV = cfg.num_kv_heads, D = cfg.head_dim, C = cfg.hidden_size;
  const int64_t G = H / KV;
  NamedSharding host(Mesh({1}, {"load"}, {devices()[0]}), P());
  auto target = [&](const std::string& name) { return NamedSharding(mesh, spec_for(name, rules)); };
  auto need = [&](const std::string& name) {
    detail::check(src.has(name), "llama.load", "the checkpoint has no tensor '{}'", name);
  };
  auto direct = [&](const std::string& name) {
    need(name);
    m.params[name] = src.load(name, target(name));
  };
  for (const auto& [name, shape] : param_shapes(cfg)) {
    if (name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight") ||
        name.ends_with("v_proj.weight") || name.ends_with("o_proj.weight")) {
      continue;  // re-laid out below
    }
    direct(name);
  }
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    std::string l = layer(i) + "self_attn.";
    for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"}) need(l + n);
    // One tensor at a time on one device, then placed in its sharding.
    Array q = heads_of(src.load(l + "q_proj.weight", host), H, D, src.interleaved_qk);
    Array k = heads_of(src.load(l + "k_proj.weight", host), KV, D, src.interleaved_qk);
    Array v = heads_of(src.load(l + "v_proj.weight", host), KV, D, false);
    // Each key/value head repeated for its G query heads (Hugging Face's repeat_kv).
    auto expand = [&](const Array& w) {
      return reshape(broadcast_in_dim(w, {KV, G, D, C}, {0, 2, 3}), {H, D, C});
    };
    Array o = reshape(src.load(l + "o_proj.weight", host), {C, H, D});
    m.params[l + "q_proj.weight"] = device_put(q, target(l + "q_proj.weight"));
    m.params[l + "k_proj.weight"] = device_put(expand(k), target(l + "k_proj.weight"));
    m.params[l + "v_proj.weight"] = device_put(expand(v), target(l + "v_proj.weight"));
    m.params[l + "o_proj.weight"] = device_put(o, target(l + "o_proj.weight"));
  }
  return m;
}

std::string gguf_name(const std::string& hf) {
  static const std::vector<std::pair<std::string, std::string>> map = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  if (hf.rfind("model.layers.", 0) == 0) {
    size_t dot = hf.find('.', 13);
    std::string idx = hf.substr(13, dot - 13), rest = hf.substr(dot + 1);
    for (const auto& [a, b] : map) {
      if (rest == a) return "blk." + idx + "." + b;
    }
  }
  return hf;
}

Model load_gguf(const std::string& path, const Mesh& mesh, const std::vector<ShardingRule>& rules) {
  GgufFile f = GgufFile::open(path);
  std::string arch = f.get_string("general.architecture", "llama");
  detail::check(arch == "llama", "llama.load", "{} holds a '{}' model, not llama", path, arch);
  Config c;
  c.hidden_size = f.get_int("llama.embedding_length");
  c.intermediate_size = f.get_int("llama.feed_forward_length");
  c.num_layers = f.get_int("llama.block_count");
  c.num_heads = f.get_int("llama.attention.head_count");
  c.num_kv_heads = f.get_int("llama.attention.head_count_kv", c.num_heads);
  c.head_dim = f.get_int("llama.rope.dimension_count", c.hidden_size / c.num_heads);
  c.rms_norm_eps = f.get_float("llama.attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = f.get_float("llama.rope.freq_base", 10000.0);
  c.max_position = f.get_int("llama.context_length", 2048);
  c.vocab_size = f.has("llama.vocab_size") ? f.get_int("llama.vocab_size")
                                           : static_cast<int64_t>(f.get_strings("tokenizer.ggml.tokens").size());
  c.tie_word_embeddings = !f.has_tensor("output.weight");
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id", 1);
  c.eos_token_id = f.get_int("tokenizer.ggml.eos_token_id", 2);
  if (f.get_string("llama.rope.scaling.type", "") == "llama3") {
    RopeScaling s;
    s.factor = f.get_float("llama.rope.scaling.factor", s.factor);
    c.rope_scaling = s;
  }
  Source src;
  src.has = [&](const std::string& n) { return f.has_tensor(gguf_name(n)); };
  src.load = [&](const std::string& n, const NamedSharding& s) { return f.load(gguf_name(n), s, DType::F32); };
  src.interleaved_qk = true;
  Model m = load_into(c, src, mesh, rules);
  m.tokenizer = std::make_shared<Tokenizer>(Tokenizer::from_gguf(f));
  m.source = path;
  return m;
}

Config config_from_hf(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  Config c;
  c.vocab_size = j.value("vocab_size", c.vocab_size);
  c.hidden_size = j.value("hidden_size", c.hidden_size);
  c.intermediate_size = j.value("intermediate_size", c.intermediate_size);
  c.num_layers = j.value("num_hidden_layers", c.num_layers);
  c.num_heads = j.value("num_attention_heads", c.num_heads);
  c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
  c.head_dim = j.value("head_dim", c.hidden_size / c.num_heads);
  c.rms_norm_eps = j.value("rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = j.value("rope_theta", c.rope_theta);
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  c.max_position = j.value("max_position_embeddings", c.max_position);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number()) c.bos_token_id = j["bos_token_id"];
  if (j.contains("eos_token_id") && j["eos_token_id"].is_number()) c.eos_token_id = j["eos_token_id"];
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const auto& r = j["rope_scaling"];
    std::string type = r.value("rope_type", r.value("type", ""));
    if (type == "llama3") {
      RopeScaling s;
      s.factor = r.value("factor", s.factor);
      s.low_freq_factor = r.value("low_freq_factor", s.low_freq_factor);
      s.high_freq_factor = r.value("high_freq_factor", s.high_freq_factor);
      s.original_max_position = r.value("original_max_position_embeddings", s.original_max_position);
      c.rope_scaling = s;
    } else if (!type.empty() && type != "default") {
      detail::fail("llama.load", "rope scaling '{}' is not supported (only llama3)", type);
    }
  }
  return c;
}

Model load_hf(const std::string& dir, const Mesh& mesh, const std::vector<ShardingRule>& rules) {
  std::ifstream in(fs::path(dir) / "config.json");
  detail::check(static_cast<bool>(in), "llama.load", "{} has no config.json", dir);
  std::stringstream ss;
  ss << in.rdbuf();
  Config c;
  try {
    c = config_from_hf(ss.str());
  } catch (const nlohmann::json::exception& e) {
    detail::fail("llama.load", "{}/config.json: {}", dir, e.what());
  }
  Safetensors st = Safetensors::open(dir);
  Source src;
  src.has = [&](const std::string& n) { return st.contains(n); };
  src.load = [&](const std::string& n, const NamedSharding& s) { return st.load(n, s, DType::F32); };
  Model m = load_into(c, src, mesh, rules);
  fs::path tok = fs::path(dir) / "tokenizer.json";
  if (fs::exists(tok)) m.tokenizer = std::make_shared<Tokenizer>(Tokenizer::from_json_file(tok.string()));
  m.source = dir;
  return m;
}

}  // namespace

Model load(const std::string& path, const Mesh& mesh, const std::vector<ShardingRule>& rules) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_hf(path, mesh, rules);
  detail::check(fs::exists(path, ec), "llama.load",
                "'{}' does not exist (scripts/fetch_smollm2.sh downloads the default model)", path);
  return load_gguf(path, mesh, rules);
}

}  // namespace partix::models::llama
