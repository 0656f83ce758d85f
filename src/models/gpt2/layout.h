// GPT-2's parameter layouts, shared by the model, its trainer and its checkpoints.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/stacking.h"
#include "partix/array.h"

namespace partix::models::gpt2 {

// The stacked blocks' parameters are named kStackedPrefix + one of block_parameters().
inline constexpr std::string_view kStackedPrefix = "transformer.h.";
// One block's parameters, as named after its prefix ("ln_1.weight", "attn.c_attn.weight", ...).
const std::vector<std::string>& block_parameters();
// "transformer.h.<i>.": the per-layer prefix of block i.
std::string layer_prefix(int64_t i);
// GPT-2's names for models/stacking.h.
LayerNames layer_names();
using models::stack_balanced;

}  // namespace partix::models::gpt2
