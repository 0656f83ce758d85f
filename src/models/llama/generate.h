// Text generation with a Llama model on a mesh: a jitted prefill over the (left-padded) prompts
// and a jitted decode step that writes the KV cache in place; sampling inside the programs.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "models/llama/llama.h"
#include "partix/transforms.h"

namespace partix::models::llama {

struct GenerateOptions {
  int64_t max_tokens = 32;
  Sampling sampling;
  uint64_t seed = 0;
  bool stop_at_eos = true;
  // Logits that are not finite are always an error; with debug_nans the failing step is
  // replayed op by op to name the stage (embedding, layer, final norm) where they first
  // appear. Costs a copy of the KV cache per step (it is no longer donated).
  bool debug_nans = false;
};

struct Generated {
  std::vector<std::vector<int32_t>> tokens;        // per prompt, the new tokens
  double prefill_seconds = 0, decode_seconds = 0;  // execution only (compilation excluded)
  double compile_seconds = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
};

class Generator {
 public:
  Generator(const Model& model, Mesh mesh, std::vector<ShardingRule> rules);
  ~Generator();
  // on_token(step, tokens): the tokens chosen for every prompt at this step, as they come.
  Generated generate(
      const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
      const std::function<void(int64_t, const std::vector<int32_t>&)>& on_token = {});
  // The decode step's compiled program (for inspection: collectives per layer).
  Lowered lower_decode(int64_t batch, int64_t cache_length, const Sampling& s = {});
  Lowered lower_prefill(int64_t batch, int64_t prompt_length, int64_t cache_length,
                        const Sampling& s = {});

 private:
  struct Fns;
  Fns& fns(const Sampling& s, bool donate);
  const Model& model_;
  Mesh mesh_;
  std::vector<ShardingRule> rules_;
  std::vector<std::unique_ptr<Fns>> cache_;
};

}  // namespace partix::models::llama
