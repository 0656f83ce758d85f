// GPT-2 with its blocks scanned (--scan-layers): the same training as the unrolled model, on any
// mesh, with Params in the per-layer Hugging Face names.
#include <fmt/format.h>

#include "partix/models/gpt2.h"
#include "test_util.h"

using namespace partix;
namespace g2 = partix::models::gpt2;

namespace {

std::vector<double> curve(int64_t data, int64_t model, bool scan, double dropout, int steps) {
  g2::TrainOptions o;
  o.model = g2::tiny();
  o.model.n_layer = 3;
  o.model.dropout = dropout;
  o.data = data;
  o.model_parallel = model;
  o.scan_layers = scan;
  o.steps = steps;
  o.batch = 8;
  o.seq = 16;
  o.lr = 3e-3;
  o.warmup = 2;
  g2::Trainer t(o);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(t.step().loss);
  return losses;
}

}  // namespace

TEST(Gpt2ScanLayers, TrainsAsTheUnrolledModel) {
  const int steps = 4;
  const std::vector<double> unrolled = curve(1, 1, false, 0.0, steps);
  const std::vector<double> scanned = curve(4, 2, true, 0.0, steps);
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(scanned[static_cast<size_t>(s)], unrolled[static_cast<size_t>(s)], 1e-4)
        << "step " << s;
  }
  EXPECT_LT(scanned.back(), scanned.front());
  // With dropout, the scanned model's masks are the same on every mesh.
  const std::vector<double> a = curve(1, 1, true, 0.1, 2), b = curve(2, 4, true, 0.1, 2);
  for (int s = 0; s < 2; ++s)
    EXPECT_NEAR(a[static_cast<size_t>(s)], b[static_cast<size_t>(s)], 1e-4);
}

TEST(Gpt2ScanLayers, TheStepProgramHoldsOneBlockWhateverTheDepth) {
  auto text = [](int64_t layers) {
    g2::TrainOptions o;
    o.model = g2::tiny();
    o.model.n_layer = layers;
    o.batch = 8;
    o.seq = 16;
    o.scan_layers = true;
    return g2::lower_train_step(o, make_abstract_mesh({4, 2}, {"data", "model"})).as_text();
  };
  const std::string t2 = text(2), t8 = text(8);
  auto count = [](const std::string& s, const std::string& op) {
    int n = 0;
    for (size_t p = s.find(op); p != std::string::npos; p = s.find(op, p + 1)) n++;
    return n;
  };
  // The blocks' matmuls live in the scans' bodies: as many with 8 layers as with 2.
  EXPECT_EQ(count(t8, "= dot_general("), count(t2, "= dot_general("));
  EXPECT_GE(count(t8, "= scan("), 2);  // forward, and the backward's reverse scan
}
