// partix plan: will it fit, and what will it send? One training step of a GPT-2-architecture
// model (the Trainer's own program), or a Llama prefill and decode step, lowered on a mesh of
// abstract devices with abstract parameters, optimizer state, batch and cache: any size, on any
// mesh, nothing allocated.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/errors.h"
#include "flags.h"
#include "files/input_file.h"
#include "files/json_util.h"
#include "partix/models/gpt2.h"
#include "partix/models/llama.h"
#include "partix/partix.h"
#include "report.h"
#include "step_time.h"

namespace partix::cli {

namespace {

namespace g2 = models::gpt2;
namespace ll = models::llama;

struct PlanArgs {
  std::string model = "small";
  std::vector<int64_t> mesh = {1, 1, 1};  // stage, data, model (the last --mesh)
  std::vector<std::vector<int64_t>> meshes;  // every --mesh given: several make a table
  int64_t microbatches = 0;  // 0: one per stage... at least the stages (pipelined meshes only)
  int64_t virtual_stages = 1;
  std::string schedule = "1f1b";
  bool fsdp = false, generate = false, json = false;
  int64_t batch = 8, seq = 0;  // seq 0: the model's context length (training), 512 (generate)
  int64_t new_tokens = 128;
  int64_t vocab = 0;  // 0: the model's own
  std::string dtype = "f32", remat = "none";
  bool step_time = false;  // measure this host and predict each training step's time
  double calibrate = 0;    // the first mesh's measured step, seconds (0: uncalibrated)
  double calibration = 0;  // measured / modelled, from an earlier --calibrate (0: none)
  std::string host_rates;  // a file that keeps the measured rates
};

// One model of either family.
struct ModelChoice {
  std::optional<g2::Config> gpt2;
  std::optional<ll::Config> llama;
};

g2::Config gpt2_sized(int64_t embd, int64_t layers, int64_t heads, int64_t positions) {
  g2::Config c;
  c.n_embd = embd;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_positions = positions;
  return c;
}

ll::Config llama_sized(int64_t hidden, int64_t mlp, int64_t layers, int64_t heads,
                       int64_t kv_heads) {
  ll::Config c;  // Llama 2: vocabulary 32000, 4096 positions, RoPE theta 10^4
  c.vocab_size = 32000;
  c.hidden_size = hidden;
  c.intermediate_size = mlp;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  c.max_position = 4096;
  return c;
}

// A config.json is a few KB; the library's loaders accept up to this much.
constexpr uint64_t kMaxConfigBytes = 16 << 20;

constexpr std::string_view kBuiltins =
    "gpt2-tiny, small, gpt2-xl, gpt3-175b, llama-7b, llama-70b, smollm2-135m";

// Built-in configurations, or a Hugging Face config.json of GPT-2 or Llama (by model_type).
ModelChoice model_config(const std::string& name) {
  if (name == "gpt2-tiny" || name == "tiny") return {g2::tiny(), {}};
  if (name == "small" || name == "gpt2") return {g2::small(), {}};
  if (name == "gpt2-xl") return {gpt2_sized(1600, 48, 25, 1024), {}};
  if (name == "gpt3-175b") return {gpt2_sized(12288, 96, 96, 2048), {}};
  if (name == "llama-7b") return {{}, llama_sized(4096, 11008, 32, 32, 32)};
  if (name == "llama-70b") return {{}, llama_sized(8192, 28672, 80, 64, 8)};
  if (name == "smollm2-135m") return {{}, ll::Config{}};  // Config's defaults are SmolLM2-135M
  std::error_code ec;
  if (!std::filesystem::exists(name, ec)) {
    detail::fail("plan", "--model '{}' is neither a built-in name ({}) nor a readable config.json",
                 name, kBuiltins);
  }
  // A Hugging Face model folder, as train and generate take, is planned from its config.json.
  std::string path = name;
  if (std::filesystem::is_directory(name, ec)) {
    path = (std::filesystem::path(name) / "config.json").string();
    if (!std::filesystem::exists(path, ec)) {
      detail::fail("plan",
                   "--model '{}' is a folder without a config.json; give a model folder "
                   "or its config.json",
                   name);
    }
  }
  // The readers' own open: a FIFO, a device or a folder is refused (never read or waited on),
  // and a file larger than any config.json is refused before it is read.
  const std::string text = detail::read_text_file(path, "plan", kMaxConfigBytes);
  const nlohmann::json j = detail::parse_untrusted_json(text, "plan", path);
  const std::string type =
      j.is_object() && j.contains("model_type") && j["model_type"].is_string()
          ? j["model_type"].get<std::string>()
          : "";
  if (type == "gpt2") return {g2::config_from_json(text, path), {}};
  if (type == "llama") return {{}, ll::config_from_json(text, path)};
  detail::fail("plan", "'{}': model_type is '{}'; partix plans gpt2 and llama models", path,
               type.empty() ? "missing" : type);
}

// Figures are exact integers: one past int64 is an error, never a wrapped number.
[[noreturn]] void too_large() {
  detail::fail("plan",
               "a figure of this plan exceeds 2^63 (bytes or parameters): the model, batch or "
               "sequence is too large to plan");
}
int64_t add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) too_large();
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) too_large();
  return r;
}
// Elements of a shape (shape_size wraps past int64).
int64_t elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = mul(n, d);
  return n;
}

// Bytes one device holds of every leaf (every device holds one block of the same shape).
int64_t shard_bytes(const Params& arrays) {
  int64_t total = 0;
  for (const auto& [name, a] : arrays) {
    total = add(total, mul(elements(a.sharding().shard_shape(a.shape())), dtype_size(a.dtype())));
  }
  return total;
}

// The device with the largest peak.
size_t fullest(const MemoryAnalysis& m) {
  return static_cast<size_t>(std::max_element(m.peak_bytes.begin(), m.peak_bytes.end()) -
                             m.peak_bytes.begin());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::ordered_json collectives_json(const CostAnalysis& cost) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [kind, bytes] : cost.bytes_per_device) j[kind] = bytes;
  return j;
}

void print_collectives(const CostAnalysis& cost, const std::vector<std::string>& warnings) {
  for (const auto& [kind, bytes] : cost.bytes_per_device) {
    fmt::print("  {:<20} {:>10}\n", kind, format_bytes(bytes));
  }
  fmt::print("  flops per device {:.3e}; duplicated {:.1f}%\n", cost.flops,
             100 * cost.duplicated_flops_fraction);
  for (const std::string& warning : warnings) fmt::print("  warning: {}\n", warning);
}

// One training plan's figures, for the fullest device.
struct TrainPlan {
  g2::TrainOptions o;
  std::string mesh;
  int64_t total_params = 0, param_bytes = 0;
  size_t device = 0;
  int64_t params = 0, optimizer = 0, grads = 0, activations = 0, arguments = 0, peak = 0;
  CostAnalysis cost;
  std::vector<std::string> warnings;
  int64_t stages = 1;
  double bubble = 0;     // pipelined meshes: the schedule's bubble fraction
  int64_t held = 0;      // pipelined meshes: microbatch inputs the first stage holds
  std::optional<StepTime> step;  // --step-time, on a mesh this host has the devices for
  double scale = 1;              // --calibrate: measured / modelled, of the first mesh
};

// --step-time: each plan's step on this host's virtual devices, from rates measured on as many
// devices as its mesh has, scaled so that the first plan takes the --calibrate seconds.
void add_step_times(const PlanArgs& a, std::vector<TrainPlan>& plans,
                    const std::vector<Mesh>& meshes) {
  if (!a.step_time) return;
  detail::check(a.calibrate == 0 || a.calibration == 0, "plan",
                "give --calibrate (a measured step) or --calibration (a factor), not both");
  std::map<int, HostRates> rates;
  const int local = static_cast<int>(local_devices().size());
  for (size_t k = 0; k < plans.size(); ++k) {
    const int n = static_cast<int>(meshes[k].size());
    if (n > local) continue;
    if (!rates.count(n)) rates.emplace(n, host_rates(n, a.host_rates));
    plans[k].step = predict_step(plans[k].cost, rates.at(n), plans[k].bubble);
    plans[k].scale = a.calibration > 0 ? a.calibration : 1;
  }
  if (a.calibrate <= 0) return;
  detail::check(plans.front().step.has_value(), "plan",
                "--calibrate is the measured step of the first --mesh ({}), which needs more "
                "devices than this host's {}",
                plans.front().mesh, local);
  const double scale = a.calibrate / plans.front().step->total();
  for (TrainPlan& t : plans) t.scale = scale;
}

nlohmann::ordered_json step_json(const TrainPlan& t) {
  if (!t.step) return nullptr;
  return {{"seconds", t.scale * t.step->total()},
          {"modelled_seconds", t.step->total()},
          {"calibration", t.scale},
          {"compute", t.step->compute},
          {"memory", t.step->memory},
          {"per_instruction", t.step->overhead},
          {"collectives", t.step->collectives}};
}

// GPT-2 small as `partix train --model small` runs it reads bytes: one name, two vocabularies,
// so the plan says which one it planned.
void note_vocabulary(const PlanArgs& a) {
  if ((a.model == "small" || a.model == "gpt2") && a.vocab == 0) {
    fmt::print("  note: GPT-2 small's vocabulary of 50257; partix train --model small reads "
               "bytes (vocabulary 256): --vocab 256 plans that run\n");
  }
}

TrainPlan plan_training_figures(const PlanArgs& a, const g2::Config& model, const Mesh& mesh) {
  TrainPlan t;
  g2::TrainOptions& o = t.o;
  o.model = model;
  if (a.vocab > 0) o.model.vocab_size = a.vocab;
  o.model.dtype = a.dtype == "bf16" ? DType::BF16 : DType::F32;
  // The model's own dropout, as partix train runs it (its masks are drawn in the step).
  o.fsdp = a.fsdp;
  o.remat = a.remat == "layer";
  o.scan_layers = true;  // as partix train: the layers stacked and scanned
  o.batch = a.batch;
  o.seq = a.seq > 0 ? a.seq : o.model.n_positions;
  detail::check(o.seq <= o.model.n_positions, "plan", "--seq {} exceeds the model's {} positions",
                o.seq, o.model.n_positions);
  o.corpus.clear();
  t.stages = mesh.has_axis("stage") ? mesh.axis_size("stage") : 1;
  o.data = mesh.axis_size("data");
  o.model_parallel = mesh.axis_size("model");
  if (t.stages > 1) {
    o.stages = t.stages;
    o.schedule = pipeline::parse_schedule(a.schedule);
    o.virtual_stages = a.virtual_stages;
    o.microbatches = a.microbatches > 0 ? a.microbatches : t.stages;
    const pipeline::Schedule sc =
        pipeline::make_schedule(o.schedule, t.stages, o.microbatches, o.virtual_stages);
    t.bubble = sc.bubble_fraction();
    t.held = sc.held.front();
  } else if (a.meshes.size() <= 1) {  // in a table they apply to the pipelined meshes
    detail::check(a.microbatches == 0 && a.virtual_stages == 1, "plan",
                  "--microbatches and --virtual-stages plan pipelines: give --mesh a 'stage' axis "
                  "of more than one device (got {})",
                  mesh.to_string());
  }
  const Lowered step = g2::lower_train_step(o, mesh);
  const MemoryAnalysis mem = step.memory_analysis();
  t.cost = step.cost_analysis();
  t.warnings = step.warnings();
  t.mesh = mesh.to_string();

  // Parameters and optimizer state per device, from their shardings.
  const nn::ParamSpecs specs = g2::param_specs(o.model, o.scan_layers);
  const auto shardings = nn::param_shardings(specs, g2::sharding_rules(o.fsdp), mesh);
  Params params, moments;
  for (const auto& [name, spec] : specs) {
    t.total_params = add(t.total_params, elements(spec.shape));
    t.param_bytes = add(t.param_bytes, mul(elements(spec.shape), dtype_size(spec.dtype)));
    params[name] = ShapeDtypeStruct{spec.shape, spec.dtype, shardings.at(name)};
    moments[name] = ShapeDtypeStruct{spec.shape, DType::F32, shardings.at(name)};
  }
  t.device = fullest(mem);
  t.params = shard_bytes(params);
  // AdamW: two f32 moments, and an f32 master copy of half-precision parameters.
  t.optimizer = mul(shard_bytes(moments), o.model.dtype == DType::F32 ? 2 : 3);
  t.grads = t.params;  // one gradient per parameter, in its dtype and sharding
  t.peak = mem.peak_bytes[t.device];
  t.arguments = mem.argument_bytes[t.device];
  // What is live beyond the arguments when the loss (the step's last output) has just been
  // computed: what the forward pass keeps for the backward pass.
  t.activations =
      std::max<int64_t>(0, mem.live_bytes_at_output[t.device].back() - t.arguments);
  return t;
}

nlohmann::ordered_json train_plan_json(const PlanArgs& a, const TrainPlan& t) {
  nlohmann::ordered_json j;
  j["model"] = a.model;
  j["mode"] = "train";
  j["mesh"] = t.mesh;
  j["fsdp"] = a.fsdp;
  j["remat"] = a.remat;
  j["dtype"] = a.dtype;
  j["batch"] = t.o.batch;
  j["seq"] = t.o.seq;
  if (t.stages > 1) {
    j["pipeline"] = {{"schedule", a.schedule},
                     {"stages", t.stages},
                     {"microbatches", t.o.microbatches},
                     {"virtual_stages", t.o.virtual_stages},
                     {"bubble_fraction", t.bubble},
                     {"first_stage_holds", t.held}};
  }
  j["total_params"] = t.total_params;
  j["param_bytes"] = t.param_bytes;
  j["per_device"] = {{"device", t.device},       {"params", t.params},
                     {"grads", t.grads},         {"optimizer", t.optimizer},
                     {"activations", t.activations}, {"arguments", t.arguments},
                     {"peak", t.peak}};
  j["collectives"] = collectives_json(t.cost);
  j["flops_per_device"] = t.cost.flops;
  j["duplicated_flops_fraction"] = t.cost.duplicated_flops_fraction;
  j["bytes_accessed_per_device"] = t.cost.bytes_accessed;
  j["instructions_per_device"] = t.cost.instructions;
  if (a.step_time) j["step_time"] = step_json(t);
  j["warnings"] = t.warnings;
  return j;
}

void print_step(const TrainPlan& t) {
  if (!t.step) {
    fmt::print("step time: - (the mesh has more devices than this host)\n");
    return;
  }
  fmt::print("step time on this host: {:.3f} s{} (modelled: compute {:.3f} s, memory {:.3f} s, "
             "per-instruction {:.3f} s, collectives {:.3f} s)\n",
             t.scale * t.step->total(),
             t.scale != 1 ? fmt::format(", calibrated x{:.3f}", t.scale) : "", t.step->compute,
             t.step->memory, t.step->overhead, t.step->collectives);
}

void plan_training(const PlanArgs& a, const g2::Config& model, const Mesh& mesh,
                   std::chrono::steady_clock::time_point t0) {
  std::vector<TrainPlan> one{plan_training_figures(a, model, mesh)};
  add_step_times(a, one, {mesh});
  const TrainPlan& t = one.front();
  const double seconds = seconds_since(t0);
  if (a.json) {
    nlohmann::ordered_json j = train_plan_json(a, t);
    j["seconds"] = seconds;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("plan: training step of {} (vocabulary {}, {:.3f} B parameters, {}), batch {} x seq "
             "{}, {}{}, {} weights{}\n",
             a.model, t.o.model.vocab_size, static_cast<double>(t.total_params) / 1e9,
             format_bytes(static_cast<double>(t.param_bytes)), t.o.batch, t.o.seq, t.mesh,
             a.fsdp ? ", FSDP" : "", a.dtype, t.o.remat ? ", layer remat" : "");
  note_vocabulary(a);
  fmt::print("per device (device {}, the fullest):\n", t.device);
  auto row = [](std::string_view what, int64_t bytes, std::string_view note) {
    fmt::print("  {:<18} {:>10}  {}\n", what, format_bytes(static_cast<double>(bytes)), note);
  };
  row("parameters", t.params, "");
  row("optimizer state", t.optimizer,
      t.o.model.dtype == DType::F32 ? "(AdamW moments)" : "(AdamW moments, f32 master weights)");
  row("gradients", t.grads, "");
  if (t.stages > 1) {
    fmt::print("  {:<18} {:>10}  {}\n", "activations", "-",
               "(pipelined: each stage's stashed inputs and one chunk's recomputation are in the "
               "peak)");
  } else {
    row("activations", t.activations,
        "(kept for the backward pass: live beyond the arguments once the loss is computed)");
  }
  row("peak", t.peak, "(arguments, donated ones until their last use, and everything the step "
                      "allocates)");
  if (t.stages > 1) {
    fmt::print("pipeline: {} over {} stages, {} microbatches of {} sequences{}: bubble {:.1f}%; "
               "the first stage holds {} microbatches' inputs\n",
               a.schedule, t.stages, t.o.microbatches, t.o.batch / (t.o.data * t.o.microbatches),
               t.o.virtual_stages > 1 ? fmt::format(", {} virtual stages", t.o.virtual_stages) : "",
               100 * t.bubble, t.held);
  }
  fmt::print("collectives per step, bytes sent per device:\n");
  print_collectives(t.cost, t.warnings);
  if (t.stages > 1) {
    fmt::print("  (pipelined: flops count the {} forward and backward halves a device works in, "
               "not its idle ones; bytes sent count the activations passed on every tick)\n",
               t.o.microbatches * t.o.virtual_stages);
  }
  if (a.step_time) print_step(t);
  fmt::print("planned in {:.1f} s\n", seconds);
}

// Several meshes: one row each.
void plan_training_table(const PlanArgs& a, const g2::Config& model,
                         const std::vector<Mesh>& meshes, std::chrono::steady_clock::time_point t0) {
  std::vector<TrainPlan> plans;
  for (const Mesh& m : meshes) plans.push_back(plan_training_figures(a, model, m));
  add_step_times(a, plans, meshes);
  const double seconds = seconds_since(t0);
  if (a.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const TrainPlan& t : plans) j.push_back(train_plan_json(a, t));
    fmt::print("{}\n", nlohmann::ordered_json{{"plans", j}, {"seconds", seconds}}.dump(2));
    return;
  }
  const TrainPlan& first = plans.front();
  fmt::print("plan: training step of {} (vocabulary {}, {:.3f} B parameters, {}), batch {} x seq "
             "{}{}, {} weights{}, per device (the fullest):\n",
             a.model, first.o.model.vocab_size, static_cast<double>(first.total_params) / 1e9,
             format_bytes(static_cast<double>(first.param_bytes)), first.o.batch, first.o.seq,
             a.fsdp ? ", FSDP" : "", a.dtype, first.o.remat ? ", layer remat" : "");
  note_vocabulary(a);
  auto name = [](const Mesh& m) {
    std::vector<std::string> parts;
    for (size_t k = 0; k < m.axis_names().size(); ++k) {
      parts.push_back(fmt::format("{}={}", m.axis_names()[k], m.axis_sizes()[k]));
    }
    return fmt::format("{}", fmt::join(parts, ","));
  };
  fmt::print("  {:<24} {:>10} {:>10} {:>10} {:>11} {:>10} {:>8}{}\n", "mesh", "params",
             "optimizer", "peak", "sent/step", "TFLOP", "bubble",
             a.step_time ? fmt::format(" {:>9}", "step") : "");
  for (size_t k = 0; k < plans.size(); ++k) {
    const TrainPlan& t = plans[k];
    double sent = 0;
    for (const auto& [kind, bytes] : t.cost.bytes_per_device) sent += bytes;
    // Pipelined: the halves a device works in (cost analysis weighs the schedule's conds).
    const double flops = t.cost.flops;
    std::string step;
    if (a.step_time) {
      step = t.step ? fmt::format(" {:>8.3f}s", t.scale * t.step->total()) : fmt::format(" {:>9}", "-");
    }
    fmt::print("  {:<24} {:>10} {:>10} {:>10} {:>11} {:>10.1f} {:>8}{}\n", name(meshes[k]),
               format_bytes(static_cast<double>(t.params)),
               format_bytes(static_cast<double>(t.optimizer)),
               format_bytes(static_cast<double>(t.peak)), format_bytes(sent), flops / 1e12,
               t.stages > 1 ? fmt::format("{:.1f}%", 100 * t.bubble) : "-", step);
  }
  for (size_t k = 0; k < plans.size(); ++k) {
    const TrainPlan& t = plans[k];
    if (t.stages > 1) {
      fmt::print("  {}: {} over {} microbatches of {} sequences; each stage recomputes its "
                 "forward in its backward; flops count the halves a device works in, bytes sent the "
                 "activations passed on every tick\n",
                 name(meshes[k]), a.schedule, t.o.microbatches,
                 t.o.batch / (t.o.data * t.o.microbatches));
    }
  }
  if (a.step_time) {
    fmt::print("  step: one training step on this host's virtual devices, from rates measured on "
               "as many devices as the mesh has{}\n",
               plans.front().scale != 1
                   ? fmt::format(", calibrated x{:.3f} by the first mesh's measured step",
                                 plans.front().scale)
                   : "");
  }
  fmt::print("planned in {:.1f} s\n", seconds);
}

void plan_generation(const PlanArgs& a, const ll::Config& config, const Mesh& mesh,
                     std::chrono::steady_clock::time_point t0) {
  detail::check(a.mesh[0] == 1 && a.mesh[1] == 1, "plan",
                "--generate plans tensor-parallel inference over 'model'; use --mesh 1x{} (got "
                "{})",
                a.mesh[0] * a.mesh[1] * a.mesh[2], mesh.to_string());
  detail::check(a.dtype == "f32", "plan",
                "--generate plans Llama in f32 (partix dequantises weights at load); got --dtype "
                "{}",
                a.dtype);
  detail::check(!a.fsdp && a.remat == "none", "plan",
                "--fsdp and --remat are for training plans, not --generate");
  const int64_t prompt = a.seq > 0 ? a.seq : 512;
  const int64_t cache_length = prompt + a.new_tokens;
  detail::check(cache_length <= config.max_position, "plan",
                "--seq {} + --new-tokens {} exceeds the model's {} positions", prompt,
                a.new_tokens, config.max_position);
  const nn::LogicalRules rules = ll::sharding_rules("model");
  const nn::ParamSpecs specs = ll::param_specs(config);
  const auto shardings = nn::param_shardings(specs, rules, mesh);
  ll::Model model{config, {}, nullptr, a.model};
  int64_t total_params = 0, param_bytes = 0;
  for (const auto& [name, spec] : specs) {
    total_params = add(total_params, elements(spec.shape));
    param_bytes = add(param_bytes, mul(elements(spec.shape), dtype_size(spec.dtype)));
    model.params[name] = ShapeDtypeStruct{spec.shape, spec.dtype, shardings.at(name)};
  }
  ll::Generator gen(model, mesh, rules);
  const Lowered prefill = gen.lower_prefill(a.batch, prompt, cache_length);
  const Lowered decode = gen.lower_decode(a.batch, cache_length);
  const int64_t p_bytes = shard_bytes(model.params);
  // The cache the generator allocates: keys and values of every layer, key/value heads only.
  const ShapeDtypeStruct kv = ll::cache_spec(config, a.batch, cache_length, mesh, rules);
  const int64_t cache_bytes =
      mul(2 * dtype_size(kv.dtype), elements(kv.sharding->shard_shape(kv.shape)));
  const MemoryAnalysis pm = prefill.memory_analysis(), dm = decode.memory_analysis();
  const int64_t prefill_peak = pm.peak_bytes[fullest(pm)];
  const int64_t decode_peak = dm.peak_bytes[fullest(dm)];
  const double seconds = seconds_since(t0);
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = a.model;
    j["mode"] = "generate";
    j["mesh"] = mesh.to_string();
    j["batch"] = a.batch;
    j["prompt"] = prompt;
    j["cache_length"] = cache_length;
    j["total_params"] = total_params;
    j["param_bytes"] = param_bytes;
    j["per_device"] = {{"params", p_bytes},
                       {"kv_cache", cache_bytes},
                       {"prefill_peak", prefill_peak},
                       {"decode_peak", decode_peak},
                       {"peak", std::max(prefill_peak, decode_peak)}};
    j["collectives"] = {{"prefill", collectives_json(prefill.cost_analysis())},
                        {"decode", collectives_json(decode.cost_analysis())}};
    j["duplicated_flops_fraction"] = {
        {"prefill", prefill.cost_analysis().duplicated_flops_fraction},
        {"decode", decode.cost_analysis().duplicated_flops_fraction}};
    std::vector<std::string> warnings = prefill.warnings();
    for (const std::string& w : decode.warnings()) warnings.push_back(w);
    j["warnings"] = warnings;
    j["seconds"] = seconds;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("plan: generation with {} ({:.3f} B parameters, {}), batch {}, prompt {}, cache {} "
             "positions, {}\n",
             a.model, static_cast<double>(total_params) / 1e9,
             format_bytes(static_cast<double>(param_bytes)), a.batch, prompt, cache_length,
             mesh.to_string());
  fmt::print("per device:\n");
  fmt::print("  {:<18} {:>10}\n", "parameters", format_bytes(static_cast<double>(p_bytes)));
  fmt::print("  {:<18} {:>10}\n", "KV cache", format_bytes(static_cast<double>(cache_bytes)));
  fmt::print("  {:<18} {:>10}\n", "prefill peak", format_bytes(static_cast<double>(prefill_peak)));
  fmt::print("  {:<18} {:>10}\n", "decode peak", format_bytes(static_cast<double>(decode_peak)));
  fmt::print("prefill ({} tokens per prompt), bytes sent per device:\n", prompt);
  print_collectives(prefill.cost_analysis(), prefill.warnings());
  fmt::print("decode step (one token per prompt), bytes sent per device:\n");
  print_collectives(decode.cost_analysis(), decode.warnings());
  fmt::print("planned in {:.1f} s\n", seconds);
}

void run_plan(const PlanArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelChoice m = model_config(a.model);
  auto abstract = [](const std::vector<int64_t>& m) {
    return m[0] > 1 ? make_abstract_mesh({m[0], m[1], m[2]}, {"stage", "data", "model"})
                    : make_abstract_mesh({m[1], m[2]}, {"data", "model"});
  };
  if (a.step_time) {
    detail::check(!a.generate, "plan", "--step-time and --calibrate time training steps, not --generate");
    // The probes run on as many devices as the largest mesh that this host can hold (64).
    int64_t most = 1;
    for (const auto& s : a.meshes.empty() ? std::vector<std::vector<int64_t>>{a.mesh} : a.meshes) {
      const int64_t n = s[0] * s[1] * s[2];
      if (n <= 64) most = std::max(most, n);
    }
    init({.num_cpu_devices = static_cast<int>(most)});
  }
  const Mesh mesh = abstract(a.mesh);
  if (a.meshes.size() > 1) {
    detail::check(!a.generate, "plan", "--generate plans one mesh; give --mesh once");
    detail::check(m.gpt2.has_value(), "plan", "training plans are for GPT-2-architecture models");
    std::vector<Mesh> meshes;
    for (const auto& s : a.meshes) meshes.push_back(abstract(s));
    plan_training_table(a, *m.gpt2, meshes, t0);
    return;
  }
  if (a.generate) {
    detail::check(m.llama.has_value(), "plan",
                  "--generate plans Llama models (llama-7b, llama-70b, smollm2-135m or a Llama "
                  "config.json); '{}' is GPT-2",
                  a.model);
    plan_generation(a, *m.llama, mesh, t0);
  } else {
    detail::check(m.gpt2.has_value(), "plan",
                  "training plans are for GPT-2-architecture models (partix trains GPT-2); plan "
                  "'{}' with --generate",
                  a.model);
    plan_training(a, *m.gpt2, mesh, t0);
  }
}

}  // namespace

void add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Per-device memory and collectives of a training step (GPT-2 architecture) or of "
      "generation (Llama) on any mesh, without running it");
  cmd->add_option("--model", a->model,
                  fmt::format("{}, a config.json, or a model folder holding one", kBuiltins));
  cmd->add_option_function<std::vector<std::string>>(
         "--mesh",
         [a](const std::vector<std::string>& texts) {
           for (const std::string& text : texts) {
             a->mesh = parse_named_mesh("plan", "--mesh", text, {"stage", "data", "model"},
                                        {"data", "model"}, int64_t{1} << 20);
             a->meshes.push_back(a->mesh);
           }
         },
         "Abstract mesh DATAxMODEL, or named axes stage=S,data=D,model=M (may exceed this "
         "machine); given several times, a table of the plans")
      ->default_str("1x1")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add_int(cmd, "--microbatches", a->microbatches, 1, int64_t{1} << 20,
          "Pipelined meshes: microbatches per step (default: one per stage)");
  cmd->add_option("--schedule", a->schedule, "Pipelined meshes: gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  add_int(cmd, "--virtual-stages", a->virtual_stages, 1, 256,
          "Pipelined meshes: layer chunks per stage device (interleaved)");
  cmd->add_flag("--fsdp", a->fsdp, "Split parameters and optimizer state over 'data' too");
  add_int(cmd, "--batch", a->batch, 1, int64_t{1} << 24, "Global batch (sequences)");
  add_int(cmd, "--seq", a->seq, 0, int64_t{1} << 20,
          "Sequence length (0: the model's context; with --generate, the prompt, 0: 512)");
  cmd->add_option("--dtype", a->dtype,
                  "Parameter and compute dtype: f32, or bf16 (f32 master weights in AdamW)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--remat", a->remat,
                  "none, or layer: recompute each block's activations in the backward pass")
      ->check(CLI::IsMember({"none", "layer"}));
  cmd->add_flag("--generate", a->generate, "Plan a prefill and a decode step instead (Llama)");
  add_int(cmd, "--new-tokens", a->new_tokens, 1, int64_t{1} << 20,
          "With --generate: positions the cache keeps beyond the prompt");
  add_int(cmd, "--vocab", a->vocab, 0, int64_t{1} << 24,
          "Training plans: the vocabulary size (0: the model's own; partix train's small and "
          "tiny read bytes: 256)");
  cmd->add_flag("--step-time", a->step_time,
                "Training plans: predict each step's time on this host's virtual devices (meshes "
                "of up to 64 devices), from rates measured here in about a second per mesh size");
  cmd->add_option_function<double>(
         "--calibrate",
         [a](double s) {
           a->calibrate = s;
           a->step_time = true;
         },
         "Seconds a step of the first --mesh took when measured (e.g. by partix train): scales "
         "every predicted step time by measured / modelled (implies --step-time)")
      ->check(CLI::PositiveNumber);
  cmd->add_option_function<double>(
         "--calibration",
         [a](double k) {
           a->calibration = k;
           a->step_time = true;
         },
         "A factor an earlier --calibrate found (measured / modelled): scales every predicted "
         "step time (implies --step-time)")
      ->check(CLI::PositiveNumber);
  cmd->add_option_function<std::string>(
         "--host-rates",
         [a](const std::string& path) {
           a->host_rates = path;
           a->step_time = true;
         },
         "Keep the rates measured on this host in this JSON file, and use the rates it holds "
         "(so that plans made apart agree; implies --step-time)");
  cmd->add_flag("--json", a->json, "Print the plan as JSON");
  cmd->callback([a] {
    if (!parse_only()) run_plan(*a);
  });
}

}  // namespace partix::cli
