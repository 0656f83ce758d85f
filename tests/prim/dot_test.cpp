// dot_general (src/prim/dot.cpp) and the contractions built on it: matmul, dot_general,
// einsum; against numpy goldens, and bad input.
#include "prim/golden.h"
#include "test_util.h"
#include "trace/trace.h"

namespace partix {
namespace {

using golden::Json;
using In = std::vector<Array>;
using Out = std::vector<Array>;

golden::OpTable dot_ops() {
  return {
      {"matmul", {[](const In& x, const Json&) { return Out{matmul(x[0], x[1])}; }, ""}},
      {"dot_general",
       {[](const In& x, const Json& a) {
          using V = std::vector<int>;
          std::optional<DType> out;
          if (a.contains("out_dtype")) out = dtype_from_name(a.at("out_dtype").get<std::string>());
          return Out{dot_general(
              x[0], x[1], golden::attr<V>(a, "a_contract"), golden::attr<V>(a, "b_contract"),
              golden::attr_or<V>(a, "a_batch", {}), golden::attr_or<V>(a, "b_batch", {}), out)};
        },
        ""}},
      {"einsum",
       {[](const In& x, const Json& a) {
          return Out{einsum(golden::attr<std::string>(a, "spec"), x)};
        },
        ""}},
  };
}

const int kRegistered = golden::register_family("dot", dot_ops);

PARTIX_GOLDEN_SUITE(DotGolden, "dot");

Array f32(Shape s) { return zeros(std::move(s)); }

TEST(DotErrors, MatmulNamesShapes) {
  EXPECT_PARTIX_ERROR(matmul(f32({2, 3}), f32({4, 2})), "[matmul]", "contracting", "[2,3]",
                      "[4,2]");
  EXPECT_PARTIX_ERROR(matmul(f32({3}), f32({4})), "[matmul]", "[3]", "[4]");
  EXPECT_PARTIX_ERROR(matmul(zeros({}), f32({2, 3})), "[matmul]", "rank >= 1", "[2,3]");
  EXPECT_PARTIX_ERROR(matmul(f32({2, 3, 4}), f32({3, 4, 5})), "[matmul]", "broadcast", "[2]",
                      "[3]");
}

TEST(DotErrors, DotGeneralChecksDimensions) {
  Array a = f32({2, 3}), b = f32({3, 4});
  EXPECT_PARTIX_ERROR(dot_general(a, f32({4, 2}), {1}, {0}), "[dot_general]", "contracting sizes",
                      "f32[2,3]", "f32[4,2]");
  EXPECT_PARTIX_ERROR(dot_general(a, b, {5}, {0}), "[dot_general]", "dimension 5", "out of range",
                      "f32[2,3]");
  EXPECT_PARTIX_ERROR(dot_general(a, b, {-1}, {0}), "[dot_general]", "dimension -1", "f32[2,3]");
  EXPECT_PARTIX_ERROR(dot_general(a, b, {1}, {}), "[dot_general]", "1 lhs but 0 rhs");
  EXPECT_PARTIX_ERROR(dot_general(a, b, {1, 1}, {0, 0}), "[dot_general]", "repeat");
  EXPECT_PARTIX_ERROR(dot_general(f32({2, 3, 4}), f32({5, 4, 3}), {1}, {2}, {0}, {0}),
                      "[dot_general]", "batch sizes differ", "f32[2,3,4]", "f32[5,4,3]");
  EXPECT_PARTIX_ERROR(dot_general(f32({2, 3}), f32({2, 3}), {1}, {1}, {1}, {0}), "[dot_general]",
                      "both batch and contracting");
  Array p = from_vector<bool>({true, false}, {2});
  EXPECT_PARTIX_ERROR(dot_general(p, p, {0}, {0}), "[dot_general]", "numeric", "bool[2]");
  // Mixed dtypes: only an f32 lhs against a 16-bit float weight (widened in the kernel).
  const ir::Attrs k10{{"lhs_contract", ir::Ints{1}}, {"rhs_contract", ir::Ints{0}}};
  EXPECT_PARTIX_ERROR(detail::bind1("dot_general", {zeros({2, 3}, DType::BF16), zeros({3, 4})}, k10),
                      "[dot_general]", "dtypes differ", "bf16[2,3]", "f32[3,4]");
  EXPECT_PARTIX_ERROR(detail::bind1("dot_general", {a, zeros({3, 4}, DType::I32)}, k10),
                      "[dot_general]", "dtypes differ", "f32[2,3]", "i32[3,4]");
  EXPECT_EQ(detail::bind1("dot_general", {a, zeros({3, 4}, DType::BF16)}, k10).dtype(), DType::F32);
}

TEST(DotErrors, InvalidEinsumSpecs) {
  Array a = f32({2, 3}), b = f32({3, 4});
  EXPECT_PARTIX_ERROR(einsum("ij,jk->ik", {a}), "[einsum]", "'ij,jk->ik'", "2 operands", "1");
  EXPECT_PARTIX_ERROR(einsum("ijk,jk->ik", {a, b}), "[einsum]", "'ijk'", "[2,3]");
  EXPECT_PARTIX_ERROR(einsum("ii->i", {f32({3, 3})}), "[einsum]", "'i' repeats", "'ii->i'");
  EXPECT_PARTIX_ERROR(einsum("ij,jk->iz", {a, b}), "[einsum]", "'z'", "not in any operand");
  EXPECT_PARTIX_ERROR(einsum("ij,jk->ii", {a, b}), "[einsum]", "'i' repeats", "'ij,jk->ii'");
  EXPECT_PARTIX_ERROR(einsum("i1,1k", {a, b}), "[einsum]", "invalid label '1'");
  EXPECT_PARTIX_ERROR(einsum("...j,jk", {a, b}), "[einsum]", "ellipsis");
  EXPECT_PARTIX_ERROR(einsum("i-", {a}), "[einsum]", "invalid label '-'");
  EXPECT_PARTIX_ERROR(einsum("ij->j->i", {a}), "[einsum]", "'ij->j->i'");
  EXPECT_PARTIX_ERROR(einsum("ij,jk->ik", {a, f32({4, 5})}), "[einsum]", "label 'j'", "3", "4",
                      "[2,3]", "[4,5]");
}

}  // namespace
}  // namespace partix
