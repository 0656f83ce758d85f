// Structural primitives (src/prim/control.cpp): constant, stop_gradient, copy,
// sharding_constraint; and the check that every primitive has golden tests.
#include <set>

#include "prim/golden.h"
#include "test_util.h"
#include "trace/trace.h"

namespace partix {
namespace {

// Checked by hand below rather than against numpy.
const std::set<std::string> kStructural = {"constant", "stop_gradient", "copy",
                                           "sharding_constraint", "checkpoint_name"};
// Primitives that depend on a device's mesh position, carry a region or exist only in
// partitioned programs: checked by the collective, resharding, partitioner and autodiff tests
// instead (storage_view by tests/spmd/quantized_reshard_test.cpp, the custom derivatives by
// tests/autodiff/custom_derivatives_test.cpp, the host callbacks by
// tests/prim/callback_test.cpp).
const std::set<std::string> kPerDevice = {"axis_index", "axis_slice", "pad_mask", "pvary",
                                          "unreduce", "shard_map", "remat", "scan", "fori_loop",
                                          "while_loop", "cond", "storage_view",
                                          "custom_vjp_call", "custom_jvp_call", "pure_callback",
                                          "effect_callback"};

TEST(Control, IdentitiesCopyValuesAndDtypes) {
  Array x = from_vector<int64_t>({1, -2, int64_t{1} << 60}, {3});
  for (const char* p : {"stop_gradient", "copy", "checkpoint_name"}) {
    for (auto mode : {runtime::KernelMode::kReference, runtime::KernelMode::kFast}) {
      golden::KernelModeScope scope(mode);
      Array y = detail::bind1(p, {x});
      EXPECT_EQ(y.dtype(), DType::I64) << p;
      EXPECT_EQ(y.to_vector<int64_t>(), x.to_vector<int64_t>()) << p;
    }
  }
  EXPECT_EQ(stop_gradient(x).to_vector<int64_t>(), x.to_vector<int64_t>());
}

TEST(Control, ConstantHoldsItsLiteral) {
  for (DType dt :
       {DType::Bool, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64}) {
    Array c = detail::literal(1.0, dt);  // a host array outside a trace
    EXPECT_EQ(c.dtype(), dt);
    EXPECT_EQ(c.shape(), Shape{});
    EXPECT_EQ(astype(c, DType::F64).item<double>(), 1.0) << dtype_name(dt);
  }
  // Inside a trace the literal is a `constant` instruction; running it gives its value.
  auto f = jit([](const Array& x) { return x + detail::literal(2.5, DType::F32); });
  Array y = f(from_vector<float>({1, 2}, {2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3.5f, 4.5f}));
  EXPECT_NE(f.lower(from_vector<float>({1, 2}, {2})).as_text().find("constant"), std::string::npos);
}

TEST(Control, ShardingConstraintKeepsValues) {
  Mesh mesh = make_mesh({4, 2}, {"x", "y"});
  Array x = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  auto f = jit([&](const Array& a) {
    return with_sharding_constraint(a * 2.0, NamedSharding(mesh, P("x", "y")));
  });
  Array y = f(x);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16}));
  EXPECT_EQ(y.sharding(), NamedSharding(mesh, P("x", "y")));
  // The global program records the constraint; the per-device program realises it.
  EXPECT_NE(f.lower(x).global_text().find("sharding_constraint"), std::string::npos);
  EXPECT_NE(f.lower(x).as_text().find("f32[1,1] P('x', 'y')"), std::string::npos);
  // A spec longer than the value's rank is refused, naming the shape.
  EXPECT_PARTIX_ERROR(jit([&](const Array& a) {
                        return with_sharding_constraint(a, NamedSharding(mesh, P("x", "y")));
                      })(zeros({4})),
                      "[4]");
}

// Every primitive's reference kernel is checked against numpy by at least one golden case
// (collectives are checked by the shard_map tests).
TEST(PrimitiveCoverage, EveryPrimitiveHasGoldenCases) {
  const golden::Json& file = golden::golden_file();
  ASSERT_TRUE(file.contains("cases")) << "golden file not loaded";
  std::set<std::string> covered;
  for (const golden::Json& c : file.at("cases")) {
    for (const std::string& p : golden::primitives_checked(c)) covered.insert(p);
  }
  for (const std::string& name : prim::primitive_names()) {
    if (kStructural.count(name) || kPerDevice.count(name) ||
        prim::get_primitive(name).is_collective()) {
      continue;
    }
    EXPECT_TRUE(covered.count(name))
        << "primitive '" << name << "' has no golden case in tools/golden/primitives.py";
  }
}

}  // namespace
}  // namespace partix
