// Quantized arrays meeting creation ops (refused: blocks come from files),
// control flow (weights captured by loops and branches, or scanned over) and grad (the float
// operand of a quantized matmul is differentiable; the weight is a constant).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/quant_blocks.h"
#include "partix/control.h"
#include "partix/random.h"
#include "test_util.h"

namespace partix {
namespace {

using testing_quant::random_blocks;
using testing_quant::random_floats;

using testing_quant::quantized;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  double top = 0;
  for (float v : want) top = std::max(top, std::fabs(double(v)));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + top)) << i;
}

// Every creation op refuses a quantized dtype with one clear message, eagerly and in jit.
TEST(QuantizedCreation, CreationOpsRefuseQuantizedDtypes) {
  Mesh mesh = make_mesh({2}, {"x"});
  const NamedSharding s(mesh, P());
  const std::string why = "quantized arrays are weight storage that comes as blocks";
  for (DType dt : {DType::Q8_0, DType::Q4_1, DType::Q4_K}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const std::string name(dtype_name(dt));
    auto each = [&] {
      EXPECT_PARTIX_ERROR(zeros({2, 32}, dt), "[zeros] cannot create " + name + "[2,32]", why);
      EXPECT_PARTIX_ERROR(ones({2, 32}, dt), "[ones] cannot create", why);
      EXPECT_PARTIX_ERROR(full({4, 256}, 1.5, dt), "[full] cannot create " + name + "[4,256]");
      EXPECT_PARTIX_ERROR(arange(32, dt), "[arange] cannot create " + name + "[32]", why);
      EXPECT_PARTIX_ERROR(arange(40, dt), "[arange] cannot create " + name + "[40]");
      EXPECT_PARTIX_ERROR(iota({2, 32}, 1, dt), "[iota] cannot create");
      EXPECT_PARTIX_ERROR(one_hot(from_vector<int32_t>({1}, {1}), 32, dt), "[one_hot] cannot");
      EXPECT_PARTIX_ERROR(zeros({2, 32}, dt, s), "[zeros] cannot create");
      EXPECT_PARTIX_ERROR(arange(64, dt, s), "[arange] cannot create");
      const Array k = random::key(1);
      EXPECT_PARTIX_ERROR(random::uniform(k, {2, 32}, dt), "[random.uniform]", name);
      EXPECT_PARTIX_ERROR(random::normal(k, {2, 32}, dt), "[random.normal]", name);
      EXPECT_PARTIX_ERROR(random::randint(k, {2, 32}, 0, 4, dt), "[random.randint]", name);
    };
    each();
    auto traced = jit([&](const Array& x) {
      each();
      return x;
    });
    traced(zeros({1}));
  }
}

class QuantizedControlFlow : public ::testing::TestWithParam<DType> {};

// Weights captured by fori_loop, scan, while_loop and cond bodies that matmul, take and
// reshape them; a stack of weights scanned over; eagerly, in jit and sharded on 8 devices.
TEST_P(QuantizedControlFlow, CapturedAndScannedWeights) {
  const DType dt = GetParam();
  const int64_t K = 2 * dtype_block_elems(dt);
  Array w = quantized(dt, K, K, 3);          // [K, K]: a carry of width K maps to width K
  Array stack = quantized(dt, 3 * K, K, 4);  // three such layers
  Array x = from_vector(random_floats(2 * K, 5), {2, K});
  auto layer = [](const Array& h, const Array& wt) { return tanh(einsum("mk,nk->mn", {h, wt})); };
  // Unrolled references.
  Array want_loop = x;
  for (int i = 0; i < 3; ++i) want_loop = layer(want_loop, w);
  Array want_scan = x;
  for (int64_t i = 0; i < 3; ++i) {
    want_scan =
        layer(want_scan, take(reshape(stack, {3, K, K}), full({}, double(i), DType::I32), 0));
  }
  Array want_rows = astype(take(w, from_vector<int32_t>({1, 0}, {2}), 0), DType::F32);

  const Array ids = from_vector<int32_t>({1, 0}, {2});
  auto run = [&](const Array& wv, const Array& sv, const Array& xv) {
    Array a = fori_loop(
        0, 3, [&](const Array&, const Array& h) { return layer(h, wv); }, xv);
    Array b = scan(
                  [&](const Array& h, const Array& wt) {
                    return std::pair{layer(h, wt), h};
                  },
                  xv, reshape(sv, {3, K, K}))
                  .first;
    Array c = while_loop([](const Array& h) { return sum(abs(h)) > 1e30; },
                         [&](const Array& h) { return layer(h, wv); }, xv);
    Array d = cond(
        sum(abs(xv)) > -1.0, [&](const Array& h) { return layer(h, wv); },
        [](const Array& h) { return h; }, xv);
    // Rows gathered and reshaped inside the body.
    Array e = fori_loop(
        0, 1,
        [&](const Array&, const Array& h) {
          Array r = take(reshape(wv, {K, 2, K / 2}), ids, 0);
          return h + reshape(astype(r, DType::F32), {2, K});
        },
        zeros({2, K}));
    return std::vector<Array>{a, b, c, d, e};
  };
  auto check = [&](const std::vector<Array>& got) {
    expect_close(got[0].to_vector<float>(), want_loop.to_vector<float>(), 1e-5);
    expect_close(got[1].to_vector<float>(), want_scan.to_vector<float>(), 1e-5);
    expect_close(got[2].to_vector<float>(), x.to_vector<float>(), 0);
    expect_close(got[3].to_vector<float>(), layer(x, w).to_vector<float>(), 1e-5);
    expect_close(got[4].to_vector<float>(), want_rows.to_vector<float>(), 0);
  };
  {
    SCOPED_TRACE("eager");
    check(run(w, stack, x));
  }
  auto f = jit([&](const Array& wv, const Array& sv, const Array& xv) { return run(wv, sv, xv); });
  {
    SCOPED_TRACE("jit");
    check(f(w, stack, x));
  }
  {
    SCOPED_TRACE("sharded");
    Mesh mesh = make_mesh({2}, {"x"});
    check(f(device_put(w, NamedSharding(mesh, P("x", None))),
            device_put(stack, NamedSharding(mesh, P(None, "x"))),
            device_put(x, NamedSharding(mesh, P()))));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedControlFlow,
                         ::testing::Values(DType::Q8_0, DType::Q4_1, DType::Q4_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// grad flows to the float operand of a quantized matmul (as with the dequantized weight);
// asking for the weight's gradient is an error that says why.
TEST(QuantizedGrad, FloatOperandDifferentiatesWeightDoesNot) {
  for (DType dt : {DType::Q8_0, DType::Q4_1, DType::Q4_K}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const int64_t K = dtype_block_elems(dt), N = 5;
    Array w = quantized(dt, N, K, 8);
    Array wf = astype(w, DType::F32);
    Array x = from_vector(random_floats(3 * K, 9), {3, K});
    Array up = from_vector(random_floats(3 * N, 10), {3, N});
    // Linear in the matmul: d loss / dx = up w exactly, whatever the forward's rounding.
    auto loss = [&](const Array& a, const Array& c) {
      return sum(einsum("mk,nk->mn", {a, c}) * up);
    };
    expect_close(grad(loss)(x, w).array().to_vector<float>(),
                 grad(loss)(x, wf).array().to_vector<float>(), 1e-5);
    auto sharded = jit(grad(loss));
    Mesh mesh = make_mesh({2}, {"x"});
    expect_close(sharded(device_put(x, NamedSharding(mesh, P(None, "x"))),
                         device_put(w, NamedSharding(mesh, P("x", None))))
                     .array()
                     .to_vector<float>(),
                 grad(loss)(x, wf).array().to_vector<float>(), 1e-5);
    // Through a loop and a branch that capture the weight.
    auto looped = [&](const Array& a, const Array& c) {
      Array h = fori_loop(
          0, 2, [&](const Array&, const Array& v) { return v * 0.5; }, a);
      Array y = cond(
          sum(abs(h)) > -1.0,
          [&](const Array& v) {
            return einsum("mk,nk->mn", {v, c});
          },
          [&](const Array& v) {
            return einsum("mk,nk->mn", {v, c}) * 0.0;
          },
          h);
      auto body = [&](const Array& acc, const Array& row) {
        return std::pair{acc + sum(einsum("k,nk->n", {row, c})), acc};
      };
      return scan(body, sum(y * up), h).first;
    };
    expect_close(grad(looped)(x, w).array().to_vector<float>(),
                 grad(looped)(x, wf).array().to_vector<float>(), 1e-5);
    EXPECT_PARTIX_ERROR(grad(loss, 1)(x, w),
                        "[grad] cannot differentiate with respect to a quantized argument",
                        std::string(dtype_name(dt)) + "[5,");
  }
}

}  // namespace
}  // namespace partix
