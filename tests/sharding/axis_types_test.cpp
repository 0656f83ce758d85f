// Mesh axis types, array types (type_of) and reshard. Expected strings follow JAX's notation:
// the type format of jax/_src/core.py (_get_shape_sharding_str: `8@X`, `8@(X,Y)`; the
// unreduced annotation `{U:X}`), ShapedArray strings such as `float32[4,8@dp,16]{U:tp}` shown
// for jax.typeof in explicit-sharding examples, and Mesh's str in jax/_src/mesh.py
// (`Mesh('x': 2, axis_types=(Explicit,))`).
#include <cstring>

#include "test_util.h"

using namespace partix;

namespace {
const AxisType kE = AxisType::Explicit;
const AxisType kA = AxisType::Auto;
const AxisType kM = AxisType::Manual;

Array iota_f32(Shape shape) {
  std::vector<float> v(static_cast<size_t>(shape_size(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return from_vector<float>(v, shape);
}
}  // namespace

TEST(AxisType, MeshTypesAndStrings) {
  Mesh plain = make_mesh({4, 2}, {"x", "y"});
  EXPECT_EQ(plain.axis_types(), (std::vector<AxisType>{kA, kA}));
  EXPECT_EQ(plain.to_string(), "Mesh('x': 4, 'y': 2)");  // all Auto: no types shown
  Mesh m = make_mesh({4, 2}, {"x", "y"}, {kE, kA});
  EXPECT_EQ(m.axis_types(), (std::vector<AxisType>{kE, kA}));
  EXPECT_EQ(m.axis_type("x"), kE);
  EXPECT_EQ(m.axis_type("y"), kA);
  EXPECT_EQ(m.to_string(), "Mesh('x': 4, 'y': 2, axis_types=(Explicit, Auto))");
  EXPECT_EQ(make_mesh({8}, {"x"}, {kE}).to_string(), "Mesh('x': 8, axis_types=(Explicit,))");
  // JAX's make_mesh takes any of the three types (Manual too).
  EXPECT_EQ(make_mesh({2, 4}, {"a", "b"}, {kM, kE}).to_string(),
            "Mesh('a': 2, 'b': 4, axis_types=(Manual, Explicit))");
  // Explicit devices and types together.
  Mesh d({2}, {"x"}, {Device{5}, Device{2}}, {kE});
  EXPECT_EQ(d.to_string(), "Mesh('x': 2, devices=[5,2], axis_types=(Explicit,))");
  EXPECT_EQ(make_abstract_mesh({16}, {"x"}).with_axis_types({kE}).to_string(),
            "AbstractMesh('x': 16, axis_types=(Explicit,))");
}

TEST(AxisType, EqualityAndKeysIncludeTypes) {
  Mesh a = make_mesh({4, 2}, {"x", "y"});
  Mesh e = make_mesh({4, 2}, {"x", "y"}, {kE, kE});
  EXPECT_TRUE(a == make_mesh({4, 2}, {"x", "y"}, {kA, kA}));
  EXPECT_FALSE(a == e);
  EXPECT_FALSE(e == make_mesh({4, 2}, {"x", "y"}, {kE, kA}));
  EXPECT_NE(a.to_string(), e.to_string());
  EXPECT_FALSE(NamedSharding(a, P("x")) == NamedSharding(e, P("x")));
  // A jit must not reuse a program traced for one mesh on arrays of the other: the types
  // decide what type_of reports while tracing.
  std::vector<std::string> seen;
  auto f = jit([&](const Array& v) {
    seen.push_back(type_of(v).to_string());
    return v * 2.0;
  });
  Array xa = device_put(iota_f32({8, 4}), NamedSharding(a, P("x")));
  Array xe = device_put(iota_f32({8, 4}), NamedSharding(e, P("x")));
  Array ya = f(xa);
  Array ye = f(xe);
  EXPECT_EQ(ya.to_vector<float>(), ye.to_vector<float>());
  EXPECT_EQ(seen, (std::vector<std::string>{"float32[8,4]", "float32[8@x,4]"}));
}

TEST(AxisType, MeshErrors) {
  EXPECT_PARTIX_ERROR(make_mesh({4, 2}, {"x", "y"}, {kE}), "[make_mesh]", "1 axis types",
                      "(Explicit,)", "2 axis names", "'x', 'y'");
  EXPECT_PARTIX_ERROR(make_mesh({8}, {"x"}, {kE, kA, kA}), "[make_mesh]", "3 axis types",
                      "(Explicit, Auto, Auto)");
  EXPECT_PARTIX_ERROR(Mesh({8}, {"x"}, {}, {}), "[Mesh]", "0 axis types", "1 axis names");
  EXPECT_PARTIX_ERROR(make_mesh({4, 2}, {"x", "y"}).with_axis_types({kA}), "[Mesh]",
                      "1 axis types");
  EXPECT_PARTIX_ERROR(make_mesh({8}, {"x"}, {kE}).axis_type("z"), "[Mesh.axis_type]", "'z'",
                      "Mesh('x': 8, axis_types=(Explicit,))");
}

TEST(AxisType, TypeStringsOfConcreteArrays) {
  Mesh e1 = make_mesh({8}, {"X"}, {kE});
  Mesh e2 = make_mesh({4, 2}, {"X", "Y"}, {kE, kE});
  Array x = iota_f32({8, 4});
  // Uncommitted, single-device: nothing sharded.
  EXPECT_EQ(type_of(x).to_string(), "float32[8,4]");
  EXPECT_EQ(type_of(device_put(x, NamedSharding(e1, P("X")))).to_string(), "float32[8@X,4]");
  EXPECT_EQ(type_of(device_put(x, NamedSharding(e1, P(None, "X")))).to_string(), "float32[8,4@X]");
  EXPECT_EQ(type_of(device_put(x, NamedSharding(e2, P("X", "Y")))).to_string(), "float32[8@X,4@Y]");
  // Several axes on one dimension, major to minor.
  EXPECT_EQ(type_of(device_put(x, NamedSharding(e2, P(Axes{"X", "Y"})))).to_string(),
            "float32[8@(X,Y),4]");
  EXPECT_EQ(type_of(device_put(x, NamedSharding(e2, P(Axes{"Y", "X"})))).to_string(),
            "float32[8@(Y,X),4]");
  // Replicated.
  EXPECT_EQ(type_of(device_put(x, NamedSharding(e2, P()))).to_string(), "float32[8,4]");
  // Auto axes are not part of the type, Explicit ones are.
  Mesh mixed = make_mesh({4, 2}, {"X", "Y"}, {kA, kE});
  Array m = device_put(x, NamedSharding(mixed, P("X", "Y")));
  EXPECT_EQ(type_of(m).to_string(), "float32[8,4@Y]");
  EXPECT_EQ(type_of(device_put(x, NamedSharding(mixed, P(Axes{"X", "Y"})))).to_string(),
            "float32[8@Y,4]");
  EXPECT_EQ(
      type_of(device_put(x, NamedSharding(make_mesh({4, 2}, {"X", "Y"}), P("X", "Y")))).to_string(),
      "float32[8,4]");
  // The accessors: the full sharding stays available, spec() is the Explicit part.
  ArrayType t = type_of(m);
  EXPECT_EQ(t.shape(), (Shape{8, 4}));
  EXPECT_EQ(t.dtype(), DType::F32);
  ASSERT_TRUE(t.sharding().has_value());
  EXPECT_EQ(t.sharding()->spec(), P("X", "Y"));
  EXPECT_EQ(t.spec(), P(None, "Y"));
  // JAX's dtype names.
  EXPECT_EQ(type_of(from_vector<int32_t>({1, 2}, {2})).to_string(), "int32[2]");
  EXPECT_EQ(type_of(astype(x, DType::BF16)).to_string(), "bfloat16[8,4]");
  EXPECT_EQ(type_of(scalar(1.0f)).to_string(), "float32[]");
  EXPECT_EQ(type_of(from_vector<bool>({true}, {1})).to_string(), "bool[1]");
  EXPECT_EQ(type_of(ShapeDtypeStruct{{16, 4}, DType::F32, NamedSharding(e1, P("X"))}).to_string(),
            "float32[16@X,4]");
}

TEST(AxisType, UnreducedAxesShowInMeshOrder) {
  Mesh e = make_mesh({4, 2}, {"X", "Y"}, {kE, kE});
  EXPECT_EQ(ArrayType({8, 4}, DType::F32, NamedSharding(e, P("X"), {"Y"})).to_string(),
            "float32[8@X,4]{U:Y}");
  EXPECT_EQ(ArrayType({8, 4}, DType::F32, NamedSharding(e, P(), {"Y", "X"})).to_string(),
            "float32[8,4]{U:(X,Y)}");
  Mesh mixed = make_mesh({4, 2}, {"X", "Y"}, {kA, kE});
  EXPECT_EQ(ArrayType({8, 4}, DType::F32, NamedSharding(mixed, P(), {"X"})).to_string(),
            "float32[8,4]");
}

TEST(AxisType, TracersReportKnownShardings) {
  Mesh e = make_mesh({4, 2}, {"X", "Y"}, {kE, kE});
  std::vector<std::string> seen;
  JitOptions o;
  o.in_shardings = {NamedSharding(e, P("X", "Y")), std::nullopt};
  auto f = jit(
      [&](const Array& a, const Array& b) {
        seen.push_back(type_of(a).to_string());
        seen.push_back(type_of(b).to_string());
        Array c = reshard(a + b, NamedSharding(e, P(None, "X")));
        seen.push_back(type_of(c).to_string());
        return c;
      },
      o);
  Array out = f(iota_f32({8, 4}), iota_f32({8, 4}));
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], "float32[8@X,4@Y]");  // fixed by in_shardings
  EXPECT_EQ(seen[1], "float32[8,4]");      // uncommitted: the partitioner places it
  EXPECT_EQ(seen[2], "float32[8,4@X]");    // constrained by reshard
  EXPECT_EQ(type_of(out).to_string(), "float32[8,4@X]");
}

TEST(AxisType, ReshardEager) {
  Mesh e = make_mesh({4, 2}, {"x", "y"}, {kE, kE});
  Array x = iota_f32({8, 4});
  const NamedSharding s(e, P("x", "y"));
  Array r = reshard(x, s);
  EXPECT_EQ(r.sharding(), s);
  EXPECT_EQ(r.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(r.addressable_shards().size(), 8u);
  // From one sharding to another of the same mesh, on device.
  Array r2 = reshard(r, NamedSharding(e, P("y", "x")));
  EXPECT_EQ(r2.sharding().spec(), P("y", "x"));
  EXPECT_EQ(r2.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(type_of(r2).to_string(), "float32[8@y,4@x]");
  {
    MeshContext ctx(e);
    Array r3 = reshard(x, P(None, "x"));
    EXPECT_EQ(r3.sharding(), NamedSharding(e, P(None, "x")));
    EXPECT_EQ(r3.to_vector<float>(), x.to_vector<float>());
  }
}

TEST(AxisType, ReshardInJitIsAConstraintWithItsCollective) {
  Mesh e = make_mesh({8}, {"x"}, {kE});
  JitOptions o;
  o.in_shardings = {NamedSharding(e, P("x"))};
  auto f = jit([&](const Array& a) { return reshard(a * 2.0, NamedSharding(e, P())); }, o);
  Array x = iota_f32({16, 4});
  Array out = f(x);
  std::vector<float> want = x.to_vector<float>();
  for (float& v : want) v *= 2;
  EXPECT_EQ(out.to_vector<float>(), want);
  EXPECT_EQ(out.sharding().spec(), P());
  // From rows split over x to replicated: an all-gather.
  EXPECT_NE(f.lower(x).as_text().find("all_gather"), std::string::npos) << f.lower(x).as_text();
}

TEST(AxisType, ReshardErrors) {
  Mesh e = make_mesh({4, 2}, {"x", "y"}, {kE, kE});
  Array x = iota_f32({8, 4});
  {
    MeshContext ctx(e);
    EXPECT_PARTIX_ERROR(reshard(x, P("z")), "[reshard]", "'z'", "P('z')");
    EXPECT_PARTIX_ERROR(reshard(x, P("x", "y", None)), "[reshard]", "3 entries", "rank 2",
                        "f32[8,4]");
    EXPECT_PARTIX_ERROR(reshard(scalar(1.0f), P("x")), "[reshard]", "scalar");
  }
  EXPECT_PARTIX_ERROR(reshard(x, NamedSharding(e, P("x", "y", None))), "[reshard]", "3 entries");
  // A Q8_0 row of 64 elements is two 32-element blocks: split 4 ways it would cut them.
  std::vector<char> raw(static_cast<size_t>(dtype_nbytes(DType::Q8_0, {2, 64})), 0);
  Array q = from_blocks(raw.data(), static_cast<int64_t>(raw.size()), DType::Q8_0, {2, 64});
  EXPECT_PARTIX_ERROR(reshard(q, NamedSharding(e, P(None, "x"))), "[reshard]",
                      "quantization blocks");
  EXPECT_EQ(reshard(q, NamedSharding(e, P(None, "y"))).sharding().spec(), P(None, "y"));
  // A bare spec needs a mesh.
  if (!has_current_mesh()) {
    EXPECT_PARTIX_ERROR(reshard(x, P("x")), "[reshard]", "needs a mesh");
  }
  // Inside jit the same checks, under the same name.
  auto g = jit([&](const Array& a) { return reshard(a, NamedSharding(e, P("x", "y", None))); });
  EXPECT_PARTIX_ERROR(g(x), "[reshard]", "3 entries");
}
