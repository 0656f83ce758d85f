// The fast CPU kernels inside jit-compiled programs on 8 devices: the same program
// run with the fast kernels and with only the reference kernels must agree (to the f32
// accumulation tolerances of the kernel tests; here a relative 1e-4 on O(1) values).
#include <gtest/gtest.h>

#include <random>

#include "partix/partix.h"
#include "runtime/interpreter.h"

namespace partix {
namespace {

Array random_array(Shape shape, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, static_cast<float>(scale));
  std::vector<float> v(static_cast<size_t>(shape_size(shape)));
  for (float& x : v) x = n(rng);
  return from_vector<float>(v, shape);
}

// An MLP block with attention-like scores: matmuls in several layouts, gelu (tanh), softmax,
// layer norm, reductions, transposes and slices.
Array block(const Array& x, const Array& w1, const Array& w2) {
  Array h = gelu(matmul(x, w1));  // [B, T, F]
  Array y = layer_norm(matmul(h, w2) + x, ones({x.shape().back()}), zeros({x.shape().back()}));
  Array scores = einsum("btc,bsc->bts", {y, y}) * 0.125;  // [B, T, T]
  Array p = softmax(scores, -1);
  Array z = einsum("bts,bsc->btc", {p, y});  // [B, T, C]
  Array tail = slice_axis(z, 2, 1, z.shape().back());
  return concatenate({tail, exp(-abs(slice_axis(z, 2, 0, 1)))}, 2) + sum(z, {1}, true);
}

void expect_close(const Array& fast, const Array& ref, double rel) {
  std::vector<float> a = fast.to_vector<float>(), b = ref.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], rel * (1.0 + std::fabs(b[i]))) << "element " << i;
  }
}

TEST(CpuKernelsInJit, ReplicatedBlockMatchesReferenceKernels) {
  // Replicated over 8 devices: eight workers run the same kernels (and the same cached oneDNN
  // primitives) at once. (Sharded inputs need the SPMD partitioner, not on this branch yet.)
  Mesh mesh = make_mesh({4, 2}, {"x", "y"});
  NamedSharding rep(mesh, P());
  Array x = device_put(random_array({8, 16, 32}, 1), rep);
  Array w1 = device_put(random_array({32, 64}, 2, 0.2), rep);
  Array w2 = device_put(random_array({64, 32}, 3, 0.2), rep);
  auto f = jit([](const Array& a, const Array& b, const Array& c) { return block(a, b, c); });
  Array fast = f(x, w1, w2);
  runtime::set_kernel_mode(runtime::KernelMode::kReference);
  Array ref = f(x, w1, w2);
  runtime::set_kernel_mode(runtime::KernelMode::kFast);
  expect_close(fast, ref, 1e-4);
  // bf16 parameters: matmuls in bf16 with f32 accumulation on both paths.
  auto g = jit([](const Array& a, const Array& b, const Array& c) {
    return astype(block(astype(a, DType::BF16), astype(b, DType::BF16), astype(c, DType::BF16)),
                  DType::F32);
  });
  Array fast16 = g(x, w1, w2);
  runtime::set_kernel_mode(runtime::KernelMode::kReference);
  Array ref16 = g(x, w1, w2);
  runtime::set_kernel_mode(runtime::KernelMode::kFast);
  expect_close(fast16, ref16, 3e-2);  // bf16 results: 2^-8 relative rounding, compounded
}

}  // namespace
}  // namespace partix
