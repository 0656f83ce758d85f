// GPT-2 training in Explicit mode: every activation's sharding is part of its type, computed
// per op while tracing. The losses equal the Auto-mode run's, and the training step moves the
// same bytes in the same kinds of collectives.
#include <fmt/format.h>
#include "partix/models/gpt2.h"

#include "test_util.h"

using namespace partix;
namespace g2 = partix::models::gpt2;

namespace {

g2::TrainOptions options(int64_t data, int64_t model, bool fsdp, bool explicit_sharding) {
  g2::TrainOptions o;
  o.model = g2::tiny();
  o.model.dropout = 0.1;
  o.data = data;
  o.model_parallel = model;
  o.fsdp = fsdp;
  o.batch = 8;
  o.seq = 32;
  o.lr = 3e-3;
  o.warmup = 5;
  o.explicit_sharding = explicit_sharding;
  return o;
}

}  // namespace

TEST(Gpt2Explicit, SameLossesAndCollectivesAsAuto) {
  struct Layout {
    int64_t d, m;
    bool fsdp;
  };
  for (Layout l : {Layout{4, 2, false}, Layout{2, 4, false}, Layout{8, 1, true}}) {
    SCOPED_TRACE(fmt::format("mesh {}x{}{}", l.d, l.m, l.fsdp ? " fsdp" : ""));
    g2::Trainer a(options(l.d, l.m, l.fsdp, false));
    g2::Trainer e(options(l.d, l.m, l.fsdp, true));
    const CostAnalysis ca = a.lower_step().cost_analysis();
    const CostAnalysis ce = e.lower_step().cost_analysis();
    // The same kinds, and the same bytes but for one difference: cross_entropy states its
    // picked log-probabilities' type (split as the labels), so they are summed over 'model'
    // before the batch mean (64 floats a device) where Auto mode carries the partial sums to
    // the scalar loss. Well under 1% of the step's traffic.
    // With FSDP the Explicit step gathers each layer's weights once (the typed, gathered
    // weights are kept for the backward pass) where Auto mode gathers them again in the backward
    // pass: the same kinds of collectives, fewer bytes.
    for (const auto& [kind, bytes] : ca.bytes_per_device) {
      const double e = ce.bytes_per_device.count(kind) ? ce.bytes_per_device.at(kind) : 0.0;
      if (l.fsdp) {
        EXPECT_LE(e, bytes + 1) << kind;
      } else {
        EXPECT_NEAR(e, bytes, 0.01 * bytes + 1) << kind;
      }
    }
    for (const auto& [kind, bytes] : ce.bytes_per_device) {
      EXPECT_TRUE(ca.bytes_per_device.count(kind) || bytes == 0) << kind << " only in Explicit";
    }
    for (int s = 0; s < 6; ++s) {
      const double la = a.step().loss, le = e.step().loss;
      ASSERT_NEAR(le, la, 1e-5) << "step " << s;
    }
  }
}

// Layer remat composes with Explicit axes (it was refused on every mesh, 1x1 included): the
// checkpointed blocks take their region's types, and the losses are the Auto run's.
TEST(Gpt2Explicit, LayerRematGivesTheSameLosses) {
  for (auto [d, m] : {std::pair<int64_t, int64_t>{1, 1}, {4, 2}}) {
    SCOPED_TRACE(fmt::format("mesh {}x{}", d, m));
    g2::TrainOptions ao = options(d, m, false, false), eo = options(d, m, false, true);
    eo.remat = true;
    g2::Trainer a(ao), e(eo);
    for (int s = 0; s < 3; ++s) {
      const double la = a.step().loss, le = e.step().loss;
      ASSERT_NEAR(le, la, 1e-5) << "step " << s;
    }
  }
}
