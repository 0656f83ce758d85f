// partix train: GPT-2 training on a mesh of virtual devices.
#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <iostream>

#include "commands.h"
#include "models/gpt2/train.h"
#include "partix/partix.h"
#include "plot.h"

namespace partix::cli {

namespace {

struct TrainArgs {
  std::string model = "tiny";
  std::string mesh = "1x1";
  bool fsdp = false;
  int64_t steps = 50, batch = 8, seq = 64, warmup = 10;
  double lr = 1e-3;
  uint64_t seed = 0;
  std::string metrics, plot, save;
  std::vector<std::string> corpus;
  bool quiet = false;
};

std::pair<int64_t, int64_t> parse_mesh(const std::string& s) {
  auto x = s.find('x');
  try {
    if (x == std::string::npos) throw std::invalid_argument("no x");
    size_t a = 0, b = 0;
    int64_t d = std::stoll(s.substr(0, x), &a), m = std::stoll(s.substr(x + 1), &b);
    if (a != x || b != s.size() - x - 1 || d < 1 || m < 1) throw std::invalid_argument("bad");
    return {d, m};
  } catch (const std::exception&) {
    throw Error("[train] --mesh must look like 4x2 (data x model), got '" + s + "'");
  }
}

void run_train(const TrainArgs& a) {
  if (!a.plot.empty()) check_plot_path(a.plot);  // before training, not after
  auto [d, m] = parse_mesh(a.mesh);
  init({.num_cpu_devices = static_cast<int>(std::max<int64_t>(d * m, 1))});
  models::gpt2::TrainOptions o;
  if (a.model == "tiny") {
    o.model = models::gpt2::tiny();
  } else if (a.model == "small") {
    o.model = models::gpt2::small();
    o.model.vocab_size = 256;  // the corpus is tokenised as bytes
  } else {
    o.checkpoint = a.model;  // a Hugging Face GPT-2 directory
  }
  o.data = d;
  o.model_parallel = m;
  o.fsdp = a.fsdp;
  o.steps = a.steps;
  o.batch = a.batch;
  o.seq = a.seq;
  o.lr = a.lr;
  o.warmup = a.warmup;
  o.seed = a.seed;
  if (!a.corpus.empty()) o.corpus = a.corpus;
  models::gpt2::Trainer t(o);
  fmt::print("GPT-2 ({} layers, C={}, {} heads, vocab {}) on {}{}\n", o.model.n_layer, o.model.n_embd,
             o.model.n_head, o.model.vocab_size, t.mesh().to_string(), a.fsdp ? " with FSDP" : "");
  fmt::print("parameter shardings:\n{}", t.sharding_table());
  std::ofstream csv;
  if (!a.metrics.empty()) {
    csv.open(a.metrics);
    if (!csv) throw Error("[train] cannot write metrics to '" + a.metrics + "'");
    csv << "step,loss,tokens_per_s\n";
  }
  const bool tty = isatty(fileno(stdout)) && !a.quiet;
  std::vector<double> losses;
  for (int64_t s = 0; s < a.steps; ++s) {
    models::gpt2::StepMetrics mt = t.step();
    losses.push_back(mt.loss);
    if (csv) csv << fmt::format("{},{:.6f},{:.1f}\n", mt.step, mt.loss, mt.tokens_per_s) << std::flush;
    int width = 30, done = static_cast<int>(width * (s + 1) / a.steps);
    std::string bar = std::string(static_cast<size_t>(done), '#') + std::string(static_cast<size_t>(width - done), '.');
    std::string line = fmt::format("[{}] step {}/{} loss {:.4f} {:.0f} tok/s mem {:.1f} MiB/device", bar,
                                   s + 1, a.steps, mt.loss, mt.tokens_per_s,
                                   static_cast<double>(mt.max_device_bytes) / (1 << 20));
    if (tty) fmt::print("\r{}", line), std::fflush(stdout);
    else if (!a.quiet) fmt::print("{}\n", line);
  }
  if (tty) fmt::print("\n");
  if (!losses.empty()) fmt::print("loss {:.4f} -> {:.4f}\n", losses.front(), losses.back());
  if (!a.save.empty()) {
    t.save(a.save);
    fmt::print("saved a Hugging Face checkpoint to {}\n", a.save);
  }
  if (!a.plot.empty()) {
    write_loss_plot(a.plot, losses);
    fmt::print("loss curve written to {}\n", a.plot);
  }
}

}  // namespace

void add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT-2 on a mesh of virtual CPU devices");
  cmd->add_option("--model", a->model, "tiny, small, or a Hugging Face GPT-2 directory");
  cmd->add_option("--mesh", a->mesh, "data x model, e.g. 4x2 (8 devices)");
  cmd->add_flag("--fsdp", a->fsdp, "Shard parameters and optimizer state over 'data'");
  cmd->add_option("--steps", a->steps, "Training steps")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--batch", a->batch, "Global batch (sequences)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--seq", a->seq, "Sequence length")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--lr", a->lr, "Peak learning rate (warmup + cosine)")->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", a->warmup, "Warmup steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a->seed, "Seed for initialisation, data order and dropout");
  cmd->add_option("--metrics", a->metrics, "Write step,loss,tokens_per_s to this CSV file");
  cmd->add_option("--plot", a->plot, "Write the loss curve to this .svg or .png file (format by extension)");
  cmd->add_option("--save", a->save, "Write the trained model as a Hugging Face directory");
  cmd->add_option("--corpus", a->corpus, "Text files or directories (default: Debian's fortunes)");
  cmd->add_flag("--quiet", a->quiet, "No progress output");
  cmd->callback([a] { run_train(*a); });
}

}  // namespace partix::cli
