// Llama's two layouts of the layers' parameters: per layer (Hugging Face names) and stacked.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/stacking.h"
#include "partix/models/llama.h"

namespace partix::models::llama {

// What each layer holds, after its "model.layers.<i>." prefix.
const std::vector<std::string>& layer_parameters();
// The stacked layers' parameters are named kStackedPrefix + one of layer_parameters().
inline constexpr std::string_view kStackedPrefix = "model.layers.";
std::string layer_prefix(int64_t i);
// Llama's names for models/stacking.h.
LayerNames layer_names();

}  // namespace partix::models::llama
