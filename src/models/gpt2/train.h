// Training a GPT-2 on a mesh: data parallel over 'data', Megatron tensor parallel over
// 'model', FSDP (parameters and optimizer state split over 'data') on request. Switching the
// strategy is only a matter of the mesh shape and the fsdp flag.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/data_loader.h"
#include "models/gpt2/gpt2.h"
#include "partix/optim.h"
#include "partix/transforms.h"

namespace partix::models::gpt2 {

struct TrainOptions {
  Config model = tiny();
  int64_t data = 1, model_parallel = 1;  // mesh (data, model)
  bool fsdp = false;
  int64_t steps = 50;
  int64_t batch = 8;  // global batch (sequences per step)
  int64_t seq = 64;
  double lr = 1e-3;
  int64_t warmup = 10;
  double clip = 1.0;
  double weight_decay = 0.1;
  uint64_t seed = 0;
  std::vector<std::string> corpus = io::default_corpus_paths();
  Params initial;  // start from these parameters if set
  std::string checkpoint;  // or from this Hugging Face directory (its config replaces `model`)
};

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  int64_t max_device_bytes = 0;  // the largest per-device memory in use after the step
};

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  ~Trainer();
  StepMetrics step();
  const Params& params() const { return params_; }
  const Mesh& mesh() const { return mesh_; }
  const TrainOptions& options() const { return o_; }
  // Each parameter's shape, logical axes and sharding, one per line.
  std::string sharding_table() const;
  Lowered lower_step();  // the compiled training step, for inspection
  void save(const std::string& dir) const;  // a Hugging Face directory

 private:
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
};

}  // namespace partix::models::gpt2
