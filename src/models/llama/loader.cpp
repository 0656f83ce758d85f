// Llama checkpoints: GGUF files and Hugging Face directories, loaded into head-major layouts
// and the shardings of a rule table.
#include <cstdlib>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/memory.h"
#include "files/input_file.h"
#include "files/json_util.h"
#include "models/llama/layout.h"
#include "partix/models/llama.h"
#include "partix/io.h"
#include "partix/ops.h"

namespace partix::models::llama {

namespace fs = std::filesystem;

std::string default_model_path() {
  const char* cache = std::getenv("PARTIX_CACHE");
  std::string base =
      cache ? cache
            : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/partix";
  return base + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

namespace {

constexpr std::string_view kApi = "llama.load";
// config.json is a few KB; anything far larger is not one.
constexpr uint64_t kMaxConfigBytes = 16 << 20;

// Source tensors by Hugging Face name, in Hugging Face layouts ([out, in] Linear weights).
struct Source {
  std::string path;
  // Every tensor the file holds, by its name in the file, with its stored shape.
  std::map<std::string, Shape> inventory;
  // The file's name for a Hugging Face name.
  std::function<std::string(const std::string&)> file_name;
  // Loads in `sharding` (a mesh of one device for tensors that are re-laid out first).
  std::function<Array(const std::string&, const NamedSharding&)> load;
  // Tensors the file may hold that the model does not use, and why they can be ignored;
  // returns "" for a tensor that must not be there.
  std::function<std::string(const std::string&, const Shape&)> ignorable;
  // GGUF stores q and k rows in llama.cpp's interleaved rotary order.
  bool interleaved_qk = false;
  // The dtype load() gives a tensor (by Hugging Face name); unset: f32.
  std::function<DType(const std::string&)> loaded_dtype;
};

std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  std::vector<std::string> quoted;
  for (size_t i = 0; i < std::min(names.size(), kShown); ++i)
    quoted.push_back("'" + names[i] + "'");
  std::string out = fmt::format("{}", fmt::join(quoted, ", "));
  if (names.size() > kShown) out += fmt::format(" and {} more", names.size() - kShown);
  return out;
}

// Every tensor the configuration needs is in the file with the shape it implies, and every
// tensor in the file is used: a wrong shape or layer count is refused before anything loads.
void check_inventory(const Config& cfg, const Source& src, const ConfigSource& cs) {
  const std::map<std::string, Shape> expected = stored_shapes(cfg);
  std::vector<std::string> missing;
  std::set<std::string> used;
  for (const auto& [hf, shape] : expected) {
    const std::string name = src.file_name(hf);
    auto it = src.inventory.find(name);
    if (it == src.inventory.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(name);
    if (it->second != shape) {
      detail::fail(kApi,
                   "'{}': tensor '{}' has shape {} but the configuration ({} {}, {} {}, {} {}, "
                   "{} {}, {} {}, {} {}) needs {}",
                   src.path, name, shape_to_string(it->second), cs.keys.vocab_size, cfg.vocab_size,
                   cs.keys.hidden_size, cfg.hidden_size, cs.keys.num_heads, cfg.num_heads,
                   cs.keys.num_kv_heads, cfg.num_kv_heads, cs.keys.head_dim, cfg.head_dim,
                   cs.keys.intermediate_size, cfg.intermediate_size, shape_to_string(shape));
    }
  }
  if (!missing.empty()) {
    detail::fail(kApi, "'{}' lacks {} tensor(s) the configuration ({} {}) needs: {}", src.path,
                 missing.size(), cs.keys.num_layers, cfg.num_layers, name_list(missing));
  }
  std::vector<std::string> unused;
  for (const auto& [name, shape] : src.inventory) {
    if (used.count(name)) continue;
    const std::string why = src.ignorable ? src.ignorable(name, shape) : "";
    if (why.empty()) unused.push_back(name);
  }
  if (!unused.empty()) {
    detail::fail(kApi,
                 "'{}' holds {} tensor(s) the configuration ({} {}{}) does not use: {}; refusing "
                 "to load a model that does not match its file",
                 src.path, unused.size(), cs.keys.num_layers, cfg.num_layers,
                 cfg.tie_word_embeddings ? ", tied embeddings" : "", name_list(unused));
  }
}

// [n*D, C] rows -> [n, D, C], llama.cpp's interleaved rotary halves restored when needed (output
// row r = j * D/2 + i of a head comes from stored row 2i + j): one gather of whole rows, so that
// quantized blocks move as they are.
Array heads_by_rows(const Array& w, int64_t heads, int64_t d, bool interleaved) {
  if (!interleaved) return reshape(w, {heads, d, w.shape()[1]});
  std::vector<int32_t> rows;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < d; ++r) {
      rows.push_back(static_cast<int32_t>(h * d + 2 * (r % (d / 2)) + r / (d / 2)));
    }
  }
  Array idx = from_vector(rows, {heads * d});
  return reshape(take(w, idx, 0), {heads, d, w.shape()[1]});
}

// Every device holds a block of every split weight, padded when a dimension has fewer entries
// than the mesh axis has devices (3 key/value heads on 8 devices: each holds one head's block).
// What this process's devices will hold in all is checked against the host's memory before
// anything loads, so too many devices is an error naming the sizes, not an OOM kill later.
void check_weights_fit(const Config& cfg, const Source& src, const Mesh& mesh,
                       const std::map<std::string, NamedSharding>& shardings, DType dtype) {
  int64_t local = 0;
  for (const Device& d : mesh.devices()) local += d.process_index == process_index() ? 1 : 0;
  if (local == 0) return;
  double per_device = 0;
  for (const auto& [name, shape] : param_shapes(cfg, false)) {
    DType dt = src.loaded_dtype ? src.loaded_dtype(name) : DType::F32;
    if (dt == DType::F32 && !name.ends_with("norm.weight")) dt = dtype;
    const double element =
        static_cast<double>(dtype_size(dt)) / static_cast<double>(dtype_block_elems(dt));
    const bool replicated_table = name == "model.embed_tokens.weight" && is_quantized(dt);
    const Shape block = replicated_table ? shape : shardings.at(name).shard_shape(shape);
    per_device += static_cast<double>(shape_size(block)) * element;
  }
  const double total = per_device * static_cast<double>(local);
  const int64_t limit = detail::device_memory_limit();
  if (limit > 0 && per_device > static_cast<double>(limit)) {
    detail::fail(kApi, "'{}': each device would hold {} of the weights, more than its {} limit",
                 src.path, detail::format_bytes(static_cast<int64_t>(per_device)),
                 detail::format_bytes(limit));
  }
  const double avail = static_cast<double>(detail::available_host_bytes());
  if (total > avail) {
    const std::string padded =
        mesh.size() > cfg.num_kv_heads
            ? fmt::format(
                  ": each holds a block of every split weight, and the {} key/value heads "
                  "split at most {} ways",
                  cfg.num_kv_heads, cfg.num_kv_heads)
            : "";
    detail::fail(kApi,
                 "out of host memory: the weights of '{}' on {} devices need {} ({} per "
                 "device{}), {} available; use fewer devices",
                 src.path, local, detail::format_bytes(static_cast<int64_t>(std::min(total, 9e18))),
                 detail::format_bytes(static_cast<int64_t>(per_device)), padded,
                 detail::format_bytes(static_cast<int64_t>(avail)));
  }
}

Model load_into(const Config& cfg, const Source& src, const ConfigSource& cs, const Mesh& mesh,
                const nn::LogicalRules& rules, DType dtype, bool stacked) {
  // Weight matrices not kept quantized take `dtype`, one tensor at a time as it loads; norms
  // stay f32.
  auto narrow = [&](const std::string& name, Array a) {
    if (dtype == DType::F32 || a.dtype() != DType::F32 || name.ends_with("norm.weight")) return a;
    return astype(a, dtype);
  };
  check_inventory(cfg, src, cs);
  Model m;
  m.config = cfg;
  const int64_t H = cfg.num_heads, KV = cfg.num_kv_heads, D = cfg.head_dim, C = cfg.hidden_size;
  const int64_t G = H / KV;
  NamedSharding host(Mesh({1}, {"load"}, {default_device()}), P());
  const auto shardings = param_shardings(cfg, rules, mesh, /*stacked=*/false);
  check_weights_fit(cfg, src, mesh, shardings, dtype);
  auto target = [&](const std::string& name) { return shardings.at(name); };
  // The embedding, the final norm and the lm_head.
  for (const auto& [name, shape] : param_shapes(cfg, false)) {
    if (name.starts_with(kStackedPrefix)) continue;
    m.params[name] = narrow(name, src.load(name, target(name)));
    // The embedding's rows are gathered whole: a quantized table is replicated, as the
    // vocab-parallel lookup would mask its rows. A tied lm_head keeps the vocab-split table
    // as its own parameter, so that no device computes every logit.
    if (name == "model.embed_tokens.weight" && is_quantized(m.params[name].dtype())) {
      if (cfg.tie_word_embeddings && mesh.size() > 1) m.params["lm_head.weight"] = m.params[name];
      m.params[name] = device_put(m.params[name], NamedSharding(mesh, P()));
    }
  }
  // A layer's attention weights share one dtype (checked before any loads).
  if (src.loaded_dtype) {
    for (int64_t i = 0; i < cfg.num_layers; ++i) {
      const std::string l = layer_prefix(i) + "self_attn.";
      const DType q = src.loaded_dtype(l + "q_proj.weight");
      if (!is_quantized(q)) continue;
      for (const char* w : {"k_proj.weight", "v_proj.weight", "o_proj.weight"}) {
        const DType other = src.loaded_dtype(l + w);
        detail::check(other == q, kApi,
                      "'{}': layer {} mixes {} and {} attention weights; load it dequantized",
                      src.path, i, dtype_name(q), dtype_name(other));
      }
    }
  }
  // Layer i's `suffix` in its per-layer sharding. The attention weights are read onto one
  // device, laid out head-major, then placed.
  auto layer_param = [&](int64_t i, const std::string& suffix) {
    const std::string name = layer_prefix(i) + suffix;
    auto raw = [&] { return narrow(name, src.load(name, host)); };
    if (suffix == "self_attn.q_proj.weight") {
      return device_put(reshape(heads_by_rows(raw(), H, D, src.interleaved_qk), {KV, G, D, C}),
                        target(name));
    }
    if (suffix == "self_attn.k_proj.weight") {
      return device_put(heads_by_rows(raw(), KV, D, src.interleaved_qk), target(name));
    }
    if (suffix == "self_attn.v_proj.weight") {
      return device_put(heads_by_rows(raw(), KV, D, false), target(name));
    }
    if (suffix == "self_attn.o_proj.weight") {
      return device_put(reshape(raw(), {C, KV, G, D}), target(name));
    }
    return narrow(name, src.load(name, target(name)));
  };
  if (!stacked) {
    for (int64_t i = 0; i < cfg.num_layers; ++i) {
      for (const std::string& suffix : layer_parameters()) {
        m.params[layer_prefix(i) + suffix] = layer_param(i, suffix);
      }
    }
    return m;
  }
  // Stacked, one parameter at a time: each layer's tensor is written into the stacked array in
  // place as it loads, so loading holds the weights and one layer's tensor more. Quantized
  // blocks are joined instead (their stack is small).
  const auto stacked_shardings = param_shardings(cfg, rules, mesh, /*stacked=*/true);
  const NamedSharding replicated(mesh, P());
  for (const std::string& suffix : layer_parameters()) {
    const std::string name = std::string(kStackedPrefix) + suffix;
    const NamedSharding& to = stacked_shardings.at(name);
    Array first = layer_param(0, suffix);
    if (is_quantized(first.dtype()) || cfg.num_layers == 1) {
      std::vector<Array> parts{std::move(first)};
      for (int64_t i = 1; i < cfg.num_layers; ++i) parts.push_back(layer_param(i, suffix));
      auto join = jit(
          [](const std::vector<Array>& l) {
            std::vector<Array> rows;
            for (const Array& a : l) rows.push_back(expand_dims(a, 0));
            return stack_balanced(std::move(rows));
          },
          {.out_shardings = {to}, .name = "llama_stack_layers"});
      m.params[name] = join(parts);
    } else {
      Shape shape = first.shape();
      shape.insert(shape.begin(), cfg.num_layers);
      const DType dt = first.dtype();
      Array all = jit([&] { return zeros(shape, dt); },
                      {.out_shardings = {to}, .name = "llama_stack_layers"})();
      auto put = jit(
          [](const Array& into, const Array& x, const Array& i) {
            std::vector<Array> at{i};
            for (int d = 0; d < x.ndim(); ++d) at.push_back(astype(zeros({}), DType::I32));
            return dynamic_update_slice(into, expand_dims(x, 0), at);
          },
          {.out_shardings = {to}, .donate_argnums = {0}, .name = "llama_stack_layer"});
      for (int64_t i = 0; i < cfg.num_layers; ++i) {
        const Array x = i == 0 ? std::move(first) : layer_param(i, suffix);
        all = put(all, x, device_put(scalar<int32_t>(static_cast<int32_t>(i)), replicated));
      }
      m.params[name] = std::move(all);
    }
    // Blocks freed in loading are not allocated again: the system gets them back now.
    detail::release_pool_cache();
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

// The hyperparameters of a GGUF file, read without evaluating any default that divides:
// validate_config sees every value before anything uses it.
std::pair<Config, ConfigSource> config_from_gguf(const GgufFile& f) {
  ConfigSource cs{std::string(kApi), f.path(), gguf_config_keys(), false};
  const ConfigKeys& k = cs.keys;
  Config c;
  c.hidden_size = f.get_int(k.hidden_size);
  c.intermediate_size = f.get_int(k.intermediate_size);
  c.num_layers = f.get_int(k.num_layers);
  c.num_heads = f.get_int(k.num_heads);
  c.num_kv_heads = f.has(k.num_kv_heads) ? f.get_int(k.num_kv_heads) : c.num_heads;
  cs.head_dim_derived = !f.has(k.head_dim);
  if (!cs.head_dim_derived) {
    c.head_dim = f.get_int(k.head_dim);
  } else if (c.num_heads > 0) {
    c.head_dim = c.hidden_size / c.num_heads;  // validate_config checks it divides
  }
  c.rms_norm_eps = f.get_float(k.rms_norm_eps, 1e-5);
  c.rope_theta = f.get_float(k.rope_theta, 10000.0);
  c.max_position = f.get_int(k.max_position, 2048);
  c.vocab_size = f.has(k.vocab_size)
                     ? f.get_int(k.vocab_size)
                     : static_cast<int64_t>(f.get_strings("tokenizer.ggml.tokens").size());
  c.tie_word_embeddings = !f.has_tensor("output.weight");
  c.bos_token_id = f.get_int(k.bos_token_id, 1);
  c.eos_token_id = f.get_int(k.eos_token_id, 2);
  const std::string scaling = f.get_string("llama.rope.scaling.type", "");
  if (scaling == "llama3") {
    RopeScaling s;
    s.factor = f.get_float(k.rope_factor, s.factor);
    c.rope_scaling = s;
  } else if (!scaling.empty() && scaling != "none") {
    detail::fail(kApi, "'{}': llama.rope.scaling.type is '{}', which partix does not support",
                 f.path(), scaling);
  }
  // A mixture of experts, or keys whose size differs from the head size, is another model.
  if (f.get_int("llama.expert_count", 0) != 0) {
    detail::fail(kApi, "'{}': llama.expert_count is {}: mixtures of experts are not supported",
                 f.path(), f.get_int("llama.expert_count"));
  }
  for (const char* key : {"llama.attention.key_length", "llama.attention.value_length"}) {
    if (f.has(key) && f.get_int(key) != c.head_dim) {
      detail::fail(kApi, "'{}': {} is {} but the head size ({}) is {}", f.path(), key,
                   f.get_int(key), k.head_dim, c.head_dim);
    }
  }
  validate_config(c, cs);
  return {c, cs};
}

Model load_gguf(const std::string& path, const Mesh& mesh, const nn::LogicalRules& rules,
                const LoadOptions& options) {
  const bool quantized = options.quantized;
  GgufFile f = GgufFile::open(path);
  std::string arch = f.get_string("general.architecture", "llama");
  detail::check(arch == "llama", kApi, "'{}' holds a '{}' model, not llama", path, arch);
  auto [c, cs] = config_from_gguf(f);
  // llama.cpp stores Llama 3.1's rope scaling as per-frequency factors; ignoring them (as an
  // unused tensor) would rotate every position wrongly.
  if (f.has_tensor("rope_freqs.weight")) {
    detail::fail(kApi,
                 "'{}' holds rope_freqs.weight (rope frequency factors, as llama.cpp writes for "
                 "Llama 3.1), which partix does not apply",
                 path);
  }
  Source src;
  src.path = path;
  for (const std::string& n : f.tensor_names()) src.inventory[n] = f.tensor_shape(n);
  src.file_name = gguf_name;
  src.load = [&](const std::string& n, const NamedSharding& s) {
    const std::optional<DType> dt = f.tensor_dtype(gguf_name(n));
    const bool keep = quantized && dt && is_quantized(*dt);
    return f.load(gguf_name(n), s, keep ? *dt : DType::F32);
  };
  src.ignorable = [](const std::string&, const Shape&) { return std::string(); };
  src.interleaved_qk = true;
  src.loaded_dtype = [&](const std::string& n) {
    const std::optional<DType> dt = f.tensor_dtype(gguf_name(n));
    return quantized && dt && is_quantized(*dt) ? *dt : DType::F32;
  };
  auto tokenizer = std::make_shared<Tokenizer>(Tokenizer::from_gguf(f));  // fails fast
  Model m = load_into(c, src, cs, mesh, rules, options.dtype, options.stacked);
  m.tokenizer = std::move(tokenizer);
  m.source = path;
  return m;
}

// Typed reads of config.json: a float where an integer belongs, or a string where a number
// belongs, is an error naming the key, never a silent conversion.
struct JsonConfig {
  const nlohmann::json& j;
  const std::string& file;

  const nlohmann::json* find(const std::string& key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void wrong(const std::string& key, const nlohmann::json& v,
                          std::string_view expected) const {
    detail::fail(kApi, "'{}': {} is {} ({}), not {}", file, key, v.dump(), detail::json_kind(v),
                 expected);
  }
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    const nlohmann::json* v = find(key);
    if (!v) {
      if (!fallback) detail::fail(kApi, "'{}' has no '{}'", file, key);
      return *fallback;
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      wrong(key, *v, "an integer that fits in int64");
    }
    if (!v->is_number_integer()) wrong(key, *v, "an integer");
    return v->get<int64_t>();
  }
  double number(const std::string& key, double fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) wrong(key, *v, "a number");
    return v->get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) wrong(key, *v, "true or false");
    return v->get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) wrong(key, *v, "a string");
    return v->get<std::string>();
  }
};

// config.json of a Hugging Face LlamaForCausalLM; missing optional keys take transformers'
// LlamaConfig defaults.
std::pair<Config, ConfigSource> config_from_hf(const std::string& text, const std::string& file) {
  nlohmann::json j = detail::parse_untrusted_json(text, kApi, file);
  if (!j.is_object())
    detail::fail(kApi, "'{}' is a JSON {}, not an object", file, detail::json_kind(j));
  ConfigSource cs{std::string(kApi), file, hf_config_keys(), false};
  const ConfigKeys& k = cs.keys;
  JsonConfig r{j, file};
  const std::string model_type = r.string("model_type", "llama");
  if (model_type != "llama") {
    detail::fail(kApi, "'{}': model_type is '{}', not llama", file, model_type);
  }
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") {
    detail::fail(kApi, "'{}': hidden_act is '{}'; Llama's MLP uses silu", file, act);
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (r.boolean(key, false)) {
      detail::fail(kApi, "'{}': {} is true; partix's Llama has no biases", file, key);
    }
  }
  Config c;
  c.vocab_size = r.integer(k.vocab_size);
  c.hidden_size = r.integer(k.hidden_size);
  c.intermediate_size = r.integer(k.intermediate_size);
  c.num_layers = r.integer(k.num_layers);
  c.num_heads = r.integer(k.num_heads);
  c.num_kv_heads = r.integer(k.num_kv_heads, c.num_heads);
  cs.head_dim_derived = r.find(k.head_dim) == nullptr;
  if (!cs.head_dim_derived) {
    c.head_dim = r.integer(k.head_dim);
  } else if (c.num_heads > 0) {
    c.head_dim = c.hidden_size / c.num_heads;  // validate_config checks it divides
  }
  c.rms_norm_eps = r.number(k.rms_norm_eps, 1e-6);
  c.rope_theta = r.number(k.rope_theta, 10000.0);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.max_position = r.integer(k.max_position, 2048);
  // Lists of end tokens (Llama 3) are not used for stopping; the first id is.
  if (const nlohmann::json* b = r.find(k.bos_token_id); b && !b->is_array()) {
    c.bos_token_id = r.integer(k.bos_token_id);
  }
  if (const nlohmann::json* e = r.find(k.eos_token_id)) {
    if (e->is_array() && !e->empty()) {
      const nlohmann::json first = {{k.eos_token_id, e->front()}};
      c.eos_token_id = JsonConfig{first, file}.integer(k.eos_token_id);
    } else {
      c.eos_token_id = r.integer(k.eos_token_id);
    }
  }
  if (const nlohmann::json* rs = r.find("rope_scaling")) {
    if (!rs->is_object()) r.wrong("rope_scaling", *rs, "an object");
    const std::string where = file;
    nlohmann::json flat = nlohmann::json::object();  // keys as validate_config names them
    for (const auto& [key, v] : rs->items()) flat["rope_scaling." + key] = v;
    JsonConfig s{flat, where};
    std::string type = s.string("rope_scaling.rope_type", s.string("rope_scaling.type", ""));
    if (type == "llama3") {
      RopeScaling sc;
      sc.factor = s.number(k.rope_factor, sc.factor);
      sc.low_freq_factor = s.number(k.rope_low_freq_factor, sc.low_freq_factor);
      sc.high_freq_factor = s.number(k.rope_high_freq_factor, sc.high_freq_factor);
      sc.original_max_position = s.integer(k.rope_original_max, sc.original_max_position);
      c.rope_scaling = sc;
    } else if (!type.empty() && type != "default") {
      detail::fail(kApi, "'{}': rope scaling '{}' is not supported (only llama3)", file, type);
    }
  }
  validate_config(c, cs);
  return {c, cs};
}

Model load_hf(const std::string& dir, const Mesh& mesh, const nn::LogicalRules& rules,
              const LoadOptions& options) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  detail::check(fs::exists(config_path, ec), kApi, "'{}' has no config.json", dir);
  auto [c, cs] =
      config_from_hf(detail::read_text_file(config_path, kApi, kMaxConfigBytes), config_path);
  Safetensors st = Safetensors::open(dir);
  Source src;
  src.path = dir;
  for (const std::string& n : st.names()) {
    src.inventory[n] = st.shape(n);
    st.dtype(n);  // a dtype partix cannot load fails here, before any tensor loads
  }
  src.file_name = [](const std::string& n) { return n; };
  src.load = [&](const std::string& n, const NamedSharding& s) {
    return st.load(n, s, DType::F32);
  };
  // Older transformers saved the rotary inverse frequencies, a buffer recomputed from
  // rope_theta on load (transformers ignores it too).
  const int64_t half = c.head_dim / 2;
  src.ignorable = [half](const std::string& n, const Shape& shape) {
    const bool inv_freq = n.starts_with("model.layers.") &&
                          n.ends_with(".self_attn.rotary_emb.inv_freq") && shape == Shape{half};
    return inv_freq ? std::string("a rotary buffer recomputed on load") : std::string();
  };
  std::shared_ptr<Tokenizer> tokenizer;
  fs::path tok = fs::path(dir) / "tokenizer.json";
  if (fs::exists(tok))
    tokenizer = std::make_shared<Tokenizer>(Tokenizer::from_json_file(tok.string()));
  Model m = load_into(c, src, cs, mesh, rules, options.dtype, options.stacked);
  m.tokenizer = std::move(tokenizer);
  m.source = dir;
  return m;
}

}  // namespace

Model load(const std::string& path, const Mesh& mesh, const nn::LogicalRules& rules,
           const LoadOptions& options) {
  std::error_code ec;
  detail::check(options.dtype == DType::F32 || options.dtype == DType::BF16 ||
                    options.dtype == DType::F16,
                "llama.load", "LoadOptions::dtype must be f32, bf16 or f16, got {}",
                dtype_name(options.dtype));
  if (fs::is_directory(path, ec)) return load_hf(path, mesh, rules, options);
  detail::check(fs::exists(path, ec), "llama.load",
                "'{}' does not exist (scripts/fetch_smollm2.sh downloads the default model)", path);
  return load_gguf(path, mesh, rules, options);
}

Config config_from_json(const std::string& json_text, const std::string& file) {
  return config_from_hf(json_text, file).first;
}

}  // namespace partix::models::llama
