// Llama (grouped-query attention, RoPE with optional Llama-3 scaling, SwiGLU, RMSNorm) as a pure
// function of Params, with a KV cache split over heads, for Megatron tensor-parallel inference.
//
// Parameter names follow Hugging Face (model.layers.0.self_attn.q_proj.weight, ...), in one of
// two layouts of the layers' parameters:
// - stacked over layers (the default): "model.layers.self_attn.q_proj.weight" [L, KV, G, D, C],
//   its first logical axis "layers". forward() then scans one traced layer over them, so a
//   program's size and compile time do not grow with depth, and the KV cache is stacked too;
// - per layer: "model.layers.3.self_attn.q_proj.weight" [KV, G, D, C], the layers unrolled.
// Checkpoints (GGUF, Hugging Face) store the per-layer names; load() stacks at the edge and
// stack_layers / unstack_layers convert. Layouts of one layer's weights
// are head-major, grouped by key/value head, so that each device holds whole groups under
// tensor parallelism (grouped-query attention without repeating a key/value head):
//   q_proj                  [KV, G, D, C]  (G = H / KV query heads per key/value head)
//   k_proj, v_proj          [KV, D, C]
//   o_proj                  [C, KV, G, D]
//   gate_proj, up_proj      [F, C]     down_proj [C, F]     embed_tokens, lm_head [V, C]
// Shapes: B batch, T sequence, S cache length, C hidden, H heads, KV key/value heads, D head
// dim, F MLP hidden, V vocab.
//
// Text generation with a Llama model on a mesh: a jitted prefill over the (left-padded) prompts
// and a jitted decode step that writes the KV cache in place; sampling inside the programs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "partix/array.h"
#include "partix/nn.h"
#include "partix/transforms.h"
#include "partix/tree.h"

namespace partix::models::llama {

struct RopeScaling {  // Llama-3 style ("rope_type": "llama3")
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct Config {
  int64_t vocab_size = 49152;
  int64_t hidden_size = 576;
  int64_t intermediate_size = 1536;
  int64_t num_layers = 30;
  int64_t num_heads = 9;
  int64_t num_kv_heads = 3;
  int64_t head_dim = 64;
  double rms_norm_eps = 1e-5;
  double rope_theta = 100000.0;
  std::optional<RopeScaling> rope_scaling{};
  bool tie_word_embeddings = true;
  int64_t max_position = 8192;
  int64_t bos_token_id = 1, eos_token_id = 2;
};

// A small random configuration for tests.
Config tiny();

// How a configuration's source spells each field, so errors name the key the user can fix.
struct ConfigKeys {
  std::string vocab_size, hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads,
      head_dim, rms_norm_eps, rope_theta, max_position, bos_token_id, eos_token_id;
  std::string rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max;
};
ConfigKeys config_field_keys();  // the Config field names (configurations built in code)
ConfigKeys hf_config_keys();     // config.json
ConfigKeys gguf_config_keys();   // llama.* and tokenizer.ggml.* metadata

// Where a configuration came from, for validate_config's messages.
struct ConfigSource {
  std::string api = "llama.config";
  std::string file{};  // "" for a Config built in code
  ConfigKeys keys = config_field_keys();
  bool head_dim_derived = false;  // the source gave no head_dim: hidden / heads must divide
};

// Checks every hyperparameter before anything divides by one or allocates by one: sizes
// positive and bounded, heads a multiple of key/value heads, an even head_dim (RoPE), a finite
// positive rms_norm_eps, a finite rope_theta > 1, sane Llama-3 scaling, token ids inside the
// vocabulary. Throws "[api] '<file>': <key> is <value>, ...".
void validate_config(const Config& c, const ConfigSource& source = {});
// A Hugging Face LlamaForCausalLM config.json (missing optional keys take transformers'
// defaults), validated; `file` names the text's source in messages.
Config config_from_json(const std::string& json_text, const std::string& file = "config.json");

// Each parameter's shape, logical axes and initialiser, in the layouts above. Logical names:
// "vocab", "embed", "heads" (key/value heads), "head_group" (the query heads of one key/value
// head), "head_dim", "mlp", "norm".
nn::ParamSpecs param_specs(const Config& c, bool stacked = true);
// Megatron tensor parallelism over `axis` as logical rules (the same rule system as GPT-2's):
// heads and the MLP's hidden units split (q/k/v, gate and up by column; o and down by row),
// the vocabulary split (embedding and logits), everything else replicated.
nn::LogicalRules sharding_rules(const std::string& axis = "model");
// Every parameter's sharding on `mesh` under `rules`.
std::map<std::string, NamedSharding> param_shardings(const Config& c, const nn::LogicalRules& rules,
                                                     const Mesh& mesh, bool stacked = true);
// One line per parameter: name, shape, dtype, logical axes, sharding.
std::string describe(const Config& c, const nn::LogicalRules& rules, const Mesh& mesh,
                     bool stacked = true);

// Shapes of every parameter (in the layouts above).
std::map<std::string, Shape> param_shapes(const Config& c, bool stacked = true);
// Shapes of every tensor as a checkpoint stores it (Hugging Face names and [out, in] layouts).
std::map<std::string, Shape> stored_shapes(const Config& c);
// Random parameters (for tests and examples), each drawn directly in its sharding: no device
// ever holds a whole parameter it does not own. A parameter's values depend only on the key and
// its per-layer name, so every mesh and both layouts get the same parameters.
Params init(const Config& c, const Array& key, const Mesh& mesh, const nn::LogicalRules& rules,
            bool stacked = true);

// Whether `params` holds the layers stacked.
bool is_stacked(const Params& params);
// Layout conversions; they trace (usable inside jit) and run eagerly, quantized weights
// included. Parameters outside the layers pass through; a missing layer parameter raises naming
// it. Each returns its argument when it already has the asked-for layout.
Params stack_layers(const Params& per_layer, const Config& c);
Params unstack_layers(const Params& stacked, const Config& c);

// Keys and values, split over heads like k/v: per layer, k[i] and v[i] are [B, KV, S, D];
// stacked, k and v hold one array each, [L, B, KV, S, D].
struct KVCache {
  std::vector<Array> k{}, v{};
  bool stacked() const { return k.size() == 1 && k[0].ndim() == 5; }
};
// One layer's keys (or values), f32 [batch, key/value heads, length, head_dim] with logical axes
// ("batch", "heads", "length", "head_dim"): split over heads like k/v.
ShapeDtypeStruct cache_layer_spec(const Config& c, int64_t batch, int64_t length, const Mesh& mesh,
                                  const nn::LogicalRules& rules);
// All layers' keys (or values) stacked: [layers, batch, key/value heads, length, head_dim].
ShapeDtypeStruct cache_spec(const Config& c, int64_t batch, int64_t length, const Mesh& mesh,
                            const nn::LogicalRules& rules);
// An empty cache in either layout (forward() needs the parameters' layout).
KVCache make_cache(const Config& c, int64_t batch, int64_t length, const Mesh& mesh,
                   const nn::LogicalRules& rules, bool stacked = true);

// Runs tokens [B, T] at positions pos .. pos+T-1 (pos: i32 scalar) through the model, writing
// their keys and values into the cache. `start` [B] (i32): each row's first real position (rows
// are left-padded); keys before it are masked and RoPE positions count from it.
struct StepResult {
  Array logits{};  // [B, T, V]
  KVCache cache{};
};
// Called with each stage's output ("model.embed_tokens", "model.layers.<i>", "model.norm",
// "lm_head"): a debugging hook, e.g. to find where NaN first appears. (Stacked, the layers'
// outputs are collected by the scan and reported after it.)
using ForwardProbe = std::function<void(const std::string& stage, const Array& value)>;
// With last_only, the logits are those of the last position only ([B, 1, V]): what a
// generation step samples from, at 1/T of the lm_head's cost.
StepResult forward(const Params& p, const Config& c, const Array& tokens, const Array& pos,
                   const Array& start, const KVCache& cache, const ForwardProbe& probe = {},
                   bool last_only = false);

// Picks the next token from logits [B, V]: greedy when temperature <= 0, else sampling with
// temperature, top-k (0: off) and top-p (1: off).
struct Sampling {
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
};
Array sample(const Array& logits, const Sampling& s, const Array& key);

}  // namespace partix::models::llama

namespace partix {
template <>
struct TreeDef<models::llama::KVCache> {
  static void flatten(const models::llama::KVCache& c, std::vector<Array>& out) {
    for (const Array& a : c.k) out.push_back(a);
    for (const Array& a : c.v) out.push_back(a);
  }
  static models::llama::KVCache unflatten(const models::llama::KVCache& p, const Array*& it) {
    models::llama::KVCache c;
    for (size_t i = 0; i < p.k.size(); ++i) c.k.push_back(*it++);
    for (size_t i = 0; i < p.v.size(); ++i) c.v.push_back(*it++);
    return c;
  }
  static std::string key(const models::llama::KVCache& c) {
    return "kv" + std::to_string(c.k.size());
  }
  static void paths(const models::llama::KVCache& c, const std::string& at,
                    std::vector<std::string>& out) {
    for (size_t i = 0; i < c.k.size(); ++i) out.push_back(at + ".k[" + std::to_string(i) + "]");
    for (size_t i = 0; i < c.v.size(); ++i) out.push_back(at + ".v[" + std::to_string(i) + "]");
  }
};
}  // namespace partix

namespace partix {
class Tokenizer;
}

namespace partix::models::llama {

// A Llama checkpoint loaded into the shardings `rules` give on `mesh` (each tensor read, laid
// out and placed one at a time): a GGUF file
// (dequantised at load unless LoadOptions::quantized; llama.cpp's row order of q/k restored)
// or a Hugging Face directory (config.json, *.safetensors, tokenizer.json).
struct Model {
  Config config{};
  Params params{};
  std::shared_ptr<Tokenizer> tokenizer{};
  std::string source{};
};
struct LoadOptions {
  // GGUF matrices stored as Q8_0, Q4_0, Q4_1, Q4_K or Q6_K stay in that dtype:
  // matmuls decode them block by block. The token embedding is then replicated (its rows are
  // gathered whole; a tied lm_head keeps the vocab-split table as Params "lm_head.weight" on
  // meshes of several devices), and head dims must be multiples of the block.
  bool quantized = false;
  // The dtype of every other weight matrix: F32, or BF16 / F16 at half the memory (matmuls
  // widen it to f32 in registers; norms stay f32). Converted tensor by tensor as it loads.
  DType dtype = DType::F32;
  // The layers' parameters stacked over layers (scanned by forward()), or per layer.
  bool stacked = true;
};
Model load(const std::string& path, const Mesh& mesh, const nn::LogicalRules& rules,
           const LoadOptions& options = {});

// The default model: SmolLM2-135M-Instruct from the cache scripts/fetch_smollm2.sh fills.
std::string default_model_path();

}  // namespace partix::models::llama

namespace partix::models::llama {

struct GenerateOptions {
  int64_t max_tokens = 32;
  Sampling sampling{};
  uint64_t seed = 0;
  bool stop_at_eos = true;
  // Logits that are not finite are always an error; with debug_nans the failing step is
  // replayed op by op to name the stage (embedding, layer, final norm) where they first
  // appear. Costs a copy of the KV cache per step (it is no longer donated).
  bool debug_nans = false;
  // Decode every token after the first in one program (a fori_loop over tokens: no return to
  // the host per token) instead of streaming them; the tokens are the same, and on_token is
  // called for each once the loop is done. Non-finite logits are reported after the loop.
  bool decode_loop = false;
};

struct Generated {
  std::vector<std::vector<int32_t>> tokens;        // per prompt, the new tokens
  double prefill_seconds = 0, decode_seconds = 0;  // execution only (compilation excluded)
  double compile_seconds = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
};

class Generator {
 public:
  Generator(const Model& model, Mesh mesh, nn::LogicalRules rules);
  ~Generator();
  // on_token(step, tokens): the tokens chosen for every prompt at this step, as they come.
  Generated generate(
      const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
      const std::function<void(int64_t, const std::vector<int32_t>&)>& on_token = {});
  // The decode step's and the prefill's compiled programs (for inspection: collectives per
  // layer, memory). Nothing is allocated: the model's parameters may be abstract
  // (ShapeDtypeStruct) and the mesh abstract (make_abstract_mesh), to plan any size.
  Lowered lower_decode(int64_t batch, int64_t cache_length, const Sampling& s = {});
  Lowered lower_prefill(int64_t batch, int64_t prompt_length, int64_t cache_length,
                        const Sampling& s = {});

 private:
  struct Fns;
  Fns& fns(const Sampling& s, bool donate);
  Lowered lower_step(int64_t batch, int64_t tokens, int64_t cache_length, const Sampling& s);
  Generated& decode_in_program(
      const GenerateOptions& o, const Array& first, const std::vector<int32_t>& first_ids,
      int64_t prompt_length, const Array& starts, const KVCache& cache, const Array& base_key,
      const std::function<void(int64_t, const std::vector<int32_t>&)>& on_token, Generated& out);
  const Model& model_;
  Mesh mesh_;
  nn::LogicalRules rules_;
  std::vector<std::unique_ptr<Fns>> cache_;
};

}  // namespace partix::models::llama
