// Planning a training step on abstract devices: the program is the one the Trainer runs, and the
// peak it predicts per device is what the devices' allocators measure when the step runs.
#include <fmt/format.h>

#include "partix/models/gpt2.h"
#include "test_util.h"

using namespace partix;
namespace g2 = partix::models::gpt2;

namespace {

g2::TrainOptions options(int64_t data, int64_t model, bool fsdp, bool remat = false) {
  g2::TrainOptions o;
  o.model = g2::tiny();
  o.data = data;
  o.model_parallel = model;
  o.fsdp = fsdp;
  o.remat = remat;
  o.batch = 8;
  o.seq = 32;
  return o;
}

Mesh abstract_mesh(const g2::TrainOptions& o) {
  return make_abstract_mesh({o.data, o.model_parallel}, {"data", "model"});
}

struct Layout {
  int64_t d, m;
  bool fsdp;
};

}  // namespace

TEST(Gpt2Plan, TheAbstractStepIsTheTrainersProgram) {
  for (Layout l : {Layout{4, 2, false}, Layout{8, 1, true}}) {
    SCOPED_TRACE(fmt::format("mesh {}x{}{}", l.d, l.m, l.fsdp ? " fsdp" : ""));
    const g2::TrainOptions o = options(l.d, l.m, l.fsdp);
    g2::Trainer t(o);
    const Lowered real = t.lower_step();
    const Lowered planned = g2::lower_train_step(o, abstract_mesh(o));
    EXPECT_EQ(planned.as_text(), real.as_text());
    const CostAnalysis pc = planned.cost_analysis(), rc = real.cost_analysis();
    EXPECT_EQ(pc.bytes_per_device, rc.bytes_per_device);
    EXPECT_EQ(pc.flops, rc.flops);
    const MemoryAnalysis pm = planned.memory_analysis(), rm = real.memory_analysis();
    EXPECT_EQ(pm.argument_bytes, rm.argument_bytes);
    EXPECT_EQ(pm.peak_temp_bytes, rm.peak_temp_bytes);
    EXPECT_EQ(pm.peak_bytes, rm.peak_bytes);
    EXPECT_GT(pc.bytes_per_device.at("all_reduce"), 0.0);
  }
}

// The validation the plan promises: on every layout small enough to run here, the predicted
// peak per device is within 5% of the allocator's peak while the Trainer steps.
TEST(Gpt2Plan, PredictedPeakIsTheMeasuredPeak) {
  for (Layout l : {Layout{1, 1, false}, Layout{8, 1, false}, Layout{4, 2, false},
                   Layout{1, 8, false}, Layout{8, 1, true}, Layout{4, 2, true}}) {
    for (bool remat : {false, true}) {
      SCOPED_TRACE(fmt::format("mesh {}x{}{}{}", l.d, l.m, l.fsdp ? " fsdp" : "",
                               remat ? " remat" : ""));
      const g2::TrainOptions o = options(l.d, l.m, l.fsdp, remat);
      const MemoryAnalysis plan = g2::lower_train_step(o, abstract_mesh(o)).memory_analysis();
      g2::Trainer t(o);
      t.step();  // compiles; the next steps run the steady state
      reset_peak_memory_stats();
      for (int s = 0; s < 2; ++s) t.step();
      const std::vector<Device>& devices = t.mesh().devices();
      for (size_t k = 0; k < devices.size(); ++k) {
        const auto measured = static_cast<double>(memory_stats(devices[k].id).peak_bytes_in_use);
        const auto predicted = static_cast<double>(plan.peak_bytes[k]);
        EXPECT_NEAR(predicted / measured, 1.0, 0.05)
            << "device " << k << ": predicted " << predicted << " measured " << measured;
      }
    }
  }
}

TEST(Gpt2Plan, LayerRematKeepsFewerActivationsAndTheSameLoss) {
  g2::TrainOptions o = options(4, 2, false);
  o.model.n_layer = 4;
  o.seq = 64;
  const MemoryAnalysis kept = g2::lower_train_step(o, abstract_mesh(o)).memory_analysis();
  g2::TrainOptions r = o;
  r.remat = true;
  const MemoryAnalysis recomputed = g2::lower_train_step(r, abstract_mesh(r)).memory_analysis();
  EXPECT_LT(recomputed.peak_bytes[0], kept.peak_bytes[0]);
  // Kept for the backward pass (live beyond the arguments once the loss is ready): every
  // block's intermediates without remat, only the blocks' inputs with it.
  const int64_t kept_acts = kept.live_bytes_at_output[0].back() - kept.argument_bytes[0];
  const int64_t recomputed_acts =
      recomputed.live_bytes_at_output[0].back() - recomputed.argument_bytes[0];
  const int64_t block_input = (o.batch / 4) * o.seq * o.model.n_embd * 4;
  EXPECT_GE(recomputed_acts, o.model.n_layer * block_input);
  EXPECT_LT(3 * recomputed_acts, kept_acts);
  // Recomputing the blocks (dropout masks included) changes no value.
  g2::Trainer a(o), b(r);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(a.step().loss, b.step().loss, 1e-5) << "step " << s;
}

TEST(Gpt2Plan, PlansMeshesLargerThanTheMachineAndRefusesBadOptions) {
  g2::TrainOptions o = options(16, 8, true);
  o.batch = 32;
  const Lowered big = g2::lower_train_step(o, abstract_mesh(o));
  EXPECT_EQ(big.memory_analysis().peak_bytes.size(), 128u);
  g2::TrainOptions bad = o;
  bad.batch = 12;
  EXPECT_PARTIX_ERROR(g2::lower_train_step(bad, abstract_mesh(bad)), "[gpt2.lower_train_step]",
                      "batch 12");
  EXPECT_PARTIX_ERROR(g2::lower_train_step(o, make_abstract_mesh({16, 8}, {"dp", "tp"})),
                      "[gpt2.lower_train_step]", "'data' and 'model'");
}
