// Fast CPU data-movement and reduction kernels against the reference kernels (the oracle).
//
// Tolerances: transpose, broadcast_in_dim, slice, concatenate, pad, integer reductions, max / min
// reductions and argmax / argmin must match exactly (max / min up to the sign of a zero
// result, which neither implementation specifies). Floating sums accumulate in f32 (f64 for
// f64) with pairwise blocking, so they may differ from the reference's double sum by at most
// (24 + log2 n) units of accumulator rounding times sum |x| (the blocked-pairwise error bound:
// 16 adds per lane within a 1024-block, log2(64) to fold the lanes, log2(blocks) above), plus
// one ulp of the result dtype for the final rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <thread>

#include "backend/kernel_harness.h"

namespace partix::testing_kernels {
namespace {

const std::vector<DType> kMoveDtypes = {DType::Bool, DType::BF16, DType::F32, DType::F64};

Shape random_shape(std::mt19937_64& rng, int rank, int64_t max_dim = 9) {
  Shape s;
  for (int d = 0; d < rank; ++d) {
    int64_t pick = static_cast<int64_t>(rng() % 10);
    s.push_back(
        pick == 0 ? 1
                  : (pick == 1 && rng() % 4 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % max_dim)));
  }
  return s;
}

void check_exact(const std::string& prim, const Attrs& attrs, const std::vector<Tensor>& ins,
                 const std::string& what) {
  KernelRun ref = run_kernel(prim, attrs, ins, false);
  KernelRun fast = run_kernel(prim, attrs, ins, true);
  ASSERT_TRUE(fast.handled) << what;
  expect_exact(fast.outs[0], ref.outs[0], what);
}

// ---- data movement ----

TEST(CpuShape, TransposeRandom) {
  std::mt19937_64 rng(21);
  for (int iter = 0; iter < 400; ++iter) {
    const int rank = static_cast<int>(rng() % 6);
    Shape s = random_shape(rng, rank);
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    DType dt = kMoveDtypes[rng() % kMoveDtypes.size()];
    Tensor x = random_tensor(dt, s, rng, Fill::kAnyBits);
    check_exact("transpose", Attrs{{"perm", perm}}, {x},
                "transpose " + x.aval.to_string() + " perm " + shape_to_string(perm));
  }
}

TEST(CpuShape, TransposeLargeTiles) {
  // Big enough for the parallel path and tiles with ragged edges, in every element width.
  std::mt19937_64 rng(22);
  for (DType dt : kMoveDtypes) {
    for (auto [s, perm] : std::vector<std::pair<Shape, ir::Ints>>{{{301, 257}, {1, 0}},
                                                                  {{3, 129, 67}, {2, 1, 0}},
                                                                  {{8, 65, 2, 33}, {0, 3, 2, 1}},
                                                                  {{5, 7, 1031}, {2, 0, 1}}}) {
      Tensor x = random_tensor(dt, s, rng, Fill::kAnyBits);
      check_exact("transpose", Attrs{{"perm", perm}}, {x}, "transpose " + x.aval.to_string());
    }
  }
}

TEST(CpuShape, BroadcastInDimRandom) {
  std::mt19937_64 rng(23);
  for (int iter = 0; iter < 400; ++iter) {
    const int out_rank = static_cast<int>(rng() % 5);
    Shape out = random_shape(rng, out_rank);
    // Keep a random increasing subset of result dims; some kept dims become size 1.
    ir::Ints dims;
    Shape in;
    for (int d = 0; d < out_rank; ++d) {
      if (rng() % 2) {
        dims.push_back(d);
        in.push_back(rng() % 3 == 0 ? 1 : out[static_cast<size_t>(d)]);
      }
    }
    DType dt = kMoveDtypes[rng() % kMoveDtypes.size()];
    Tensor x = random_tensor(dt, in, rng, Fill::kAnyBits);
    check_exact("broadcast_in_dim", Attrs{{"shape", out}, {"dims", dims}}, {x},
                "broadcast " + x.aval.to_string() + " to " + shape_to_string(out));
  }
  // Large: a row vector over many rows, a column over many columns.
  for (auto [in, out, dims] : std::vector<std::tuple<Shape, Shape, ir::Ints>>{
           {{1000}, {70, 1000}, {1}}, {{70, 1}, {70, 1000}, {0, 1}}, {{}, {300, 301}, {}}}) {
    Tensor x = random_tensor(DType::F32, in, rng);
    check_exact("broadcast_in_dim", Attrs{{"shape", out}, {"dims", dims}}, {x}, "broadcast large");
  }
}

TEST(CpuShape, SliceRandom) {
  std::mt19937_64 rng(24);
  for (int iter = 0; iter < 400; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    Shape s = random_shape(rng, rank, 12);
    ir::Ints start, stop, steps;
    for (int64_t n : s) {
      int64_t a = n == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
      int64_t b =
          a + (n - a == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(n - a + 1)));
      start.push_back(a);
      stop.push_back(b);
      steps.push_back(1 + static_cast<int64_t>(rng() % 3));
    }
    DType dt = kMoveDtypes[rng() % kMoveDtypes.size()];
    Tensor x = random_tensor(dt, s, rng, Fill::kAnyBits);
    Attrs attrs{{"start", start}, {"stop", stop}};
    if (rng() % 2) attrs.set("strides", steps);
    check_exact("slice", attrs, {x}, "slice " + x.aval.to_string() + " " + attrs.to_string());
  }
}

TEST(CpuShape, ConcatenateRandom) {
  std::mt19937_64 rng(25);
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    Shape base = random_shape(rng, rank);
    const int axis = static_cast<int>(rng() % static_cast<uint64_t>(rank));
    DType dt = kMoveDtypes[rng() % kMoveDtypes.size()];
    std::vector<Tensor> xs;
    const int count = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < count; ++k) {
      Shape s = base;
      s[static_cast<size_t>(axis)] = static_cast<int64_t>(rng() % 5);
      xs.push_back(random_tensor(dt, s, rng, Fill::kAnyBits));
    }
    check_exact("concatenate", Attrs{{"axis", int64_t{axis}}}, xs,
                "concatenate axis " + std::to_string(axis) + " of " + xs[0].aval.to_string());
  }
  Tensor a = random_tensor(DType::F32, {300, 200}, rng),
         b = random_tensor(DType::F32, {300, 57}, rng);
  check_exact("concatenate", Attrs{{"axis", int64_t{1}}}, {a, b}, "concatenate large");
}

TEST(CpuShape, PadRandom) {
  std::mt19937_64 rng(26);
  const double values[] = {0.0, -0.0, 1.5, -INFINITY};
  for (int iter = 0; iter < 400; ++iter) {
    const int rank = static_cast<int>(rng() % 5);
    Shape s = random_shape(rng, rank);
    ir::Ints low, high;
    for (int d = 0; d < rank; ++d) {
      // Often unpadded, so that unpadded inner dims join the copied chunk.
      low.push_back(rng() % 2 ? 0 : static_cast<int64_t>(rng() % 3));
      high.push_back(rng() % 2 ? 0 : static_cast<int64_t>(rng() % 3));
    }
    DType dt = kMoveDtypes[rng() % kMoveDtypes.size()];
    Tensor x = random_tensor(dt, s, rng, Fill::kAnyBits);
    Attrs attrs{{"low", low}, {"high", high}, {"value", values[rng() % std::size(values)]}};
    check_exact("pad", attrs, {x}, "pad " + x.aval.to_string() + " " + attrs.to_string());
  }
  // Large (the parallel path): q, k, v cotangents padded back into [B, T, 3, H, D].
  Tensor g = random_tensor(DType::F32, {2, 128, 1, 12, 64}, rng);
  check_exact("pad",
              Attrs{{"low", ir::Ints{0, 0, 1, 0, 0}}, {"high", ir::Ints{0, 0, 1, 0, 0}},
                    {"value", 0.0}},
              {g}, "pad large");
}

TEST(CpuShape, PadInteriorFallsBackToTheReference) {
  std::mt19937_64 rng(27);
  Tensor x = random_tensor(DType::F32, {3, 4}, rng);
  Attrs attrs{{"low", ir::Ints{0, 1}}, {"high", ir::Ints{0, 0}}, {"interior", ir::Ints{0, 1}},
              {"value", 0.0}};
  EXPECT_FALSE(run_kernel("pad", attrs, {x}, true).handled);
}

// ---- reductions ----

double ulp_at(DType dt, double v) {
  int e = 0;
  std::frexp(v == 0 ? 1e-300 : v, &e);
  const int digits = dt == DType::F64 ? 53 : dt == DType::F32 ? 24 : dt == DType::BF16 ? 8 : 11;
  return std::ldexp(1.0, e - digits);
}

// Sum of |x| over the same reduction, in double (for the error bound).
Tensor abs_sum(const Tensor& x, const Attrs& attrs) {
  Tensor ax{Aval{x.aval.shape, DType::F64},
            std::vector<char>(static_cast<size_t>(x.aval.size()) * 8)};
  for (int64_t i = 0; i < x.aval.size(); ++i) ax.data<double>()[i] = std::fabs(x.at(i));
  return run_kernel("reduce_sum", attrs, {ax}, false).outs[0];
}

void check_reduce(const std::string& prim, const Tensor& x, const ir::Ints& axes) {
  Attrs attrs{{"axes", axes}};
  std::string what = prim + " " + x.aval.to_string() + " axes " + shape_to_string(axes);
  KernelRun ref = run_kernel(prim, attrs, {x}, false);
  KernelRun fast = run_kernel(prim, attrs, {x}, true);
  ASSERT_TRUE(fast.handled) << what;
  const DType dt = x.aval.dtype;
  if (!is_floating(dt)) {
    expect_exact(fast.outs[0], ref.outs[0], what);
    return;
  }
  const Tensor& f = fast.outs[0];
  const Tensor& r = ref.outs[0];
  ASSERT_EQ(f.aval, r.aval) << what;
  if (prim != "reduce_sum") {
    for (int64_t i = 0; i < r.aval.size(); ++i) {
      const double a = f.at(i), b = r.at(i);
      EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || a == b)
          << what << " at " << i << ": " << a << " vs " << b;
    }
    return;
  }
  int64_t n = 1;
  for (int64_t a : axes) n *= x.aval.shape[static_cast<size_t>(a)];
  const double u = dt == DType::F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double c = 24 + std::log2(static_cast<double>(n) + 1);
  Tensor mag = abs_sum(x, attrs);
  int shown = 0;
  for (int64_t i = 0; i < r.aval.size(); ++i) {
    const double a = f.at(i), b = r.at(i);
    if (std::isnan(b) || std::isinf(b)) {
      EXPECT_TRUE(std::isnan(b) ? std::isnan(a) : a == b)
          << what << " at " << i << ": " << a << " vs " << b;
      continue;
    }
    const double tol = c * u * mag.at(i) + ulp_at(dt, b);
    if (!(std::fabs(a - b) <= tol) && shown++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": " << a << " vs " << b << " (tolerance " << tol
                    << ")";
    }
  }
}

TEST(CpuReduce, AllAxisSubsets) {
  std::mt19937_64 rng(31);
  const std::vector<DType> dtypes = {DType::F32, DType::BF16, DType::F16,
                                     DType::F64, DType::I32,  DType::I64};
  const std::vector<Shape> shapes = {{},        {0},          {1},          {7},     {5, 0},
                                     {3, 1, 4}, {2, 3, 5, 7}, {1, 9, 1, 6}, {33, 65}};
  for (const char* prim : {"reduce_sum", "reduce_max", "reduce_min"}) {
    for (DType dt : dtypes) {
      for (const Shape& s : shapes) {
        const int rank = static_cast<int>(s.size());
        for (int mask = 0; mask < (1 << rank); ++mask) {
          ir::Ints axes;
          for (int d = 0; d < rank; ++d) {
            if (mask >> d & 1) axes.push_back(d);
          }
          if (axes.size() > 1 && (mask & 1))
            std::reverse(axes.begin(), axes.end());  // order is irrelevant
          Fill fill = std::string(prim) == "reduce_sum" ? Fill::kNormal : Fill::kSpecial;
          check_reduce(prim, random_tensor(dt, s, rng, fill), axes);
        }
      }
    }
  }
}

TEST(CpuReduce, LargeRowsColumnsAndMixed) {
  std::mt19937_64 rng(32);
  for (DType dt : {DType::F32, DType::BF16, DType::F64, DType::I32}) {
    for (const char* prim : {"reduce_sum", "reduce_max", "reduce_min"}) {
      check_reduce(prim, random_tensor(dt, {1 << 20}, rng), {0});            // one long row
      check_reduce(prim, random_tensor(dt, {37, 5000}, rng), {1});           // rows
      check_reduce(prim, random_tensor(dt, {1000, 700}, rng), {0});          // columns
      check_reduce(prim, random_tensor(dt, {3, 300, 130}, rng), {1});        // outer x columns
      check_reduce(prim, random_tensor(dt, {20, 30, 40, 50}, rng), {0, 2});  // permuted
    }
  }
}

TEST(CpuReduce, NaNAndInfinities) {
  std::mt19937_64 rng(33);
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    for (const char* prim : {"reduce_sum", "reduce_max", "reduce_min"}) {
      for (const Shape& s : {Shape{4000}, Shape{40, 100}}) {
        Tensor x = random_tensor(dt, s, rng);
        detail::store_scalar(x.bytes.data() + 17 * dtype_size(dt), dt, NAN);
        detail::store_scalar(x.bytes.data() + 1234 * dtype_size(dt), dt, INFINITY);
        detail::store_scalar(x.bytes.data() + 2345 * dtype_size(dt), dt, -INFINITY);
        check_reduce(prim, x, {0});
        check_reduce(prim, x, {static_cast<int64_t>(s.size()) - 1});
      }
    }
  }
}

TEST(CpuReduce, PairwiseSumIsAccurate) {
  // 2^24 copies of 0.1f: a sequential f32 sum stalls at 2^21 (0.1 is below half an ulp of
  // the running sum there), the pairwise sum stays within a few ulp of the exact value.
  const int64_t n = int64_t{1} << 24;
  Tensor x{Aval{{n}, DType::F32}, std::vector<char>(static_cast<size_t>(n) * 4)};
  std::fill(x.data<float>(), x.data<float>() + n, 0.1f);
  KernelRun fast = run_kernel("reduce_sum", Attrs{{"axes", ir::Ints{0}}}, {x}, true);
  const double exact = static_cast<double>(0.1f) * static_cast<double>(n);
  EXPECT_NEAR(fast.outs[0].at(0), exact, exact * 1e-6);
  // Columns too: 2^16 rows.
  Tensor y{Aval{{int64_t{1} << 16, 3}, DType::F32}, std::vector<char>((size_t{1} << 16) * 12)};
  std::fill(y.data<float>(), y.data<float>() + (int64_t{3} << 16), 0.1f);
  KernelRun col = run_kernel("reduce_sum", Attrs{{"axes", ir::Ints{0}}}, {y}, true);
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(col.outs[0].at(j), static_cast<double>(0.1f) * 65536, 6553.6 * 1e-6);
  }
}

TEST(CpuReduce, ArgmaxArgmin) {
  std::mt19937_64 rng(34);
  for (const char* prim : {"argmax", "argmin"}) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64, DType::I32, DType::I64}) {
      for (const Shape& s :
           {Shape{1}, Shape{7}, Shape{3, 1, 4}, Shape{5, 9, 3}, Shape{200, 301}, Shape{0, 4}}) {
        for (int64_t axis = 0; axis < static_cast<int64_t>(s.size()); ++axis) {
          if (s[static_cast<size_t>(axis)] == 0) continue;  // an empty axis has no argmax
          for (Fill fill : {Fill::kNormal, Fill::kSpecial}) {
            Tensor x = random_tensor(dt, s, rng, fill);
            // Ties: copy a few elements onto others.
            for (int64_t i = 3; i < x.aval.size(); i += 5) {
              std::memcpy(x.bytes.data() + i * dtype_size(dt),
                          x.bytes.data() + (i / 2) * dtype_size(dt),
                          static_cast<size_t>(dtype_size(dt)));
            }
            for (DType idx : {DType::I32, DType::I64}) {
              check_exact(
                  prim, Attrs{{"axis", axis}, {"index_dtype", idx}}, {x},
                  std::string(prim) + " " + x.aval.to_string() + " axis " + std::to_string(axis));
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace partix::testing_kernels
