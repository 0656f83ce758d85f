// The tour of docs/concepts.md, compiled and checked: what it claims about shardings, programs and
// collectives holds. Keep the two in step.
#include <cmath>
#include <string>

#include "test_util.h"

using namespace partix;

TEST(Tour, TheReadmeTourRunsAsWritten) {
  Mesh mesh = make_mesh({4, 2}, {"data", "model"});
  // --- as in docs/concepts.md, from here ---
  MeshContext ctx(mesh);  // a bare PartitionSpec now means a sharding on this mesh

  // Sharded creation: each device draws only its block.
  Array x = random::normal(random::key(0), {256, 512}, DType::F32, P("data"));
  Params params{{"w1", random::normal(random::key(1), {512, 2048}, DType::F32, P(None, "model"))},
                {"w2", random::normal(random::key(2), {2048, 512}, DType::F32, P("model", None))}};

  // jit: write the program for one big device; shardings of the inputs decide the rest.
  auto mlp = jit([](const Params& p, const Array& x) {
    return matmul(gelu(matmul(x, p.at("w1"))), p.at("w2"));
  });
  Array y = mlp(params, x);  // y.sharding(): P('data')
  Lowered l = mlp.lower(params, x);
  std::string text = l.as_text();  // the per-device program: one all_reduce over 'model'

  // shard_map: write the per-device program and its collectives yourself.
  auto total = shard_map([](const Array& block) { return psum(sum(block), "data"); }, mesh,
                         {P("data")}, {P()});

  // grad composes with jit and shard_map; a gradient keeps its parameter's sharding; trees
  // map like JAX's.
  auto loss = [](const Params& p, const Array& x) {
    return mean(square(matmul(gelu(matmul(x, p.at("w1"))), p.at("w2"))));
  };
  auto step = jit([&](const Params& p, const Array& x) {
    auto [value, grads] = value_and_grad(loss)(p, x);
    return std::make_pair(value, tree_map([](const Array& w, const Array& g) { return w - 0.1 * g; },
                                          p, grads));
  }, {.donate_argnums = {0}});
  auto [value, updated] = step(params, x);
  // --- to here ---

  EXPECT_EQ(y.sharding(), NamedSharding(mesh, P("data")));
  EXPECT_NE(text.find("all_reduce"), std::string::npos);
  EXPECT_GT(l.cost_analysis().bytes_per_device.at("all_reduce"), 0);
  Array host_x = device_put(x, Device{0});
  EXPECT_NEAR(Array(total(x)).item<float>(), sum(host_x).item<float>(), 1e-2);
  EXPECT_EQ(updated.at("w1").sharding(), NamedSharding(mesh, P(None, "model")));
  EXPECT_EQ(updated.at("w2").sharding(), NamedSharding(mesh, P("model", None)));
  EXPECT_TRUE(std::isfinite(value.item<float>()));
  EXPECT_THROW(params.at("w1").to_vector<float>(), Error);  // donated to the step
}
