// GPT-2 with its blocks scanned (the trainer's layout, the only one partix train uses): the same training as the
// unrolled model, on any mesh; the two parameter layouts (per layer, stacked over layers) convert
// exactly and give the same model.
#include <fmt/format.h>

#include "partix/models/gpt2.h"
#include "partix/nn.h"
#include "partix/random.h"
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
  // With dropout, the scanned model's masks are the same on every mesh, and the unrolled
  // model's are the same as the scanned model's.
  const std::vector<double> a = curve(1, 1, true, 0.1, 2), b = curve(2, 4, true, 0.1, 2);
  const std::vector<double> u = curve(1, 1, false, 0.1, 2);
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(a[static_cast<size_t>(s)], b[static_cast<size_t>(s)], 1e-4);
    EXPECT_NEAR(u[static_cast<size_t>(s)], a[static_cast<size_t>(s)], 1e-4);
  }
}

TEST(Gpt2ScanLayers, TheStepProgramHoldsOneBlockWhateverTheDepth) {
  auto text = [](int64_t layers, bool scan = true) {
    g2::TrainOptions o;
    o.model = g2::tiny();
    o.model.n_layer = layers;
    o.model.dropout = 0.1;
    o.batch = 8;
    o.seq = 16;
    o.scan_layers = scan;
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
  // With the parameters (and so the optimizer's update) stacked, nothing in the step grows with
  // depth: the programs differ only in the layer count inside shapes.
  EXPECT_EQ(count(t8, "\n"), count(t2, "\n"));
  // What the forward scan saves for the backward keeps the body's sharding: no value is
  // gathered inside the loops, so the step gathers no more than the unrolled one does.
  EXPECT_EQ(count(t8, "= all_gather("), count(text(8, false), "= all_gather(")) << t8;
}

namespace {

g2::Config three_layers() {
  g2::Config c = g2::tiny();
  c.n_layer = 3;
  return c;
}

}  // namespace

TEST(Gpt2ScanLayers, LayoutsConvertExactlyAndKeepTheRulesShardings) {
  const g2::Config c = three_layers();
  Mesh mesh({4, 2}, {"data", "model"});
  const nn::LogicalRules rules = g2::sharding_rules(/*fsdp=*/true);
  const Params per = g2::init(c, random::key(3), mesh, rules);
  const Params st = g2::init(c, random::key(3), mesh, rules, /*stacked=*/true);
  EXPECT_FALSE(g2::is_stacked(per));
  ASSERT_TRUE(g2::is_stacked(st));
  const auto per_sh = nn::param_shardings(g2::param_specs(c), rules, mesh);
  const auto st_sh = nn::param_shardings(g2::param_specs(c, true), rules, mesh);
  ASSERT_EQ(per.size(), per_sh.size());
  ASSERT_EQ(st.size(), st_sh.size());
  ASSERT_EQ(st.size(), 4u + 12);
  for (const auto& [name, a] : st) {
    EXPECT_EQ(a.sharding(), st_sh.at(name)) << name;
    EXPECT_EQ(a.shape(), g2::param_specs(c, true).at(name).shape) << name;
  }
  // FSDP x tensor parallel on a stacked weight: layers whole, then as per layer.
  EXPECT_EQ(st.at("transformer.h.mlp.c_fc.weight").sharding().spec(), P(None, "data", "model"));
  EXPECT_EQ(st.at("transformer.h.mlp.c_fc.weight").shape(), (Shape{3, 64, 256}));
  // Layer i of a stacked parameter is the per-layer one, bit for bit, in every conversion.
  const Params eager_stacked = g2::stack_layers(per, c);
  const Params back = g2::to_layout(st, c, /*stacked=*/false, mesh, rules);
  const Params eager_back = g2::unstack_layers(st, c);
  for (const auto& [name, a] : per) {
    EXPECT_EQ(back.at(name).sharding(), per_sh.at(name)) << name;
    EXPECT_EQ(back.at(name).to_vector<float>(), a.to_vector<float>()) << name;
    EXPECT_EQ(eager_back.at(name).to_vector<float>(), a.to_vector<float>()) << name;
  }
  for (const auto& [name, a] : st) {
    EXPECT_EQ(eager_stacked.at(name).to_vector<float>(), a.to_vector<float>()) << name;
  }
  // A layout already right is returned as it is.
  EXPECT_EQ(g2::stack_layers(st, c).size(), st.size());
  EXPECT_EQ(g2::unstack_layers(per, c).size(), per.size());
  // Bad input names what is wrong.
  Params missing = per;
  missing.erase("transformer.h.1.ln_2.bias");
  EXPECT_PARTIX_ERROR(g2::stack_layers(missing, c), "[gpt2.stack_layers]",
                      "'transformer.h.1.ln_2.bias'");
  g2::Config four = c;
  four.n_layer = 4;
  EXPECT_PARTIX_ERROR(g2::unstack_layers(st, four), "[gpt2.unstack_layers]",
                      "'transformer.h.ln_1.weight'", "not 4 layers first");
}

TEST(Gpt2ScanLayers, ForwardIsTheSameInEitherLayoutScannedOrUnrolled) {
  const g2::Config c = three_layers();
  Mesh mesh({4, 2}, {"data", "model"});
  const nn::LogicalRules rules = g2::sharding_rules(false);
  const Params per = g2::init(c, random::key(4), mesh, rules);
  const Params st = g2::to_layout(per, c, true, mesh, rules);
  Array ids = device_put(random::randint(random::key(5), {4, 16}, 0, 256),
                         NamedSharding(mesh, P("data")));
  auto logits = [&](const Params& p, bool scan) {
    g2::ForwardOptions fo;
    fo.mesh = &mesh;
    fo.rules = &rules;
    fo.scan_layers = scan;
    return jit([&](const Params& q, const Array& x) { return g2::forward(q, x, c, fo); })(p, ids)
        .to_vector<float>();
  };
  const std::vector<float> want = logits(per, false);
  for (const auto& [p, scan, what] :
       {std::tuple{&per, true, "per layer, scanned"}, std::tuple{&st, true, "stacked, scanned"},
        std::tuple{&st, false, "stacked, unrolled"}}) {
    SCOPED_TRACE(what);
    const std::vector<float> got = logits(*p, scan);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
  }
}
