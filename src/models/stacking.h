// The two layouts of a transformer's layer parameters, shared by the models: per layer
// ("<prefix><i>.<suffix>", as checkpoints name them) and stacked over layers
// ("<prefix><suffix>", [L, ...]).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "partix/tree.h"

namespace partix::models {

struct LayerNames {
  std::string_view stacked_prefix;                   // "transformer.h.", "model.layers."
  std::function<std::string(int64_t)> layer_prefix;  // i -> "transformer.h.<i>."
  const std::vector<std::string>& suffixes;          // what one layer holds
};

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
