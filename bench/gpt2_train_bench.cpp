// GPT-2 training-step speed, for bench/gpt2_vs_jax.py:
//   partix_bench_gpt2_train --mesh 8x1 --batch 8 --seq 128 --warmup 2 --steps 5
//       [--model small|tiny] [--fsdp] [--dropout P] [--lr X] [--save-init FILE]
//       [--trace FILE.json]  (the last step's per-device timeline)
//       [--scan-layers]  (parameters stacked over layers, one block scanned; bench/gpt2_vs_jax.py
//                         compares the unrolled per-layer model, the default here)
// The step is models::gpt2::Trainer's (value_and_grad of the mean cross entropy, global-norm
// clipping at 1, AdamW b1 0.9 b2 0.95 eps 1e-8 weight decay 0.1, parameters and optimizer
// state donated), on GPT-2 small with the byte vocabulary `partix train --model small` uses.
// Batches are a fixed formula of (step, row, position) that the JAX side reproduces, and the
// learning rate is a constant, so both sides run the same steps. Prints one JSON line: the
// parameter specs, compile seconds, and per measured step its seconds and loss.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <iostream>
#include <string>

#include "partix/models/gpt2.h"
#include "partix/partix.h"

namespace {

using namespace partix;

struct Args {
  std::string model = "small";
  int64_t data = 8, model_parallel = 1;
  bool fsdp = false, scan_layers = false;
  int64_t batch = 8, seq = 128, warmup = 2, steps = 5;
  double dropout = 0.1, lr = 1e-3;
  std::string save_init, trace;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("[gpt2_train_bench] " + k + " needs a value");
      return argv[++i];
    };
    if (k == "--model") a.model = value();
    else if (k == "--mesh") {
      std::string m = value();
      size_t x = m.find('x');
      if (x == std::string::npos) throw Error("[gpt2_train_bench] --mesh looks like 4x2");
      a.data = std::stoll(m.substr(0, x));
      a.model_parallel = std::stoll(m.substr(x + 1));
    } else if (k == "--fsdp") a.fsdp = true;
    else if (k == "--scan-layers") a.scan_layers = true;
    else if (k == "--batch") a.batch = std::stoll(value());
    else if (k == "--seq") a.seq = std::stoll(value());
    else if (k == "--warmup") a.warmup = std::stoll(value());
    else if (k == "--steps") a.steps = std::stoll(value());
    else if (k == "--dropout") a.dropout = std::stod(value());
    else if (k == "--lr") a.lr = std::stod(value());
    else if (k == "--save-init") a.save_init = value();
    else if (k == "--trace") a.trace = value();
    else throw Error("[gpt2_train_bench] unknown argument " + k);
  }
  return a;
}

// Token ids of step s: a fixed formula (bench/gpt2_vs_jax.py computes the same).
int32_t token(int64_t step, int64_t row, int64_t pos) {
  return static_cast<int32_t>((row * 131 + pos * 31 + step * 17 + (row * pos) % 7) % 256);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

using StepOut = std::tuple<Params, optim::AdamWState, Array>;

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse(argc, argv);
    init({.num_cpu_devices = static_cast<int>(a.data * a.model_parallel)});
    namespace gpt2 = models::gpt2;
    gpt2::Config cfg = a.model == "tiny" ? gpt2::tiny() : gpt2::small();
    cfg.vocab_size = 256;  // byte tokens, as `partix train --model small`
    cfg.dropout = a.dropout;
    Mesh mesh = make_mesh({a.data, a.model_parallel}, {"data", "model"});
    nn::LogicalRules rules = gpt2::sharding_rules(a.fsdp);
    auto specs = gpt2::param_specs(cfg);
    Params params = nn::init_params(specs, random::key(0), mesh, rules);
    if (!a.save_init.empty()) save_safetensors(a.save_init, params);
    params = gpt2::to_layout(params, cfg, a.scan_layers, mesh, rules);
    optim::AdamWState opt = optim::adamw_init(params);
    const optim::AdamWConfig adam{0.9, 0.95, 1e-8, 0.1};
    const bool scan = a.scan_layers;
    auto step_fn = [cfg, mesh, rules, adam, scan](const Params& p, const optim::AdamWState& s,
                                                  const Array& ids, const Array& targets,
                                                  const Array& lr, const Array& key) -> StepOut {
      gpt2::ForwardOptions fo{key, &mesh, &rules, /*remat=*/false, scan};
      auto [loss_value, g] = value_and_grad([&](const Params& pp) {
        return gpt2::loss(pp, ids, targets, cfg, fo);
      })(p);
      auto [clipped, norm] = optim::clip_by_global_norm(Params(g), 1.0);
      auto [np, ns] = optim::adamw_update(p, clipped, s, lr, adam);
      return {np, ns, loss_value};
    };
    auto step = jit(step_fn, {.donate_argnums = {0, 1}, .name = "train_step"});
    NamedSharding batch_sharding(mesh, P("data")), rep(mesh, P());
    Array lr = device_put(scalar<float>(static_cast<float>(a.lr)), rep);
    Array base_key = device_put(random::fold_in(random::key(0), 7), rep);
    auto batch = [&](int64_t s, int64_t shift) {
      std::vector<int32_t> v(static_cast<size_t>(a.batch * a.seq));
      for (int64_t b = 0; b < a.batch; ++b) {
        for (int64_t t = 0; t < a.seq; ++t) v[static_cast<size_t>(b * a.seq + t)] = token(s, b, t + shift);
      }
      return device_put(from_vector(v, {a.batch, a.seq}), batch_sharding);
    };
    auto tc = std::chrono::steady_clock::now();
    {
      Array ids = batch(0, 0);
      step.lower(params, opt, ids, ids, lr, base_key);
    }
    const double compile_s = seconds_since(tc);
    std::vector<double> times, losses;
    for (int64_t s = 0; s < a.warmup + a.steps; ++s) {
      const bool last = s + 1 == a.warmup + a.steps;
      if (last && !a.trace.empty()) profiler::start();
      auto t0 = std::chrono::steady_clock::now();
      Array ids = batch(s, 0), targets = batch(s, 1);
      Array key = device_put(random::fold_in(base_key, s), rep);
      auto [np, ns, loss] = step(params, opt, ids, targets, lr, key);
      params = std::move(np);
      opt = std::move(ns);
      const double l = loss.item<float>();  // waits for the step
      const double dt = seconds_since(t0);
      if (last && !a.trace.empty()) {
        profiler::stop();
        profiler::write_chrome_trace(a.trace);
      }
      if (s >= a.warmup) times.push_back(dt);
      losses.push_back(l);
    }
    std::string param_specs;
    for (const auto& [k, v] : params) {
      param_specs += fmt::format("{}\"{}\": \"{}\"", param_specs.empty() ? "" : ", ", k,
                                 v.sharding().spec().to_string());
    }
    fmt::print(
        "{{\"system\": \"partix\", \"compile_s\": {:.3f}, \"step_s\": [{}], \"loss\": [{}], "
        "\"tokens_per_step\": {}, \"specs\": {{{}}}}}\n",
        compile_s, fmt::join(times, ", "), fmt::join(losses, ", "), a.batch * a.seq, param_specs);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
