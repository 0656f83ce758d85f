#include <bit>
#include <cmath>
#include <limits>

#include "test_util.h"

using namespace partix;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::Bool), 1);
  EXPECT_EQ(dtype_size(DType::BF16), 2);
  EXPECT_EQ(dtype_size(DType::F64), 8);
  for (DType d : {DType::Bool, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32,
                  DType::F64}) {
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
  }
  EXPECT_PARTIX_ERROR(dtype_from_name("f8"), "[dtype]", "'f8'");
}

TEST(DType, BFloat16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  // Just above halfway rounds up.
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bfloat16(-2.0f).bits, 0xc000);
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(static_cast<float>(bfloat16(std::numeric_limits<float>::infinity()))));
  // The largest float rounds to infinity in bf16 (its mantissa rounds up into the exponent).
  EXPECT_TRUE(std::isinf(static_cast<float>(bfloat16(std::numeric_limits<float>::max()))));
}

TEST(DType, Float16RoundsToNearestEven) {
  EXPECT_EQ(float16(1.0f).bits, 0x3c00);
  EXPECT_EQ(float16(-2.0f).bits, 0xc000);
  EXPECT_EQ(float16(65504.0f).bits, 0x7bff);  // largest finite half
  EXPECT_EQ(float16(65520.0f).bits, 0x7c00);  // halfway to the next: ties to even -> inf
  EXPECT_EQ(float16(65519.0f).bits, 0x7bff);
  // 1 + 2^-11 is halfway between 1.0 and 1 + 2^-10: ties to even.
  EXPECT_EQ(float16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  EXPECT_EQ(float16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  // Subnormals: the smallest is 2^-24; 2^-25 is halfway to zero and ties to even (0).
  EXPECT_EQ(float16(std::ldexp(1.0f, -24)).bits, 0x0001);
  EXPECT_EQ(float16(std::ldexp(1.0f, -25)).bits, 0x0000);
  EXPECT_EQ(float16(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(float16(std::ldexp(3.0f, -25)).bits, 0x0002);  // 1.5 ulp ties to even (2)
  EXPECT_TRUE(std::isnan(static_cast<float>(float16(std::nanf("")))));
}

TEST(DType, Float16RoundTripsEveryHalf) {
  // Every finite half value converts to float and back unchanged.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float16 h = float16::from_bits(static_cast<uint16_t>(b));
    float f = static_cast<float>(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float16(f).bits, h.bits) << "bits " << b;
  }
}

TEST(DType, BFloat16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    bfloat16 h = bfloat16::from_bits(static_cast<uint16_t>(b));
    float f = static_cast<float>(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(bfloat16(f).bits, h.bits) << "bits " << b;
  }
}

TEST(DType, Float16MatchesExactRounding) {
  // Independent oracle: round in double arithmetic to the nearest representable half.
  auto oracle = [](float x) -> float {
    double best = 0, best_err = INFINITY;
    for (uint32_t b = 0; b < 0x7c00; ++b) {
      double v = static_cast<float>(float16::from_bits(static_cast<uint16_t>(b)));
      double err = std::fabs(v - std::fabs(static_cast<double>(x)));
      if (err < best_err || (err == best_err && (b & 1) == 0)) {
        best_err = err;
        best = v;
      }
    }
    return static_cast<float>(x < 0 ? -best : best);
  };
  for (float x : {0.1f, 0.2f, 1.0f / 3.0f, 3.14159f, -7.77e-5f, 1234.567f, 6.1e-5f, 2.9e-7f,
                  -0.0001f, 60000.1f}) {
    EXPECT_EQ(static_cast<float>(float16(x)), oracle(x)) << x;
  }
}
