// Pipeline parallelism measured: the bubble and the per-stage memory of each schedule.
//   partix_bench_pipeline --mesh stage=2 --microbatches 8 --schedule 1f1b
//       [--model tiny|small] [--layers L] [--batch B] [--seq T] [--virtual-stages V]
//       [--warmup W] [--steps N] [--trace FILE.json]  (the last step; halves named F3, B3, idle)
// Trains GPT-2 (models::gpt2::Trainer, byte vocabulary) and profiles the last step. A device's
// busy time is the sum of its forward and backward halves (the conds of the schedule's loop,
// spans named ".../forward_half/cond" and ".../backward_half/cond"); the rest of the loop's
// span is its bubble: waits in the ppermutes for the other stages. The measured bubble is
// 1 - busy / loop, averaged over devices, against the schedule's (S-1)/(M+S-1). Memory: the
// peak each device measured (memory_stats) against the plan (the step's memory_analysis).
// One device per core makes the waits real: on this 2-core machine, --mesh stage=2.
// Prints one JSON line.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

#include "partix/models/gpt2.h"
#include "partix/partix.h"
#include "partix/profiler.h"

namespace {

using namespace partix;
namespace g2 = partix::models::gpt2;

struct Args {
  std::string model = "tiny", schedule = "1f1b", trace;
  int64_t layers = 0, stages = 2, data = 1, model_parallel = 1, microbatches = 8, virtual_stages = 1;
  int64_t batch = 16, seq = 64, warmup = 2, steps = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("[pipeline_bench] " + k + " needs a value");
      return argv[++i];
    };
    if (k == "--model") a.model = value();
    else if (k == "--layers") a.layers = std::stoll(value());
    else if (k == "--mesh") {
      const std::string m = value();
      size_t start = 0;
      while (start < m.size()) {
        const size_t comma = std::min(m.find(',', start), m.size());
        const std::string item = m.substr(start, comma - start);
        const size_t eq = item.find('=');
        if (eq == std::string::npos) throw Error("[pipeline_bench] --mesh looks like stage=2,data=1");
        const std::string name = item.substr(0, eq);
        const int64_t v = std::stoll(item.substr(eq + 1));
        if (name == "stage") a.stages = v;
        else if (name == "data") a.data = v;
        else if (name == "model") a.model_parallel = v;
        else throw Error("[pipeline_bench] unknown mesh axis " + name);
        start = comma + 1;
      }
    } else if (k == "--microbatches") a.microbatches = std::stoll(value());
    else if (k == "--schedule") a.schedule = value();
    else if (k == "--virtual-stages") a.virtual_stages = std::stoll(value());
    else if (k == "--batch") a.batch = std::stoll(value());
    else if (k == "--seq") a.seq = std::stoll(value());
    else if (k == "--warmup") a.warmup = std::stoll(value());
    else if (k == "--steps") a.steps = std::stoll(value());
    else if (k == "--trace") a.trace = value();
    else throw Error("[pipeline_bench] unknown flag " + k);
  }
  return a;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    init({.num_cpu_devices = static_cast<int>(a.stages * a.data * a.model_parallel)});
    g2::TrainOptions o;
    o.model = a.model == "small" ? g2::small() : g2::tiny();
    o.model.vocab_size = 256;
    o.model.dropout = 0.0;
    if (a.layers > 0) o.model.n_layer = a.layers;
    o.stages = a.stages;
    o.data = a.data;
    o.model_parallel = a.model_parallel;
    o.microbatches = a.microbatches;
    o.virtual_stages = a.virtual_stages;
    o.schedule = pipeline::parse_schedule(a.schedule);
    o.batch = a.batch;
    o.seq = a.seq;
    o.steps = a.warmup + a.steps;
    g2::Trainer t(o);
    const MemoryAnalysis plan = t.lower_step().memory_analysis();
    for (int64_t s = 0; s < a.warmup; ++s) t.step();
    std::vector<double> seconds;
    std::vector<profiler::Span> last;
    for (int64_t s = 0; s < a.steps; ++s) {
      const bool profile = s + 1 == a.steps;
      if (profile) profiler::start();
      seconds.push_back(t.step().seconds);
      if (profile) {
        profiler::stop();
        last = profiler::spans();
      }
    }
    const pipeline::Schedule sc =
        pipeline::make_schedule(o.schedule, a.stages, a.microbatches, a.virtual_stages);
    if (!a.trace.empty()) {
      const Mesh mesh = t.mesh();
      profiler::write_chrome_trace(a.trace, [&](std::vector<profiler::Span>& sp) {
        pipeline::label_spans(sp, sc, [&](int id) -> int64_t {
          const int64_t k = mesh.position_of(id);
          return k < 0 ? -1 : mesh.axis_coord(mesh.coords(k), "stage");
        });
      });
    }
    const int64_t n = a.stages * a.data * a.model_parallel;
    std::vector<double> busy(static_cast<size_t>(n), 0), loop(static_cast<size_t>(n), 0);
    for (const profiler::Span& sp : last) {
      const auto d = static_cast<size_t>(sp.device);
      if (d >= busy.size()) continue;
      if (ends_with(sp.name, "forward_half/cond") || ends_with(sp.name, "backward_half/cond")) {
        busy[d] += sp.duration_us;
      } else if (sp.name == "fori_loop" || ends_with(sp.name, "/fori_loop")) {
        // The schedule's loop (the model's layers are a scan).
        loop[d] = std::max(loop[d], sp.duration_us);
      }
    }
    std::vector<double> bubble;
    for (size_t d = 0; d < busy.size(); ++d) {
      if (loop[d] <= 0) throw Error("[pipeline_bench] no pipeline loop in the trace of device " + std::to_string(d));
      bubble.push_back(1.0 - busy[d] / loop[d]);
    }
    double mean = 0;
    for (double b : bubble) mean += b / static_cast<double>(bubble.size());
    std::vector<int64_t> measured_peak;
    for (const Device& d : t.mesh().devices()) measured_peak.push_back(memory_stats(d.id).peak_bytes_in_use);
    std::sort(seconds.begin(), seconds.end());
    fmt::print(
        "{{\"schedule\": \"{}\", \"stages\": {}, \"microbatches\": {}, \"virtual_stages\": {}, "
        "\"layers\": {}, \"batch\": {}, \"seq\": {}, \"step_s\": {:.4f}, \"bubble_measured\": {:.4f}, "
        "\"bubble_per_device\": [{:.4f}], \"bubble_schedule\": {:.4f}, \"bubble_ideal\": {:.4f}, "
        "\"held\": [{}], \"peak_measured\": [{}], \"peak_planned\": [{}]}}\n",
        a.schedule, a.stages, a.microbatches, a.virtual_stages, o.model.n_layer, a.batch, a.seq,
        seconds[seconds.size() / 2], mean, fmt::join(bubble, ", "), sc.bubble_fraction(),
        sc.ideal_bubble_fraction(), fmt::join(sc.held, ", "), fmt::join(measured_peak, ", "),
        fmt::join(plan.peak_bytes, ", "));
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
