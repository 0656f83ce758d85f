#include "models/gpt2/train.h"

#include <chrono>

#include "core/errors.h"
#include "partix/ops.h"
#include "partix/random.h"

namespace partix::models::gpt2 {

using StepOut = std::tuple<Params, optim::AdamWState, Array>;
using StepFn = std::function<StepOut(const Params&, const optim::AdamWState&, const Array&,
                                     const Array&, const Array&, const Array&)>;

struct Trainer::Step {
  Jitted<StepFn> fn;
};

Trainer::Trainer(TrainOptions o)
    : o_(std::move(o)),
      mesh_(make_mesh({o_.data, o_.model_parallel}, {"data", "model"})),
      rules_(sharding_rules(o_.fsdp)) {
  detail::check(o_.batch % o_.data == 0, "train", "the batch {} does not split over {} data devices",
                o_.batch, o_.data);
  detail::check(o_.seq <= o_.model.n_positions, "train", "seq {} exceeds the model's {} positions",
                o_.seq, o_.model.n_positions);
  if (!o_.checkpoint.empty()) {
    Checkpoint ck = load_hf(o_.checkpoint, mesh_, rules_);
    o_.model = ck.config;
    o_.initial = std::move(ck.params);
  }
  auto specs = param_specs(o_.model);
  if (o_.initial.empty()) {
    params_ = nn::init_params(specs, random::key(o_.seed), mesh_, rules_);
  } else {
    auto sh = nn::param_shardings(specs, rules_, mesh_);
    for (const auto& [k, s] : sh) {
      detail::check(o_.initial.count(k) != 0, "train", "the initial parameters lack '{}'", k);
      params_[k] = device_put(o_.initial.at(k), s);
    }
  }
  opt_ = optim::adamw_init(params_);
  key_ = device_put(random::fold_in(random::key(o_.seed), 7), NamedSharding(mesh_, P()));
  std::vector<int32_t> tokens = io::load_corpus(o_.corpus);
  loader_ = std::make_unique<io::DataLoader>(std::move(tokens), o_.batch, o_.seq, o_.seed,
                                             process_index(), process_count());
  const Config cfg = o_.model;
  const Mesh mesh = mesh_;
  const nn::LogicalRules rules = rules_;
  const optim::AdamWConfig adam{0.9, 0.95, 1e-8, o_.weight_decay};
  const double clip = o_.clip;
  StepFn f = [cfg, mesh, rules, adam, clip](const Params& p, const optim::AdamWState& s,
                                            const Array& ids, const Array& targets,
                                            const Array& lr, const Array& key) -> StepOut {
    ForwardOptions fo{key, &mesh, &rules};
    auto [loss_value, g] = value_and_grad([&](const Params& pp) {
      return loss(pp, ids, targets, cfg, fo);
    })(p);
    auto [clipped, norm] = optim::clip_by_global_norm(Params(g), clip);
    auto [np, ns] = optim::adamw_update(p, clipped, s, lr, adam);
    return {np, ns, loss_value};
  };
  step_fn_ = std::make_unique<Step>(Step{jit(f, {.donate_argnums = {0, 1}, .name = "train_step"})});
}

Trainer::~Trainer() = default;

StepMetrics Trainer::step() {
  auto t0 = std::chrono::steady_clock::now();
  io::Batch b = loader_->next();
  NamedSharding batch_sharding(mesh_, P("data"));
  Array ids = device_put(from_vector(b.inputs, {b.rows, b.seq}), batch_sharding);
  Array targets = device_put(from_vector(b.targets, {b.rows, b.seq}), batch_sharding);
  double lr = optim::warmup_cosine(step_, o_.lr, o_.warmup, std::max<int64_t>(o_.steps, 1));
  Array lr_arr = device_put(scalar<float>(static_cast<float>(lr)), NamedSharding(mesh_, P()));
  Array key = device_put(random::fold_in(key_, step_), NamedSharding(mesh_, P()));
  auto [np, ns, loss_value] = step_fn_->fn(params_, opt_, ids, targets, lr_arr, key);
  params_ = std::move(np);
  opt_ = std::move(ns);
  StepMetrics m;
  m.step = step_++;
  m.loss = loss_value.item<float>();
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.tokens_per_s = static_cast<double>(o_.batch * o_.seq) / m.seconds;
  for (const Device& d : mesh_.devices()) {
    m.max_device_bytes = std::max(m.max_device_bytes, memory_stats(d.id).bytes_in_use);
  }
  return m;
}

Lowered Trainer::lower_step() {
  NamedSharding batch_sharding(mesh_, P("data"));
  Array ids = device_put(zeros({o_.batch, o_.seq}, DType::I32), batch_sharding);
  Array lr = device_put(scalar<float>(0.0f), NamedSharding(mesh_, P()));
  return step_fn_->fn.lower(params_, opt_, ids, ids, lr, key_);
}

void Trainer::save(const std::string& dir) const { save_hf(dir, params_, o_.model); }

std::string Trainer::sharding_table() const {
  std::string out;
  for (const auto& [k, v] : params_) {
    out += fmt::format("  {:<44} {}{:<14} {}\n", k, dtype_name(v.dtype()), shape_to_string(v.shape()),
                       v.sharding().spec().to_string());
  }
  return out;
}

}  // namespace partix::models::gpt2
