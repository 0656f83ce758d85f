// Fast CPU elementwise kernels against the reference kernels (the oracle).
//
// Every row of the elementwise table (ir/elementwise_table.inc) is checked. Tolerances: every
// op whose f32 result equals the double result rounded (+ - * / sqrt, max, min, comparisons,
// neg abs sign floor ceil round) or that the fast kernel evaluates in double like the
// reference (rsqrt pow rem log1p expm1 erf_inv, all f64, integer and bool ops, select,
// convert) must match bit for bit (NaN payloads aside). exp tanh logistic erf log sin cos use
// the polynomial approximations of vector_math.h: at most 1 ulp from the reference in f32,
// and so at most 1 ulp of bf16 / f16 after rounding.
#include <gtest/gtest.h>

#include <random>

#include "backend/kernel_harness.h"
#include "ir/elementwise_ops.h"

namespace partix::testing_kernels {
namespace {

namespace ew = prim::ew;

const std::vector<Shape> kShapes = {{}, {0}, {1}, {7}, {3, 37}, {1000}, {70001}};
const std::vector<DType> kAllDtypes = {DType::F32, DType::BF16, DType::F16, DType::F64,
                                       DType::I32, DType::I64,  DType::Bool};

bool admits(ew::Allowed a, DType d) {
  if (d == DType::Bool) return ew::allows_bool(a);
  if (is_integral(d)) return ew::allows_int(a);
  return ew::allows_float(a);
}

std::string label(const std::string& op, DType dt, const Shape& s, const std::string& extra = "") {
  return op + " " + std::string(dtype_name(dt)) + shape_to_string(s) + extra;
}

// ---- unary ----

template <class Op>
void check_unary(double max_ulp) {
  std::mt19937_64 rng(std::hash<std::string>{}(Op::kName));
  for (DType dt : kAllDtypes) {
    if (!admits(Op::kAllowed, dt)) continue;
    for (const Shape& s : kShapes) {
      for (Fill fill : {Fill::kNormal, Fill::kSpecial, Fill::kAnyBits}) {
        Tensor x = random_tensor(dt, s, rng, fill);
        KernelRun ref = run_kernel(Op::kName, {}, {x}, false);
        KernelRun fast = run_kernel(Op::kName, {}, {x}, true);
        ASSERT_TRUE(fast.handled) << label(Op::kName, dt, s);
        if (max_ulp == 0 || !is_floating(dt)) {
          expect_exact(fast.outs[0], ref.outs[0], label(Op::kName, dt, s));
        } else {
          expect_ulp(fast.outs[0], ref.outs[0], max_ulp, label(Op::kName, dt, s));
        }
        // In place: the result overwrites its operand.
        KernelRun inplace = run_kernel(Op::kName, {}, {x}, true, 0);
        expect_exact(inplace.outs[0], fast.outs[0], label(Op::kName, dt, s, " in place"));
      }
    }
  }
}

TEST(CpuElementwise, EveryUnaryRow) {
  // Rows the fast kernel computes exactly or in double (the f32 column) match bit for bit;
  // vector-math and block ones within 1 ulp.
  int rows = 0;
  ew::for_each_unary([&]<class Op>() {
    const bool approx = Op::kF32 == ew::F32Eval::kVector || Op::kF32 == ew::F32Eval::kBlock;
    check_unary<Op>(approx ? 1 : 0);
    ++rows;
  });
  EXPECT_GE(rows, 19);
}

// A dense sweep of f32 inputs (every 509th bit pattern: all exponents, both signs, NaN and
// inf): at most 1 ulp everywhere, and equal to the reference for the vast majority.
template <class Op>
void sweep_f32(double max_mismatch_fraction) {
  constexpr int64_t kN = (int64_t{1} << 32) / 509;
  Tensor x{Aval{{kN}, DType::F32}, std::vector<char>(static_cast<size_t>(kN) * 4)};
  for (int64_t i = 0; i < kN; ++i) x.data<uint32_t>()[i] = static_cast<uint32_t>(i * 509 + 17);
  KernelRun ref = run_kernel(Op::kName, {}, {x}, false);
  KernelRun fast = run_kernel(Op::kName, {}, {x}, true);
  ASSERT_TRUE(fast.handled);
  EXPECT_LE(expect_ulp(fast.outs[0], ref.outs[0], 1, std::string(Op::kName) + " sweep"), 1);
  int64_t differ = 0;
  for (int64_t i = 0; i < kN; ++i) {
    differ += ulp_distance(DType::F32, fast.outs[0].bytes.data() + 4 * i,
                           ref.outs[0].bytes.data() + 4 * i) != 0;
  }
  EXPECT_LE(static_cast<double>(differ) / kN, max_mismatch_fraction) << Op::kName;
}

TEST(CpuElementwise, TranscendentalSweepF32) {
  // Measured while writing vector_math.h: exp differs from the reference in 0.4% of inputs,
  // logistic 1.8%, erf 0.7%, tanh 0.2%, the double-evaluated log/sin/cos almost never.
  sweep_f32<ew::Exp>(0.01);
  sweep_f32<ew::Tanh>(0.01);
  sweep_f32<ew::Logistic>(0.03);
  sweep_f32<ew::Erf>(0.01);
  sweep_f32<ew::Log>(1e-4);
  sweep_f32<ew::Sin>(1e-4);
  sweep_f32<ew::Cos>(1e-4);
}

TEST(CpuElementwise, SpecialValues) {
  // Signed zeros, infinities and NaN through the approximations, bit for bit.
  const std::vector<float> xs = {0.0f,  -0.0f, INFINITY, -INFINITY, NAN,     1e-45f, -1e-45f,
                                 88.7f, 88.8f, -87.4f,   -103.9f,   -104.5f, 9.1f,   -9.1f,
                                 4.0f,  1e10f, -1e10f,   524288.5f, 3.0e38f};
  Tensor x{Aval{{static_cast<int64_t>(xs.size())}, DType::F32}, std::vector<char>(xs.size() * 4)};
  std::memcpy(x.bytes.data(), xs.data(), xs.size() * 4);
  for (const char* op : {"exp", "log", "tanh", "logistic", "erf", "sin", "cos"}) {
    KernelRun ref = run_kernel(op, {}, {x}, false);
    KernelRun fast = run_kernel(op, {}, {x}, true);
    expect_ulp(fast.outs[0], ref.outs[0], 1, op);
    for (size_t i = 0; i < xs.size(); ++i) {
      float a = fast.outs[0].data<float>()[i], b = ref.outs[0].data<float>()[i];
      if (a == 0 && b == 0) {
        EXPECT_EQ(std::signbit(a), std::signbit(b)) << op << "(" << xs[i] << ")";
      }
      if (std::isinf(b)) {
        EXPECT_EQ(a, b) << op << "(" << xs[i] << ")";
      }
    }
  }
}

// ---- binary ----

template <class Op>
void check_binary() {
  std::mt19937_64 rng(std::hash<std::string>{}(Op::kName) + 1);
  for (DType dt : kAllDtypes) {
    if (!admits(Op::kAllowed, dt)) continue;
    for (const Shape& s : kShapes) {
      for (int scalars = 0; scalars < 4; ++scalars) {  // bit 0: lhs rank 0, bit 1: rhs rank 0
        if (s.empty() && scalars != 3) continue;
        Shape sa = (scalars & 1) ? Shape{} : s, sb = (scalars & 2) ? Shape{} : s;
        Fill fill = (rng() & 1) ? Fill::kSpecial : Fill::kNormal;
        Tensor a = random_tensor(dt, sa, rng, fill);
        Tensor b = random_tensor(dt, sb, rng, fill);
        if (shape_size(s) > 3) {
          // Ties and equal elements matter for comparisons, max and min.
          for (int64_t i = 0; i + 1 < shape_size(sa) && i + 1 < shape_size(sb); i += 3) {
            std::memcpy(a.bytes.data() + i * dtype_size(dt), b.bytes.data() + i * dtype_size(dt),
                        static_cast<size_t>(dtype_size(dt)));
          }
        }
        std::string what = label(Op::kName, dt, s, " scalars=" + std::to_string(scalars));
        KernelRun ref = run_kernel(Op::kName, {}, {a, b}, false);
        KernelRun fast = run_kernel(Op::kName, {}, {a, b}, true);
        ASSERT_TRUE(fast.handled) << what;
        expect_exact(fast.outs[0], ref.outs[0], what);
        // In place over whichever operand has the result's shape and dtype.
        for (int k = 0; k < 2; ++k) {
          const Tensor& op = k == 0 ? a : b;
          if (op.aval == ref.outs[0].aval) {
            KernelRun inplace = run_kernel(Op::kName, {}, {a, b}, true, k);
            expect_exact(inplace.outs[0], ref.outs[0], what + " in place " + std::to_string(k));
          }
        }
      }
    }
  }
}

TEST(CpuElementwise, EveryBinaryRow) {
  // Arithmetic and comparisons, bit for bit.
  int rows = 0;
  ew::for_each_binary([&]<class Op>() {
    check_binary<Op>();
    ++rows;
  });
  EXPECT_GE(rows, 16);
}

TEST(CpuElementwise, IntegerDivisionEdgeCases) {
  // x / 0 = -1, x % 0 = x, INT_MIN / -1 = INT_MIN (XLA's definitions), in both widths.
  for (DType dt : {DType::I32, DType::I64}) {
    Tensor a{Aval{{6}, dt}, std::vector<char>(static_cast<size_t>(6 * dtype_size(dt)))};
    Tensor b = a;
    const int64_t lo = dt == DType::I32 ? INT32_MIN : INT64_MIN;
    const int64_t av[] = {7, -7, lo, lo, 5, 0}, bv[] = {0, 2, -1, 1, -1, 0};
    for (int i = 0; i < 6; ++i) {
      detail::store_int(a.bytes.data() + i * dtype_size(dt), dt, av[i]);
      detail::store_int(b.bytes.data() + i * dtype_size(dt), dt, bv[i]);
    }
    for (const char* op : {"div", "rem"}) {
      KernelRun ref = run_kernel(op, {}, {a, b}, false);
      KernelRun fast = run_kernel(op, {}, {a, b}, true);
      expect_exact(fast.outs[0], ref.outs[0], std::string(op) + " " + std::string(dtype_name(dt)));
    }
    KernelRun q = run_kernel("div", {}, {a, b}, true);
    EXPECT_EQ(detail::load_int(q.outs[0].bytes.data(), dt), -1);
    EXPECT_EQ(detail::load_int(q.outs[0].bytes.data() + 2 * dtype_size(dt), dt), lo);
  }
}

// ---- select ----

TEST(CpuElementwise, Select) {
  std::mt19937_64 rng(11);
  for (DType dt : kAllDtypes) {
    for (const Shape& s : kShapes) {
      for (int scalars = 0; scalars < 8; ++scalars) {  // bits: pred, on_true, on_false rank 0
        if (s.empty() && scalars != 7) continue;
        auto shape_of = [&](int bit) { return (scalars >> bit) & 1 ? Shape{} : s; };
        Tensor p = random_tensor(DType::Bool, shape_of(0), rng);
        Tensor t = random_tensor(dt, shape_of(1), rng, Fill::kSpecial);
        Tensor f = random_tensor(dt, shape_of(2), rng, Fill::kSpecial);
        std::string what = label("select", dt, s, " scalars=" + std::to_string(scalars));
        KernelRun ref = run_kernel("select", {}, {p, t, f}, false);
        KernelRun fast = run_kernel("select", {}, {p, t, f}, true);
        ASSERT_TRUE(fast.handled) << what;
        expect_exact(fast.outs[0], ref.outs[0], what);
        for (int k = 0; k < 3; ++k) {
          const Tensor& op = k == 0 ? p : (k == 1 ? t : f);
          if (op.aval == ref.outs[0].aval) {
            KernelRun inplace = run_kernel("select", {}, {p, t, f}, true, k);
            expect_exact(inplace.outs[0], ref.outs[0], what + " in place " + std::to_string(k));
          }
        }
      }
    }
  }
}

// ---- convert ----

TEST(CpuElementwise, ConvertAllPairs) {
  std::mt19937_64 rng(12);
  for (DType from : kAllDtypes) {
    for (DType to : kAllDtypes) {
      for (const Shape& s : {Shape{}, Shape{0}, Shape{5}, Shape{4, 333}, Shape{70001}}) {
        for (Fill fill : {Fill::kNormal, Fill::kSpecial, Fill::kAnyBits}) {
          Tensor x = random_tensor(from, s, rng, fill);
          if (fill == Fill::kNormal && is_floating(from)) {
            // Values around the integer ranges' ends: saturation and truncation.
            const double edges[] = {2147483647.0, 2147483648.0, -2147483649.0, 9.3e18, -9.3e18,
                                    -0.7,         0.7,          255.5,         -1e-45};
            for (int64_t i = 0; i < shape_size(s); i += 7) {
              detail::store_scalar(x.bytes.data() + i * dtype_size(from), from,
                                   edges[static_cast<size_t>(i / 7) % std::size(edges)]);
            }
          }
          Attrs attrs{{"dtype", to}};
          std::string what = "convert " + std::string(dtype_name(from)) + "->" +
                             std::string(dtype_name(to)) + shape_to_string(s);
          KernelRun ref = run_kernel("convert", attrs, {x}, false);
          KernelRun fast = run_kernel("convert", attrs, {x}, true);
          ASSERT_TRUE(fast.handled) << what;
          expect_exact(fast.outs[0], ref.outs[0], what);
          if (dtype_size(from) == dtype_size(to)) {
            KernelRun inplace = run_kernel("convert", attrs, {x}, true, 0);
            expect_exact(inplace.outs[0], ref.outs[0], what + " in place");
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace partix::testing_kernels
