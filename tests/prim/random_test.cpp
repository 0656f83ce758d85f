// Random primitives (src/prim/random.cpp): threefry2x32 against its published known-answer
// vectors, random_bits / random_uniform / random_fold_in against an independent numpy
// implementation, and bad input.
#include "prim/golden.h"
#include "prim/random_core.h"
#include "test_util.h"
#include "trace/trace.h"

namespace partix {
namespace {

golden::OpTable random_ops() { return {}; }  // every random case binds its primitive directly

const int kRegistered = golden::register_family("random", random_ops);

PARTIX_GOLDEN_SUITE(RandomGolden, "random");

// Random123's kat_vectors for threefry2x32_20: key, counter -> output.
TEST(Threefry, KnownAnswerVectors) {
  struct Kat {
    uint32_t k0, k1, c0, c1, x0, x1;
  };
  const Kat kats[] = {
      {0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x6b200159u, 0x99ba4efeu},
      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x1cb996fcu, 0xbb002be7u},
      {0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u, 0xc4923a9cu, 0x483df7a0u},
  };
  for (const Kat& k : kats) {
    auto [x0, x1] = prim::threefry2x32(k.k0, k.k1, k.c0, k.c1);
    EXPECT_EQ(x0, k.x0);
    EXPECT_EQ(x1, k.x1);
  }
}

TEST(RandomErrors, KeysShapesDtypes) {
  Array key = from_vector<int32_t>({0, 42}, {2});
  EXPECT_PARTIX_ERROR(detail::bind1("random_bits", {zeros({2})}, {{"shape", ir::Ints{2}}}),
                      "[random_bits]", "i32[2]", "f32[2]");
  EXPECT_PARTIX_ERROR(detail::bind1("random_bits", {from_vector<int32_t>({1, 2, 3}, {3})},
                                    {{"shape", ir::Ints{2}}}),
                      "[random_bits]", "i32[3]");
  EXPECT_PARTIX_ERROR(detail::bind1("random_bits", {key}, {{"shape", ir::Ints{2, -1}}}),
                      "[random_bits]", "[2,-1]");
  EXPECT_PARTIX_ERROR(
      detail::bind1("random_uniform", {key}, {{"shape", ir::Ints{2}}, {"dtype", DType::I32}}),
      "[random_uniform]", "floating", "i32");
  EXPECT_PARTIX_ERROR(detail::bind1("random_fold_in", {key, zeros({})}), "[random_fold_in]",
                      "integer scalar", "f32[]");
}

}  // namespace
}  // namespace partix
