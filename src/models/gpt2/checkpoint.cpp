// GPT-2 checkpoints in the Hugging Face format.
#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "core/errors.h"
#include "files/atomic_file.h"
#include "files/input_file.h"
#include "partix/models/gpt2.h"
#include "partix/io.h"
#include "partix/ops.h"

namespace partix::models::gpt2 {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kLoadApi = "gpt2.load_hf";
constexpr uint64_t kMaxConfigBytes = 16 << 20;  // config.json is a few KB

bool is_c_attn(const std::string& name) { return name.find("attn.c_attn.") != std::string::npos; }

// transformers once saved GPT-2's causal mask constants as buffers (h.N.attn.bias, a
// [1, 1, P, P] mask, and h.N.attn.masked_bias, a scalar); it ignores them on load, and so do we.
bool is_mask_buffer(const std::string& body_name, const Shape& shape, const Config& c) {
  const size_t dot = body_name.find(".attn.");
  if (!body_name.starts_with("h.") || dot == std::string::npos) return false;
  const std::string index = body_name.substr(2, dot - 2);
  if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos ||
      index.size() > 4 || std::stoll(index) >= c.n_layer) {
    return false;
  }
  const std::string rest = body_name.substr(dot + 6);
  return (rest == "bias" && shape == Shape{1, 1, c.n_positions, c.n_positions}) ||
         (rest == "masked_bias" && shape.empty());
}

// The prefix of body tensors in the checkpoint: GPT2LMHeadModel files name them
// "transformer.*", GPT2Model files have no prefix.
std::string body_prefix(const Safetensors& st) {
  const std::vector<std::string> names = st.names();
  const bool prefixed = std::any_of(names.begin(), names.end(), [](const std::string& n) {
    return n.starts_with("transformer.");
  });
  return prefixed ? "transformer." : "";
}

// Every tensor the configuration needs is in the file with the shape Hugging Face stores (a
// transposed or reshaped c_attn is refused, as transformers refuses it), and nothing else is.
void check_inventory(const Config& c, const Safetensors& st, const std::string& dir) {
  const std::map<std::string, Shape> expected = stored_shapes(c);
  std::set<std::string> used;
  std::vector<std::string> missing;
  const std::string prefix = body_prefix(st);
  for (const auto& [body, shape] : expected) {
    const std::string key = prefix + body;
    if (!st.contains(key)) {
      missing.push_back(key);
      continue;
    }
    used.insert(key);
    const Shape stored = st.shape(key);
    if (stored != shape) {
      detail::fail(kLoadApi,
                   "'{}': tensor '{}' has shape {} but the configuration (vocab_size {}, "
                   "n_positions {}, n_embd {}) needs {}",
                   dir, key, shape_to_string(stored), c.vocab_size, c.n_positions, c.n_embd,
                   shape_to_string(shape));
    }
    st.dtype(key);  // a dtype partix cannot load fails here, before any tensor loads
  }
  if (!missing.empty()) {
    detail::fail(kLoadApi,
                 "'{}' lacks {} tensor(s) the configuration (n_layer {}) needs, e.g. '{}'", dir,
                 missing.size(), c.n_layer, missing.front());
  }
  std::vector<std::string> unused;
  for (const std::string& name : st.names()) {
    if (used.count(name)) continue;
    const std::string body = name.starts_with("transformer.") ? name.substr(12) : name;
    if (!is_mask_buffer(body, st.shape(name), c)) unused.push_back("'" + name + "'");
  }
  if (!unused.empty()) {
    if (unused.size() > 5) unused.resize(5);
    detail::fail(kLoadApi,
                 "'{}' holds tensors the configuration (n_layer {}, tied embeddings) does not "
                 "use: {}; refusing to load a model that does not match its file",
                 dir, c.n_layer, fmt::join(unused, ", "));
  }
}

}  // namespace

Checkpoint load_hf(const std::string& dir, const Mesh& mesh, const nn::LogicalRules& rules) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  detail::check(fs::exists(config_path, ec), kLoadApi, "'{}' has no config.json", dir);
  Checkpoint ck;
  ck.config =
      config_from_json(detail::read_text_file(config_path, kLoadApi, kMaxConfigBytes), config_path);
  ck.config.dropout = 0.0;
  Safetensors st = Safetensors::open(dir);
  check_inventory(ck.config, st, dir);
  auto specs = param_specs(ck.config);
  auto shardings = nn::param_shardings(specs, rules, mesh);
  const std::string prefix = body_prefix(st);
  for (const auto& [name, spec] : specs) {
    const std::string key = prefix + name.substr(12);  // without "transformer."
    const NamedSharding& target = shardings.at(name);
    if (is_c_attn(name)) {
      // Hugging Face stores c_attn as [C, 3C] (bias [3C]); partix keeps [C, 3, C] (bias [3, C]).
      Array whole = st.load(key, NamedSharding(mesh, P()), ck.config.dtype);
      ck.params[name] = device_put(reshape(whole, spec.shape), target);
    } else {
      ck.params[name] = st.load(key, target, ck.config.dtype);
    }
  }
  return ck;
}

std::vector<std::string> checkpoint_files() { return {"config.json", "model.safetensors"}; }

void check_save_path(const std::string& dir) {
  detail::check_writable_dir(dir, "gpt2.save_hf", checkpoint_files());
}

void save_hf(const std::string& dir, const Params& params, const Config& c) {
  // The whole folder is written beside the target and swapped in: a crash or a full disk
  // leaves the previous checkpoint, never new weights with an old or empty config.
  detail::AtomicDir out(dir, "gpt2.save_hf", checkpoint_files());
  Params tensors;
  for (const auto& [name, v] : unstack_layers(params, c)) {
    Array a = device_put(v, Device{0});
    if (is_c_attn(name)) {
      Shape s = a.shape();
      a = a.ndim() == 3 ? reshape(a, {s[0], s[1] * s[2]}) : reshape(a, {s[0] * s[1]});
    }
    tensors[name] = a;
  }
  try {
    detail::write_file_atomic(out.file("config.json"), "gpt2.save_hf", config_to_json(c) + "\n");
    save_safetensors(out.file("model.safetensors"), tensors, {{"format", "pt"}});
  } catch (const Error& e) {
    // The inner message names the temporary folder; the user knows the checkpoint's path.
    detail::fail("gpt2.save_hf", "cannot write the checkpoint '{}' (it is unchanged): {}", dir,
                 e.what());
  }
  out.commit();
}

}  // namespace partix::models::gpt2
