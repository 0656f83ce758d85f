// GPT-2's parameter layouts, shared by the model, its trainer and its checkpoints.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/stacking.h"
#include "partix/array.h"

namespace partix::models::gpt2 {

struct Config;

// The stacked blocks' parameters are named kStackedPrefix + one of block_parameters().
inline constexpr std::string_view kStackedPrefix = "transformer.h.";
// One block's parameters, as named after its prefix ("ln_1.weight", "attn.c_attn.weight", ...).
const std::vector<std::string>& block_parameters();
// "transformer.h.<i>.": the per-layer prefix of block i.
std::string layer_prefix(int64_t i);
// GPT-2's names for models/stacking.h.
LayerNames layer_names();
using models::stack_balanced;
// Throws partix::Error from `api` naming the first parameter the config needs that `p` lacks
// or holds in another shape (per-layer or stacked layout, whichever `p` uses).
void check_params(std::string_view api, const Params& p, const Config& c);
// Throws partix::Error from `api` unless `layers` split evenly into stages x virtual_stages
// chunks. An uneven split would pad the stacked weights, and padding a dimension split over
// 'stage' gathers every layer onto every device each step; the message names the nearest
// stage counts that divide.
void check_layers_split(std::string_view api, int64_t layers, int64_t stages,
                        int64_t virtual_stages);

}  // namespace partix::models::gpt2
