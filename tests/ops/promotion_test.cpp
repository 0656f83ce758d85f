// Dtype promotion (JAX's lattice, weak Python-number semantics) and numpy broadcasting of the
// op library (src/ops/elementwise.cpp), against the tables tools/golden/primitives.py wrote.
#include "prim/golden.h"
#include "test_util.h"

namespace partix {
namespace {

using golden::Json;

std::vector<DType> dtypes_of(const Json& names) {
  std::vector<DType> out;
  for (const Json& n : names) out.push_back(dtype_from_name(n.get<std::string>()));
  return out;
}

TEST(Promotion, PromoteTypesIsJaxLattice) {
  const Json& p = golden::golden_file().at("promotion");
  std::vector<DType> ds = dtypes_of(p.at("dtypes"));
  ASSERT_EQ(ds.size(), 7u);
  for (size_t i = 0; i < ds.size(); ++i) {
    for (size_t j = 0; j < ds.size(); ++j) {
      DType want = dtype_from_name(p.at("table")[i][j].get<std::string>());
      EXPECT_EQ(promote_types(ds[i], ds[j]), want)
          << dtype_name(ds[i]) << " with " << dtype_name(ds[j]);
    }
  }
}

// The ops themselves promote: binary arithmetic, where, concatenate, dot_general.
TEST(Promotion, OpsPromoteTheirOperands) {
  const Json& p = golden::golden_file().at("promotion");
  std::vector<DType> ds = dtypes_of(p.at("dtypes"));
  Array cond = from_vector<bool>({true, false}, {2});
  for (size_t i = 0; i < ds.size(); ++i) {
    for (size_t j = 0; j < ds.size(); ++j) {
      DType want = dtype_from_name(p.at("table")[i][j].get<std::string>());
      SCOPED_TRACE(std::string(dtype_name(ds[i])) + " with " + std::string(dtype_name(ds[j])));
      Array a = ones({2}, ds[i]), b = ones({2}, ds[j]);
      EXPECT_EQ(where(cond, a, b).dtype(), want);
      EXPECT_EQ(concatenate({a, b}, 0).dtype(), want);
      EXPECT_EQ((a * b).dtype(), want);
      EXPECT_EQ(maximum(a, b).dtype(), want);
      if (want == DType::Bool) {
        EXPECT_PARTIX_ERROR(a - b, "[sub]", "bool[2]");  // numpy and JAX refuse too
        continue;
      }
      EXPECT_EQ((a - b).dtype(), want);
      EXPECT_EQ(dot_general(a, b, {0}, {0}).dtype(), want);
      Array s = a + b;
      EXPECT_EQ(s.dtype(), want);
      EXPECT_EQ(astype(s, DType::F64).to_vector<double>(), (std::vector<double>{2.0, 2.0}));
    }
  }
}

TEST(Promotion, WeakPlainNumbers) {
  for (const Json& w : golden::golden_file().at("weak")) {
    DType dt = dtype_from_name(w.at("dtype").get<std::string>());
    double v = w.at("value").get<double>();
    DType want = dtype_from_name(w.at("result").get<std::string>());
    SCOPED_TRACE(std::string(dtype_name(dt)) + " with " + std::to_string(v));
    Array x = ones({3}, dt);
    EXPECT_EQ((x * v).dtype(), want);
    EXPECT_EQ((v * x).dtype(), want);
    EXPECT_EQ((x + v).dtype(), want);
    EXPECT_EQ((v - x).dtype(), want);
    EXPECT_EQ(maximum(x, v).dtype(), want);
    EXPECT_EQ(where(from_vector<bool>({true, false, true}, {3}), x, v).dtype(), want);
    EXPECT_EQ((x < v).dtype(), DType::Bool);
  }
}

TEST(Promotion, WeakNumbersKeepLowPrecisionValues) {
  // bf16 * 2.0 stays bf16 and exact; int * 2.5 becomes f32.
  Array b = from_vector<bfloat16>({bfloat16(1.5f), bfloat16(-3.0f)}, {2});
  Array y = b * 2.0;
  ASSERT_EQ(y.dtype(), DType::BF16);
  std::vector<bfloat16> v = y.to_vector<bfloat16>();
  EXPECT_EQ(static_cast<float>(v[0]), 3.0f);
  EXPECT_EQ(static_cast<float>(v[1]), -6.0f);
  Array i = from_vector<int32_t>({1, -3}, {2}) * 2.5;
  ASSERT_EQ(i.dtype(), DType::F32);
  EXPECT_EQ(i.to_vector<float>(), (std::vector<float>{2.5f, -7.5f}));
}

TEST(Broadcasting, NumpyShapes) {
  for (const Json& b : golden::golden_file().at("broadcast")) {
    Shape sa = b.at("a").get<Shape>(), sb = b.at("b").get<Shape>();
    SCOPED_TRACE(shape_to_string(sa) + " with " + shape_to_string(sb));
    Array a = ones(sa), c = ones(sb, DType::I32);
    if (b.at("result").is_null()) {
      EXPECT_PARTIX_ERROR(a + c, "[add]", "cannot broadcast", shape_to_string(sa),
                          shape_to_string(sb));
      EXPECT_PARTIX_ERROR(where(ones(sa, DType::Bool), a, c), "[select]", shape_to_string(sa));
      continue;
    }
    Shape want = b.at("result").get<Shape>();
    Array s = a + c;
    EXPECT_EQ(s.shape(), want);
    EXPECT_EQ(s.dtype(), DType::F32);
    std::vector<float> v = s.to_vector<float>();
    EXPECT_EQ(v, std::vector<float>(static_cast<size_t>(shape_size(want)), 2.0f));
    EXPECT_EQ((c < a).shape(), want);
    EXPECT_EQ(where(ones(sb, DType::Bool), a, 0.0).shape(), want);
  }
}

}  // namespace
}  // namespace partix
