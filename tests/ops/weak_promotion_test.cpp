// promote_weak (partix/promotion.h): JAX's weak typing of a Python number beside an array, the
// rule partix.numpy's `x + 1`, `x * 0.5`, `x == True` ask the core for.
#include "test_util.h"

using namespace partix;

namespace {

WeakScalar integer(int64_t v) {
  WeakScalar s;
  s.kind = WeakScalar::Kind::kInt;
  s.value = static_cast<double>(v);
  s.int_value = v;
  s.text = std::to_string(v);
  return s;
}
WeakScalar real(double v) {
  WeakScalar s;
  s.kind = WeakScalar::Kind::kFloat;
  s.value = v;
  s.text = std::to_string(v);
  return s;
}

}  // namespace

TEST(WeakPromotion, TheNumberTakesTheArraysTypeUnlessItWidensIt) {
  Array i8 = astype(from_vector<int32_t>({1, 2}, {2}), DType::I8);
  auto [a, s] = promote_weak(i8, integer(100), "add");
  EXPECT_EQ(a.dtype(), DType::I8);
  EXPECT_EQ(s.dtype(), DType::I8);
  EXPECT_EQ(s.ndim(), 0);
  auto [f, h] = promote_weak(i8, real(0.5), "mul");  // a float beside ints: float32
  EXPECT_EQ(f.dtype(), DType::F32);
  EXPECT_EQ(h.to_vector<float>(), std::vector<float>{0.5f});
  Array b = from_vector<bool>({true, false}, {2});
  EXPECT_EQ(promote_weak(b, integer(1), "add").first.dtype(), DType::I32);
  WeakScalar t;
  t.kind = WeakScalar::Kind::kBool;
  t.value = 1;
  EXPECT_EQ(promote_weak(b, t, "eq").second.dtype(), DType::Bool);
  Array bf = astype(from_vector<float>({1}, {1}), DType::BF16);
  EXPECT_EQ(promote_weak(bf, real(2.5), "mul").second.dtype(), DType::BF16);
}

TEST(WeakPromotion, IntegersAreExactAndRefusedWhereTheyDoNotFit) {
  Array u32 = astype(from_vector<int32_t>({1}, {1}), DType::U32);
  auto [a, s] = promote_weak(u32, integer(4000000000), "add");
  EXPECT_EQ(s.dtype(), DType::U32);
  EXPECT_EQ((a + s).to_vector<uint32_t>(), std::vector<uint32_t>{4000000001u});
  Array i8 = astype(from_vector<int32_t>({1}, {1}), DType::I8);
  EXPECT_PARTIX_ERROR(promote_weak(i8, integer(300), "add"), "[add]", "300 does not fit");
  WeakScalar huge = integer(0);
  huge.int_fits_int64 = false;
  huge.value = std::numeric_limits<double>::infinity();
  huge.text = "1" + std::string(400, '0');
  EXPECT_PARTIX_ERROR(promote_weak(from_vector<float>({1}, {1}), huge, "add"), "too large");
  EXPECT_PARTIX_ERROR(promote_weak(from_vector<int32_t>({1}, {1}), huge, "add"), "does not fit");
}
