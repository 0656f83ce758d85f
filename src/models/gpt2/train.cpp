#include "partix/models/gpt2.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/errors.h"
#include "files/checksum.h"
#include "data/data_loader.h"
#include "models/gpt2/layout.h"
#include "partix/distributed.h"
#include "partix/ops.h"
#include "partix/random.h"

namespace partix::models::gpt2 {

using StepOut = std::tuple<Params, optim::AdamWState, Array>;
using StepFn = std::function<StepOut(const Params&, const optim::AdamWState&, const Array&,
                                     const Array&, const Array&, const Array&)>;

struct Trainer::Step {
  Jitted<StepFn> fn;
};

namespace {

// One training step as one program: value_and_grad of the loss (activation constraints by the
// rules), clipping to the global norm, AdamW.
Jitted<StepFn> make_step(const TrainOptions& o, const Mesh& mesh, const nn::LogicalRules& rules) {
  const Config cfg = o.model;
  const optim::AdamWConfig adam{0.9, 0.95, 1e-8, o.weight_decay};
  const double clip = o.clip;
  const bool remat = o.remat, scan_layers = o.scan_layers;
  const bool pipelined = mesh.has_axis("stage");
  const PipelineOptions po{o.schedule, o.microbatches, o.virtual_stages};
  StepFn f = [cfg, mesh, rules, adam, clip, remat, scan_layers, pipelined, po](
                 const Params& p, const optim::AdamWState& s, const Array& ids,
                 const Array& targets, const Array& lr, const Array& key) -> StepOut {
    ForwardOptions fo{key, &mesh, &rules, remat, scan_layers};
    Array loss_value;
    Params g;
    if (pipelined) {
      std::tie(loss_value, g) = pipeline_value_and_grad(p, ids, targets, cfg, fo, po);
    } else {
      auto [v, gt] = value_and_grad([&](const Params& pp) {
        return loss(pp, ids, targets, cfg, fo);
      })(p);
      loss_value = v;
      g = Params(gt);
    }
    auto [clipped, norm] = optim::clip_by_global_norm(g, clip);
    auto [np, ns] = optim::adamw_update(p, clipped, s, lr, adam);
    return {np, ns, loss_value};
  };
  return jit(f, {.donate_argnums = {0, 1}, .name = "train_step"});
}

Mesh train_mesh(const TrainOptions& o) {
  const AxisType t = o.explicit_sharding ? AxisType::Explicit : AxisType::Auto;
  if (o.stages > 1) {
    return make_mesh({o.stages, o.data, o.model_parallel}, {"stage", "data", "model"},
                     std::vector<AxisType>(3, t));
  }
  return make_mesh({o.data, o.model_parallel}, {"data", "model"}, std::vector<AxisType>(2, t));
}

// The pipeline's preconditions, checked before anything is loaded or allocated.
void check_pipeline(const TrainOptions& o) {
  detail::check(o.stages >= 1, "train", "stages is {}, must be at least 1", o.stages);
  detail::check(o.microbatches >= 1, "train", "microbatches is {}, must be at least 1",
                o.microbatches);
  if (o.stages == 1) {
    detail::check(o.microbatches == 1 && o.virtual_stages == 1, "train",
                  "microbatches ({}) and virtual stages ({}) need a pipeline: a 'stage' axis of "
                  "more than one device",
                  o.microbatches, o.virtual_stages);
    return;
  }
  detail::check(o.scan_layers, "train", "a pipeline needs the layers stacked (scan_layers)");
  detail::check(!o.explicit_sharding, "train", "a pipeline runs on an Auto mesh, not Explicit");
  // The schedule's own checks (microbatches a multiple of the stages when interleaved, ...).
  (void)pipeline::make_schedule(o.schedule, o.stages, o.microbatches, o.virtual_stages);
  if (o.checkpoint.empty()) {  // a checkpoint's depth is checked at its step
    check_layers_split("train", o.model.n_layer, o.stages, o.virtual_stages);
  }
  detail::check(o.batch % (o.data * o.microbatches) == 0, "train",
                "the batch {} does not split into {} microbatches on each of {} data devices",
                o.batch, o.microbatches, o.data);
}

}  // namespace

Lowered lower_train_step(const TrainOptions& o, const Mesh& mesh) {
  if (!(mesh.has_axis("data") && mesh.has_axis("model"))) {
    detail::fail("gpt2.lower_train_step",
                 "the mesh must have axes 'data' and 'model' (and 'stage' for a pipeline), got {}",
                 mesh.to_string());
  }
  detail::check(o.batch % mesh.axis_size("data") == 0, "gpt2.lower_train_step",
                "the batch {} does not split over {} data devices", o.batch,
                mesh.axis_size("data"));
  const int64_t stages = mesh.has_axis("stage") ? mesh.axis_size("stage") : 1;
  if (stages != o.stages) {
    detail::fail("gpt2.lower_train_step", "the mesh {} has {} stages but the options {}",
                 mesh.to_string(), stages, o.stages);
  }
  {
    TrainOptions checked = o;
    checked.data = mesh.axis_size("data");
    check_pipeline(checked);
  }
  const nn::LogicalRules rules = sharding_rules(o.fsdp);
  const nn::ParamSpecs specs = param_specs(o.model, o.scan_layers);
  const auto shardings = nn::param_shardings(specs, rules, mesh);
  Params p;
  optim::AdamWState s;
  for (const auto& [name, spec] : specs) {
    const NamedSharding& sh = shardings.at(name);
    p[name] = ShapeDtypeStruct{spec.shape, spec.dtype, sh};
    s.mu[name] = ShapeDtypeStruct{spec.shape, DType::F32, sh};
    s.nu[name] = ShapeDtypeStruct{spec.shape, DType::F32, sh};
    if (spec.dtype != DType::F32) s.master[name] = ShapeDtypeStruct{spec.shape, DType::F32, sh};
  }
  const NamedSharding replicated(mesh, P());
  s.count = ShapeDtypeStruct{{}, DType::I32, replicated};
  Array ids = ShapeDtypeStruct{{o.batch, o.seq}, DType::I32, NamedSharding(mesh, P("data"))};
  return make_step(o, mesh, rules)
      .lower(p, s, ids, ids, ShapeDtypeStruct{{}, DType::F32, replicated},
             ShapeDtypeStruct{{2}, DType::I32, replicated});
}

namespace {

// The optimiser's numbers (as the CLI's flags check them): a NaN or negative learning rate
// would train on silently and ruin every parameter at the first step.
void check_hyperparameters(const TrainOptions& o) {
  detail::check(std::isfinite(o.lr) && o.lr > 0, "train", "lr is {}, must be finite and positive",
                o.lr);
  detail::check(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "train",
                "weight_decay is {}, must be finite and non-negative", o.weight_decay);
  detail::check(std::isfinite(o.clip) && o.clip > 0, "train",
                "clip is {}, must be finite and positive", o.clip);
  detail::check(o.warmup >= 0, "train", "warmup is {}, must be non-negative", o.warmup);
}

}  // namespace

Trainer::Trainer(TrainOptions o)
    : o_((check_hyperparameters(o), check_pipeline(o), std::move(o))),
      mesh_(train_mesh(o_)),
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
  std::vector<int32_t> tokens = io::load_corpus(o_.corpus);
  corpus_tokens_ = static_cast<int64_t>(tokens.size());
  corpus_xxh64_ = detail::xxh64(tokens.data(), tokens.size() * sizeof(int32_t));
  std::optional<int64_t> resume_step;
  if (!o_.checkpoint_dir.empty()) {
    checkpoints_ = std::make_unique<CheckpointManager>(
        o_.checkpoint_dir, CheckpointManagerOptions{.keep = o_.keep, .save_every = 1});
    if (o_.resume) resume_step = checkpoints_->latest_step();
  }
  if (resume_step) {
    restore_checkpoint(*resume_step);
  } else {
    if (o_.initial.empty()) {
      params_ = init(o_.model, random::key(o_.seed), mesh_, rules_, o_.scan_layers);
    } else {
      // Initial parameters in either layout: placed in their own layout's shardings, then
      // converted to the run's.
      auto specs = param_specs(o_.model, is_stacked(o_.initial));
      Params placed;
      for (const auto& [k, s] : nn::param_shardings(specs, rules_, mesh_)) {
        detail::check(o_.initial.count(k) != 0, "train", "the initial parameters lack '{}'", k);
        const Array& a = o_.initial.at(k);
        if (a.shape() != specs.at(k).shape) {
          detail::fail("train", "the initial parameter '{}' has shape {}, but the model needs {}",
                       k, shape_to_string(a.shape()), shape_to_string(specs.at(k).shape));
        }
        placed[k] = device_put(a, s);
      }
      o_.initial.clear();
      params_ = to_layout(placed, o_.model, o_.scan_layers, mesh_, rules_);
    }
    opt_ = optim::adamw_init(params_);
    key_ = device_put(random::fold_in(random::key(o_.seed), 7), NamedSharding(mesh_, P()));
  }
  // Each process reads only the rows its devices hold.
  const auto [part, parts] = io::process_rows(NamedSharding(mesh_, P("data")), o_.batch);
  loader_ = std::make_unique<io::DataLoader>(std::move(tokens), o_.batch, o_.seq, o_.seed, part,
                                             parts, /*prefetch=*/2, /*first_step=*/step_);
  step_fn_ = std::make_unique<Step>(Step{make_step(o_, mesh_, rules_)});
}

Trainer::~Trainer() = default;

StepMetrics Trainer::step() {
  auto t0 = std::chrono::steady_clock::now();
  io::Batch b = loader_->next();
  NamedSharding batch_sharding(mesh_, P("data"));
  const Shape global{o_.batch, o_.seq};
  Array ids = make_array_from_process_local_data(batch_sharding,
                                                 from_vector(b.inputs, {b.rows, b.seq}), global);
  Array targets = make_array_from_process_local_data(
      batch_sharding, from_vector(b.targets, {b.rows, b.seq}), global);
  double lr = optim::warmup_cosine(step_, o_.lr, o_.warmup, std::max<int64_t>(o_.steps, 1));
  Array lr_arr = device_put(scalar<float>(static_cast<float>(lr)), NamedSharding(mesh_, P()));
  Array key = device_put(random::fold_in(key_, step_), NamedSharding(mesh_, P()));
  auto [np, ns, loss_value] = step_fn_->fn(params_, opt_, ids, targets, lr_arr, key);
  params_ = std::move(np);
  opt_ = std::move(ns);
  StepMetrics m;
  m.step = step_++;
  m.loss = loss_value.item<float>();
  // A diverged run must stop here: saving on would replace good checkpoints with garbage.
  detail::check(std::isfinite(m.loss), "train",
                "step {}: the loss is {}: training diverged (try a lower learning rate); "
                "stopped without saving this step",
                step_, m.loss);
  if (checkpoints_ && ((o_.save_every > 0 && step_ % o_.save_every == 0) || step_ == o_.steps)) {
    auto s0 = std::chrono::steady_clock::now();
    save_checkpoint();
    m.save_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
  }
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

void Trainer::save(const std::string& dir) const {
  // Across processes every process gathers the parameters it does not hold whole; process 0
  // alone writes.
  Params whole;
  for (const auto& [name, p] : to_layout(params_, o_.model, false, mesh_, rules_)) {
    whole.emplace(name, p.is_fully_addressable() ? p : process_allgather(p));
  }
  if (process_index() == 0) save_hf(dir, whole, o_.model);
}

// ---- training checkpoints

namespace {

constexpr std::string_view kConfigKey = "gpt2.config";
constexpr std::string_view kDataKey = "train.data";

// What the checkpoint's data position means: the same corpus (its token count and a hash of the
// tokens: another corpus of the same size is another stream), batch and sequence length, and
// the seed that shuffles the windows.
std::string data_description(const TrainOptions& o, int64_t corpus_tokens, uint64_t corpus_xxh64) {
  return fmt::format(
      "{{\"batch\": {}, \"seq\": {}, \"seed\": {}, \"corpus_tokens\": {}, \"corpus_xxh64\": "
      "\"{}\"}}",
      o.batch, o.seq, o.seed, corpus_tokens, detail::hex64(corpus_xxh64));
}

std::string quoted(const std::string& name) { return "['" + name + "']"; }

// Whether the checkpoint holds the blocks stacked over layers (leaves under `prefix`).
bool has_stacked_leaves(const ckpt::Info& info, const std::string& prefix) {
  const std::string first =
      prefix + quoted(std::string(kStackedPrefix) + block_parameters().front());
  return std::any_of(info.leaves.begin(), info.leaves.end(),
                     [&](const auto& l) { return l.name == first; });
}

}  // namespace

void Trainer::save_checkpoint() {
  // The loss was finite, but the update may not be: a parameter with a non-finite value, or
  // values so large that their squares overflow (far from any trained weights), is divergence.
  for (const auto& [name, p] : params_) {
    const float norm2 = sum(square(astype(p, DType::F32))).item<float>();
    detail::check(std::isfinite(norm2), "train",
                  "step {}: parameter '{}' holds non-finite or overflowing values after the "
                  "update: training diverged (try a lower learning rate); stopped without saving "
                  "this step",
                  step_, name);
  }
  ckpt::SaveOptions so;
  so.metadata[std::string(kConfigKey)] = config_to_json(o_.model);
  so.metadata[std::string(kDataKey)] = data_description(o_, corpus_tokens_, corpus_xxh64_);
  checkpoints_->save(step_, state(), so, /*force=*/true);
}

void Trainer::wait_for_checkpoints() {
  if (checkpoints_) checkpoints_->wait();
}

void Trainer::restore_checkpoint(int64_t step) {
  ckpt::Info info = checkpoints_->info(step);
  auto meta = [&](std::string_view key) -> std::string {
    auto it = info.metadata.find(std::string(key));
    if (it == info.metadata.end()) {
      detail::fail("train", "'{}' is not a training checkpoint of partix train (no '{}' metadata)",
                   info.path, key);
    }
    return it->second;
  };
  const std::string config = config_to_json(o_.model);
  if (meta(kConfigKey) != config) {
    detail::fail("train",
                 "'{}' holds another model: its configuration is {} but this run's is {} (choose "
                 "the same --model, or another --checkpoint-dir)",
                 info.path, meta(kConfigKey), config);
  }
  const std::string data = data_description(o_, corpus_tokens_, corpus_xxh64_);
  if (meta(kDataKey) != data) {
    detail::fail("train",
                 "'{}' was saved reading the data as {}, but this run reads it as {}; resume with "
                 "the same --batch, --seq, --seed and --corpus",
                 info.path, meta(kDataKey), data);
  }
  // The state's structure with one spec per leaf: nothing is allocated before the restore.
  // The checkpoint's layout (stacked or per layer) is restored, then converted to this run's.
  const bool stacked = has_stacked_leaves(info, "['params']");
  const NamedSharding replicated(mesh_, P());
  const Array fresh_key = random::key(0);
  TrainState proto;
  std::map<std::string, ckpt::ArraySpec> specs;
  const nn::ParamSpecs param = param_specs(o_.model, stacked);
  for (const auto& [name, sharding] : nn::param_shardings(param, rules_, mesh_)) {
    const nn::ParamSpec& ps = param.at(name);
    proto.params[name] = proto.opt_state.mu[name] = proto.opt_state.nu[name] = Array();
    specs.insert({"['params']" + quoted(name), {ps.shape, ps.dtype, sharding}});
    specs.insert({"['opt_state'].mu" + quoted(name), {ps.shape, DType::F32, sharding}});
    specs.insert({"['opt_state'].nu" + quoted(name), {ps.shape, DType::F32, sharding}});
    if (ps.dtype == DType::BF16 || ps.dtype == DType::F16) {
      proto.opt_state.master[name] = Array();
      specs.insert({"['opt_state'].master" + quoted(name), {ps.shape, DType::F32, sharding}});
    }
  }
  specs.insert({"['opt_state'].count", {Shape{}, DType::I32, replicated}});
  specs.insert({"['rng_key']", {fresh_key.shape(), fresh_key.dtype(), replicated}});
  TrainState st = checkpoints_->restore(step, proto, specs);
  auto convert = [&](const Params& p) {
    return to_layout(p, o_.model, o_.scan_layers, mesh_, rules_);
  };
  params_ = convert(st.params);
  opt_ = std::move(st.opt_state);
  opt_.mu = convert(opt_.mu);
  opt_.nu = convert(opt_.nu);
  if (!opt_.master.empty()) opt_.master = convert(opt_.master);
  key_ = std::move(st.rng_key);
  step_ = step;
  resumed_from_ = step;
}

void checkpoint_to_hf(const std::string& checkpoint_dir, int64_t step, const std::string& out,
                      const std::optional<Config>& config) {
  constexpr std::string_view api = "gpt2.checkpoint_to_hf";
  ckpt::Info info = ckpt::info(checkpoint_dir, step);
  Config c;
  if (config) {
    c = *config;
  } else {
    auto it = info.metadata.find(std::string(kConfigKey));
    detail::check(it != info.metadata.end(), api,
                  "'{}' has no '{}' metadata: pass the model's Config", info.path, kConfigKey);
    c = config_from_json(it->second, info.path + " metadata");
  }
  // Parameters alone, or under ['params'] in a training checkpoint.
  const bool training = std::any_of(info.leaves.begin(), info.leaves.end(),
                                    [](const auto& l) { return l.name.starts_with("['params']"); });
  const std::string prefix = training ? "['params']" : "";
  const NamedSharding one = single_device_sharding(default_device());
  Params proto;
  std::map<std::string, ckpt::ArraySpec> specs;
  for (const auto& [name, ps] : param_specs(c, has_stacked_leaves(info, prefix))) {
    proto[name] = Array();
    specs.insert({prefix + quoted(name), {ps.shape, ps.dtype, one}});
  }
  std::vector<std::string> names;
  std::vector<ckpt::ArraySpec> ordered;
  for (const std::string& path : tree_leaf_paths(proto, prefix)) {
    names.push_back(path);
    ordered.push_back(specs.at(path));
  }
  std::vector<Array> leaves =
      ckpt::restore_leaves(checkpoint_dir, step, names, ordered, {.partial = training});
  save_hf(out, tree_unflatten(proto, leaves), c);
}

std::string Trainer::sharding_table() const {
  std::string out;
  for (const auto& [k, v] : params_) {
    out += fmt::format("  {:<44} {}{:<14} {}\n", k, dtype_name(v.dtype()), shape_to_string(v.shape()),
                       v.sharding().spec().to_string());
  }
  return out;
}

}  // namespace partix::models::gpt2
