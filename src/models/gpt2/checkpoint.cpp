// GPT-2 checkpoints in the Hugging Face format.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/errors.h"
#include "models/gpt2/gpt2.h"
#include "partix/io.h"
#include "partix/ops.h"

namespace partix::models::gpt2 {

namespace fs = std::filesystem;

namespace {

bool is_c_attn(const std::string& name) { return name.find("attn.c_attn.") != std::string::npos; }

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) detail::fail("gpt2.load_hf", "cannot read {}", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Checkpoint load_hf(const std::string& dir, const Mesh& mesh, const nn::LogicalRules& rules) {
  Checkpoint ck;
  ck.config = config_from_json(read_file(fs::path(dir) / "config.json"));
  ck.config.dropout = 0.0;
  Safetensors st = Safetensors::open(dir);
  auto specs = param_specs(ck.config);
  auto shardings = nn::param_shardings(specs, rules, mesh);
  for (const auto& [name, spec] : specs) {
    std::string key = name;
    if (!st.contains(key) && key.rfind("transformer.", 0) == 0) key = key.substr(12);
    detail::check(st.contains(key), "gpt2.load_hf", "{} has no tensor '{}'", dir, name);
    const NamedSharding& target = shardings.at(name);
    if (is_c_attn(name)) {
      // Hugging Face stores c_attn as [C, 3C] (bias [3C]); partix keeps [C, 3, C] (bias [3, C]).
      Array whole = st.load(key, NamedSharding(mesh, P()), ck.config.dtype);
      ck.params[name] = device_put(reshape(whole, spec.shape), target);
    } else {
      Shape stored = st.shape(key);
      detail::check(stored == spec.shape, "gpt2.load_hf", "'{}' is {} in {} but the config needs {}",
                    key, shape_to_string(stored), dir, shape_to_string(spec.shape));
      ck.params[name] = st.load(key, target, ck.config.dtype);
    }
  }
  return ck;
}

void save_hf(const std::string& dir, const Params& params, const Config& c) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  detail::check(!ec, "gpt2.save_hf", "cannot create {}: {}", dir, ec.message());
  Params out;
  for (const auto& [name, v] : params) {
    Array a = device_put(v, Device{0});
    if (is_c_attn(name)) {
      Shape s = a.shape();
      a = a.ndim() == 3 ? reshape(a, {s[0], s[1] * s[2]}) : reshape(a, {s[0] * s[1]});
    }
    out[name] = a;
  }
  save_safetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  std::ofstream cfg(fs::path(dir) / "config.json");
  detail::check(static_cast<bool>(cfg), "gpt2.save_hf", "cannot write {}/config.json", dir);
  cfg << config_to_json(c) << "\n";
}

}  // namespace partix::models::gpt2
