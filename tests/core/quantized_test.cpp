// Quantized storage dtypes as Arrays: blocks in, astype out, matmul through
// einsum / dot_general, sharded column- and row-parallel on 8 devices with blocks never
// split, and the errors for everything else.
//
// Tolerances: against the dequantized f32 matmul, the 8-bit activations bound the error by
// sum_k |w_k| step_k / 2 (see tests/backend/cpu_quant_dot_test.cpp); here the looser
// 2e-2 * sum_k |x_k w_k| + 1e-4 covers it for normal x. Sharded runs compute the same
// integer block sums and differ only in how f32 partial sums are added: 1e-5 of the largest
// result.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/quant_dot.h"
#include "core/quants.h"
#include "backend/quant_blocks.h"
#include "test_util.h"

namespace partix {
namespace {

using testing_quant::kQuantTypes;
using testing_quant::random_blocks;
using testing_quant::random_floats;

using testing_quant::quantized;

// x [M, K] . dequantize(w) [N, K]^T in double, and sum_k |x_k w_k| per result.
std::pair<std::vector<double>, std::vector<double>> f64_matmul(const std::vector<float>& x,
                                                               const std::vector<float>& w,
                                                               int64_t M, int64_t N, int64_t K) {
  std::vector<double> y(static_cast<size_t>(M * N)), mag(y.size());
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, s = 0;
      for (int64_t k = 0; k < K; ++k) {
        acc += double(x[m * K + k]) * w[n * K + k];
        s += std::fabs(double(x[m * K + k]) * w[n * K + k]);
      }
      y[m * N + n] = acc;
      mag[m * N + n] = s;
    }
  }
  return {y, mag};
}

TEST(Quantized, DtypeFacts) {
  EXPECT_EQ(dtype_block_elems(DType::Q4_1), 32);
  EXPECT_EQ(dtype_block_elems(DType::Q6_K), 256);
  EXPECT_EQ(dtype_nbytes(DType::Q4_1, {3, 64}), 3 * 2 * 20);
  EXPECT_EQ(dtype_nbytes(DType::Q4_K, {2, 512}), 2 * 2 * 144);
  EXPECT_EQ(dtype_from_name("q6_k"), DType::Q6_K);
  EXPECT_TRUE(is_quantized(DType::Q8_0));
  EXPECT_FALSE(is_floating(DType::Q8_0));
}

TEST(Quantized, BlocksAstypeToTheirDequantizedValues) {
  for (DType dt : kQuantTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const int64_t K = 2 * dtype_block_elems(dt);
    auto raw = random_blocks(dt, 3, K, 11);
    Array w = from_blocks(raw.data(), static_cast<int64_t>(raw.size()), dt, {3, K});
    EXPECT_EQ(w.dtype(), dt);
    EXPECT_EQ(w.shape(), (Shape{3, K}));
    EXPECT_EQ(w.nbytes(), static_cast<int64_t>(raw.size()));
    std::vector<float> want(static_cast<size_t>(3 * K));
    detail::dequantize(dt, raw.data(), 3 * K, want.data());
    EXPECT_EQ(astype(w, DType::F32).to_vector<float>(), want);
    // Reshapes that keep whole blocks in each row, and row gathers, keep the bytes.
    Array r = reshape(w, {3, 2, K / 2});
    EXPECT_EQ(astype(r, DType::F32).to_vector<float>(), want);
    Array rows = take(w, from_vector<int32_t>({2, 0}, {2}), 0);
    std::vector<float> got = astype(rows, DType::F32).to_vector<float>();
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + K, want.begin() + 2 * K));
    EXPECT_TRUE(std::equal(got.begin() + K, got.end(), want.begin()));
  }
}

TEST(Quantized, EinsumMatchesTheDequantizedMatmul) {
  for (DType dt : kQuantTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const int64_t M = 3, N = 40, K = 2 * dtype_block_elems(dt);
    Array w = quantized(dt, N, K, 5);
    auto xv = random_floats(M * K, 6);
    Array x = from_vector(xv, {M, K});
    auto [want, mag] = f64_matmul(xv, astype(w, DType::F32).to_vector<float>(), M, N, K);
    std::vector<float> got = einsum("mk,nk->mn", {x, w}).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-2 * mag[i] + 1e-4);
    // Several contracting dims, trailing in order: [M, H, D] x [N, H, D].
    Array w3 = reshape(w, {N, 2, K / 2});
    std::vector<float> got3 =
        einsum("mhd,nhd->mn", {reshape(x, {M, 2, K / 2}), w3}).to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got3[i], got[i], 1e-5 * (1 + mag[i]));
  }
}

class QuantizedSharded : public ::testing::TestWithParam<DType> {};

// Column-parallel (w split over its rows, uneven: 37 rows on 8 devices), row-parallel (the
// contraction split on block boundaries) and an uneven head-split contraction
// ([M, 9, D] x [N, 9, D] with 9 heads on 8 devices) all give the single-device result.
TEST_P(QuantizedSharded, ColumnAndRowParallelMatchOneDevice) {
  const DType dt = GetParam();
  const int64_t b = dtype_block_elems(dt);
  Mesh mesh = make_mesh({8}, {"x"});
  auto close = [](const std::vector<float>& a, const std::vector<float>& e) {
    ASSERT_EQ(a.size(), e.size());
    double top = 0;
    for (float v : e) top = std::max(top, std::fabs(double(v)));
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-5 * (1 + top));
  };
  {  // column-parallel
    const int64_t M = 2, N = 37, K = 2 * b;
    Array w = quantized(dt, N, K, 21);
    Array x = from_vector(random_floats(M * K, 22), {M, K});
    std::vector<float> want = einsum("mk,nk->mn", {x, w}).to_vector<float>();
    Array ws = device_put(w, NamedSharding(mesh, P("x", None)));
    EXPECT_EQ(ws.dtype(), dt);
    auto f = jit([](const Array& a, const Array& c) { return einsum("mk,nk->mn", {a, c}); });
    Array xr = device_put(x, NamedSharding(mesh, P()));
    close(f(xr, ws).to_vector<float>(), want);
    // The weight reaches the matmul in its blocks: no conversion anywhere in the program.
    const std::string text = f.lower(xr, ws).as_text();
    EXPECT_EQ(text.find("convert"), std::string::npos) << text;
    EXPECT_NE(text.find(std::string(dtype_name(dt)) + "["), std::string::npos) << text;
  }
  {  // row-parallel: each device holds one block column of every row
    const int64_t M = 3, N = 5, K = 8 * b;
    Array w = quantized(dt, N, K, 31);
    Array x = from_vector(random_floats(M * K, 32), {M, K});
    std::vector<float> want = einsum("mk,nk->mn", {x, w}).to_vector<float>();
    Array ws = device_put(w, NamedSharding(mesh, P(None, "x")));
    Array xs = device_put(x, NamedSharding(mesh, P(None, "x")));
    auto f = jit([](const Array& a, const Array& c) { return einsum("mk,nk->mn", {a, c}); });
    close(f(xs, ws).to_vector<float>(), want);
    // The blocks each device holds are the block columns of the global array.
    std::vector<float> all = astype(w, DType::F32).to_vector<float>();
    std::vector<float> shard0 =
        astype(ws.addressable_shards()[0].data, DType::F32).to_vector<float>();
    ASSERT_EQ(static_cast<int64_t>(shard0.size()), N * b);
    EXPECT_TRUE(std::equal(shard0.begin(), shard0.begin() + b, all.begin()));
  }
  if (b == 32) {  // uneven heads on the contraction: padding must not reach the sum
    const int64_t M = 2, N = 6, H = 9, D = 64;
    Array w = reshape(quantized(dt, N, H * D, 41), {N, H, D});
    Array x = from_vector(random_floats(M * H * D, 42), {M, H, D});
    std::vector<float> want = einsum("mhd,nhd->mn", {x, w}).to_vector<float>();
    Array ws = device_put(w, NamedSharding(mesh, P(None, "x", None)));
    Array xs = device_put(x, NamedSharding(mesh, P(None, "x", None)));
    auto f = jit([](const Array& a, const Array& c) { return einsum("mhd,nhd->mn", {a, c}); });
    close(f(xs, ws).to_vector<float>(), want);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedSharded, ::testing::ValuesIn(kQuantTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Quantized, BadInputIsAnErrorNamingTheApiAndValue) {
  auto raw = random_blocks(DType::Q4_1, 2, 64, 1);
  EXPECT_PARTIX_ERROR(from_blocks(raw.data(), 10, DType::Q4_1, {2, 64}), "[from_blocks]",
                      "10 bytes", "q4_1[2,64]", "80 bytes");
  EXPECT_PARTIX_ERROR(from_blocks(raw.data(), 80, DType::Q4_1, {2, 40}), "[from_blocks]",
                      "multiple of 32", "[2,40]");
  EXPECT_PARTIX_ERROR(from_blocks(raw.data(), 80, DType::F32, {20}), "[from_blocks]",
                      "f32 is not a quantized dtype");
  Array w = from_blocks(raw.data(), 80, DType::Q4_1, {2, 64});
  Mesh mesh = make_mesh({8}, {"x"});
  // 64 columns on 8 devices would split each 32-element block in four.
  EXPECT_PARTIX_ERROR(device_put(w, NamedSharding(mesh, P(None, "x"))), "[device_put]",
                      "q4_1[2,64]", "chunks of 8 elements", "32-element quantization blocks");
  EXPECT_PARTIX_ERROR(w + 1.0, "[add] got a quantized array (q4_1)", "astype");
  EXPECT_PARTIX_ERROR(exp(w), "[exp] got a quantized array", "astype it to a float dtype first");
  EXPECT_PARTIX_ERROR(transpose(w, {1, 0}), "[transpose]", "quantized");
  EXPECT_PARTIX_ERROR(astype(astype(w, DType::F32), DType::Q8_0), "[convert]",
                      "cannot astype f32[2,64] to q8_0");
  EXPECT_PARTIX_ERROR(reshape(w, {4, 32, 1}), "[reshape]", "multiple of 32", "[4,32,1]");
  Array x = zeros({3, 2});
  EXPECT_PARTIX_ERROR(einsum("mn,nk->mk", {x, w}), "[dot_general]",
                      "trailing dimensions of both operands");
  EXPECT_PARTIX_ERROR(einsum("nk,mk->nm", {w, zeros({3, 64})}), "[dot_general]",
                      "must be the rhs, with an f32 lhs");
  EXPECT_PARTIX_ERROR(take(w, from_vector<int32_t>({0}, {1}), 1), "[take]",
                      "last (block) dimension");
  EXPECT_PARTIX_ERROR(w.to_vector<float>(), "astype a quantized array to f32 first");
}

}  // namespace
}  // namespace partix
