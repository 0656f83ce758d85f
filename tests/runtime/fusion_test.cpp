// Loop fusion of elementwise groups (runtime/fusion.h): which instructions group (golden, program
// text in, groups out), and that fused runs give the unfused bits on 1 and 8 devices, with the
// memory the plan predicts.
#include "runtime/fusion.h"

#include <cmath>

#include "core/memory.h"
#include "runtime/interpreter.h"
#include "test_util.h"

using namespace partix;

namespace {

// Plans made while it lives run unfused.
struct Unfused {
  Unfused() { runtime::set_fusion_enabled(false); }
  ~Unfused() { runtime::set_fusion_enabled(true); }
};

std::vector<std::string> groups_of(const std::string& text) {
  ir::Program p = ir::parse_program(text);
  return runtime::describe_fusion(p, runtime::plan_fusion(p, *prim::find_fused_kernel("cpu")).group);
}

}  // namespace

TEST(Fusion, GoldenGroupsOfASoftmax) {
  // exp's result is also read by a reduction: it ends a group (its result is materialised),
  // and the normalising division is a second group. The maxima's views (3 elements) do not
  // join groups of 15.
  const std::string text =
      "program @sm mesh<> (%0: f32[3,5] P()) -> (%10) {\n"
      "  %1 = reduce_max(%0) {axes=[1]} : f32[3] P()\n"
      "  %2 = reshape(%1) {shape=[3,1]} : f32[3,1] P()\n"
      "  %3 = stop_gradient(%2) : f32[3,1] P()\n"
      "  %4 = broadcast_in_dim(%3) {dims=[0,1], shape=[3,5]} : f32[3,5] P()\n"
      "  %5 = sub(%0, %4) : f32[3,5] P()\n"
      "  %6 = exp(%5) : f32[3,5] P()\n"
      "  %7 = reduce_sum(%6) {axes=[1]} : f32[3] P()\n"
      "  %8 = reshape(%7) {shape=[3,1]} : f32[3,1] P()\n"
      "  %9 = broadcast_in_dim(%8) {dims=[0,1], shape=[3,5]} : f32[3,5] P()\n"
      "  %10 = div(%6, %9) : f32[3,5] P()\n"
      "}\n";
  EXPECT_EQ(groups_of(text),
            (std::vector<std::string>{"%6 = fusion(broadcast_in_dim,sub,exp)(%3, %0) : f32[3,5] {%4 %5 %6}",
                                      "%10 = fusion(broadcast_in_dim,div)(%8, %6) : f32[3,5] {%9 %10}"}));
}

TEST(Fusion, GoldenGroupsOfAnRmsNormWithLiterals) {
  // The statistics (2 elements) and the normalised rows (8) are separate groups; scalar
  // literals and the reshape of the sums join the first; the second reads the statistics, x
  // and the weight.
  const std::string text =
      "program @rms mesh<> (%0: f32[2,4] P(), %1: f32[4] P()) -> (%13) {\n"
      "  %2 = mul(%0, %0) : f32[2,4] P()\n"
      "  %3 = reduce_sum(%2) {axes=[1]} : f32[2] P()\n"
      "  %4 = reshape(%3) {shape=[2,1]} : f32[2,1] P()\n"
      "  %5 = constant() {value=<f32[]: 4>} : f32[] P()\n"
      "  %6 = div(%4, %5) : f32[2,1] P()\n"
      "  %7 = constant() {value=<f32[]: 1e-05>} : f32[] P()\n"
      "  %8 = add(%6, %7) : f32[2,1] P()\n"
      "  %9 = rsqrt(%8) : f32[2,1] P()\n"
      "  %10 = broadcast_in_dim(%9) {dims=[0,1], shape=[2,4]} : f32[2,4] P()\n"
      "  %11 = mul(%0, %10) : f32[2,4] P()\n"
      "  %12 = broadcast_in_dim(%1) {dims=[1], shape=[2,4]} : f32[2,4] P()\n"
      "  %13 = mul(%11, %12) : f32[2,4] P()\n"
      "}\n";
  EXPECT_EQ(groups_of(text),
            (std::vector<std::string>{"%9 = fusion(div,add,rsqrt)(%3) : f32[2,1] {%4 %5 %6 %7 %8 %9}",
                                      "%13 = fusion(broadcast_in_dim,mul,broadcast_in_dim,mul)(%9, %0, %1) : f32[2,4] {%10 %11 %12 %13}"}));
}

TEST(Fusion, ResultsAndOpsWithoutAFusedLoopStayOutside) {
  // %2 is a program result, so it is materialised even though %3 reads it; a comparison (bool
  // result) and an integer op are not fused; one op alone is no group.
  const std::string text =
      "program @f mesh<> (%0: f32[4] P(), %1: i32[4] P()) -> (%2, %4, %6, %7) {\n"
      "  %2 = exp(%0) : f32[4] P()\n"
      "  %3 = neg(%2) : f32[4] P()\n"
      "  %4 = tanh(%3) : f32[4] P()\n"
      "  %5 = lt(%0, %4) : bool[4] P()\n"
      "  %6 = add(%1, %1) : i32[4] P()\n"
      "  %7 = select(%5, %0, %4) : f32[4] P()\n"
      "}\n";
  EXPECT_EQ(groups_of(text),
            (std::vector<std::string>{"%4 = fusion(neg,tanh)(%2) : f32[4] {%3 %4}"}));
}

TEST(Fusion, ViewsPassThroughAndOtherTransposesStayOutside) {
  // Views (the primitive says so for its avals and attrs: a reshape, a transpose that moves
  // only a size-1 dim) pass their operand through a group; a transpose that reorders elements
  // is no view and its result is read from memory.
  const std::string text =
      "program @v mesh<> (%0: f32[4,1] P(), %1: f32[2,3] P()) -> (%4, %8) {\n"
      "  %2 = transpose(%0) {perm=[1,0]} : f32[1,4] P()\n"
      "  %3 = exp(%2) : f32[1,4] P()\n"
      "  %4 = neg(%3) : f32[1,4] P()\n"
      "  %5 = transpose(%1) {perm=[1,0]} : f32[3,2] P()\n"
      "  %6 = exp(%5) : f32[3,2] P()\n"
      "  %7 = reshape(%6) {shape=[6]} : f32[6] P()\n"
      "  %8 = neg(%7) : f32[6] P()\n"
      "}\n";
  EXPECT_EQ(groups_of(text),
            (std::vector<std::string>{"%4 = fusion(exp,neg)(%0) : f32[1,4] {%2 %3 %4}",
                                      "%8 = fusion(exp,neg)(%5) : f32[6] {%6 %7 %8}"}));
}

namespace {

// A broadcast that only adds a dimension of extent 1 (w read as [1, n]) inside one fused group.
Array unit_broadcasts(const Array& x, const Array& w) {
  return exp(expand_dims(sum(x, {0}), 0) * 0.01) * w + w;
}

// The functions the bit checks run: norms, softmaxes, activations, scalar operands (literals
// and a runtime scalar), broadcasts along either dimension, and broadcasts that only add a
// dimension of extent 1 (read in place by the CPU loop).
std::vector<Array> functions(const Array& x, const Array& w, const Array& s) {
  return {rms_norm(x, w, 1e-5),
          softmax(x * 0.5, -1),
          gelu(x, true) * silu(x + 1.0),
          layer_norm(x, w, w * 0.1, 1e-5),
          exp(-x) / (1.0 + x * x) + s,
          maximum(x, w) - minimum(x, expand_dims(sum(x, {1}), 1)),
          unit_broadcasts(x, w)};
}

void expect_same_bits(const std::vector<Array>& a, const std::vector<Array>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>()) << "function " << i;
  }
}

}  // namespace

TEST(Fusion, FusedRunsGiveTheUnfusedBitsOnOneAndEightDevices) {
  Array key = random::key(3);
  Array x = random::normal(random::fold_in(key, 1), {16, 96});
  Array w = random::normal(random::fold_in(key, 2), {96});
  Array s = from_vector<float>({0.25f}, {});
  auto f = [](const Array& a, const Array& b, const Array& c) { return functions(a, b, c); };
  Mesh mesh({8}, {"x"});
  Array xs = device_put(x, NamedSharding(mesh, P("x")));
  Array ws = device_put(w, NamedSharding(mesh, P()));
  Array ss = device_put(s, NamedSharding(mesh, P()));
  auto fused = jit(f);
  EXPECT_GE(fused.lower(x, w, s).fusions().size(), 6u);
  // The last function's group reads w through broadcasts to [1, 96] (read in place).
  const std::vector<std::string> last = jit(unit_broadcasts).lower(x, w).fusions();
  ASSERT_EQ(last.size(), 1u);
  EXPECT_NE(last[0].find("broadcast_in_dim,mul,broadcast_in_dim,add)"), std::string::npos) << last[0];
  EXPECT_NE(last[0].find(": f32[1,96]"), std::string::npos) << last[0];
  const std::vector<Array> one = fused(x, w, s), eight = fused(xs, ws, ss);
  std::vector<Array> plain_one, plain_eight;
  {
    Unfused off;
    auto plain = jit(f);
    EXPECT_TRUE(plain.lower(x, w, s).fusions().empty());
    plain_one = plain(x, w, s);
    plain_eight = plain(xs, ws, ss);
  }
  expect_same_bits(one, plain_one);
  expect_same_bits(eight, plain_eight);
  // The sharded run holds the same values (rows split over devices).
  for (size_t i = 0; i < one.size(); ++i) {
    const auto a = one[i].to_vector<float>(), b = eight[i].to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-5 * (1 + std::fabs(a[k]))) << i;
  }
}

TEST(Fusion, LargeGroupsSplitOverTheTeamAndReferenceKernelsRunTheMembers) {
  // Past a block of work the group's blocks split over the device's threads: the same bits.
  Array x = random::normal(random::key(5), {512, 300});
  auto f = jit([](const Array& a) { return tanh(a * 1.5 + 0.25) * exp(-a * a); });
  const std::vector<float> fused = f(x).to_vector<float>();
  std::vector<float> plain, reference;
  {
    Unfused off;
    plain = jit([](const Array& a) { return tanh(a * 1.5 + 0.25) * exp(-a * a); })(x).to_vector<float>();
  }
  EXPECT_EQ(fused, plain);
  runtime::set_kernel_mode(runtime::KernelMode::kReference);
  reference = f(x).to_vector<float>();  // the fused plan, its members on the reference kernels
  runtime::set_kernel_mode(runtime::KernelMode::kFast);
  for (size_t k = 0; k < fused.size(); ++k) ASSERT_NEAR(fused[k], reference[k], 1e-6) << k;
}

TEST(Fusion, BroadcastsThatOnlyAddUnitDimensionsGiveTheUnfusedBitsPastOneBlock) {
  // The CPU loop reads such a broadcast's operand in place, block after block (256 elements)
  // and split over the device's threads: every block must read its own elements.
  Array a = random::normal(random::key(7), {3, 5000});
  Array b = random::normal(random::key(8), {5000});
  auto f = unit_broadcasts;
  const std::vector<std::string> groups = jit(f).lower(a, b).fusions();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_NE(groups[0].find("broadcast_in_dim"), std::string::npos) << groups[0];
  const std::vector<float> fused = jit(f)(a, b).to_vector<float>();
  std::vector<float> plain;
  {
    Unfused off;
    plain = jit(f)(a, b).to_vector<float>();
  }
  EXPECT_EQ(fused, plain);
  // And the values themselves, against the host.
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  for (size_t i = 0; i < bv.size(); ++i) {
    const float col = av[i] + av[5000 + i] + av[10000 + i];
    ASSERT_NEAR(fused[i], std::exp(col * 0.01f) * bv[i] + bv[i], 1e-4 * (1 + std::fabs(bv[i]))) << i;
  }
}

TEST(Fusion, IntermediatesAreNeverAllocatedAndThePlanSaysSo) {
  // Two branches of a 1 MiB array rejoin: unfused, both branches' results are live at once
  // (one becomes the result, the other is a temporary); fused, only the result is allocated
  // (in place over a donated argument: nothing at all).
  const int64_t n = 1 << 18;
  auto body = [](const Array& v) { return exp(v) * 0.5 + tanh(v) * v; };
  Array x = device_put(zeros({n}), Device{3});
  auto fused = jit(body);
  const int64_t fused_peak = fused.lower(x).memory_analysis().peak_temp_bytes[0];
  int64_t plain_peak = 0;
  {
    Unfused off;
    plain_peak = jit(body).lower(x).memory_analysis().peak_temp_bytes[0];
  }
  EXPECT_EQ(fused_peak, 0);  // no temporaries beside the result
  EXPECT_GE(plain_peak, n * 4);
  fused(x);  // warm
  reset_peak_memory_stats();
  const int64_t before = memory_stats(3).bytes_in_use;
  Array r = fused(x);
  EXPECT_EQ(memory_stats(3).peak_bytes_in_use - before, n * 4);
  auto donating = jit(body, {.donate_argnums = {0}});
  donating(device_put(zeros({n}), Device{3}));  // compile
  Array y = device_put(zeros({n}), Device{3});
  reset_peak_memory_stats();
  const int64_t with_y = memory_stats(3).bytes_in_use;
  Array z = donating(y);
  EXPECT_EQ(memory_stats(3).peak_bytes_in_use, with_y);  // the result took y's buffer
  EXPECT_EQ(z.to_vector<float>()[5], 0.5f);
}
