// GPT-2's two parameter layouts: per layer (Hugging Face names) and stacked over layers.
#include "models/gpt2/layout.h"

#include "core/errors.h"
#include "partix/models/gpt2.h"
#include "partix/ops.h"
#include "partix/transforms.h"

namespace partix::models::gpt2 {

const std::vector<std::string>& block_parameters() {
  static const std::vector<std::string> names{
      "ln_1.weight",        "ln_1.bias",       "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",       "ln_2.bias",
      "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight", "mlp.c_proj.bias"};
  return names;
}

std::string layer_prefix(int64_t i) { return "transformer.h." + std::to_string(i) + "."; }

bool is_stacked(const Params& params) {
  return params.count(std::string(kStackedPrefix) + block_parameters().front()) != 0;
}

LayerNames layer_names() { return {kStackedPrefix, layer_prefix, block_parameters()}; }

Params stack_layers(const Params& per_layer, const Config& c) {
  constexpr std::string_view api = "gpt2.stack_layers";
  if (is_stacked(per_layer)) return per_layer;
  validate_config(c, api);
  return models::stack_layers(per_layer, c.n_layer, layer_names(), api);
}

Params unstack_layers(const Params& stacked, const Config& c) {
  constexpr std::string_view api = "gpt2.unstack_layers";
  if (!is_stacked(stacked)) return stacked;
  validate_config(c, api);
  return models::unstack_layers(stacked, c.n_layer, layer_names(), api);
}

Params to_layout(const Params& params, const Config& c, bool stacked, const Mesh& mesh,
                 const nn::LogicalRules& rules) {
  if (is_stacked(params) == stacked) return params;
  const auto shardings = nn::param_shardings(param_specs(c, stacked), rules, mesh);
  std::vector<std::optional<NamedSharding>> out;
  out.reserve(shardings.size());
  // Results are Params, flattened in name order, as the map of shardings is.
  for (const auto& [name, s] : shardings) out.emplace_back(s);
  auto convert = jit(
      [c, stacked](const Params& p) { return stacked ? stack_layers(p, c) : unstack_layers(p, c); },
      {.out_shardings = std::move(out), .name = stacked ? "gpt2_stack_layers" : "gpt2_unstack_layers"});
  return convert(params);
}

void check_layers_split(std::string_view api, int64_t layers, int64_t stages,
                        int64_t virtual_stages) {
  const int64_t chunks = stages * virtual_stages;
  if (layers % chunks == 0) return;
  // The nearest stage counts below and above whose chunks divide the layers.
  int64_t below = 0, above = 0;
  for (int64_t s = stages - 1; s >= 1 && below == 0; --s) {
    if (layers % (s * virtual_stages) == 0) below = s;
  }
  for (int64_t s = stages + 1; s * virtual_stages <= layers && above == 0; ++s) {
    if (layers % (s * virtual_stages) == 0) above = s;
  }
  std::string nearest = below > 0 ? fmt::format("{}", below) : "";
  if (above > 0) nearest += fmt::format("{}{}", below > 0 ? " or " : "", above);
  detail::fail(api,
               "{} layers do not split into {} chunks ({} stages x {} virtual stages): uneven "
               "stages would gather every layer's weights onto every device each step; stage "
               "counts that divide: {}",
               layers, chunks, stages, virtual_stages, nearest.empty() ? "none" : nearest);
}

}  // namespace partix::models::gpt2
