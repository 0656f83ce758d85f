// Training checkpoints: a run resumed from a checkpoint continues bit-exactly (same mesh) or to
// summation order (another mesh), and a checkpoint's parameters become a Hugging Face folder.
#include <filesystem>

#include "io/checkpoint_test_util.h"
#include "partix/models/gpt2.h"
#include "test_util.h"

using namespace partix;
namespace g2 = partix::models::gpt2;
namespace fs = std::filesystem;

namespace {

g2::TrainOptions options(int64_t data, int64_t model, const std::string& dir) {
  g2::TrainOptions o;
  o.model = g2::tiny();
  o.model.dropout = 0.1;
  o.data = data;
  o.model_parallel = model;
  o.steps = 6;
  o.batch = 8;
  o.seq = 16;
  o.lr = 3e-3;
  o.warmup = 2;
  o.checkpoint_dir = dir;
  o.save_every = 3;
  return o;
}

std::vector<double> run(g2::Trainer& t) {
  std::vector<double> losses;
  while (t.step_count() < t.options().steps) losses.push_back(t.step().loss);
  t.wait_for_checkpoints();
  return losses;
}

}  // namespace

TEST(Gpt2Checkpoint, ResumeContinuesBitExactlyAndOntoAnotherMesh) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  std::vector<double> full;
  std::string final_state;
  {
    g2::Trainer t(options(2, 2, d));
    full = run(t);
    final_state = test::bytes_of(t.params().at("transformer.h.attn.c_attn.weight"));
  }
  EXPECT_EQ(ckpt::all_steps(d), (std::vector<int64_t>{3, 6}));
  fs::remove_all(ckpt::step_path(d, 6));  // as if the run had died after step 3
  {
    g2::TrainOptions o = options(2, 2, d);
    o.resume = true;
    g2::Trainer t(o);
    ASSERT_EQ(t.resumed_from(), std::optional<int64_t>(3));
    std::vector<double> rest = run(t);
    ASSERT_EQ(rest.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest[i], full[3 + i]) << "step " << 3 + i;
    EXPECT_EQ(test::bytes_of(t.params().at("transformer.h.attn.c_attn.weight")), final_state);
  }
  fs::remove_all(ckpt::step_path(d, 6));
  {
    g2::TrainOptions o = options(1, 4, d);  // another mesh, and FSDP on top
    o.fsdp = true;
    o.resume = true;
    g2::Trainer t(o);
    std::vector<double> rest = run(t);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(rest[i], full[3 + i], 1e-5 * full[3 + i]);
  }
  // What the checkpoint holds is the run's data position as well: another batch is refused.
  g2::TrainOptions other = options(2, 2, d);
  other.resume = true;
  other.batch = 4;
  EXPECT_PARTIX_ERROR(g2::Trainer{other}, "[train]", "step_6", "resume with the same --batch");
  other = options(2, 2, d);
  other.resume = true;
  other.model.n_layer = 3;
  EXPECT_PARTIX_ERROR(g2::Trainer{other}, "[train]", "step_6", "holds another model");
}

TEST(Gpt2Checkpoint, TrainingStateLeavesAndHuggingFaceExport) {
  test::TempDir dir;
  const std::string d = (dir.path() / "ckpt").string();
  g2::TrainOptions o = options(2, 1, d);
  o.steps = 2;
  o.save_every = 0;  // the last step only
  g2::Trainer t(o);
  run(t);
  ASSERT_EQ(ckpt::all_steps(d), std::vector<int64_t>{2});
  ckpt::Info info = ckpt::info(d, 2);
  std::vector<std::string> names;
  for (const auto& l : info.leaves) names.push_back(l.name);
  EXPECT_EQ(names, tree_leaf_paths(t.state()));
  EXPECT_NE(std::find(names.begin(), names.end(), "['opt_state'].mu['transformer.wte.weight']"),
            names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "['rng_key']"), names.end());

  // The training checkpoint's parameters, and a checkpoint of parameters alone, each become a
  // Hugging Face folder that loads back to the same values.
  const std::string hf = (dir.path() / "hf").string();
  g2::checkpoint_to_hf(d, 2, hf);
  const std::string params_only = (dir.path() / "params").string();
  ckpt::save(params_only, 7, t.params());
  ckpt::wait();
  const std::string hf2 = (dir.path() / "hf2").string();
  g2::checkpoint_to_hf(params_only, 7, hf2, o.model);
  EXPECT_PARTIX_ERROR(g2::checkpoint_to_hf(params_only, 7, hf2), "[gpt2.checkpoint_to_hf]",
                      "no 'gpt2.config' metadata");
  // The trainer keeps its blocks stacked over layers; Hugging Face names them per layer.
  ASSERT_TRUE(g2::is_stacked(t.params()));
  const Params per_layer = g2::unstack_layers(t.params(), o.model);
  ASSERT_EQ(per_layer.size(), 2u + 12 * 2 + 2);
  for (const std::string& folder : {hf, hf2}) {
    g2::Checkpoint back = g2::load_hf(folder, t.mesh(), g2::sharding_rules(false));
    ASSERT_EQ(back.params.size(), per_layer.size());
    for (const auto& [k, v] : per_layer) {
      EXPECT_EQ(test::bytes_of(back.params.at(k)), test::bytes_of(v)) << folder << " " << k;
    }
  }
}

TEST(Gpt2Checkpoint, ResumesAcrossLayerLayouts) {
  // A checkpoint of a scanned run (blocks stacked) resumes unrolled (per layer), and back: the
  // state is converted, so training continues as it would have (no dropout: the two draw
  // their masks differently).
  test::TempDir dir;
  const std::string d = dir.path().string();
  auto opts = [&](bool scan) {
    g2::TrainOptions o = options(2, 2, d);
    o.model.dropout = 0.0;
    o.scan_layers = scan;
    return o;
  };
  std::vector<double> full;
  {
    g2::Trainer t(opts(true));
    full = run(t);
  }
  for (bool scan : {false, true}) {
    SCOPED_TRACE(scan ? "resumed scanned" : "resumed unrolled");
    fs::remove_all(ckpt::step_path(d, 6));
    g2::TrainOptions o = opts(scan);
    o.resume = true;
    o.save_every = 0;
    g2::Trainer t(o);
    ASSERT_EQ(t.resumed_from(), std::optional<int64_t>(3));
    EXPECT_EQ(g2::is_stacked(t.params()), scan);
    EXPECT_EQ(g2::is_stacked(t.state().opt_state.mu), scan);
    std::vector<double> rest = run(t);
    ASSERT_EQ(rest.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(rest[i], full[3 + i], 1e-5 * full[3 + i]);
  }
  // The unrolled run wrote a per-layer checkpoint at step 6, which still exports.
  const std::string hf = (dir.path() / "hf").string();
  g2::checkpoint_to_hf(d, 6, hf);
  EXPECT_EQ(g2::load_hf(hf, Mesh({1, 1}, {"data", "model"}), g2::sharding_rules(false)).params.size(),
            2u + 12 * 2 + 2);
}
