// The two layouts of a transformer's layer parameters, shared by the models: per layer
// ("<prefix><i>.<suffix>", as checkpoints name them) and stacked over layers
// ("<prefix><suffix>", [L, ...]).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "partix/nn.h"
#include "partix/tree.h"

namespace partix::models {

struct LayerNames {
  std::string_view stacked_prefix;                   // "transformer.h.", "model.layers."
  std::function<std::string(int64_t)> layer_prefix;  // i -> "transformer.h.<i>."
  const std::vector<std::string>& suffixes;          // what one layer holds
};

// `per_layer` with every layer entry (names.layer_prefix(i) + suffix) replaced by one stacked
// entry (names.stacked_prefix + suffix) made by stack(list of the layers' entries, in order).
template <typename T, typename F>
std::map<std::string, T> stack_entries(std::map<std::string, T> per_layer, int64_t layers,
                                       const LayerNames& names, F stack) {
  for (const std::string& suffix : names.suffixes) {
    std::vector<T> parts;
    for (int64_t i = 0; i < layers; ++i) {
      auto it = per_layer.find(names.layer_prefix(i) + suffix);
      if (it == per_layer.end()) continue;
      parts.push_back(std::move(it->second));
      per_layer.erase(it);
    }
    if (!parts.empty()) {
      per_layer.emplace(std::string(names.stacked_prefix) + suffix, stack(std::move(parts)));
    }
  }
  return per_layer;
}
// Parameter specs with each layer parameter once, layers first: its logical axis "layers".
nn::ParamSpecs stacked_specs(nn::ParamSpecs per_layer, int64_t layers, const LayerNames& names);

// Arrays of one shape [1, ...] concatenated on axis 0 (pairwise, so that planning stays linear
// in their number).
Array stack_balanced(std::vector<Array> per_layer);
// Every layer parameter of `layers` layers stacked (per_layer: the per-layer layout), the
// others passed through; a missing one raises "[api] the parameters lack '<name>'".
Params stack_layers(const Params& per_layer, int64_t layers, const LayerNames& names,
                    std::string_view api);
// The inverse; a stacked parameter whose first dimension is not `layers` raises naming it.
Params unstack_layers(const Params& stacked, int64_t layers, const LayerNames& names,
                      std::string_view api);

}  // namespace partix::models
