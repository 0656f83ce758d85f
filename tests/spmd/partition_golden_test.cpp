// Golden tests of propagation + partitioning: program text with shardings in, per-device
// program with its collectives out.
#include "spmd_test_util.h"

using namespace partix;
using testing_util::count_op;
using testing_util::partition_text;

namespace {
const char* kDotXY =
    "program @f mesh<'x': 4, 'y': 2> (%0: f32[16,8] P('x', 'y'), %1: f32[8,12] P('y')) -> (%2) {\n"
    "  %2 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[16,12]\n"
    "}\n";
}

TEST(PartitionGolden, ContractionShardedOutReplicatedIsOneAllReduce) {
  EXPECT_EQ(partition_text(kDotXY, {P("x", None)}),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[4,4] P('x', 'y'), %1: f32[4,12] P('y')) -> (%3) {\n"
            "  %2 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[4,12] P('x') unreduced('y')\n"
            "  %3 = all_reduce(%2) {axes=['y'], group=2, kind=\"sum\"} : f32[4,12] P('x')\n"
            "}\n");
}

TEST(PartitionGolden, ContractionShardedOutShardedIsOneReduceScatter) {
  EXPECT_EQ(partition_text(kDotXY, {P("x", "y")}),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[4,4] P('x', 'y'), %1: f32[4,12] P('y')) -> (%3) {\n"
            "  %2 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[4,12] P('x') unreduced('y')\n"
            "  %3 = reduce_scatter(%2) {axes=['y'], axis=1, group=2, tiled=true} : f32[4,6] P('x', 'y')\n"
            "}\n");
}

TEST(PartitionGolden, BatchTimesColumnsNeedsNoCollective) {
  EXPECT_EQ(partition_text(
                "program @f mesh<'x': 4, 'y': 2> (%0: f32[16,8] P('x'), %1: f32[8,12] P(None, 'y')) -> (%2) {\n"
                "  %2 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[16,12]\n"
                "}\n"),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[4,8] P('x'), %1: f32[8,6] P(None, 'y')) -> (%2) {\n"
            "  %2 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[4,6] P('x', 'y')\n"
            "}\n");
}

TEST(PartitionGolden, MegatronMlpHasExactlyOneAllReduce) {
  std::string out = partition_text(
      "program @mlp mesh<'x': 4, 'y': 2> (%0: f32[16,8] P('x'), %1: f32[8,32] P(None, 'y'), %2: f32[32,8] P('y')) -> (%5) {\n"
      "  %3 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[16,32]\n"
      "  %4 = tanh(%3) : f32[16,32]\n"
      "  %5 = dot_general(%4, %2) {lhs_contract=[1], rhs_contract=[0]} : f32[16,8]\n"
      "}\n");
  EXPECT_EQ(out,
            "program @mlp mesh<'x': 4, 'y': 2> (%0: f32[4,8] P('x'), %1: f32[8,16] P(None, 'y'), %2: f32[16,8] P('y')) -> (%6) {\n"
            "  %3 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[4,16] P('x', 'y')\n"
            "  %4 = tanh(%3) : f32[4,16] P('x', 'y')\n"
            "  %5 = dot_general(%4, %2) {lhs_contract=[1], rhs_contract=[0]} : f32[4,8] P('x') unreduced('y')\n"
            "  %6 = all_reduce(%5) {axes=['y'], group=2, kind=\"sum\"} : f32[4,8] P('x')\n"
            "}\n");
  EXPECT_EQ(count_op(out, "all_reduce"), 1);
}

TEST(PartitionGolden, SumOverAShardedDimensionIsAnAllReduce) {
  EXPECT_EQ(partition_text(
                "program @f mesh<'x': 4, 'y': 2> (%0: f32[16,8] P('x', 'y')) -> (%1) {\n"
                "  %1 = reduce_sum(%0) {axes=[1]} : f32[16]\n"
                "}\n"),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[4,4] P('x', 'y')) -> (%2) {\n"
            "  %1 = reduce_sum(%0) {axes=[1]} : f32[4] P('x') unreduced('y')\n"
            "  %2 = all_reduce(%1) {axes=['y'], group=2, kind=\"sum\"} : f32[4] P('x')\n"
            "}\n");
  // max over a split dimension combines the local maxima at once.
  EXPECT_EQ(partition_text(
                "program @f mesh<'x': 4, 'y': 2> (%0: f32[16,8] P('x', 'y')) -> (%1) {\n"
                "  %1 = reduce_max(%0) {axes=[1]} : f32[16]\n"
                "}\n"),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[4,4] P('x', 'y')) -> (%2) {\n"
            "  %1 = reduce_max(%0) {axes=[1]} : f32[4] P('x')\n"
            "  %2 = all_reduce(%1) {axes=['y'], group=2, kind=\"max\"} : f32[4] P('x')\n"
            "}\n");
}

TEST(PartitionGolden, TransposePermutesTheSpec) {
  EXPECT_EQ(partition_text(
                "program @f mesh<'x': 4, 'y': 2> (%0: f32[16,8] P('x', 'y')) -> (%1) {\n"
                "  %1 = transpose(%0) {perm=[1,0]} : f32[8,16]\n"
                "}\n"),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[4,4] P('x', 'y')) -> (%1) {\n"
            "  %1 = transpose(%0) {perm=[1,0]} : f32[4,4] P('y', 'x')\n"
            "}\n");
}

TEST(PartitionGolden, ReshapeKeepsTheLeadingSharding) {
  EXPECT_EQ(partition_text(
                "program @f mesh<'x': 4, 'y': 2> (%0: f32[8,32] P('x')) -> (%1) {\n"
                "  %1 = reshape(%0) {shape=[8,16,2]} : f32[8,16,2]\n"
                "}\n"),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[2,32] P('x')) -> (%1) {\n"
            "  %1 = reshape(%0) {shape=[2,16,2]} : f32[2,16,2] P('x')\n"
            "}\n");
  // A split minor dimension maps onto the major factor of the refinement.
  EXPECT_EQ(partition_text(
                "program @f mesh<'x': 4, 'y': 2> (%0: f32[8,32] P('x', 'y')) -> (%1) {\n"
                "  %1 = reshape(%0) {shape=[8,16,2]} : f32[8,16,2]\n"
                "}\n"),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[2,16] P('x', 'y')) -> (%1) {\n"
            "  %1 = reshape(%0) {shape=[2,8,2]} : f32[2,8,2] P('x', 'y')\n"
            "}\n");
}

TEST(PartitionGolden, ConflictingUseOfOneAxisMovesTheSmallerTensor) {
  // x[B_x, D] @ W[D, F_x]: one axis cannot split two factors; the smaller W is gathered.
  std::string out = partition_text(
      "program @f mesh<'x': 8> (%0: f32[64,16] P('x'), %1: f32[16,8] P(None, 'x')) -> (%2) {\n"
      "  %2 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[64,8]\n"
      "}\n");
  EXPECT_EQ(out,
            "program @f mesh<'x': 8> (%0: f32[8,16] P('x'), %1: f32[16,1] P(None, 'x')) -> (%3) {\n"
            "  %2 = all_gather(%1) {axes=['x'], axis=1, group=8, tiled=true} : f32[16,8] P()\n"
            "  %3 = dot_general(%0, %2) {lhs_contract=[1], rhs_contract=[0]} : f32[8,8] P('x')\n"
            "}\n");
}

TEST(PartitionGolden, ShardedEmbeddingLookupIsMaskedLocallyThenReduced) {
  std::string out = partition_text(
      "program @f mesh<'x': 4> (%0: f32[64,8] P('x'), %1: i32[6] P()) -> (%2) {\n"
      "  %2 = take(%0, %1) {axis=0} : f32[6,8]\n"
      "}\n");
  EXPECT_EQ(count_op(out, "take"), 1);
  EXPECT_EQ(count_op(out, "all_gather"), 0) << out;  // the table never moves
  EXPECT_EQ(count_op(out, "all_reduce"), 1) << out;
  EXPECT_NE(out.find("f32[16,8] P('x')"), std::string::npos) << out;
}

TEST(PartitionGolden, UnevenReshardingIsReportedAsAWarning) {
  std::vector<std::string> warnings;
  std::string out = partition_text(
      "program @f mesh<'x': 4, 'y': 2> (%0: f32[13,8] P('x')) -> (%1) {\n"
      "  %1 = exp(%0) : f32[13,8]\n"
      "}\n",
      {P("y")}, &warnings);
  ASSERT_EQ(warnings.size(), 1u) << out;
  EXPECT_NE(warnings[0].find("%1 (exp)"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("gathers dimension 0"), std::string::npos) << warnings[0];
}

TEST(PartitionGolden, UnevenGatherToReplicatedIsNotWarned) {
  // 13 rows over 4 devices: one all_gather of the padded blocks and a trim, nothing wasted.
  std::vector<std::string> warnings;
  std::string out = partition_text(
      "program @f mesh<'x': 4> (%0: f32[13,8] P('x')) -> (%1) {\n"
      "  %1 = exp(%0) : f32[13,8]\n"
      "}\n",
      {P()}, &warnings);
  EXPECT_EQ(count_op(out, "all_gather"), 1) << out;
  EXPECT_TRUE(warnings.empty()) << warnings[0];
}

TEST(PartitionGolden, VocabParallelCrossEntropyNeverGathersTheLogits) {
  // cross_entropy(logits[B, V_x], labels): max and sum over the split vocab reduce small
  // [B] vectors; the label's logit is a masked local pick.
  Mesh mesh({4}, {"x"});
  Array logits = device_put(random::normal(random::key(1), {6, 32}), NamedSharding(mesh, P(None, "x")));
  Array labels = device_put(from_vector<int32_t>({0, 31, 7, 8, 15, 16}, {6}), NamedSharding(mesh, P()));
  auto f = jit([](const Array& l, const Array& y) { return mean(cross_entropy(l, y)); });
  std::string text = f.lower(logits, labels).as_text();
  EXPECT_EQ(count_op(text, "all_gather"), 0) << text;
  EXPECT_EQ(count_op(text, "all_to_all"), 0) << text;
  float want = mean(cross_entropy(device_put(logits, Device{0}), device_put(labels, Device{0}))).item<float>();
  EXPECT_NEAR(f(logits, labels).item<float>(), want, 1e-5);
  // Its gradient stays split over the vocab too.
  auto g = jit([](const Array& l, const Array& y) {
    return grad([&](const Array& ll) { return mean(cross_entropy(ll, y)); })(l);
  });
  std::string gt = g.lower(logits, labels).as_text();
  EXPECT_EQ(count_op(gt, "all_gather"), 0) << gt;
  Array gs = g(logits, labels);
  EXPECT_EQ(gs.sharding(), NamedSharding(mesh, P(None, "x")));
  Array gl = g(device_put(logits, Device{0}), device_put(labels, Device{0}));
  auto a = gs.to_vector<float>(), b = gl.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6);
}

TEST(PartitionGolden, FsdpWeightIsGatheredRatherThanTheActivationResharded) {
  // tanh(x)[B_x, D] @ W[D_x, F]: W is user-sharded on its contraction dimension (FSDP) but is
  // the smaller tensor, so W is gathered and the activation keeps its batch split, as XLA
  // does; a pinned sharding must not outrank a bigger intermediate.
  std::string out = partition_text(
      "program @f mesh<'x': 8> (%0: f32[64,16] P('x'), %1: f32[16,8] P('x')) -> (%3) {\n"
      "  %2 = tanh(%0) : f32[64,16]\n"
      "  %3 = dot_general(%2, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[64,8]\n"
      "}\n");
  EXPECT_EQ(out,
            "program @f mesh<'x': 8> (%0: f32[8,16] P('x'), %1: f32[2,8] P('x')) -> (%4) {\n"
            "  %2 = tanh(%0) : f32[8,16] P('x')\n"
            "  %3 = all_gather(%1) {axes=['x'], axis=0, group=8, tiled=true} : f32[16,8] P()\n"
            "  %4 = dot_general(%2, %3) {lhs_contract=[1], rhs_contract=[0]} : f32[8,8] P('x')\n"
            "}\n");
}

TEST(PartitionGolden, ShardedVectorIsGatheredBeforeItIsBroadcast) {
  // x[B_x, C] * broadcast(gamma[C_x]) (an FSDP LayerNorm scale): the [C] vector is gathered
  // and broadcast into x's batch split, not broadcast on C and then moved as a [B, C] block.
  std::string out = partition_text(
      "program @f mesh<'x': 8> (%0: f32[64,16] P('x'), %1: f32[16] P('x')) -> (%3) {\n"
      "  %2 = broadcast_in_dim(%1) {dims=[1], shape=[64,16]} : f32[64,16]\n"
      "  %3 = mul(%0, %2) : f32[64,16]\n"
      "}\n");
  EXPECT_EQ(out,
            "program @f mesh<'x': 8> (%0: f32[8,16] P('x'), %1: f32[2] P('x')) -> (%4) {\n"
            "  %2 = all_gather(%1) {axes=['x'], axis=0, group=8, tiled=true} : f32[16] P()\n"
            "  %3 = broadcast_in_dim(%2) {dims=[1], shape=[8,16]} : f32[8,16] P('x')\n"
            "  %4 = mul(%0, %3) : f32[8,16] P('x')\n"
            "}\n");
}

TEST(PartitionGolden, WeightBiggerThanActivationIsStillGatheredWhenPartialSumsCostMore) {
  // tanh(x)[B_x, C] @ W[C_x, F] with W (8 KB) bigger than x (4 KB): keeping W in place would
  // leave the [B, F] product (32 KB) unreduced; gathering W moves 7 KB instead of 28 KB.
  std::string out = partition_text(
      "program @f mesh<'x': 8> (%0: f32[64,16] P('x'), %1: f32[16,128] P('x')) -> (%4) {\n"
      "  %2 = tanh(%0) : f32[64,16]\n"
      "  %3 = dot_general(%2, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[64,128]\n"
      "  %4 = tanh(%3) : f32[64,128]\n"
      "}\n");
  EXPECT_EQ(out,
            "program @f mesh<'x': 8> (%0: f32[8,16] P('x'), %1: f32[2,128] P('x')) -> (%5) {\n"
            "  %2 = tanh(%0) : f32[8,16] P('x')\n"
            "  %3 = all_gather(%1) {axes=['x'], axis=0, group=8, tiled=true} : f32[16,128] P()\n"
            "  %4 = dot_general(%2, %3) {lhs_contract=[1], rhs_contract=[0]} : f32[8,128] P('x')\n"
            "  %5 = tanh(%4) : f32[8,128] P('x')\n"
            "}\n");
}

TEST(PartitionGolden, ContractionSplitWeightStaysWhenMovingTheActivationIsCheaper) {
  // tanh(f)[B_x, F] @ W[F_x, C] -> [B_x, C]: gathering W moves 28 KB; moving f's split onto F
  // (all_to_all, 3.5 KB) and reduce-scattering the [B, C] partial sums (14 KB) moves less.
  std::string out = partition_text(
      "program @f mesh<'x': 8> (%0: f32[64,128] P('x'), %1: f32[128,64] P('x')) -> (%3) {\n"
      "  %2 = tanh(%0) : f32[64,128]\n"
      "  %3 = dot_general(%2, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[64,64]\n"
      "}\n",
      {P("x")});
  EXPECT_EQ(out,
            "program @f mesh<'x': 8> (%0: f32[8,128] P('x'), %1: f32[16,64] P('x')) -> (%5) {\n"
            "  %2 = tanh(%0) : f32[8,128] P('x')\n"
            "  %3 = all_to_all(%2) {axes=['x'], concat_axis=0, group=8, split_axis=1, tiled=true} : f32[64,16] P(None, 'x')\n"
            "  %4 = dot_general(%3, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[64,64] P() unreduced('x')\n"
            "  %5 = reduce_scatter(%4) {axes=['x'], axis=0, group=8, tiled=true} : f32[8,64] P('x')\n"
            "}\n");
}

// A loop body is partitioned once: the Megatron MLP inside a fori_loop keeps its single
// all_reduce in the per-device body (run every iteration), and the carry keeps its sharding.
TEST(PartitionGolden, MegatronMlpInALoopBodyHasOneAllReducePerIteration) {
  std::string out = partition_text(
      "program @loop mesh<'x': 4, 'y': 2> (%0: f32[16,8] P('x'), %1: f32[8,32] P(None, 'y'), %2: f32[32,8] P('y')) -> (%3) {\n"
      "  %3 = fori_loop(%0, %1, %2) {lower=0, num_carry=1, upper=3} : f32[16,8] region {\n"
      "    program @body (%0: i32[], %1: f32[16,8], %2: f32[8,32], %3: f32[32,8]) -> (%6) {\n"
      "      %4 = dot_general(%1, %2) {lhs_contract=[1], rhs_contract=[0]} : f32[16,32]\n"
      "      %5 = tanh(%4) : f32[16,32]\n"
      "      %6 = dot_general(%5, %3) {lhs_contract=[1], rhs_contract=[0]} : f32[16,8]\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_EQ(out,
            "program @loop mesh<'x': 4, 'y': 2> (%0: f32[4,8] P('x'), %1: f32[8,16] P(None, 'y'), %2: f32[16,8] P('y')) -> (%3) {\n"
            "  %3 = fori_loop(%0, %1, %2) {lower=0, num_carry=1, upper=3} : f32[4,8] P('x') region {\n"
            "    program @body mesh<'x': 4, 'y': 2> (%0: i32[] P(), %1: f32[4,8] P('x'), %2: f32[8,16] P(None, 'y'), %3: f32[16,8] P('y')) -> (%7) {\n"
            "      %4 = dot_general(%1, %2) {lhs_contract=[1], rhs_contract=[0]} : f32[4,16] P('x', 'y')\n"
            "      %5 = tanh(%4) : f32[4,16] P('x', 'y')\n"
            "      %6 = dot_general(%5, %3) {lhs_contract=[1], rhs_contract=[0]} : f32[4,8] P('x') unreduced('y')\n"
            "      %7 = all_reduce(%6) {axes=['y'], group=2, kind=\"sum\"} : f32[4,8] P('x')\n"
            "    }\n"
            "  }\n"
            "}\n");
  EXPECT_EQ(count_op(out, "all_reduce"), 1);
}

namespace {
// rev over both dimensions of an f32[rows,8] value split P('x', 'y'), partitioned.
std::string rev_partitioned(int rows) {
  const std::string type = "f32[" + std::to_string(rows) + ",8]";
  return partition_text("program @f mesh<'x': 4, 'y': 2> (%0: " + type +
                        " P('x', 'y')) -> (%1) {\n  %1 = rev(%0) {axes=[0, 1]} : " + type +
                        "\n}\n");
}
}  // namespace

// rev of an evenly split dimension reverses each block and swaps block r with block n-1-r
// (a ppermute per split dimension): no gather.
TEST(PartitionGolden, RevOfSplitDimensionsReversesBlocksAndSwapsThem) {
  const std::string out = rev_partitioned(16);
  EXPECT_EQ(out,
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[4,4] P('x', 'y')) -> (%3) {\n"
            "  %1 = rev(%0) {axes=[0,1]} : f32[4,4] P('x', 'y')\n"
            "  %2 = ppermute(%1) {axes=['x'], group=4, perm=[0,3,1,2,2,1,3,0]} : f32[4,4] P('x', 'y')\n"
            "  %3 = ppermute(%2) {axes=['y'], group=2, perm=[0,1,1,0]} : f32[4,4] P('x', 'y')\n"
            "}\n");
  EXPECT_EQ(count_op(out, "all_gather"), 0);
  EXPECT_EQ(count_op(out, "ppermute"), 2);
}

// An unevenly split dimension cannot swap equal blocks: it is gathered first.
TEST(PartitionGolden, RevOfAnUnevenSplitGathersThatDimension) {
  EXPECT_EQ(rev_partitioned(6),
            "program @f mesh<'x': 4, 'y': 2> (%0: f32[2,4] P('x', 'y')) -> (%6) {\n"
            "  %1 = all_gather(%0) {axes=['x'], axis=0, group=4, tiled=true} : f32[8,4] P(None, 'y')\n"
            "  %2 = slice(%1) {start=[0,0], stop=[6,4]} : f32[6,4] P(None, 'y')\n"
            "  %3 = rev(%2) {axes=[0,1]} : f32[6,4] P(None, 'y')\n"
            "  %4 = ppermute(%3) {axes=['y'], group=2, perm=[0,1,1,0]} : f32[6,4] P(None, 'y')\n"
            "  %5 = pad(%4) {high=[2,0], low=[0,0], value=0.0} : f32[8,4] P(None, 'y')\n"
            "  %6 = axis_slice(%5) {axes=['x'], axis=0, group=4} : f32[2,4] P('x', 'y')\n"
            "}\n");
}
