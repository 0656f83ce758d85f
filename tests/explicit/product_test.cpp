// Explicit sharding across the product: lowered text shows the typed values, checkpoints of
// typed arrays restore onto another (finer) explicit mesh with their types, errors cite the named
// scope in C++ programs, mixed Auto/Explicit meshes type only the Explicit axes, and eager ops
// place their results as their types say.
#include <filesystem>

#include "explicit_util.h"
#include "ir/program.h"
#include "partix/checkpoint.h"

using namespace partix;
using explicit_test::iota_f32;
using explicit_test::ty;

namespace {
const AxisType kE = AxisType::Explicit;
const AxisType kA = AxisType::Auto;

}  // namespace

TEST(ExplicitProduct, LoweredTextMarksTypedValues) {
  Mesh m = make_mesh({2, 4}, {"X", "Y"}, {kE, kE});
  Array x = reshard(iota_f32({8, 4}), NamedSharding(m, P("X", "Y")));
  auto f = jit([](const Array& a) { return sum(exp(a), {1}); });
  const std::string g = f.lower(x).global_text();
  // exp keeps the type; the sum over the Y-split dimension is typed replicated over Y.
  EXPECT_NE(g.find("= exp(%0) : f32[8,4] P('X', 'Y') typed"), std::string::npos) << g;
  EXPECT_NE(g.find("= reduce_sum(%1) {axes=[1]} : f32[8] P('X') typed"), std::string::npos) << g;
  // The mark round-trips through the program text's parser.
  const std::string text =
      "program @f mesh<'X': 2> (%0: f32[8] P('X') typed) -> (%1) {\n"
      "  %1 = exp(%0) : f32[8] P('X') typed\n"
      "}\n";
  ir::Program p = ir::parse_program(text);
  EXPECT_TRUE(p.info(1).typed);
  EXPECT_EQ(ir::to_text(p), text);
}

TEST(ExplicitProduct, CheckpointRestoresTypesOntoAFinerMesh) {
  const std::string dir = testing::TempDir() + "explicit_ckpt";
  std::filesystem::remove_all(dir);
  Mesh coarse = make_mesh({2, 4}, {"X", "Y"}, {kE, kE});
  Array x = reshard(iota_f32({8, 12}), NamedSharding(coarse, P("X", None)));
  ckpt::save(dir, 1, std::map<std::string, Array>{{"x", x}});
  ckpt::wait();
  Mesh fine = make_mesh({8}, {"Z"}, {kE});
  std::map<std::string, Array> target{
      {"x", ShapeDtypeStruct{{8, 12}, DType::F32, NamedSharding(fine, P("Z", None))}}};
  auto back = ckpt::restore(dir, 1, target);
  EXPECT_EQ(ty(back.at("x")), "float32[8@Z,12]");
  EXPECT_EQ(back.at("x").to_vector<float>(), iota_f32({8, 12}).to_vector<float>());
  // And the restored array computes under the rules of its new mesh.
  EXPECT_EQ(ty(back.at("x") * 2.0), "float32[8@Z,12]");
  std::filesystem::remove_all(dir);
}

TEST(ExplicitProduct, ErrorsCiteTheNamedScope) {
  Mesh m = make_mesh({2, 4}, {"X", "Y"}, {kE, kE});
  Array a = reshard(iota_f32({4, 4}), NamedSharding(m, P("X", None)));
  Array b = reshard(iota_f32({4, 4}), NamedSharding(m, P(None, "X")));
  auto f = jit([](const Array& p, const Array& q) {
    NamedScope s("block3");
    NamedScope t("mlp");
    return p * q;
  });
  EXPECT_PARTIX_ERROR((void)f(a, b), "[mul]", "float32[4@X,4]", "float32[4,4@X]",
                      "scope 'block3/mlp'");
}

TEST(ExplicitProduct, MixedMeshTypesOnlyExplicitAxes) {
  // X Explicit, Y Auto: the type mentions X only; the partitioner may still split over Y.
  Mesh m = make_mesh({2, 4}, {"X", "Y"}, {kE, kA});
  Array x = device_put(iota_f32({8, 16}), NamedSharding(m, P("X", "Y")));
  EXPECT_EQ(ty(x), "float32[8@X,16]");
  Array w = device_put(iota_f32({16, 4}), NamedSharding(m, P("Y", None)));
  // Split over Y in both operands, but Y is Auto: no ambiguity in the types.
  std::string seen;
  auto f = jit([&](const Array& a, const Array& b) {
    Array r = matmul(a, b);
    seen = ty(r);
    return r;
  });
  Array r = f(x, w);
  EXPECT_EQ(seen, "float32[8@X,4]");
  EXPECT_EQ(r.sharding().spec()[0], PartitionSpec::Entry{"X"});
  auto want = matmul(iota_f32({8, 16}), iota_f32({16, 4})).to_vector<float>();
  auto got = r.to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3);
}

TEST(ExplicitProduct, EagerResultsArePlacedAsTyped) {
  Mesh m = make_mesh({2, 4}, {"X", "Y"}, {kE, kE});
  Array x = reshard(iota_f32({8, 4}), NamedSharding(m, P("X", "Y")));
  Array s = sum(x, {0});
  EXPECT_EQ(s.sharding().spec(), P("Y"));
  EXPECT_TRUE(s.sharding().mesh() == m);
  Array t = transpose(x);
  EXPECT_EQ(ty(t), "float32[4@Y,8@X]");
  EXPECT_EQ(t.sharding().spec(), P("Y", "X"));
  // Uncommitted host arrays are untyped and take part as replicated.
  Array y = x + iota_f32({8, 4});
  EXPECT_EQ(ty(y), "float32[8@X,4@Y]");
}

TEST(ExplicitProduct, ResultsArePlacedAsTheirTypes) {
  // A broadcast typed replicated is laid out as its users inside the program, but a result is
  // what the user holds: its sharding is its type.
  Mesh m = make_mesh({2, 4}, {"X", "Y"}, {kE, kE});
  Array x = reshard(iota_f32({8, 4}), NamedSharding(m, P("X", None)));
  Array b = reshard(iota_f32({4}), NamedSharding(m, P()));
  auto f = jit([](const Array& a, const Array& bias) {
    Array wide = broadcast_to(bias, {8, 4});
    return std::vector<Array>{a + wide, wide};
  });
  auto outs = f(x, b);
  EXPECT_EQ(ty(outs[0]), "float32[8@X,4]");
  EXPECT_EQ(ty(outs[1]), "float32[8,4]");
  EXPECT_TRUE(outs[1].sharding().is_fully_replicated());
  EXPECT_EQ(outs[1].to_vector<float>(), broadcast_to(iota_f32({4}), {8, 4}).to_vector<float>());
}
