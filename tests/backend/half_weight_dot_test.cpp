// f32 activations against a bf16 or f16 weight: dot_general takes the weight as it is (no
// convert op in the program) and equals the f32 product of the widened weight, in every layout
// the fast kernel takes and in those it hands to the general path, with gradients.
#include <fmt/format.h>

#include "partix/partix.h"
#include "runtime/interpreter.h"
#include "test_util.h"

using namespace partix;

namespace {

Array random_f32(Shape s, uint32_t seed) { return random::normal(random::key(seed), s); }

void expect_close(const Array& got, const Array& want, double tol) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), DType::F32);
  auto g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << "element " << i;
  }
}

}  // namespace

TEST(HalfWeightDot, EqualsTheF32ProductOfTheWidenedWeight) {
  for (DType dt : {DType::BF16, DType::F16}) {
    for (int64_t M : {1, 3, 4, 5, 37}) {
      for (int64_t N : {1, 7, 64}) {
        for (int64_t K : {1, 8, 15, 16, 100}) {
          SCOPED_TRACE(fmt::format("{} M={} N={} K={}", dtype_name(dt), M, N, K));
          Array x = random_f32({M, K}, 1), w = astype(random_f32({N, K}, 2), dt);
          Array got = einsum("mk,nk->mn", {x, w});
          Array want = einsum("mk,nk->mn", {x, astype(w, DType::F32)});
          expect_close(got, want, 1e-5);
          // The naive reference agrees too.
          runtime::set_kernel_mode(runtime::KernelMode::kReference);
          Array ref = einsum("mk,nk->mn", {x, w});
          runtime::set_kernel_mode(runtime::KernelMode::kFast);
          expect_close(got, ref, 1e-5);
        }
      }
    }
  }
}

TEST(HalfWeightDot, TheProgramHoldsNoConvertAndOtherLayoutsWork) {
  Array x = random_f32({2, 3, 48}, 3), w = astype(random_f32({48, 5}, 4), DType::BF16);
  auto f = jit([](const Array& a, const Array& b) { return matmul(a, b); });  // w [K, N]
  std::string text = f.lower(x, w).as_text();
  EXPECT_EQ(text.find("convert"), std::string::npos) << text;
  EXPECT_NE(text.find("bf16[48,5]"), std::string::npos) << text;
  expect_close(f(x, w), matmul(x, astype(w, DType::F32)), 1e-5);
  // Batched: the general path widens the weight.
  Array wb = astype(random_f32({2, 48, 5}, 5), DType::F16);
  Array xb = random_f32({2, 4, 48}, 6);
  expect_close(matmul(xb, wb), matmul(xb, astype(wb, DType::F32)), 1e-5);
  // A bf16 lhs with an f32 rhs promotes as before.
  EXPECT_EQ(matmul(astype(xb, DType::BF16), astype(wb, DType::F32)).dtype(), DType::F32);
}

TEST(HalfWeightDot, ShardedAndGradientsMatchTheWidenedWeight) {
  Mesh mesh({4}, {"model"});
  Array x = device_put(random_f32({6, 64}, 7), NamedSharding(mesh, P()));
  Array w32 = random_f32({32, 64}, 8);
  for (PartitionSpec spec : {P("model"), P(None, "model")}) {  // column- and row-parallel
    SCOPED_TRACE(spec.to_string());
    Array w = device_put(astype(w32, DType::BF16), NamedSharding(mesh, spec));
    Array wide = astype(w, DType::F32);
    auto loss = [](const Array& a, const Array& b) { return sum(square(einsum("mk,nk->mn", {a, b}))); };
    expect_close(jit([](const Array& a, const Array& b) { return einsum("mk,nk->mn", {a, b}); })(x, w),
                 einsum("mk,nk->mn", {x, wide}), 1e-5);
    auto g = grad(loss, std::vector<int>{0, 1})(x, w);
    auto h = grad(loss, std::vector<int>{0, 1})(x, wide);
    const Array &gx = g[0], &gw = g[1], &hx = h[0], &hw = h[1];
    expect_close(gx, hx, 1e-4);
    EXPECT_EQ(gw.dtype(), DType::BF16);  // a weight's gradient keeps its dtype
    expect_close(astype(gw, DType::F32), astype(astype(hw, DType::BF16), DType::F32), 1e-2);
  }
}
