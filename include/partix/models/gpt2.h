// GPT-2 as a pure function of Params and token ids, with Hugging Face GPT-2 parameter names
// (GPT2LMHeadModel: transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...).
//
// One layout difference from Hugging Face: attn.c_attn.weight is stored [C, 3, C] (bias [3, C])
// instead of [C, 3C], so that tensor parallelism can split the heads of q, k and v alike; the
// loader and saver convert. Shapes: B batch, T sequence, C channels, V vocab, H heads,
// D head dim (C = H * D), F = 4C.
//
// Trainer trains one on a mesh: data parallel over 'data', Megatron tensor parallel over
// 'model', FSDP (parameters and optimizer state split over 'data') on request. Switching the
// strategy is only a matter of the mesh shape and the fsdp flag.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "partix/array.h"
#include "partix/checkpoint.h"
#include "partix/nn.h"
#include "partix/optim.h"
#include "partix/pipeline.h"
#include "partix/transforms.h"

namespace partix::io {
class DataLoader;  // the token stream a Trainer reads
// The text files partix train reads by default (Debian's fortunes).
std::vector<std::string> default_corpus_paths();
}  // namespace partix::io

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

// Two layouts of the blocks' parameters:
// - per layer, under Hugging Face's names: "transformer.h.3.mlp.c_fc.weight" [C, F];
// - stacked over layers: "transformer.h.mlp.c_fc.weight" [L, C, F], its first logical axis
//   "layers" (never sharded). A scanned model reads these directly, so neither the program nor
//   the optimizer's update grows with depth.
// The embeddings and the final LayerNorm are the same in both. Loading and saving Hugging Face
// checkpoints always use the per-layer names; convert with stack_layers / unstack_layers.

// Parameter shapes, logical axes and initialisation (GPT-2: normal(0.02), residual
// projections scaled by 1/sqrt(2L), LayerNorm ones/zeros), in either layout.
nn::ParamSpecs param_specs(const Config& c, bool stacked = false);
// Whether `params` holds the blocks stacked over layers.
bool is_stacked(const Params& params);
// Layout conversions; they trace (usable inside jit) and run eagerly. Parameters outside the
// blocks pass through; a missing block parameter raises naming it. Each returns its argument
// when it already has the asked-for layout. Also apply to any tree named as the parameters
// (optimizer moments).
Params stack_layers(const Params& per_layer, const Config& c);
Params unstack_layers(const Params& stacked, const Config& c);
// The same conversion as one program whose results have the shardings `rules` give on `mesh`.
Params to_layout(const Params& params, const Config& c, bool stacked, const Mesh& mesh,
                 const nn::LogicalRules& rules);

// Megatron tensor parallelism over 'model' (qkv and MLP-in column-parallel, attention-out and
// MLP-out row-parallel, embeddings vocab-parallel), data parallelism over 'data'; with fsdp,
// parameters (and so optimizer state) are also split over 'data'.
nn::LogicalRules sharding_rules(bool fsdp);
// Fresh parameters, each drawn directly in the sharding `rules` give on `mesh`; the same values
// on every mesh (nn::init_params over param_specs), and in both layouts (stacked: drawn per
// layer, then stacked).
Params init(const Config& c, const Array& key, const Mesh& mesh, const nn::LogicalRules& rules,
            bool stacked = false);

struct ForwardOptions {
  std::optional<Array> dropout_key{};  // training: dropout on; none: evaluation
  const Mesh* mesh = nullptr;        // with rules: activation sharding constraints
  const nn::LogicalRules* rules = nullptr;
  // Rematerialise each transformer block (partix::checkpoint): the backward pass recomputes a
  // block's activations from its input instead of keeping them.
  bool remat = false;
  // Scan one traced block over the layers: compile time does not grow with depth. Params may be
  // stacked (read directly) or per layer (stacked inside the program). Without it, stacked
  // Params are sliced per layer and the blocks unrolled. Both draw the same dropout masks
  // (layer i's key is the dropout key folded with i).
  bool scan_layers = false;
};

// Logits [B, T, V] for token ids [B, T].
Array forward(const Params& params, const Array& ids, const Config& c,
              const ForwardOptions& options = {});
// Mean next-token cross entropy of ids [B, T] against targets [B, T].
Array loss(const Params& params, const Array& ids, const Array& targets, const Config& c,
           const ForwardOptions& options = {});

// Pipeline parallelism: the loss of loss() and its gradients with the stacked
// blocks split over the mesh's 'stage' axis, run by `schedule` over `microbatches` (each the
// batch's rows divided by the microbatches on every data device), inside one shard_map. The
// mesh's other axes are 'data' (data parallel, and FSDP when the rules split parameters over
// it: each is gathered where used, a layer at a time) and 'model' (Megatron tensor parallel);
// the rules must split 'layers' over 'stage' (sharding_rules does). Each chunk is rematerialised
// in its backward. Losses and gradients equal value_and_grad of loss() up to summation order;
// with dropout the masks are drawn per microbatch, so they differ from the unpipelined run's.
struct PipelineOptions {
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::k1F1B;
  int64_t microbatches = 1;
  int64_t virtual_stages = 1;  // interleaved: chunks per device
};
std::pair<Array, Params> pipeline_value_and_grad(const Params& params, const Array& ids,
                                                 const Array& targets, const Config& c,
                                                 const ForwardOptions& options,
                                                 const PipelineOptions& pipeline);

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
  Config config{};
  Params params{};
};
Checkpoint load_hf(const std::string& dir, const Mesh& mesh, const nn::LogicalRules& rules);
// Writes config.json and model.safetensors that transformers' GPT2LMHeadModel loads. The
// folder appears (or replaces an earlier checkpoint) whole; an existing folder holding other
// files is refused rather than replaced.
void save_hf(const std::string& dir, const Params& params, const Config& c);
// Throws unless save_hf could write `dir`: call before training, so its result is not lost.
void check_save_path(const std::string& dir);

}  // namespace partix::models::gpt2

namespace partix::models::gpt2 {

struct TrainOptions {
  Config model = tiny();
  int64_t data = 1, model_parallel = 1;  // mesh (data, model)
  // Pipeline stages: above 1 the mesh is (stage, data, model) and the step runs `schedule`
  // (pipeline_value_and_grad) over `microbatches`; needs scan_layers.
  int64_t stages = 1;
  int64_t microbatches = 1;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::k1F1B;
  int64_t virtual_stages = 1;
  bool fsdp = false;
  int64_t steps = 50;
  int64_t batch = 8;  // global batch (sequences per step)
  int64_t seq = 64;
  double lr = 1e-3;
  int64_t warmup = 10;
  double clip = 1.0;
  double weight_decay = 0.1;
  bool remat = false;  // recompute each block's activations in the backward pass
  // Keep the parameters (and optimizer state) stacked over layers and scan one traced block
  // over them (ForwardOptions); false: per-layer parameters, blocks unrolled.
  bool scan_layers = true;
  // Explicit sharding: the mesh's axes are Explicit, so every activation's
  // sharding is part of its type, computed per op while tracing; the contractions whose
  // sharding is ambiguous (tensor-parallel output projections) state theirs with out_sharding.
  // Same losses and collectives as the Auto mesh.
  bool explicit_sharding = false;
  uint64_t seed = 0;
  std::vector<std::string> corpus = io::default_corpus_paths();
  Params initial{};  // start from these parameters if set
  std::string checkpoint{};  // or from this Hugging Face directory (its config replaces `model`)
  // Training checkpoints (parameters, optimizer state, RNG key, step, data position) under
  // checkpoint_dir: after every save_every steps (0: none but the last) and after step `steps`,
  // the newest `keep` kept (0: all). With resume, training continues from the latest committed
  // step, on any mesh; `steps` stays the final step number.
  std::string checkpoint_dir{};
  int64_t save_every = 0;
  int64_t keep = 0;
  bool resume = false;
};

// Everything a run needs to continue bit-exactly, as one tree (its leaf paths are the
// checkpoint's leaf names: "['params']['transformer.wte.weight']", "['opt_state'].count", ...).
// The step and the data loader's position are the checkpoint's step.
struct TrainState {
  Params params{};
  optim::AdamWState opt_state{};
  Array rng_key{};
};

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  int64_t max_device_bytes = 0;  // the largest per-device memory in use after the step
  double save_seconds = 0;       // of `seconds`, the time a checkpoint save held the step
};

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  ~Trainer();
  // One step; a non-finite loss (or parameters, at a checkpoint) raises partix::Error naming
  // the step, before anything of that step is saved.
  StepMetrics step();
  // Stacked over layers when options().scan_layers (unstack_layers gives the per-layer names).
  const Params& params() const { return params_; }
  const Mesh& mesh() const { return mesh_; }
  const TrainOptions& options() const { return o_; }
  // Each parameter's shape, logical axes and sharding, one per line.
  std::string sharding_table() const;
  Lowered lower_step();  // the compiled training step, for inspection
  // A Hugging Face directory. With several processes every process must call it: they gather
  // the parameters and process 0 writes.
  void save(const std::string& dir) const;
  // Steps done so far: the index of the next step.
  int64_t step_count() const { return step_; }
  // The checkpoint step this run continued from, if it resumed.
  std::optional<int64_t> resumed_from() const { return resumed_from_; }
  TrainState state() const { return {params_, opt_, key_}; }
  // Waits for checkpoint writes in flight; raises a failed one's error.
  void wait_for_checkpoints();

 private:
  void restore_checkpoint(int64_t step);
  void save_checkpoint();
  struct Step;
  TrainOptions o_;
  Mesh mesh_;
  nn::LogicalRules rules_;
  Params params_;
  optim::AdamWState opt_;
  std::unique_ptr<io::DataLoader> loader_;
  std::unique_ptr<Step> step_fn_;
  Array key_;
  int64_t step_ = 0;
  int64_t corpus_tokens_ = 0;
  uint64_t corpus_xxh64_ = 0;  // the token stream's fingerprint, checked at resume
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::optional<int64_t> resumed_from_;
};

// The Trainer's step for `o` (its model, batch, seq, fsdp, clip and weight decay; o.data and
// o.model_parallel are ignored) lowered on `mesh`, which must have axes 'data' and 'model' and
// may be abstract (make_abstract_mesh): parameters, optimizer state and batch are abstract, so
// nothing is allocated and any size plans on any mesh. The same program the Trainer compiles.
Lowered lower_train_step(const TrainOptions& o, const Mesh& mesh);

// A Hugging Face directory from a checkpoint step: a training checkpoint, or one of parameters
// alone (leaves "['transformer.wte.weight']", ...). The configuration comes from the
// checkpoint's "gpt2.config" metadata (training checkpoints have it) or from `config`.
void checkpoint_to_hf(const std::string& checkpoint_dir, int64_t step, const std::string& out,
                      const std::optional<Config>& config = std::nullopt);

}  // namespace partix::models::gpt2

namespace partix {

template <>
struct TreeDef<models::gpt2::TrainState> {
  using T = models::gpt2::TrainState;
  static void flatten(const T& s, std::vector<Array>& out) {
    TreeDef<Params>::flatten(s.params, out);
    TreeDef<optim::AdamWState>::flatten(s.opt_state, out);
    out.push_back(s.rng_key);
  }
  static T unflatten(const T& proto, const Array*& it) {
    T s;
    s.params = TreeDef<Params>::unflatten(proto.params, it);
    s.opt_state = TreeDef<optim::AdamWState>::unflatten(proto.opt_state, it);
    s.rng_key = *it++;
    return s;
  }
  static std::string key(const T& s) {
    return "train" + TreeDef<Params>::key(s.params) + TreeDef<optim::AdamWState>::key(s.opt_state);
  }
  static void paths(const T& s, const std::string& at, std::vector<std::string>& out) {
    TreeDef<Params>::paths(s.params, at + "['params']", out);
    TreeDef<optim::AdamWState>::paths(s.opt_state, at + "['opt_state']", out);
    out.push_back(at + "['rng_key']");
  }
};

}  // namespace partix
