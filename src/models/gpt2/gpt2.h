// GPT-2 as a pure function of Params and token ids, with Hugging Face GPT-2 parameter names
// (GPT2LMHeadModel: transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...).
//
// One layout difference from Hugging Face: attn.c_attn.weight is stored [C, 3, C] (bias [3, C])
// instead of [C, 3C], so that tensor parallelism can split the heads of q, k and v alike; the
// loader and saver convert. Shapes: B batch, T sequence, C channels, V vocab, H heads,
// D head dim (C = H * D), F = 4C.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "partix/array.h"
#include "partix/nn.h"

namespace partix::models::gpt2 {

struct Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  double layer_norm_epsilon = 1e-5;
  double dropout = 0.1;  // embedding, attention and residual dropout
  DType dtype = DType::F32;
};

Config tiny();   // bytes vocab (256), 64 positions, C=64, 2 layers, 4 heads
Config small();  // GPT-2 small: 124M parameters

// Checks every hyperparameter before anything divides by one or allocates by one: sizes
// positive and bounded, n_embd a multiple of n_head, layer_norm_epsilon finite in (0, 1),
// dropout in [0, 1). Keys are named as config.json names them; `file` is "" for a Config built
// in code. Throws "[api] '<file>': <key> is <value>, ...".
void validate_config(const Config& c, std::string_view api = "gpt2.config",
                     std::string_view file = "");

// Parameter shapes, logical axes and initialisation (GPT-2: normal(0.02), residual
// projections scaled by 1/sqrt(2L), LayerNorm ones/zeros).
nn::ParamSpecs param_specs(const Config& c);

// Megatron tensor parallelism over 'model' (qkv and MLP-in column-parallel, attention-out and
// MLP-out row-parallel, embeddings vocab-parallel), data parallelism over 'data'; with fsdp,
// parameters (and so optimizer state) are also split over 'data'.
nn::LogicalRules sharding_rules(bool fsdp);

struct ForwardOptions {
  std::optional<Array> dropout_key;  // training: dropout on; none: evaluation
  const Mesh* mesh = nullptr;        // with rules: activation sharding constraints
  const nn::LogicalRules* rules = nullptr;
};

// Logits [B, T, V] for token ids [B, T].
Array forward(const Params& params, const Array& ids, const Config& c,
              const ForwardOptions& options = {});
// Mean next-token cross entropy of ids [B, T] against targets [B, T].
Array loss(const Params& params, const Array& ids, const Array& targets, const Config& c,
           const ForwardOptions& options = {});

// Hugging Face checkpoint directory (config.json + model.safetensors) <-> Params.
// `file` names the text's source in messages.
Config config_from_json(const std::string& json_text, const std::string& file = "config.json");
std::string config_to_json(const Config& c);
// Every tensor as a Hugging Face checkpoint stores it (Conv1D weights [in, out], c_attn
// [C, 3C]), without the "transformer." prefix for the body.
std::map<std::string, Shape> stored_shapes(const Config& c);

}  // namespace partix::models::gpt2

namespace partix::models::gpt2 {

// A Hugging Face GPT-2 directory (config.json + model.safetensors, keys with or without the
// "transformer." prefix) loaded into the shardings the rules give on `mesh`.
struct Checkpoint {
  Config config;
  Params params;
};
Checkpoint load_hf(const std::string& dir, const Mesh& mesh, const nn::LogicalRules& rules);
// Writes config.json and model.safetensors that transformers' GPT2LMHeadModel loads. The
// folder appears (or replaces an earlier checkpoint) whole; an existing folder holding other
// files is refused rather than replaced.
void save_hf(const std::string& dir, const Params& params, const Config& c);
// Throws unless save_hf could write `dir`: call before training, so its result is not lost.
void check_save_path(const std::string& dir);

}  // namespace partix::models::gpt2
