// Pipeline parallelism: the schedules' tables (checked by replaying them symbolically), and
// GPT-2's pipelined loss and gradients against value_and_grad of the unpipelined loss on the
// same global batch, for every schedule, uneven layer splits and data and tensor parallelism.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <map>
#include <set>

#include "partix/models/gpt2.h"
#include "partix/nn.h"
#include "partix/pipeline.h"
#include "partix/profiler.h"
#include "partix/random.h"
#include "test_util.h"

using namespace partix;
namespace g2 = partix::models::gpt2;
namespace pp = partix::pipeline;

namespace {

// Replays a schedule with each buffer slot holding a (chunk, microbatch) label, as the SPMD loop
// moves data: every forward must read its own input, every backward its input and its output's
// cotangent, and every op must come after what it depends on.
void replay(const pp::Schedule& sc) {
  const int64_t S = sc.stages, K = sc.chunks(), M = sc.microbatches;
  using Label = std::pair<int, int>;
  const Label none{-1, -1};
  std::vector<std::vector<Label>> in(static_cast<size_t>(S),
                                     std::vector<Label>(static_cast<size_t>(sc.input_slots + 1), none));
  auto co = std::vector<std::vector<Label>>(
      static_cast<size_t>(S), std::vector<Label>(static_cast<size_t>(sc.cotangent_slots + 1), none));
  std::set<Label> fwd_done, bwd_done;
  for (int64_t t = 0; t < sc.ticks; ++t) {
    const auto tu = static_cast<size_t>(t);
    std::vector<Label> sent(static_cast<size_t>(S), none);
    for (size_t d = 0; d < static_cast<size_t>(S); ++d) {
      const int k = sc.fwd_chunk[tu][d], m = sc.fwd_mb[tu][d];
      if (k < 0) continue;
      ASSERT_EQ(k % S, static_cast<int64_t>(d)) << "chunk " << k << " on device " << d;
      if (k > 0) {
        ASSERT_TRUE(fwd_done.count({k - 1, m})) << "F" << m << " of chunk " << k << " at tick " << t;
        ASSERT_EQ(in[d][static_cast<size_t>(sc.fwd_in[tu][d])], (Label{k, m})) << "tick " << t;
      }
      sent[d] = {k, m};
    }
    for (const auto& [k, m] : sent) {
      if (k >= 0) fwd_done.insert({k, m});
    }
    for (size_t d = 0; d < static_cast<size_t>(S); ++d) {
      const Label from = sent[(d + static_cast<size_t>(S) - 1) % static_cast<size_t>(S)];
      const int32_t slot = sc.fwd_recv[tu][d];
      if (from.first >= 0 && from.first + 1 < K) {
        ASSERT_LT(slot, sc.input_slots) << "an arriving input discarded at tick " << t;
        in[d][static_cast<size_t>(slot)] = {from.first + 1, from.second};
      } else {
        ASSERT_EQ(slot, sc.input_slots);
      }
    }
    std::vector<Label> back(static_cast<size_t>(S), none);
    for (size_t d = 0; d < static_cast<size_t>(S); ++d) {
      const int k = sc.bwd_chunk[tu][d], m = sc.bwd_mb[tu][d];
      if (k < 0) continue;
      ASSERT_TRUE(fwd_done.count({k, m}));
      if (k > 0) {
        ASSERT_EQ(in[d][static_cast<size_t>(sc.bwd_in[tu][d])], (Label{k, m})) << "tick " << t;
      }
      if (k + 1 < K) {
        ASSERT_TRUE(bwd_done.count({k + 1, m}));
        ASSERT_EQ(co[d][static_cast<size_t>(sc.bwd_co[tu][d])], (Label{k, m})) << "tick " << t;
      }
      back[d] = {k, m};
    }
    for (const auto& [k, m] : back) {
      if (k >= 0) bwd_done.insert({k, m});
    }
    for (size_t d = 0; d < static_cast<size_t>(S); ++d) {
      const Label from = back[(d + 1) % static_cast<size_t>(S)];
      const int32_t slot = sc.bwd_recv[tu][d];
      if (from.first > 0) {
        ASSERT_LT(slot, sc.cotangent_slots);
        co[d][static_cast<size_t>(slot)] = {from.first - 1, from.second};
      } else {
        ASSERT_EQ(slot, sc.cotangent_slots);
      }
    }
  }
  EXPECT_EQ(static_cast<int64_t>(fwd_done.size()), K * M);
  EXPECT_EQ(static_cast<int64_t>(bwd_done.size()), K * M);
}

}  // namespace

TEST(PipelineSchedule, TablesMoveEveryInputAndCotangentToItsConsumer) {
  for (auto kind : {pp::ScheduleKind::kGPipe, pp::ScheduleKind::k1F1B}) {
    for (int64_t S : {1, 2, 3, 4, 8}) {
      for (int64_t M : {1, 2, 5, 8, 16}) {
        SCOPED_TRACE(fmt::format("{} S={} M={}", pp::schedule_name(kind), S, M));
        replay(pp::make_schedule(kind, S, M));
      }
    }
  }
  for (int64_t S : {2, 4}) {
    for (int64_t V : {2, 3}) {
      for (int64_t M : {S, 2 * S, 4 * S}) {
        SCOPED_TRACE(fmt::format("interleaved S={} M={} V={}", S, M, V));
        replay(pp::make_schedule(pp::ScheduleKind::kInterleaved, S, M, V));
      }
    }
  }
}

TEST(PipelineSchedule, BubblesAndMemoryAreTheTextbookOnes) {
  for (int64_t S : {2, 4, 8}) {
    for (int64_t M : {1, 4, 8, 32}) {
      const pp::Schedule g = pp::make_schedule(pp::ScheduleKind::kGPipe, S, M);
      const pp::Schedule f = pp::make_schedule(pp::ScheduleKind::k1F1B, S, M);
      const double ideal = static_cast<double>(S - 1) / static_cast<double>(M + S - 1);
      // Whatever the ratio of backward to forward time.
      for (double tb : {1.0, 2.0, 3.0}) {
        EXPECT_NEAR(g.bubble_fraction(1.0, tb), ideal, 1e-12) << S << " " << M;
        EXPECT_NEAR(f.bubble_fraction(1.0, tb), ideal, 1e-12) << S << " " << M;
      }
      for (int64_t d = 0; d < S; ++d) {
        // GPipe holds every microbatch; 1F1B at most 2(S-d)-1 of them, whatever M is.
        EXPECT_EQ(g.held[static_cast<size_t>(d)], M);
        EXPECT_EQ(f.held[static_cast<size_t>(d)], std::min(M, 2 * (S - d) - 1));
      }
    }
  }
  // Interleaving fills the pipeline V times faster.
  const pp::Schedule one = pp::make_schedule(pp::ScheduleKind::k1F1B, 4, 8);
  const pp::Schedule two = pp::make_schedule(pp::ScheduleKind::kInterleaved, 4, 8, 2);
  EXPECT_LT(two.bubble_fraction(), one.bubble_fraction());
  EXPECT_NEAR(two.bubble_fraction(), two.ideal_bubble_fraction(), 0.1 * two.ideal_bubble_fraction());
  EXPECT_THAT(one.to_string(), ::testing::HasSubstr("stage  0 (holds  7): F0|."));
}

TEST(PipelineSchedule, TraceHalvesAreNamedByTheirMicrobatches) {
  const pp::Schedule sc = pp::make_schedule(pp::ScheduleKind::k1F1B, 2, 4);
  // Two devices (stages 0 and 1), each with its halves in tick order, plus unrelated spans.
  std::vector<profiler::Span> spans;
  double t = 0;
  for (int64_t tick = 0; tick < sc.ticks; ++tick) {
    for (int d = 0; d < 2; ++d) {
      spans.push_back({d, "jit/forward_half/cond", "compute", t, 1});
      spans.push_back({d, "jit/forward_half/h/dot_general", "compute", t + 0.1, 0.5});
      spans.push_back({d, "jit/backward_half/cond", "compute", t + 1, 1});
    }
    t += 2;
  }
  pp::label_spans(spans, sc, [](int id) -> int64_t { return id; });
  std::vector<std::string> got[2];
  for (const auto& sp : spans) {
    if (sp.name.find("dot_general") == std::string::npos) got[sp.device].push_back(sp.name.substr(4));
  }
  // 1f1b, 2 stages, 4 microbatches (the table of to_string): F0|. F1|. F2|B0 F3|B1 .|B2 .|B3
  const std::vector<std::string> want0 = {
      "forward_half/F0", "backward_half/idle", "forward_half/F1", "backward_half/idle",
      "forward_half/F2", "backward_half/B0",   "forward_half/F3", "backward_half/B1",
      "forward_half/idle", "backward_half/B2", "forward_half/idle", "backward_half/B3"};
  EXPECT_EQ(got[0], want0);
  EXPECT_EQ(got[1][2], "forward_half/F0");
  EXPECT_EQ(got[1][3], "backward_half/B0");
  EXPECT_EQ(spans[1].name, "jit/forward_half/h/dot_general");  // other spans keep their names
}

TEST(PipelineSchedule, BadArgumentsAreRefusedByName) {
  EXPECT_PARTIX_ERROR(pp::make_schedule(pp::ScheduleKind::k1F1B, 0, 4), "stages is 0");
  EXPECT_PARTIX_ERROR(pp::make_schedule(pp::ScheduleKind::k1F1B, 2, 0), "microbatches is 0");
  EXPECT_PARTIX_ERROR(pp::make_schedule(pp::ScheduleKind::kInterleaved, 2, 4, 1),
                   "at least 2 virtual stages");
  EXPECT_PARTIX_ERROR(pp::make_schedule(pp::ScheduleKind::kInterleaved, 4, 6, 2),
                   "6 microbatches is not a multiple of 4");
  EXPECT_PARTIX_ERROR(pp::make_schedule(pp::ScheduleKind::kGPipe, 2, 4, 2), "one virtual stage");
  EXPECT_PARTIX_ERROR(pp::parse_schedule("zb"), "unknown schedule 'zb'");
}

namespace {

struct Grads {
  double loss;
  std::map<std::string, std::vector<float>> g;
};

// The loss and gradients of one batch, on `mesh` (pipelined when it has a 'stage' axis).
Grads loss_and_grads(const g2::Config& c, const Mesh& mesh, const g2::PipelineOptions& po,
                     bool remat = false, bool fsdp = false) {
  const nn::LogicalRules rules = g2::sharding_rules(fsdp);
  const Params p = g2::init(c, random::key(3), mesh, rules, /*stacked=*/true);
  const int64_t B = 8, T = 16;
  Array ids = random::randint(random::key(5), {B, T}, 0, c.vocab_size);
  Array targets = random::randint(random::key(6), {B, T}, 0, c.vocab_size);
  const NamedSharding rows(mesh, P("data"));
  ids = device_put(ids, rows);
  targets = device_put(targets, rows);
  auto f = jit([&](const Params& pp, const Array& i, const Array& t) {
    g2::ForwardOptions fo{std::nullopt, &mesh, &rules, remat, true};
    if (mesh.has_axis("stage")) return g2::pipeline_value_and_grad(pp, i, t, c, fo, po);
    auto [v, g] = value_and_grad([&](const Params& q) { return g2::loss(q, i, t, c, fo); })(pp);
    return std::pair<Array, Params>{v, Params(g)};
  });
  auto [v, g] = f(p, ids, targets);
  Grads out{static_cast<double>(v.item<float>()), {}};
  for (const auto& [n, x] : g) out.g[n] = x.to_vector<float>();
  return out;
}

void expect_same(const Grads& got, const Grads& want, const std::string& what) {
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::abs(want.loss)) << what;
  ASSERT_EQ(got.g.size(), want.g.size());
  for (const auto& [n, w] : want.g) {
    const std::vector<float>& x = got.g.at(n);
    ASSERT_EQ(x.size(), w.size()) << n;
    double scale = 0, err = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(w[i])));
      err = std::max(err, std::abs(static_cast<double>(x[i]) - w[i]));
    }
    EXPECT_LE(err, 1e-5 * scale + 1e-9) << what << ": " << n << " max error " << err
                                        << " against max |g| " << scale;
  }
}

}  // namespace

TEST(Gpt2Pipeline, EverySchedulesLossAndGradientsAreTheUnpipelinedOnes) {
  g2::Config c = g2::tiny();
  c.n_layer = 8;  // one layer per stage at 8 stages
  const Grads want = loss_and_grads(c, make_mesh({1, 1}, {"data", "model"}), {});
  struct Case {
    pp::ScheduleKind kind;
    int64_t S, D, TP, M, V;
  };
  for (const Case& k : {Case{pp::ScheduleKind::k1F1B, 2, 2, 2, 4, 1},
                        Case{pp::ScheduleKind::kGPipe, 4, 2, 1, 2, 1},
                        Case{pp::ScheduleKind::k1F1B, 8, 1, 1, 8, 1},
                        Case{pp::ScheduleKind::kInterleaved, 2, 2, 2, 2, 2},
                        Case{pp::ScheduleKind::kInterleaved, 2, 1, 1, 4, 2}}) {
    const std::string what = fmt::format("{} stage={} data={} model={} M={} V={}",
                                         pp::schedule_name(k.kind), k.S, k.D, k.TP, k.M, k.V);
    SCOPED_TRACE(what);
    const Mesh mesh = make_mesh({k.S, k.D, k.TP}, {"stage", "data", "model"});
    expect_same(loss_and_grads(c, mesh, {k.kind, k.M, k.V}), want, what);
  }
}

TEST(Gpt2Pipeline, AVocabularyThatDoesNotSplitEvenlyIsPaddedAndMasked) {
  g2::Config c = g2::tiny();
  c.vocab_size = 251;
  const Grads want = loss_and_grads(c, make_mesh({1, 1}, {"data", "model"}), {});
  const Mesh mesh = make_mesh({2, 1, 4}, {"stage", "data", "model"});
  expect_same(loss_and_grads(c, mesh, {pp::ScheduleKind::k1F1B, 2, 1}), want, "vocab 251 over 4");
}

TEST(Gpt2Pipeline, FsdpGathersEachLayerWhereItIsUsed) {
  g2::Config c = g2::tiny();
  c.n_layer = 4;
  const Grads want = loss_and_grads(c, make_mesh({1, 1}, {"data", "model"}), {});
  for (auto [S, D, TP] : {std::tuple{2, 2, 2}, {2, 4, 1}}) {
    const Mesh mesh = make_mesh({S, D, TP}, {"stage", "data", "model"});
    for (bool remat : {false, true}) {
      expect_same(loss_and_grads(c, mesh, {pp::ScheduleKind::k1F1B, 2, 1}, remat, /*fsdp=*/true),
                  want, fmt::format("FSDP stage={} data={} model={} remat={}", S, D, TP, remat));
    }
  }
}

TEST(Gpt2Pipeline, LayerRematInsideTheStagesGivesTheSameGradients) {
  g2::Config c = g2::tiny();
  c.n_layer = 4;
  const Grads want = loss_and_grads(c, make_mesh({1, 1}, {"data", "model"}), {});
  const Mesh mesh = make_mesh({2, 2, 2}, {"stage", "data", "model"});
  expect_same(loss_and_grads(c, mesh, {pp::ScheduleKind::k1F1B, 2, 1}, /*remat=*/true), want,
              "1f1b with layer remat");
}

// Layers that do not split evenly over the stages are refused, naming the stage counts that
// divide: padding the stacked weights split over 'stage' would gather every layer onto every
// device each step (GPT-3 175B on 97 stages: 648 GiB sent per device per step).
TEST(Gpt2Pipeline, UnevenLayerSplitsAreRefusedNamingTheStageCountsThatDivide) {
  g2::Config c = g2::tiny();
  c.n_layer = 3;
  const Mesh mesh = make_mesh({2, 2, 2}, {"stage", "data", "model"});
  EXPECT_PARTIX_ERROR(loss_and_grads(c, mesh, {pp::ScheduleKind::k1F1B, 2, 1}),
                      "3 layers do not split into 2 chunks (2 stages x 1 virtual stages)",
                      "gather every layer's weights", "stage counts that divide: 1 or 3");
  g2::TrainOptions o;
  o.model = g2::tiny();
  o.model.n_layer = 12;
  o.stages = 5;
  o.microbatches = 5;
  o.batch = 10;
  EXPECT_PARTIX_ERROR(g2::Trainer{o}, "[train] 12 layers do not split into 5 chunks",
                      "stage counts that divide: 4 or 6");
  o.stages = 4;
  o.virtual_stages = 2;
  o.microbatches = 4;
  o.batch = 8;
  o.model.n_layer = 4;
  o.schedule = pp::ScheduleKind::kInterleaved;
  EXPECT_PARTIX_ERROR(g2::Trainer{o}, "4 layers do not split into 8 chunks",
                      "stage counts that divide: 2");
}

namespace {

struct TrainRun {
  std::vector<double> losses;
  Params params;
};

g2::TrainOptions train_options(int64_t layers, int64_t steps) {
  g2::TrainOptions o;
  o.model = g2::tiny();
  o.model.n_layer = layers;
  o.steps = steps;
  o.batch = 8;
  o.seq = 16;
  o.lr = 3e-3;
  o.warmup = 1;
  return o;
}

TrainRun train(g2::TrainOptions o, int64_t steps) {
  g2::Trainer t(std::move(o));
  TrainRun r;
  for (int64_t s = 0; s < steps; ++s) r.losses.push_back(t.step().loss);
  t.wait_for_checkpoints();
  for (const auto& [n, p] : t.params()) r.params.emplace(n, device_put(p, single_device_sharding(default_device())));
  return r;
}

void expect_same_run(const TrainRun& got, const TrainRun& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << what << " step " << s;
  }
  for (const auto& [n, w] : want.params) {
    const std::vector<float> a = got.params.at(n).to_vector<float>(), b = w.to_vector<float>();
    double err = 0, scale = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
      scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    }
    // Adam's m / sqrt(v) turns reduction-order differences of near-zero gradients into
    // differences up to the learning rate: parameters are compared as tests/mpi/cli_equal.sh
    // compares them across processes (losses and one step's gradients are held to 1e-5 above).
    EXPECT_LE(err, 1e-3 * scale) << what << ": " << n;
  }
}

}  // namespace

TEST(Gpt2Pipeline, TrainingStepsMatchTheUnpipelinedRun) {
  const int64_t steps = 3;
  for (int64_t layers : {4, 2}) {
    const TrainRun want = train(train_options(layers, steps), steps);
    EXPECT_LT(want.losses.back(), want.losses.front());
    for (auto [kind, S, D, TP, M, V, fsdp] :
         {std::tuple{pp::ScheduleKind::k1F1B, 2, 2, 2, 2, 1, false},
          {pp::ScheduleKind::kGPipe, 2, 4, 1, 2, 1, false},
          {pp::ScheduleKind::kInterleaved, 2, 2, 2, 2, 2, false},
          {pp::ScheduleKind::k1F1B, 2, 2, 2, 2, 1, true}}) {
      if (layers % (S * V) != 0) continue;  // the stages need equal chunks
      g2::TrainOptions o = train_options(layers, steps);
      o.stages = S;
      o.data = D;
      o.model_parallel = TP;
      o.schedule = kind;
      o.microbatches = M;
      o.virtual_stages = V;
      o.fsdp = fsdp;
      expect_same_run(train(o, steps), want,
                      fmt::format("{} layers, {} stage={} data={} model={} M={} V={}{}", layers,
                                  pp::schedule_name(kind), S, D, TP, M, V, fsdp ? " FSDP" : ""));
    }
  }
}

TEST(Gpt2Pipeline, CheckpointsMoveBetweenMeshesWithAndWithoutAStageAxis) {
  // 2 steps on one mesh, resumed for 2 more on another: the losses and parameters of 4
  // uninterrupted steps.
  const TrainRun want = train(train_options(4, 4), 4);
  struct Mesh3 {
    int64_t stages, data, model;
  };
  for (auto [first, second] : {std::pair{Mesh3{2, 2, 2}, Mesh3{1, 4, 2}}, {Mesh3{1, 2, 4}, Mesh3{4, 1, 2}}}) {
    const std::string dir = ::testing::TempDir() + fmt::format("partix_pipeline_ckpt_{}{}", first.stages, second.stages);
    std::filesystem::remove_all(dir);
    auto opts = [&](Mesh3 m) {
      g2::TrainOptions o = train_options(4, 4);
      o.stages = m.stages;
      o.data = m.data;
      o.model_parallel = m.model;
      o.microbatches = m.stages > 1 ? 2 : 1;
      o.checkpoint_dir = dir;
      o.save_every = 2;
      o.resume = true;
      return o;
    };
    TrainRun a = train(opts(first), 2);
    TrainRun b = train(opts(second), 2);
    TrainRun joined{a.losses, b.params};
    joined.losses.insert(joined.losses.end(), b.losses.begin(), b.losses.end());
    expect_same_run(joined, want,
                    fmt::format("stages {} then {}", first.stages, second.stages));
    std::filesystem::remove_all(dir);
  }
}

TEST(Gpt2Pipeline, BadPipelinesAreRefusedBeforeTraining) {
  g2::TrainOptions o = train_options(4, 1);
  o.microbatches = 2;
  EXPECT_PARTIX_ERROR(g2::Trainer{o}, "need a pipeline");
  o.stages = 2;
  o.microbatches = 3;
  EXPECT_PARTIX_ERROR(g2::Trainer{o}, "does not split into 3 microbatches");
  o.microbatches = 2;
  o.scan_layers = false;
  EXPECT_PARTIX_ERROR(g2::Trainer{o}, "stacked");
  o.scan_layers = true;
  o.schedule = pp::ScheduleKind::kInterleaved;
  o.virtual_stages = 2;
  o.microbatches = 3;
  EXPECT_PARTIX_ERROR(g2::Trainer{o}, "not a multiple of 2");
}

// The lowered per-device program names its schedule's loop and prints, above the program, the
// schedule that loop runs: each stage's forwards and backwards tick by tick.
TEST(Gpt2Pipeline, LoweredTextShowsTheSchedulePerDevice) {
  g2::Config c = g2::tiny();
  c.n_layer = 4;
  for (const auto& [kind, V] : {std::pair{pp::ScheduleKind::k1F1B, int64_t{1}},
                                std::pair{pp::ScheduleKind::kInterleaved, int64_t{2}}}) {
    const Mesh mesh = make_mesh({2, 2, 2}, {"stage", "data", "model"});
    const nn::LogicalRules rules = g2::sharding_rules(false);
    const Params p = g2::init(c, random::key(3), mesh, rules, /*stacked=*/true);
    const NamedSharding rows(mesh, P("data"));
    const ShapeDtypeStruct batch{{8, 16}, DType::I32, rows};
    const g2::PipelineOptions po{kind, 4, V};
    auto f = jit([&](const Params& pp, const Array& i, const Array& t) {
      g2::ForwardOptions fo{std::nullopt, &mesh, &rules, false, true};
      return g2::pipeline_value_and_grad(pp, i, t, c, fo, po);
    });
    const std::string text = f.lower(p, batch, batch).as_text();
    const pp::Schedule sc = pp::make_schedule(kind, 2, 4, V);
    const std::string name =
        fmt::format("pipeline_{}_S2_M4{}", pp::schedule_name(kind), V > 1 ? "_V2" : "");
    const size_t note = text.find("# " + name + ": the loop of that scope runs this schedule");
    ASSERT_NE(note, std::string::npos) << text.substr(0, 2000);
    EXPECT_NE(text.find(name + "/"), std::string::npos);  // the loop's instructions carry it
    // Every line of the schedule's table, commented, before the program.
    const std::string table = sc.to_string();
    for (size_t s = 0, e; s < table.size(); s = e + 1) {
      e = table.find('\n', s);
      if (e == std::string::npos) e = table.size();
      const size_t at = text.find("#   " + table.substr(s, e - s) + "\n");
      EXPECT_NE(at, std::string::npos) << table.substr(s, e - s);
      EXPECT_LT(at, text.find("program @")) << "the note comes before the program";
    }
    EXPECT_NE(table.find("F3"), std::string::npos);
  }
}

// Cost analysis counts the halves a device works in, not the schedule's ticks: GPipe and 1F1B
// run each microbatch's forward and backward of the same layers once per device, so their
// flops agree although their tick counts differ (only the per-tick bookkeeping outside the
// halves, a few scalar ops, differs).
TEST(Gpt2Pipeline, CostAnalysisCountsTheHalvesADeviceWorksIn) {
  g2::Config c = g2::tiny();
  c.n_layer = 4;
  const Mesh mesh = make_mesh({2, 2, 2}, {"stage", "data", "model"});
  const nn::LogicalRules rules = g2::sharding_rules(false);
  const Params p = g2::init(c, random::key(3), mesh, rules, /*stacked=*/true);
  const ShapeDtypeStruct batch{{8, 16}, DType::I32, NamedSharding(mesh, P("data"))};
  std::vector<double> flops;
  std::vector<int64_t> ticks;
  for (const auto& [kind, V] : {std::pair{pp::ScheduleKind::kGPipe, int64_t{1}},
                                std::pair{pp::ScheduleKind::k1F1B, int64_t{1}}}) {
    const g2::PipelineOptions po{kind, 4, V};
    auto f = jit([&](const Params& pp, const Array& i, const Array& t) {
      g2::ForwardOptions fo{std::nullopt, &mesh, &rules, false, true};
      return g2::pipeline_value_and_grad(pp, i, t, c, fo, po);
    });
    flops.push_back(f.lower(p, batch, batch).cost_analysis().flops);
    ticks.push_back(pp::make_schedule(kind, 2, 4, V).ticks);
  }
  ASSERT_NE(ticks[0], ticks[1]);
  EXPECT_GT(flops[0], 0);
  EXPECT_NEAR(flops[1] / flops[0], 1.0, 1e-4) << "ticks " << ticks[0] << " and " << ticks[1];
}
