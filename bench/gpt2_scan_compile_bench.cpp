// Compile time of a GPT-2 training step against depth, with the blocks unrolled over per-layer
// parameters or scanned over parameters stacked over layers (TrainOptions::scan_layers):
//   partix_bench_gpt2_scan_compile [--layers 12,48] [--reps 3]
// Lowers the loss with its gradient, and the whole step (forward, backward, clipping, AdamW), of
// GPT-2 small's width on an abstract 4x2 mesh (data, model), batch 8 x seq 128, and prints per
// depth the median seconds of tracing + propagation + partitioning, and the ratio of the deepest
// to the shallowest.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "partix/models/gpt2.h"
#include "partix/nn.h"
#include "partix/partix.h"

using namespace partix;

namespace {

namespace g2 = models::gpt2;

// The whole training step, or (step = false) only the loss and its gradient.
double lower_seconds(int64_t layers, bool scan, bool step, const Mesh& mesh) {
  g2::TrainOptions o;
  o.model = g2::small();
  o.model.vocab_size = 256;
  o.model.n_layer = layers;
  o.batch = 8;
  o.seq = 128;
  o.scan_layers = scan;
  const auto t0 = std::chrono::steady_clock::now();
  std::string text;
  if (step) {
    text = g2::lower_train_step(o, mesh).as_text();
  } else {
    const nn::LogicalRules rules = g2::sharding_rules(false);
    // As the trainer keeps them: stacked over layers when scanning.
    const nn::ParamSpecs specs = g2::param_specs(o.model, scan);
    const auto shardings = nn::param_shardings(specs, rules, mesh);
    Params p;
    for (const auto& [name, spec] : specs) {
      p[name] = ShapeDtypeStruct{spec.shape, spec.dtype, shardings.at(name)};
    }
    Array ids = ShapeDtypeStruct{{o.batch, o.seq}, DType::I32, NamedSharding(mesh, P("data"))};
    const g2::Config c = o.model;
    g2::ForwardOptions fo;
    fo.mesh = &mesh;
    fo.rules = &rules;
    fo.scan_layers = scan;
    auto f = jit([&](const Params& pp, const Array& x) {
      return value_and_grad([&](const Params& q) { return g2::loss(q, x, x, c, fo); })(pp);
    });
    text = f.lower(p, ids).as_text();
  }
  const auto t1 = std::chrono::steady_clock::now();
  if (text.empty()) throw Error("[gpt2_scan_compile_bench] empty program");
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> depths{12, 48};
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--reps") {
      reps = std::stoi(v);
    } else if (k == "--layers") {
      depths.clear();
      std::stringstream ss(v);
      for (std::string d; std::getline(ss, d, ',');) depths.push_back(std::stoll(d));
    }
  }
  try {
    Mesh mesh = make_abstract_mesh({4, 2}, {"data", "model"});
    lower_seconds(depths.front(), true, true, mesh);  // one-time start-up costs, not measured
    for (bool step : {false, true}) {
      for (bool scan : {true, false}) {
        std::vector<double> medians;
        const std::string what = fmt::format("{} {}", step ? "train step" : "loss+grad ",
                                             scan ? "scanned " : "unrolled");
        for (int64_t L : depths) {
          std::vector<double> t;
          for (int r = 0; r < reps; ++r) t.push_back(lower_seconds(L, scan, step, mesh));
          std::sort(t.begin(), t.end());
          medians.push_back(t[t.size() / 2]);
          fmt::print("{} {:3} layers: {:.3f} s\n", what, L, medians.back());
        }
        fmt::print("{} ratio {}/{} layers: {:.2f}\n", what, depths.back(), depths.front(),
                   medians.back() / medians.front());
      }
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
