// partix train: GPT-2 training on a mesh of virtual devices.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "commands.h"
#include "core/errors.h"
#include "flags.h"
#include "files/atomic_file.h"
#include "partix/models/gpt2.h"
#include "partix/partix.h"
#include "plot.h"
#include "report.h"

namespace partix::cli {

namespace {

struct TrainArgs {
  std::string model = "tiny";
  std::vector<int64_t> mesh = {1, 1, 1};  // stage, data, model
  int64_t microbatches = 1, virtual_stages = 1;
  std::string schedule = "1f1b";
  bool fsdp = false, remat = false, explicit_sharding = false;
  int64_t steps = 50, batch = 8, seq = 64, warmup = 10;
  double lr = 1e-3;
  uint64_t seed = 0;
  std::string metrics, plot, save, trace;
  std::vector<std::string> corpus;
  bool quiet = false;
  std::string checkpoint_dir;
  int64_t save_every = 0, keep = 0;
  bool resume = false;
};

// The checkpoint folder takes new steps, and holds none unless the run resumes from them.
void check_checkpoint_dir(const TrainArgs& a) {
  if (a.checkpoint_dir.empty()) {
    if (a.save_every > 0 || a.keep > 0 || a.resume) {
      detail::fail("train", "--save-every, --keep and --resume need --checkpoint-dir");
    }
    return;
  }
  const std::string& dir = a.checkpoint_dir;
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) {
    // Other files may live beside the steps; new steps must be creatable inside.
    detail::check_writable_file((std::filesystem::path(dir) / ".partix-new-step").string(),
                                "train");
  } else {
    detail::check_writable_dir(dir, "train", {});
  }
  const std::optional<int64_t> latest = ckpt::latest_step(dir);
  if (latest && !a.resume) {
    detail::fail("train",
                 "'{}' holds checkpoints up to step {}; pass --resume to continue from it, or "
                 "choose another --checkpoint-dir",
                 dir, *latest);
  }
  if (latest && *latest > a.steps) {
    detail::fail("train", "--steps {} is before the step {} '{}' holds (--steps is the final step)",
                 a.steps, *latest, dir);
  }
}

// Every destination is checked before training: a typo must not cost a finished run.
void check_outputs(const TrainArgs& a) {
  if (!a.plot.empty()) {
    check_plot_path(a.plot);
    detail::check_writable_file(a.plot, "train");
  }
  if (!a.metrics.empty()) detail::check_writable_file(a.metrics, "train");
  if (!a.trace.empty()) detail::check_writable_file(a.trace, "train");
  if (!a.save.empty()) models::gpt2::check_save_path(a.save);
  check_checkpoint_dir(a);
}

void run_train(const TrainArgs& a) {
  const bool lead = distributed::launch_process_index() == 0;
  if (lead) check_outputs(a);
  const int64_t st = a.mesh[0], d = a.mesh[1], m = a.mesh[2];
  models::gpt2::TrainOptions o;
  o.stages = st;
  o.microbatches = a.microbatches;
  o.virtual_stages = a.virtual_stages;
  o.schedule = pipeline::parse_schedule(a.schedule);
  init({.num_cpu_devices = devices_per_process("train", st * d * m)});
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
  o.remat = a.remat;
  o.scan_layers = true;  // the layers stacked and scanned: the only layout the CLI trains
  o.explicit_sharding = a.explicit_sharding;
  o.steps = a.steps;
  o.batch = a.batch;
  o.seq = a.seq;
  o.lr = a.lr;
  o.warmup = a.warmup;
  o.seed = a.seed;
  if (!a.corpus.empty()) o.corpus = a.corpus;
  o.checkpoint_dir = a.checkpoint_dir;
  o.save_every = a.save_every;
  o.keep = a.keep;
  o.resume = a.resume;
  models::gpt2::Trainer t(o);
  fmt::print("GPT-2 ({} layers, C={}, {} heads, vocab {}) on {}{}\n", o.model.n_layer,
             o.model.n_embd, o.model.n_head, o.model.vocab_size, t.mesh().to_string(),
             a.fsdp ? " with FSDP" : "");
  fmt::print("parameter shardings:\n{}", t.sharding_table());
  if (st > 1) {
    const pipeline::Schedule sc =
        pipeline::make_schedule(o.schedule, st, o.microbatches, o.virtual_stages);
    fmt::print("pipeline: microbatches of {} sequences; {}", o.batch / (d * o.microbatches),
               sc.to_string());
  }
  if (t.resumed_from()) {
    fmt::print("resumed from {} (step {} of {})\n",
               ckpt::step_path(a.checkpoint_dir, *t.resumed_from()), *t.resumed_from(), a.steps);
  } else if (a.resume) {
    fmt::print("no checkpoint in {} yet; starting at step 0\n", a.checkpoint_dir);
  }
  // Rows are flushed every step (a full disk stops the run at once) and the file appears
  // whole when training ends, or with the rows so far when it fails.
  std::unique_ptr<detail::AtomicFile> csv;
  if (!a.metrics.empty() && lead) {
    csv = std::make_unique<detail::AtomicFile>(a.metrics, "train");
    csv->write("step,loss,tokens_per_s\n");
  }
  const bool tty = isatty(fileno(stdout)) && !a.quiet;
  std::vector<double> losses;
  try {
    for (int64_t s = t.step_count(); s < a.steps; ++s) {
      const bool profile = !a.trace.empty() && s + 1 == a.steps;  // the last step's timeline
      if (profile) profiler::start();
      models::gpt2::StepMetrics mt = t.step();
      if (profile) profiler::stop();
      losses.push_back(mt.loss);
      if (csv) {
        csv->write(fmt::format("{},{:.6f},{:.1f}\n", mt.step, mt.loss, mt.tokens_per_s));
        csv->flush();
      }
      int width = 30, done = static_cast<int>(width * (s + 1) / a.steps);
      std::string bar = std::string(static_cast<size_t>(done), '#') +
                        std::string(static_cast<size_t>(width - done), '.');
      std::string line = fmt::format(
          "[{}] step {}/{} loss {:.4f} {:.0f} tok/s mem {:.1f} MiB/device", bar, s + 1, a.steps,
          mt.loss, mt.tokens_per_s, static_cast<double>(mt.max_device_bytes) / (1 << 20));
      if (tty)
        fmt::print("\r{}", line), std::fflush(stdout);
      else if (!a.quiet)
        fmt::print("{}\n", line);
    }
    t.wait_for_checkpoints();  // a failed write is reported here, with the CSV kept
  } catch (const Error&) {
    if (csv && !losses.empty()) {
      try {
        csv->commit();  // the rows so far help diagnose the failure
      } catch (const Error&) {
      }
    }
    throw;
  }
  if (csv) csv->commit();
  if (tty) fmt::print("\n");
  if (!losses.empty()) fmt::print("loss {:.4f} -> {:.4f}\n", losses.front(), losses.back());
  fmt::print("peak memory per device:{}\n", peak_memory_per_device(t.mesh()));
  if (!a.checkpoint_dir.empty()) {
    fmt::print("checkpoints in {}: steps {}\n", a.checkpoint_dir,
               fmt::join(ckpt::all_steps(a.checkpoint_dir), ", "));
  }
  if (!a.save.empty()) {
    t.save(a.save);  // every process takes part; process 0 writes
    fmt::print("saved a Hugging Face checkpoint to {}\n", a.save);
  }
  if (!a.trace.empty()) {
    // Pipelined: each device's forward and backward halves named by the schedule's microbatch.
    std::function<void(std::vector<profiler::Span>&)> label;
    if (st > 1) {
      const Mesh mesh = t.mesh();
      const pipeline::Schedule sc =
          pipeline::make_schedule(o.schedule, st, o.microbatches, o.virtual_stages);
      label = [mesh, sc](std::vector<profiler::Span>& spans) {
        pipeline::label_spans(spans, sc, [&](int id) -> int64_t {
          const int64_t k = mesh.position_of(id);
          return k < 0 ? -1 : mesh.axis_coord(mesh.coords(k), "stage");
        });
      };
    }
    profiler::write_chrome_trace(a.trace, label);  // every process takes part; process 0 writes
    if (lead) fmt::print("trace of the last step written to {} (open in ui.perfetto.dev)\n", a.trace);
  }
  if (!a.plot.empty() && lead) {
    write_loss_plot(a.plot, losses);
    fmt::print("loss curve written to {}\n", a.plot);
  }
}

}  // namespace

void add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT-2 on a mesh of virtual CPU devices");
  cmd->add_option("--model", a->model, "tiny, small, or a Hugging Face GPT-2 directory");
  cmd->add_option_function<std::string>(
         "--mesh",
         [a](const std::string& s) {
           a->mesh = parse_named_mesh("train", "--mesh", s, {"stage", "data", "model"},
                                      {"data", "model"}, kMaxDevices);
         },
         "data x model, e.g. 4x2 (8 devices), or named axes, e.g. stage=2,data=2,model=2 "
         "(a 'stage' axis of more than one device pipelines the layers)")
      ->default_str("1x1");
  add_int(cmd, "--microbatches", a->microbatches, 1, int64_t{1} << 20,
          "Pipeline: microbatches per step (the batch on each data device splits into them)");
  cmd->add_option_function<std::string>(
         "--schedule",
         [a](const std::string& s) {
           if (s != "gpipe" && s != "1f1b" && s != "interleaved") {
             detail::fail("train", "--schedule '{}': expected gpipe, 1f1b or interleaved", s);
           }
           a->schedule = s;
         },
         "Pipeline schedule: gpipe, 1f1b or interleaved")
      ->default_str("1f1b");
  add_int(cmd, "--virtual-stages", a->virtual_stages, 1, 256,
          "Pipeline: layer chunks per stage device (the interleaved schedule; at least 2)");
  cmd->add_flag("--fsdp", a->fsdp, "Shard parameters and optimizer state over 'data'");
  cmd->add_flag("--remat", a->remat,
                "Recompute each block's activations in the backward pass instead of keeping them");
  cmd->add_flag("--explicit-sharding", a->explicit_sharding,
                "Make the mesh's axes Explicit: every activation's sharding is part of its type, "
                "computed per op while tracing (same losses and collectives as the default Auto "
                "axes)");
  add_int(cmd, "--steps", a->steps, 1, int64_t{1} << 40, "Training steps");
  add_int(cmd, "--batch", a->batch, 1, int64_t{1} << 20, "Global batch (sequences)");
  add_int(cmd, "--seq", a->seq, 1, int64_t{1} << 20, "Sequence length");
  add_real(cmd, "--lr", a->lr, {.lo = 0, .lo_open = true}, "Peak learning rate (warmup + cosine)");
  add_int(cmd, "--warmup", a->warmup, 0, int64_t{1} << 40, "Warmup steps");
  add_seed(cmd, "--seed", a->seed, "Seed for initialisation, data order and dropout");
  cmd->add_option("--metrics", a->metrics, "Write step,loss,tokens_per_s to this CSV file");
  cmd->add_option("--plot", a->plot,
                  "Write the loss curve to this .svg or .png file (format by extension)");
  cmd->add_option("--save", a->save, "Write the trained model as a Hugging Face directory");
  cmd->add_option("--trace", a->trace,
                  "Write the last step's Chrome/Perfetto trace (one track per device; a "
                  "pipeline's halves named by microbatch: F3, B3, idle)");
  cmd->add_option("--corpus", a->corpus, "Text files or directories (default: Debian's fortunes)");
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir,
                  "Save training checkpoints (sharded, asynchronous, atomic) under this folder");
  add_int(cmd, "--save-every", a->save_every, 1, int64_t{1} << 40,
          "Save a checkpoint every N steps (and after the last step)");
  add_int(cmd, "--keep", a->keep, 1, int64_t{1} << 40, "Keep only the newest K checkpoints");
  cmd->add_flag("--resume", a->resume,
                "Continue from the latest checkpoint in --checkpoint-dir (any --mesh)");
  cmd->add_flag("--quiet", a->quiet, "No progress output");
  cmd->callback([a] {
    if (!parse_only()) run_train(*a);
  });
}

}  // namespace partix::cli
