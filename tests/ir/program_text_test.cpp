// Program text: printing, parsing (exact round trip) and golden text of traced functions.
#include "ir/program.h"
#include "test_util.h"

using namespace partix;

namespace {

void expect_round_trip(const std::string& text) {
  ir::Program p = ir::parse_program(text);
  EXPECT_EQ(ir::to_text(p), text);
}

}  // namespace

TEST(ProgramText, GoldenTraceOfAnMlpLayer) {
  auto f = jit([](const Array& x, const Array& y) { return tanh(matmul(x, y)) + 1.0; },
               {.name = "mlp"});
  EXPECT_EQ(f.lower(zeros({4, 8}), zeros({8, 2})).global_text(),
            "program @mlp mesh<> (%0: f32[4,8] P(), %1: f32[8,2] P()) -> (%5) {\n"
            "  %2 = dot_general(%0, %1) {lhs_contract=[1], rhs_contract=[0]} : f32[4,2] P()\n"
            "  %3 = tanh(%2) : f32[4,2] P()\n"
            "  %4 = constant() {value=<f32[]: 1>} : f32[] P()\n"
            "  %5 = add(%3, %4) : f32[4,2] P()\n"
            "}\n");
}

TEST(ProgramText, GoldenTraceOfSoftmaxAndCapturedConstant) {
  Array bias = from_vector<float>({1, 2, 3, 4, 5}, {5});
  auto f = jit([&](const Array& x) { return sum(softmax(x), {0}) + bias; }, {.name = "sm"});
  std::string text = f.lower(ones({3, 5})).global_text();
  EXPECT_EQ(text,
            "program @sm mesh<> (%0: f32[3,5] P(), %12: f32[5] P()) -> (%13) {\n"
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
            "  %11 = reduce_sum(%10) {axes=[0]} : f32[5] P()\n"
            "  %13 = add(%11, %12) : f32[5] P()\n"
            "}\n");
  // The captured array became a parameter of the program and its value is used.
  auto v = f(ones({3, 5})).to_vector<float>();
  EXPECT_NEAR(v[0], 0.6f + 1.0f, 1e-5);
  EXPECT_NEAR(v[4], 0.6f + 5.0f, 1e-5);
}

TEST(ProgramText, TracedProgramsRoundTrip) {
  auto f = jit([](const Array& x, const Array& i) {
    Array y = take(x, i, 0);
    Array z = concatenate({y, pad(y, {0, 1}, {0, 0}, -1.5)}, 1);
    auto [v, idx] = top_k(z, 2);
    return astype(v, DType::BF16) * 0.25 + astype(idx, DType::BF16);
  });
  std::string text = f.lower(ones({6, 3}), from_vector<int32_t>({1, 5}, {2})).global_text();
  expect_round_trip(text);
}

TEST(ProgramText, HandWrittenProgramsRoundTrip) {
  expect_round_trip(
      "program @f mesh<'x': 4, 'y': 2> (%0: f32[8,16] P('x', 'y'), %1: i32[] P()) -> (%3, %4) {\n"
      "  %2 = exp(%0) : f32[8,16] P('x', 'y')\n"
      "  %3 = reduce_sum(%2) {axes=[1]} : f32[8] P('x') unreduced('y')\n"
      "  %4 = constant() {value=<i64[3]: -9223372036854775807, 0, 7>} : i64[3]\n"
      "}\n");
  expect_round_trip(
      "program @g (%0: f64[2]) -> (%2) {\n"
      "  %1 = constant() {value=<f64[2]: 0.1, nan>} : f64[2]\n"
      "  %2 = add(%0, %1) : f64[2]  # block0/attn\n"
      "}\n");
  expect_round_trip(
      "program @h mesh<'a': 2; devices=[3,1]> (%0: f32[4] P('a')) -> (%1) {\n"
      "  %1 = sharding_constraint(%0) {mesh=mesh<'a': 2; devices=[3,1]>, spec=P('a')} : f32[4] P()\n"
      "}\n");
}

TEST(ProgramText, ParseErrorsNameLineAndColumn) {
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f (%0: f32[2]) -> (%1) {\n  %1 = nope(%0) : f32[2]\n}\n"),
                      "[parse_program]", "line 2", "unknown primitive 'nope'");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f (%0: q32[2]) -> (%0) {\n}\n"),
                      "[parse_program]", "line 1", "unknown dtype 'q32'");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f (%0: f32[2]) -> (%0) {"), "[parse_program]",
                      "expected");
  // Shapes that do not match the primitive's inference are rejected by the verifier.
  EXPECT_THROW(ir::parse_program("program @f (%0: f32[2]) -> (%1) {\n  %1 = exp(%0) : f32[3]\n}\n"),
               Error);
}

// Inputs found by fuzzing the parser (fuzz/program_text.cpp): each once escaped as another
// exception type or crashed.
TEST(ProgramText, AxisNamesHoldNoControlCharactersQuotesOrBackslashes) {
  // A varying axis holding NUL bytes once parsed, then printed to text that parsed differently
  // (fuzz/corpus/program_text/regression-axis-name-with-nul).
  const std::string nul = std::string("program @f mesh<'x': 2> (%0: f32[2] vary('x") + '\0' +
                          "')) -> (%0) {\n}\n";
  EXPECT_PARTIX_ERROR(ir::parse_program(nul), "[parse_program]", "line 1",
                      "may not hold control characters", "0x00");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f mesh<'x\\'y': 2> () -> () {\n}\n"),
                      "[parse_program]", "0x27");
  // Sub-axis names keep their punctuation.
  EXPECT_NO_THROW(ir::parse_program(
      "program @f mesh<'x': 4> (%0: f32[4] P('x:(2)2')) -> (%0) {\n}\n"));
}

TEST(ProgramText, IntegerLiteralElementsMustBeIntegersOfTheirDtype) {
  // "-" alone once reached std::stoll and escaped as std::invalid_argument.
  EXPECT_PARTIX_ERROR(
      ir::parse_program("program @f () -> (%0) {\n  %0 = constant() {value=<i64[1]: ->} : i64[1]\n}\n"),
      "[parse_program]", "line 2", "'-' is not an i64 value");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f () -> (%0) {\n  %0 = constant() "
                                        "{value=<i64[1]: 99999999999999999999>} : i64[1]\n}\n"),
                      "[parse_program]", "is not an i64 value");
  // An i32 element once went through double, where 1e30 does not fit (undefined behaviour).
  EXPECT_PARTIX_ERROR(
      ir::parse_program("program @f () -> (%0) {\n  %0 = constant() {value=<i32[1]: 1e30>} : i32[1]\n}\n"),
      "[parse_program]", "'1e30' is not an i32 value");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f () -> (%0) {\n  %0 = constant() "
                                        "{value=<i32[1]: 2147483648>} : i32[1]\n}\n"),
                      "is not an i32 value");
  ir::Program p = ir::parse_program(
      "program @f () -> (%0) {\n  %0 = constant() {value=<i32[2]: -2147483648, 7>} : i32[2]\n}\n");
  EXPECT_EQ(ir::to_text(p),
            "program @f () -> (%0) {\n  %0 = constant() {value=<i32[2]: -2147483648, 7>} : i32[2]\n}\n");
}

TEST(ProgramText, RegionsAreVerifiedBeforeTheirInstruction) {
  // The shard_map's inference once read the body's undefined result %7 out of bounds.
  EXPECT_PARTIX_ERROR(
      ir::parse_program(
          "program @f mesh<'x': 2> (%0: f32[4] P('x')) -> (%1) {\n"
          "  %1 = shard_map(%0) {in_specs=[P('x')], mesh=mesh<'x': 2>, out_specs=[P('x')]} : "
          "f32[4] P('x') region {\n"
          "    program @body (%0: f32[2] vary('x')) -> (%7) {\n"
          "    }\n"
          "  }\n"
          "}\n"),
      "[verify]", "result %7 of @body is not defined");
}

TEST(ProgramText, HostileSizesAndNestingAreRefused) {
  // A value id sizes the program's value table; a literal's shape sizes its bytes.
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f (%99999999: f32[]) -> (%99999999) {\n}\n"),
                      "[parse_program]", "bad value id %99999999");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f () -> (%0) {\n  %0 = constant() "
                                        "{value=<f32[1000000,1000000]: 1>} : f32[1000000,1000000]\n}\n"),
                      "[parse_program]", "literal f32[1000000,1000000] has more elements than the text holds");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f () -> (%0) {\n  %0 = constant() "
                                        "{value=<f32[4611686018427387904,4]: 1>} : f32[1]\n}\n"),
                      "[parse_program]", "overflows");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @h mesh<'a': 1; devices=[4294967296]> () -> () {\n}\n"),
                      "[parse_program]", "bad device id 4294967296");
  // Regions nest programs recursively: the depth is bounded, not the stack.
  std::string text;
  constexpr int kLevels = 100;
  for (int i = 0; i < kLevels; ++i) {
    text += "program @f (%0: f32[]) -> (%1) {\n  %1 = remat(%0) : f32[] region {\n";
  }
  text += "program @g (%0: f32[]) -> (%0) {\n}\n";
  for (int i = 0; i < kLevels; ++i) text += "  }\n}\n";
  EXPECT_PARTIX_ERROR(ir::parse_program(text), "[parse_program]", "regions nest deeper than 64");
}
