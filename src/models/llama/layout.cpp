// Llama's two parameter layouts: per layer (Hugging Face names) and stacked over layers.
#include "models/llama/layout.h"

#include "models/stacking.h"

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

LayerNames layer_names() { return {kStackedPrefix, layer_prefix, layer_parameters()}; }

Params stack_layers(const Params& per_layer, const Config& c) {
  constexpr std::string_view api = "llama.stack_layers";
  if (is_stacked(per_layer)) return per_layer;
  validate_config(c);
  return models::stack_layers(per_layer, c.num_layers, layer_names(), api);
}

Params unstack_layers(const Params& stacked, const Config& c) {
  constexpr std::string_view api = "llama.unstack_layers";
  if (!is_stacked(stacked)) return stacked;
  validate_config(c);
  return models::unstack_layers(stacked, c.num_layers, layer_names(), api);
}

}  // namespace partix::models::llama
