// Gradients of a 2-layer MLP under data-parallel, FSDP, tensor-parallel and FSDP+TP shardings
// on 8 devices equal the single-device gradients and carry the parameters' shardings.
#include "test_util.h"

using namespace partix;

namespace {

constexpr int64_t B = 16, D = 8, F = 32;

Array mlp_loss(const Params& p, const Array& x, const Array& y) {
  Array h = gelu(matmul(x, p.at("w1")) + p.at("b1"));
  Array out = matmul(h, p.at("w2")) + p.at("b2");
  return mean(square(out - y));
}

Params make_params() {
  return {{"w1", random::normal(random::key(1), {D, F}) * 0.3},
          {"b1", random::normal(random::key(2), {F}) * 0.1},
          {"w2", random::normal(random::key(3), {F, D}) * 0.3},
          {"b2", random::normal(random::key(4), {D}) * 0.1}};
}

struct Layout {
  std::string name;
  Mesh mesh;
  std::map<std::string, PartitionSpec> params;
  PartitionSpec batch;
};

std::vector<Layout> layouts() {
  Mesh dp({8}, {"data"});
  Mesh tp({1, 8}, {"data", "model"});
  Mesh hybrid({4, 2}, {"data", "model"});
  return {
      {"data parallel", dp, {{"w1", P()}, {"b1", P()}, {"w2", P()}, {"b2", P()}}, P("data")},
      {"fsdp", dp, {{"w1", P("data")}, {"b1", P("data")}, {"w2", P("data")}, {"b2", P("data")}}, P("data")},
      {"tensor parallel", tp,
       {{"w1", P(None, "model")}, {"b1", P("model")}, {"w2", P("model")}, {"b2", P()}}, P()},
      {"fsdp + tp", hybrid,
       {{"w1", P("data", "model")}, {"b1", P("model")}, {"w2", P("model", "data")}, {"b2", P("data")}},
       P("data")},
  };
}

}  // namespace

TEST(ShardedGrad, MlpGradientsMatchTheSingleDeviceRun) {
  Params p = make_params();
  Array x = random::normal(random::key(5), {B, D});
  Array y = random::normal(random::key(6), {B, D});
  auto loss_grad = jit([](const Params& pp, const Array& xx, const Array& yy) {
    return value_and_grad(mlp_loss)(pp, xx, yy);
  });
  auto [want_loss, want_tree] = loss_grad(p, x, y);
  Params want = want_tree;
  for (const Layout& l : layouts()) {
    SCOPED_TRACE(l.name);
    Params ps;
    for (const auto& [k, v] : p) ps[k] = device_put(v, NamedSharding(l.mesh, l.params.at(k)));
    Array xs = device_put(x, NamedSharding(l.mesh, l.batch));
    Array ys = device_put(y, NamedSharding(l.mesh, l.batch));
    auto [loss, tree] = loss_grad(ps, xs, ys);
    Params g = tree;
    EXPECT_NEAR(loss.item<float>(), want_loss.item<float>(), 1e-5);
    for (const auto& [k, v] : g) {
      EXPECT_EQ(v.sharding(), ps.at(k).sharding()) << k;  // the parameter's sharding, unasked
      auto gv = v.to_vector<float>(), wv = want.at(k).to_vector<float>();
      ASSERT_EQ(gv.size(), wv.size());
      for (size_t i = 0; i < gv.size(); ++i) ASSERT_NEAR(gv[i], wv[i], 1e-5) << k << "[" << i << "]";
    }
  }
}

TEST(ShardedGrad, EagerGradOfShardedParamsKeepsShardings) {
  Mesh mesh({4, 2}, {"data", "model"});
  Array w = device_put(random::normal(random::key(7), {8, 4}), NamedSharding(mesh, P(None, "model")));
  Array x = device_put(random::normal(random::key(8), {16, 8}), NamedSharding(mesh, P("data")));
  Array g = grad([](const Array& ww, const Array& xx) { return sum(tanh(matmul(xx, ww))); })(w, x);
  EXPECT_EQ(g.sharding(), NamedSharding(mesh, P(None, "model")));
  Array gl = grad([](const Array& ww, const Array& xx) { return sum(tanh(matmul(xx, ww))); })(
      device_put(w, Device{0}), device_put(x, Device{0}));
  auto a = g.to_vector<float>(), b = gl.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
}

TEST(ShardedGrad, RematGivesTheSameGradientsUnderSharding) {
  Mesh mesh({4, 2}, {"data", "model"});
  Params p = make_params();
  Array x = random::normal(random::key(9), {B, D});
  auto loss = [](const Params& pp, const Array& xx) {
    auto block = checkpoint([](const Array& h, const Array& w) { return gelu(matmul(h, w)); });
    return sum(matmul(block(xx, pp.at("w1")), pp.at("w2")));
  };
  auto g = jit([&](const Params& pp, const Array& xx) { return grad(loss)(pp, xx); });
  Params plain = g(p, x);
  Params ps = p;
  ps["w1"] = device_put(p.at("w1"), NamedSharding(mesh, P(None, "model")));
  ps["w2"] = device_put(p.at("w2"), NamedSharding(mesh, P("model")));
  Params sharded = g(ps, device_put(x, NamedSharding(mesh, P("data"))));
  for (const char* k : {"w1", "w2"}) {
    auto a = plain.at(k).to_vector<float>(), b = sharded.at(k).to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << k;
  }
}
