// GPT-2's transformer block, shared by the model's forward pass and its pipeline stages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "partix/models/gpt2.h"

namespace partix::models::gpt2 {

// Block i on x [B, T, C] with the parameters named l + "ln_1.weight", ...; dropout with `key`
// when given. `tp` empty: global arrays, sharded by the options' rules. `tp` an axis name:
// inside shard_map, the weights are this device's heads and MLP columns, and the row-parallel
// projections are summed over `tp`.
Array block(const Params& lp, const std::string& l, const Array& x, const Config& c,
            const ForwardOptions& o, int64_t i, const std::optional<Array>& key,
            const std::string& tp);
// The dropout applied to the embeddings' sum.
Array embed_dropout(const Array& x, const Config& c, const std::optional<Array>& key);

}  // namespace partix::models::gpt2
