// Lowered: per-device text, cost analysis (flops, bytes per collective kind), memory analysis,
// and the redundant-computation lint.
#include "spmd_test_util.h"

using namespace partix;

TEST(Introspection, CostAndMemoryOfAShardedMatmul) {
  Mesh mesh({4, 2}, {"x", "y"});
  Array x = device_put(zeros({16, 8}), NamedSharding(mesh, P("x", "y")));
  Array w = device_put(zeros({8, 12}), NamedSharding(mesh, P("y")));
  auto f = jit([](const Array& a, const Array& b) { return matmul(a, b); },
               {.out_shardings = {NamedSharding(mesh, P("x"))}});
  Lowered l = f.lower(x, w);
  std::string text = l.as_text();
  EXPECT_NE(text.find("all_reduce(%2) {axes=['y']"), std::string::npos) << text;
  EXPECT_NE(text.find("f32[4,4] P('x', 'y')"), std::string::npos) << text;  // local shapes
  CostAnalysis c = l.cost_analysis();
  // Local dot [4,4] x [4,12]: 2*4*4*12 flops; all_reduce of a [4,12] f32 block over 2 devices.
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 4 * 4 * 12);
  EXPECT_DOUBLE_EQ(c.bytes_per_device["all_reduce"], 2.0 * 1 / 2 * 4 * 12 * 4);
  EXPECT_DOUBLE_EQ(c.bytes_per_device["all_gather"], 0.0);
  EXPECT_DOUBLE_EQ(c.duplicated_flops_fraction, 0.0);
  MemoryAnalysis m = l.memory_analysis();
  ASSERT_EQ(m.argument_bytes.size(), 8u);
  EXPECT_EQ(m.argument_bytes[5], (4 * 4 + 4 * 12) * 4);
  EXPECT_EQ(m.output_bytes[5], 4 * 12 * 4);
  EXPECT_GE(m.peak_temp_bytes[5], 0);
  EXPECT_EQ(l.in_shardings()[0], NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(l.out_shardings()[0], NamedSharding(mesh, P("x")));
}

TEST(Introspection, BytesOfEachCollectiveKind) {
  Mesh mesh({8}, {"x"});
  Array a = device_put(zeros({64, 16}), NamedSharding(mesh, P("x")));
  // Gathering a [8,16] f32 block: (n-1)/n of the [64,16] output.
  auto g = jit([](const Array& v) { return v * 2.0; }, {.out_shardings = {NamedSharding(mesh, P())}});
  EXPECT_DOUBLE_EQ(g.lower(a).cost_analysis().bytes_per_device["all_gather"], 7.0 / 8 * 64 * 16 * 4);
  // Moving the split from dim 0 to dim 1: an all_to_all of the local block.
  auto t = jit([](const Array& v) { return v + 1.0; }, {.out_shardings = {NamedSharding(mesh, P(None, "x"))}});
  EXPECT_DOUBLE_EQ(t.lower(a).cost_analysis().bytes_per_device["all_to_all"], 7.0 / 8 * 8 * 16 * 4);
  auto p = shard_map([](const Array& v) { return ppermute(v, "x", {{0, 1}, {1, 0}}); }, mesh, {P("x")}, {P("x")});
  auto pj = jit([&](const Array& v) { return p(v); });
  EXPECT_DOUBLE_EQ(pj.lower(a).cost_analysis().bytes_per_device["collective_permute"], 8 * 16 * 4);
}

TEST(Introspection, RedundantComputeIsMeasuredAndWarned) {
  // The seed's pitfall: weights split on 'model', batch replicated: every 'data' device
  // computes the same product.
  Mesh mesh({4, 2}, {"data", "model"});
  Array x = device_put(zeros({256, 512}), NamedSharding(mesh, P()));
  Array w = device_put(zeros({512, 256}), NamedSharding(mesh, P(None, "model")));
  auto f = jit([](const Array& a, const Array& b) { return matmul(a, b); });
  Lowered l = f.lower(x, w);
  EXPECT_NEAR(l.cost_analysis().duplicated_flops_fraction, 0.75, 1e-9);
  auto warnings = l.warnings();
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("computed identically on 4 devices"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("'data'"), std::string::npos) << warnings[0];
  // Splitting the batch over 'data' removes it.
  Array xs = device_put(zeros({256, 512}), NamedSharding(mesh, P("data")));
  Lowered ok = f.lower(xs, w);
  EXPECT_NEAR(ok.cost_analysis().duplicated_flops_fraction, 0.0, 1e-9);
  EXPECT_TRUE(ok.warnings().empty());
}

TEST(Introspection, LiveBytesWhenEachOutputIsReady) {
  Mesh mesh({8}, {"x"});
  Array x = device_put(zeros({64}), NamedSharding(mesh, P()));
  auto f = jit([](const Array& a) {
    Array y = exp(a);
    return std::make_tuple(y, sum(y * y), a);
  });
  const MemoryAnalysis m = f.lower(x).memory_analysis();
  ASSERT_EQ(m.live_bytes_at_output.size(), 8u);
  ASSERT_EQ(m.live_bytes_at_output[3].size(), 3u);
  // y ready: the argument and y. The sum ready: y*y has died after its one use; the argument
  // and y stay (y is an output). An output that is the argument: the arguments alone.
  EXPECT_EQ(m.live_bytes_at_output[3][0], 64 * 4 + 64 * 4);
  EXPECT_EQ(m.live_bytes_at_output[3][1], 64 * 4 + 64 * 4 + 4);
  EXPECT_EQ(m.live_bytes_at_output[3][2], 64 * 4);
  EXPECT_EQ(m.peak_bytes[3], 64 * 4 * 3 + 4);
}

// Bytes accessed count what kernels read and write: a fused elementwise chain reads its input
// and writes its result once; a product reads both operands and writes its result; a loop runs
// its body as often as its trip count and moves its operands and results once. Instructions and
// collectives count as often as they run.
TEST(Introspection, BytesAccessedInstructionsAndCollectivesPerDevice) {
  Array x = zeros({1000});
  auto chain = jit([](const Array& a) { return exp(a) * 2.0 + 1.0; });
  const CostAnalysis e = chain.lower(x).cost_analysis();
  EXPECT_DOUBLE_EQ(e.bytes_accessed, 2 * 1000 * 4);
  EXPECT_GE(e.instructions, 3);

  Array a = zeros({4, 8}), w = zeros({8, 12});
  auto mm = jit([](const Array& l, const Array& r) { return matmul(l, r); });
  const CostAnalysis m = mm.lower(a, w).cost_analysis();
  EXPECT_DOUBLE_EQ(m.bytes_accessed, (4 * 8 + 8 * 12 + 4 * 12) * 4);
  EXPECT_DOUBLE_EQ(m.instructions, 1);

  Array v = zeros({100});
  auto loop = jit([](const Array& c) {
    return fori_loop(0, 5, [](const Array&, const Array& y) { return tanh(y); }, c);
  });
  const CostAnalysis l = loop.lower(v).cost_analysis();
  // Five tanh of 100 floats (400 bytes in, 400 out) and the loop's carry in and out.
  EXPECT_DOUBLE_EQ(l.bytes_accessed, 5 * 800 + 800);

  Mesh mesh({8}, {"x"});
  Array s = device_put(zeros({64}), NamedSharding(mesh, P("x")));
  auto sm = shard_map(
      [](const Array& b) {
        return fori_loop(0, 3, [](const Array&, const Array& y) { return psum(y, "x") * 0.5; }, b);
      },
      mesh, {P("x")}, {P("x")}, /*check_vma=*/false);
  auto smj = jit([&](const Array& b) { return sm(b); });
  const CostAnalysis c = smj.lower(s).cost_analysis();
  EXPECT_DOUBLE_EQ(c.collectives_per_device.at("all_reduce"), 3);
  EXPECT_DOUBLE_EQ(c.collectives_per_device.at("all_gather"), 0);
  EXPECT_DOUBLE_EQ(c.bytes_per_device.at("all_reduce"), 3 * 2.0 * 7 / 8 * 8 * 4);
}
