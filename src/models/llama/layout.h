// Llama's two layouts of the layers' parameters: per layer (Hugging Face names) and stacked.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "partix/models/llama.h"

namespace partix::models::llama {

// What each layer holds, after its "model.layers.<i>." prefix.
const std::vector<std::string>& layer_parameters();
// The stacked layers' parameters are named kStackedPrefix + one of layer_parameters().
inline constexpr std::string_view kStackedPrefix = "model.layers.";
std::string layer_prefix(int64_t i);
// The per-layer map with every layer parameter replaced by one with `layers` first, each
// produced by `stack(suffix, per-layer entries)`.
template <typename T, typename F>
std::map<std::string, T> stacked_map(std::map<std::string, T> per_layer, int64_t layers, F stack) {
  for (const std::string& suffix : layer_parameters()) {
    std::vector<T> parts;
    for (int64_t i = 0; i < layers; ++i) {
      auto it = per_layer.find(layer_prefix(i) + suffix);
      if (it == per_layer.end()) continue;
      parts.push_back(std::move(it->second));
      per_layer.erase(it);
    }
    if (!parts.empty()) per_layer.emplace(std::string(kStackedPrefix) + suffix, stack(suffix, parts));
  }
  return per_layer;
}

}  // namespace partix::models::llama
