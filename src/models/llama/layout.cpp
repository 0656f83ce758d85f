// Llama's two parameter layouts: per layer (Hugging Face names) and stacked over layers.
#include "models/llama/layout.h"

#include "core/errors.h"
#include "partix/ops.h"

namespace partix::models::llama {

const std::vector<std::string>& layer_parameters() {
  static const std::vector<std::string> names{
      "input_layernorm.weight",  "self_attn.q_proj.weight",         "self_attn.k_proj.weight",
      "self_attn.v_proj.weight", "self_attn.o_proj.weight",         "post_attention_layernorm.weight",
      "mlp.gate_proj.weight",    "mlp.up_proj.weight",              "mlp.down_proj.weight"};
  return names;
}

std::string layer_prefix(int64_t i) { return std::string(kStackedPrefix) + std::to_string(i) + "."; }

bool is_stacked(const Params& params) {
  return params.count(std::string(kStackedPrefix) + layer_parameters().front()) != 0;
}

namespace {

const Array& need(const Params& p, const std::string& name, std::string_view api) {
  auto it = p.find(name);
  if (it == p.end()) detail::fail(api, "the parameters lack '{}'", name);
  return it->second;
}

bool is_layer_parameter(const std::string& name) {
  // "model.layers.<i>.<suffix>" or "model.layers.<suffix>"; the embedding, final norm and
  // lm_head are not.
  return name.starts_with(kStackedPrefix);
}

}  // namespace

Params stack_layers(const Params& per_layer, const Config& c) {
  constexpr std::string_view api = "llama.stack_layers";
  if (is_stacked(per_layer)) return per_layer;
  validate_config(c);
  Params out;
  for (const auto& [name, a] : per_layer) {
    if (!is_layer_parameter(name)) out.emplace(name, a);
  }
  for (const std::string& suffix : layer_parameters()) {
    std::vector<Array> layers;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      layers.push_back(expand_dims(need(per_layer, layer_prefix(i) + suffix, api), 0));
    }
    out.emplace(std::string(kStackedPrefix) + suffix,
                layers.size() == 1 ? layers[0] : concatenate(layers, 0));
  }
  return out;
}

Params unstack_layers(const Params& stacked, const Config& c) {
  constexpr std::string_view api = "llama.unstack_layers";
  if (!is_stacked(stacked)) return stacked;
  validate_config(c);
  Params out;
  for (const auto& [name, a] : stacked) {
    if (!is_layer_parameter(name)) out.emplace(name, a);
  }
  for (const std::string& suffix : layer_parameters()) {
    const std::string name = std::string(kStackedPrefix) + suffix;
    const Array& w = need(stacked, name, api);
    detail::check(w.ndim() >= 1 && w.shape()[0] == c.num_layers, api,
                  "'{}' has shape {}, not {} layers first", name, shape_to_string(w.shape()),
                  c.num_layers);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      out.emplace(layer_prefix(i) + suffix, squeeze(slice_axis(w, 0, i, i + 1), {0}));
    }
  }
  return out;
}

}  // namespace partix::models::llama
