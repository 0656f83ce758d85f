// The quantized matmul kernels (every format, every instruction set this CPU has) against
// dequantize-then-f64 references.
//
// Tolerance: the kernels quantize each block of 32 activations to int8 with step
// d = max|x| / 127 and sum the integer products exactly, so each element of x is off by at
// most d / 2: |y - ref| <= sum_k |w_k| d_block(k) / 2, plus f32 rounding (1e-5 relative).
// All instruction sets compute the same integer sums; only the f32 combination of scales may
// round differently (fused multiply-adds): they agree to 1e-6 of sum_k |x_k w_k|.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu/quant_dot.h"
#include "core/quants.h"
#include "backend/cpu/thread_team.h"
#include "backend/quant_blocks.h"

namespace partix::backend::cpu {
namespace {

using testing_quant::kQuantTypes;
using testing_quant::random_blocks;
using testing_quant::random_floats;

struct Ref {
  std::vector<double> y, bound, mag;  // mag: sum_k |x_k w_k|
};

// y = x w^T in double over the dequantized weights, with the error bound above.
Ref reference(DType dt, const std::vector<float>& x, const std::vector<uint8_t>& w, int64_t M,
              int64_t N, int64_t K) {
  std::vector<float> wf(static_cast<size_t>(N * K));
  detail::dequantize(dt, w.data(), N * K, wf.data());
  const auto size = static_cast<size_t>(M * N);
  Ref r{std::vector<double>(size), std::vector<double>(size), std::vector<double>(size)};
  for (int64_t m = 0; m < M; ++m) {
    std::vector<double> step(static_cast<size_t>(K / 32));
    for (int64_t b = 0; b < K / 32; ++b) {
      double amax = 0;
      for (int64_t i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(double(x[m * K + 32 * b + i])));
      step[b] = amax / 127.0;
    }
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, bound = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double xv = x[m * K + k], wv = wf[n * K + k];
        acc += xv * wv;
        bound += std::fabs(wv) * step[k / 32] / 2;
        mag += std::fabs(xv * wv);
      }
      r.y[m * N + n] = acc;
      r.bound[m * N + n] = bound + 1e-5 * mag + 1e-6;
      r.mag[m * N + n] = mag;
    }
  }
  return r;
}

class QuantDot : public ::testing::TestWithParam<DType> {};

TEST_P(QuantDot, MatchesDequantizedReferenceOnEveryIsa) {
  const DType dt = GetParam();
  const int64_t bk = dtype_block_elems(dt);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 2 * bk},
                         {5, 64, 3 * bk},
                         {37, 9, bk},
                         {2, 300, 4 * bk}}) {
    auto w = random_blocks(dt, N, K, static_cast<uint64_t>(M * 1000 + N));
    auto x = random_floats(M * K, static_cast<uint64_t>(K + N));
    Ref r = reference(dt, x, w, M, N, K);
    std::vector<float> first;
    for (QuantIsa isa : {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
      if (!quant_isa_supported(isa)) continue;
      SCOPED_TRACE(std::string(quant_isa_name(isa)) + " " + std::string(dtype_name(dt)) + " M=" +
                   std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
      std::vector<float> y(static_cast<size_t>(M * N), -1.0f);
      quant_matmul(dt, x.data(), w.data(), y.data(), M, N, K, isa);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], r.y[i], r.bound[i]) << "at " << i;
      }
      if (first.empty()) first = y;
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], first[i], 1e-6 * (1 + r.mag[i])) << "ISAs disagree at " << i;
      }
    }
  }
}

TEST_P(QuantDot, OutlierActivationsStayWithinTheBoundOnEveryIsa) {
  // A few channels hundreds of times larger than the rest (Llama's residual stream has them):
  // the integer sums must not overflow and the large terms' cancellation must stay within f32
  // rounding of sum_k |x_k w_k|, on both the matrix-vector (M = 1) and the matrix path.
  const DType dt = GetParam();
  const int64_t K = 3 * dtype_block_elems(dt) * (dt == DType::Q4_K || dt == DType::Q6_K ? 1 : 16);
  for (int64_t M : {1, 6}) {
    const int64_t N = 77;
    auto w = random_blocks(dt, N, K, static_cast<uint64_t>(M + 40));
    auto x = random_floats(M * K, static_cast<uint64_t>(M + 41));
    for (int64_t i = 0; i < M * K; i += 97) x[static_cast<size_t>(i)] *= 300.0f;
    Ref r = reference(dt, x, w, M, N, K);
    for (QuantIsa isa : {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
      if (!quant_isa_supported(isa)) continue;
      SCOPED_TRACE(std::string(quant_isa_name(isa)) + " M=" + std::to_string(M));
      std::vector<float> y(static_cast<size_t>(M * N));
      quant_matmul(dt, x.data(), w.data(), y.data(), M, N, K, isa);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], r.y[i], r.bound[i]) << "at " << i;
    }
  }
}

TEST_P(QuantDot, ZeroActivationsGiveZeroAndDequantizeMatchesTheBlockLayout) {
  const DType dt = GetParam();
  const int64_t K = dtype_block_elems(dt) * 2, N = 3;
  auto w = random_blocks(dt, N, K, 7);
  std::vector<float> x(static_cast<size_t>(K), 0.0f), y(N, 1.0f);
  quant_matmul(dt, x.data(), w.data(), y.data(), 1, N, K);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  // A one-hot activation reads back one dequantized weight (up to f32 rounding of the scale).
  std::vector<float> wf(static_cast<size_t>(N * K));
  detail::dequantize(dt, w.data(), N * K, wf.data());
  for (int64_t k : {int64_t{0}, int64_t{17}, K - 1}) {
    std::fill(x.begin(), x.end(), 0.0f);
    x[static_cast<size_t>(k)] = 1.0f;
    quant_matmul(dt, x.data(), w.data(), y.data(), 1, N, K);
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_NEAR(y[n], wf[n * K + k], 1e-5 * (1 + std::fabs(wf[n * K + k]))) << "k=" << k;
    }
  }
}

TEST_P(QuantDot, NonFiniteActivationsGiveNaN) {
  const DType dt = GetParam();
  const int64_t K = dtype_block_elems(dt), N = 2;
  auto w = random_blocks(dt, N, K, 9);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(static_cast<size_t>(K), 0.5f), y(N, 0.0f);
    x[3] = bad;
    for (QuantIsa isa : {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
      if (!quant_isa_supported(isa)) continue;
      quant_matmul(dt, x.data(), w.data(), y.data(), 1, N, K, isa);
      for (float v : y) EXPECT_TRUE(std::isnan(v)) << quant_isa_name(isa);
    }
  }
}

TEST_P(QuantDot, MatrixVectorRowGroupsAndTeamSplitsGiveTheSameBits) {
  // Decode products take weight rows in groups and split them over the team: each row's sum
  // must not depend on its neighbours or on the split (row counts off the group size).
  const DType dt = GetParam();
  const int64_t K = dtype_block_elems(dt) * 4;
  auto x = random_floats(K, 11);
  for (int64_t N : {1, 2, 3, 5, 7, 37, 513}) {
    auto w = random_blocks(dt, N, K, static_cast<uint64_t>(N));
    for (QuantIsa isa : {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
      if (!quant_isa_supported(isa)) continue;
      SCOPED_TRACE(std::string(quant_isa_name(isa)) + " N=" + std::to_string(N));
      std::vector<float> one(static_cast<size_t>(N)), team(static_cast<size_t>(N));
      quant_matmul(dt, x.data(), w.data(), one.data(), 1, N, K, isa);  // no team: one thread
      {
        ThreadTeam two(1);
        ThreadTeam::set_current(&two);
        quant_matmul(dt, x.data(), w.data(), team.data(), 1, N, K, isa);
        ThreadTeam::set_current(nullptr);
      }
      for (int64_t n = 0; n < N; ++n) {
        ASSERT_EQ(one[n], team[n]) << "at " << n;
        // Each row alone (a matrix of one row) gives the same bits as within the group.
        float alone = 0;
        quant_matmul(dt, x.data(), w.data() + n * dtype_nbytes(dt, {K}), &alone, 1, 1, K, isa);
        ASSERT_EQ(one[n], alone) << "at " << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantDot, ::testing::ValuesIn(testing_quant::kQuantTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(QuantIsa, ActivationQuantizationIsTheSameOnEveryIsa) {
  // The SIMD quantization must reproduce the portable one bit for bit: round half to even,
  // codes clamped to [-127, 127], a NaN scale (and zero codes) for a non-finite block.
  const int64_t K = 32 * 64;
  auto x = random_floats(K, 5);
  // Exact halves after scaling: block 1's maximum 127 makes the step 1.
  for (int i = 0; i < 32; ++i) x[32 + i] = static_cast<float>(i) - 15.5f;
  x[32 + 31] = 127.0f;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // block 2: all zero
  x[96 + 4] = std::numeric_limits<float>::quiet_NaN();
  x[128 + 9] = -std::numeric_limits<float>::infinity();
  x[160 + 1] = std::numeric_limits<float>::max();
  x[192 + 2] = std::numeric_limits<float>::denorm_min();
  std::vector<float> ref_d(K / 32);
  std::vector<int8_t> ref_q(K);
  quantize_activations(x.data(), K, QuantIsa::kPortable, ref_d.data(), ref_q.data());
  EXPECT_EQ(ref_q[32 + 0], -16);  // -15.5 -> -16 (even)
  EXPECT_EQ(ref_q[32 + 1], -14);  // -14.5 -> -14
  EXPECT_TRUE(std::isnan(ref_d[3]) && std::isnan(ref_d[4]));
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
    if (!quant_isa_supported(isa)) continue;
    std::vector<float> d(K / 32);
    std::vector<int8_t> q(K);
    quantize_activations(x.data(), K, isa, d.data(), q.data());
    for (size_t b = 0; b < d.size(); ++b) {
      if (std::isnan(ref_d[b])) {
        EXPECT_TRUE(std::isnan(d[b])) << b;
      } else {
        EXPECT_EQ(d[b], ref_d[b]) << b;
      }
    }
    for (size_t i = 0; i < q.size(); ++i)
      ASSERT_EQ(q[i], ref_q[i]) << quant_isa_name(isa) << " " << i;
  }
}

TEST(QuantIsa, PortableAlwaysSupportedAndBestIsSupported) {
  EXPECT_TRUE(quant_isa_supported(QuantIsa::kPortable));
  EXPECT_TRUE(quant_isa_supported(quant_isa()));
}

}  // namespace
}  // namespace partix::backend::cpu
