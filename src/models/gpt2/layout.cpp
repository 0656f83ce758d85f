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

Array stack_balanced(std::vector<Array> per_layer) {
  // Pairwise, in a balanced tree: planning one concatenation costs its operand count squared.
  while (per_layer.size() > 1) {
    std::vector<Array> next;
    for (size_t k = 0; k + 1 < per_layer.size(); k += 2) {
      next.push_back(concatenate({per_layer[k], per_layer[k + 1]}, 0));
    }
    if (per_layer.size() % 2 == 1) next.push_back(per_layer.back());
    per_layer = std::move(next);
  }
  return per_layer.front();
}

namespace {

const Array& need(const Params& p, const std::string& name, std::string_view api) {
  auto it = p.find(name);
  if (it == p.end()) detail::fail(api, "the parameters lack '{}'", name);
  return it->second;
}

bool is_block_parameter(const std::string& name) {
  return name.starts_with(kStackedPrefix);
}

}  // namespace

Params stack_layers(const Params& per_layer, const Config& c) {
  constexpr std::string_view api = "gpt2.stack_layers";
  if (is_stacked(per_layer)) return per_layer;
  validate_config(c, api);
  Params out;
  for (const auto& [name, a] : per_layer) {
    if (!is_block_parameter(name)) out.emplace(name, a);
  }
  for (const std::string& suffix : block_parameters()) {
    std::vector<Array> layers;
    for (int64_t i = 0; i < c.n_layer; ++i) {
      layers.push_back(expand_dims(need(per_layer, layer_prefix(i) + suffix, api), 0));
    }
    out.emplace(std::string(kStackedPrefix) + suffix, stack_balanced(std::move(layers)));
  }
  return out;
}

Params unstack_layers(const Params& stacked, const Config& c) {
  constexpr std::string_view api = "gpt2.unstack_layers";
  if (!is_stacked(stacked)) return stacked;
  validate_config(c, api);
  Params out;
  for (const auto& [name, a] : stacked) {
    if (!is_block_parameter(name)) out.emplace(name, a);
  }
  for (const std::string& suffix : block_parameters()) {
    const std::string name = std::string(kStackedPrefix) + suffix;
    const Array& w = need(stacked, name, api);
    detail::check(w.ndim() >= 1 && w.shape()[0] == c.n_layer, api,
                  "'{}' has shape {}, not {} layers first", name, shape_to_string(w.shape()),
                  c.n_layer);
    for (int64_t i = 0; i < c.n_layer; ++i) {
      out.emplace(layer_prefix(i) + suffix, squeeze(slice_axis(w, 0, i, i + 1), {0}));
    }
  }
  return out;
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

}  // namespace partix::models::gpt2
