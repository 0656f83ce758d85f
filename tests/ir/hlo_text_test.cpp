// HLO text (Lowered::hlo_text, ir/hlo.cpp): golden text of a traced function with a captured
// constant, a reducer and a broadcast scalar; shardings as tile assignments; refusals by name.
// XLA itself reads and runs such texts in tools/golden/hlo_export.py.
#include "ir/hlo.h"
#include "test_util.h"

using namespace partix;

TEST(HloText, GoldenTextOfACapturedConstantAndAReduction) {
  Array bias = from_vector<float>({1, 2, 3}, {3});
  auto f = jit([&](const Array& x) { return sum(x * 2.0, {0}) + bias; }, {.name = "f"});
  EXPECT_EQ(f.lower(ones({4, 3})).hlo_text(),
            "HloModule jit_f, entry_computation_layout={(f32[4,3]{1,0})->f32[3]{0}}\n"
            "\n"
            "region.7 {\n"
            "  Arg_0.8 = f32[] parameter(0)\n"
            "  Arg_1.9 = f32[] parameter(1)\n"
            "  ROOT add.10 = f32[] add(Arg_0.8, Arg_1.9)\n"
            "}\n"
            "\n"
            "ENTRY main.13 {\n"
            "  Arg_0.2 = f32[4,3]{1,0} parameter(0)\n"
            "  constant.1 = f32[3]{0} constant({1, 2, 3})\n"
            "  constant.3 = f32[] constant(2)\n"
            "  broadcast.4 = f32[4,3]{1,0} broadcast(constant.3), dimensions={}\n"
            "  multiply.5 = f32[4,3]{1,0} multiply(Arg_0.2, broadcast.4)\n"
            "  constant.6 = f32[] constant(0)\n"
            "  reduce.11 = f32[3]{0} reduce(multiply.5, constant.6), dimensions={0}, "
            "to_apply=region.7\n"
            "  ROOT add.12 = f32[3]{0} add(reduce.11, constant.1)\n"
            "}\n");
}

TEST(HloText, ShardingsAreTileAssignmentsOverTheMeshDevices) {
  Mesh mesh = make_mesh({4, 2}, {"a", "b"});
  EXPECT_EQ(ir::hlo_sharding(NamedSharding(mesh, P("a", "b")), "t"),
            "{devices=[4,2]0,1,2,3,4,5,6,7}");
  EXPECT_EQ(ir::hlo_sharding(NamedSharding(mesh, P("b", "a")), "t"),
            "{devices=[2,4]0,2,4,6,1,3,5,7}");
  EXPECT_EQ(ir::hlo_sharding(NamedSharding(mesh, P(None, "b")), "t"),
            "{devices=[1,2,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}");
  EXPECT_EQ(ir::hlo_sharding(NamedSharding(mesh, P(Axes{"a", "b"})), "t"),
            "{devices=[8]0,1,2,3,4,5,6,7}");
  EXPECT_EQ(ir::hlo_sharding(NamedSharding(mesh, P()), "t"), "{replicated}");
}

TEST(HloText, OpsWithoutAnHloFormAreRefusedByName) {
  auto f = jit([](const Array& x) { return cumsum(x, 0); }, {.name = "c"});
  EXPECT_PARTIX_ERROR((void)f.lower(ones({3})).hlo_text(), "compiler_ir(dialect='hlo')",
                      "'cumsum'");
}
