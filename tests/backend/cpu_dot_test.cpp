// The fast CPU dot_general (oneDNN matmul and the f64 / integer loops) against the reference
// kernel, over every dimension layout.
//
// Tolerance: the reference accumulates in double. f32 and bf16 / f16 operands accumulate in
// f32 (bf16 products are exact in f32), so each result may differ by the classic bound for a
// length-K dot product, (K + 2) u sum_k |a_k b_k| with u = 2^-24 (f64: u = 2^-53), plus one
// ulp of the result dtype for its final rounding (bf16 / f16 results are rounded from f32 in
// the fast kernel, from double in the reference). Integer results must match exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <thread>

#include "backend/cpu/kernel_util.h"
#include "backend/cpu/thread_team.h"
#include "backend/kernel_harness.h"

namespace partix::testing_kernels {
namespace {

struct DotCase {
  Shape lhs, rhs;
  ir::Ints lc, rc, lb, rb;  // contracting and batch dims
};

Attrs dot_attrs(const DotCase& d, std::optional<DType> out = std::nullopt) {
  Attrs a{{"lhs_contract", d.lc}, {"rhs_contract", d.rc}, {"lhs_batch", d.lb}, {"rhs_batch", d.rb}};
  if (out) a.set("out_dtype", *out);
  return a;
}

// A random dot_general: up to two batch, contracting and free dims per side, each operand's
// dims in a random order, pairs listed in a random order.
DotCase random_case(std::mt19937_64& rng, int64_t max_dim) {
  auto dim = [&] {
    int64_t r = static_cast<int64_t>(rng() % 8);
    return r == 0 ? int64_t{1} : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_dim));
  };
  const int nb = static_cast<int>(rng() % 3), nc = static_cast<int>(rng() % 3);
  const int nlf = static_cast<int>(rng() % 3), nrf = static_cast<int>(rng() % 3);
  std::vector<int64_t> bs, cs, lfs, rfs;
  for (int i = 0; i < nb; ++i) bs.push_back(dim());
  for (int i = 0; i < nc; ++i) cs.push_back(dim());
  for (int i = 0; i < nlf; ++i) lfs.push_back(dim());
  for (int i = 0; i < nrf; ++i) rfs.push_back(dim());
  // Roles per position, shuffled: 'b' batch i, 'c' contract i, 'f' free i.
  auto layout = [&](int nfree) {
    std::vector<std::pair<char, int>> roles;
    for (int i = 0; i < nb; ++i) roles.push_back({'b', i});
    for (int i = 0; i < nc; ++i) roles.push_back({'c', i});
    for (int i = 0; i < nfree; ++i) roles.push_back({'f', i});
    std::shuffle(roles.begin(), roles.end(), rng);
    return roles;
  };
  auto lroles = layout(nlf), rroles = layout(nrf);
  DotCase d;
  d.lb.resize(static_cast<size_t>(nb));
  d.rb.resize(static_cast<size_t>(nb));
  d.lc.resize(static_cast<size_t>(nc));
  d.rc.resize(static_cast<size_t>(nc));
  for (size_t p = 0; p < lroles.size(); ++p) {
    auto [r, i] = lroles[p];
    d.lhs.push_back(r == 'b'   ? bs[static_cast<size_t>(i)]
                    : r == 'c' ? cs[static_cast<size_t>(i)]
                               : lfs[static_cast<size_t>(i)]);
    if (r == 'b') d.lb[static_cast<size_t>(i)] = static_cast<int64_t>(p);
    if (r == 'c') d.lc[static_cast<size_t>(i)] = static_cast<int64_t>(p);
  }
  for (size_t p = 0; p < rroles.size(); ++p) {
    auto [r, i] = rroles[p];
    d.rhs.push_back(r == 'b'   ? bs[static_cast<size_t>(i)]
                    : r == 'c' ? cs[static_cast<size_t>(i)]
                               : rfs[static_cast<size_t>(i)]);
    if (r == 'b') d.rb[static_cast<size_t>(i)] = static_cast<int64_t>(p);
    if (r == 'c') d.rc[static_cast<size_t>(i)] = static_cast<int64_t>(p);
  }
  // Contracting pairs in a random order (batch order fixes the result layout).
  std::vector<size_t> order(static_cast<size_t>(nc));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  ir::Ints lc, rc;
  for (size_t i : order) {
    lc.push_back(d.lc[i]);
    rc.push_back(d.rc[i]);
  }
  d.lc = lc;
  d.rc = rc;
  return d;
}

std::string describe(const DotCase& d, DType in, DType out) {
  return std::string(dtype_name(in)) + shape_to_string(d.lhs) + " x " + shape_to_string(d.rhs) +
         " contract " + shape_to_string(d.lc) + "/" + shape_to_string(d.rc) + " batch " +
         shape_to_string(d.lb) + "/" + shape_to_string(d.rb) + " -> " +
         std::string(dtype_name(out));
}

Tensor abs_copy_f64(const Tensor& x) {
  Tensor a{Aval{x.aval.shape, DType::F64},
           std::vector<char>(static_cast<size_t>(x.aval.size()) * 8)};
  for (int64_t i = 0; i < x.aval.size(); ++i) a.data<double>()[i] = std::fabs(x.at(i));
  return a;
}

double ulp_of(DType dt, double v) {
  int e = 0;
  std::frexp(v == 0 ? 1e-300 : v, &e);
  const int digits = dt == DType::F64 ? 53 : dt == DType::F32 ? 24 : dt == DType::BF16 ? 8 : 11;
  return std::ldexp(1.0, e - digits);
}

// Runs fast and reference on (a, b) and checks the bound; returns false if the fast kernel
// declined the case.
bool check_dot(const DotCase& d, const Tensor& a, const Tensor& b, DType out) {
  const DType in = a.aval.dtype;
  Attrs attrs = dot_attrs(d, out == in ? std::nullopt : std::optional<DType>(out));
  const std::string what = describe(d, in, out);
  KernelRun ref = run_kernel("dot_general", attrs, {a, b}, false);
  KernelRun fast = run_kernel("dot_general", attrs, {a, b}, true);
  if (!fast.handled) return false;
  const Tensor& f = fast.outs[0];
  const Tensor& r = ref.outs[0];
  EXPECT_EQ(f.aval, r.aval) << what;
  if (!is_floating(out)) {
    expect_exact(f, r, what);
    return true;
  }
  int64_t k = 1;
  for (int64_t x : d.lc) k *= d.lhs[static_cast<size_t>(x)];
  const double u = in == DType::F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  KernelRun mag =
      run_kernel("dot_general", dot_attrs(d), {abs_copy_f64(a), abs_copy_f64(b)}, false);
  int shown = 0;
  for (int64_t i = 0; i < r.aval.size(); ++i) {
    const double tol = static_cast<double>(k + 2) * u * mag.outs[0].at(i) + ulp_of(out, r.at(i));
    if (!(std::fabs(f.at(i) - r.at(i)) <= tol) && shown++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": fast " << f.at(i) << " reference " << r.at(i)
                    << " tolerance " << tol;
    }
  }
  return true;
}

// Dtype combinations the fast kernel must handle: (operands, result).
const std::vector<std::pair<DType, DType>> kHandled = {
    {DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::BF16, DType::F32},
    {DType::F16, DType::F16}, {DType::F16, DType::F32},   {DType::F32, DType::BF16},
    {DType::F64, DType::F64}, {DType::I32, DType::I32},   {DType::I32, DType::I64},
    {DType::I64, DType::I64}};

TEST(CpuDot, RandomLayoutsAllDtypes) {
  std::mt19937_64 rng(41);
  for (int iter = 0; iter < 300; ++iter) {
    DotCase d = random_case(rng, 9);
    for (auto [in, out] : kHandled) {
      Tensor a = random_tensor(in, d.lhs, rng), b = random_tensor(in, d.rhs, rng);
      EXPECT_TRUE(check_dot(d, a, b, out)) << "declined: " << describe(d, in, out);
    }
  }
}

TEST(CpuDot, RandomLayoutsLargerSizes) {
  // Sizes past oneDNN's register blocking (and its edge handling), f32 and bf16.
  std::mt19937_64 rng(42);
  for (int iter = 0; iter < 60; ++iter) {
    DotCase d = random_case(rng, 40);
    int64_t work = shape_size(d.lhs) * shape_size(d.rhs);  // >= the multiply-adds
    if (work > 4000000) {                                  // keep the naive reference quick
      --iter;
      continue;
    }
    for (auto [in, out] : {std::pair{DType::F32, DType::F32}, std::pair{DType::BF16, DType::F32},
                           std::pair{DType::BF16, DType::BF16}}) {
      Tensor a = random_tensor(in, d.lhs, rng), b = random_tensor(in, d.rhs, rng);
      EXPECT_TRUE(check_dot(d, a, b, out)) << "declined: " << describe(d, in, out);
    }
  }
}

TEST(CpuDot, NamedLayouts) {
  std::mt19937_64 rng(43);
  const std::vector<DotCase> cases = {
      {{64, 300}, {300, 129}, {1}, {0}, {}, {}},                  // A B
      {{300, 64}, {300, 129}, {0}, {0}, {}, {}},                  // A^T B
      {{64, 300}, {129, 300}, {1}, {1}, {}, {}},                  // A B^T (x @ W^T)
      {{300, 64}, {129, 300}, {0}, {1}, {}, {}},                  // A^T B^T
      {{4, 33, 16}, {4, 16, 21}, {2}, {1}, {0}, {0}},             // batched
      {{2, 17, 3, 8}, {2, 19, 3, 8}, {3}, {3}, {0, 2}, {0, 2}},   // attention scores [B,T,H,D]
      {{2, 3, 17, 19}, {2, 19, 3, 8}, {3}, {1}, {0, 1}, {0, 2}},  // attention values
      {{6, 5, 7}, {7, 5, 4}, {1, 2}, {1, 0}, {}, {}},             // two contracting dims, crossed
      {{5, 6, 7}, {7, 9, 5}, {0, 2}, {2, 0}, {}, {}},             // contracting around a free dim
      {{1, 300}, {300, 1}, {1}, {0}, {}, {}},                     // vector dot
      {{300}, {300}, {0}, {0}, {}, {}},                           // rank-1 dot
      {{8}, {5}, {}, {}, {}, {}},                                 // outer product
      {{1, 1, 8}, {1, 8, 1}, {2}, {1}, {0}, {0}},                 // size-1 batch and free
      {{0, 5}, {5, 3}, {1}, {0}, {}, {}},                         // M = 0
      {{4, 0}, {0, 3}, {1}, {0}, {}, {}},                         // K = 0: zeros
      {{0, 4, 5}, {0, 5, 3}, {2}, {1}, {0}, {0}},                 // batch 0
  };
  for (const DotCase& d : cases) {
    for (auto [in, out] : kHandled) {
      Tensor a = random_tensor(in, d.lhs, rng), b = random_tensor(in, d.rhs, rng);
      EXPECT_TRUE(check_dot(d, a, b, out)) << "declined: " << describe(d, in, out);
    }
  }
}

TEST(CpuDot, DecodeAttentionShapes) {
  // Decode's attention products take the small-product path: scores q [B, H, M, D] against
  // the cache [B, H, S, D] (dot products along D), values probs [B, H, M, S] x [B, H, S, D]
  // (row updates along D); head sizes and cache lengths off the vector widths included. Up to
  // four rows of q share each load of the cache, and the work splits over the team by heads
  // and columns: every row and column must be summed as when computed alone, on one thread.
  std::mt19937_64 rng(44);
  backend::cpu::ThreadTeam team(1);
  for (int64_t D : {64, 72, 37, 8}) {
    for (int64_t S : {1, 5, 50, 131, 300}) {
      for (int64_t M : {1, 2, 3, 5}) {
        const DotCase scores{{1, 3, M, D}, {1, 3, S, D}, {3}, {3}, {0, 1}, {0, 1}};
        const DotCase values{{1, 3, M, S}, {1, 3, S, D}, {3}, {2}, {0, 1}, {0, 1}};
        for (bool is_scores : {true, false}) {
          const DotCase& d = is_scores ? scores : values;
          SCOPED_TRACE(describe(d, DType::F32, DType::F32));
          Tensor a = random_tensor(DType::F32, d.lhs, rng);
          Tensor b = random_tensor(DType::F32, d.rhs, rng);
          EXPECT_TRUE(check_dot(d, a, b, DType::F32));
          KernelRun one = run_kernel("dot_general", dot_attrs(d), {a, b}, true);
          backend::cpu::ThreadTeam::set_current(&team);
          KernelRun split = run_kernel("dot_general", dot_attrs(d), {a, b}, true);
          backend::cpu::ThreadTeam::set_current(nullptr);
          ASSERT_TRUE(one.handled && split.handled);
          EXPECT_EQ(one.outs[0].bytes, split.outs[0].bytes) << "split over the team";
          // The last row of q alone (M = 1) gives that row's bits.
          const int64_t inner = d.lhs[3], row_bytes = inner * 4;
          Tensor last{Aval{{1, 3, 1, inner}, DType::F32}, {}};
          for (int64_t h = 0; h < 3; ++h) {
            const char* src = a.bytes.data() + ((h * M) + M - 1) * row_bytes;
            last.bytes.insert(last.bytes.end(), src, src + row_bytes);
          }
          DotCase d1 = d;
          d1.lhs[2] = 1;
          KernelRun alone = run_kernel("dot_general", dot_attrs(d1), {last, b}, true);
          const int64_t out_row = is_scores ? S : D;
          for (int64_t h = 0; h < 3; ++h) {
            ASSERT_EQ(0, std::memcmp(alone.outs[0].bytes.data() + h * out_row * 4,
                                     one.outs[0].bytes.data() + ((h * M) + M - 1) * out_row * 4,
                                     static_cast<size_t>(out_row * 4)))
                << "row " << M - 1 << " of head " << h;
          }
        }
      }
    }
  }
}

TEST(CpuDot, MatrixVectorProductsSplitOverColumnsGiveTheSameBits) {
  // f32 decode: x [1, K] against a weight [N, K] (dot products) or [K, N] (row updates) has
  // one row of output, so its columns are split over the team; each column must be summed
  // exactly as on one thread, N off the column groups included.
  std::mt19937_64 rng(45);
  for (int64_t N : {1536, 1000, 577}) {
    for (int64_t K : {576, 300}) {
      const DotCase dots{{1, K}, {N, K}, {1}, {1}, {}, {}};
      const DotCase updates{{1, K}, {K, N}, {1}, {0}, {}, {}};
      for (const DotCase& d : {dots, updates}) {
        SCOPED_TRACE(describe(d, DType::F32, DType::F32));
        Tensor a = random_tensor(DType::F32, d.lhs, rng), b = random_tensor(DType::F32, d.rhs, rng);
        KernelRun one = run_kernel("dot_general", dot_attrs(d), {a, b}, true);
        backend::cpu::ThreadTeam team(1);
        backend::cpu::ThreadTeam::set_current(&team);
        KernelRun split = run_kernel("dot_general", dot_attrs(d), {a, b}, true);
        backend::cpu::ThreadTeam::set_current(nullptr);
        ASSERT_TRUE(one.handled && split.handled);
        EXPECT_EQ(one.outs[0].bytes, split.outs[0].bytes);
        EXPECT_TRUE(check_dot(d, a, b, DType::F32));
      }
    }
  }
}

TEST(CpuDot, LargeProductsSplitOverTheTeamMatchTheReference) {
  // oneDNN runs on one thread per call; a product of a few million multiply-adds is split over
  // the device's thread team along its batch, its rows (M) or its columns (N), each piece a
  // strided view of the operands and the result. Transposed operands and bf16 take the same
  // path.
  std::mt19937_64 rng(46);
  const DotCase cases[] = {
      {{4, 128, 96}, {4, 96, 128}, {2}, {1}, {0}, {0}},   // batch
      {{3, 130, 96}, {3, 96, 130}, {2}, {1}, {0}, {0}},   // batch 3 < 4 pieces: rows
      {{500, 96}, {96, 130}, {1}, {0}, {}, {}},           // rows, uneven pieces
      {{96, 500}, {130, 96}, {0}, {1}, {}, {}},           // rows, both transposed
      {{6, 1024}, {1024, 700}, {1}, {0}, {}, {}},         // 6 rows: columns
      {{6, 1024}, {700, 1024}, {1}, {1}, {}, {}},         // columns of a transposed weight
  };
  backend::cpu::ThreadTeam team(3);
  for (DType dt : {DType::F32, DType::BF16}) {
    for (const DotCase& d : cases) {
      SCOPED_TRACE(describe(d, dt, DType::F32));
      Tensor a = random_tensor(dt, d.lhs, rng), b = random_tensor(dt, d.rhs, rng);
      backend::cpu::ThreadTeam::set_current(&team);
      const int64_t before = backend::cpu::onednn_calls();
      KernelRun split = run_kernel("dot_general", dot_attrs(d, DType::F32), {a, b}, true);
      const int64_t calls = backend::cpu::onednn_calls() - before;
      EXPECT_TRUE(check_dot(d, a, b, DType::F32));
      backend::cpu::ThreadTeam::set_current(nullptr);
      ASSERT_TRUE(split.handled);
      EXPECT_GE(calls, 2) << "not split";
      EXPECT_LE(calls, 4) << "one piece per thread";
    }
  }
}

TEST(CpuDot, SpecialValuesPropagate) {
  // inf * 0 = NaN and inf + -inf = NaN must appear where the reference has them.
  DotCase d{{3, 2}, {2, 3}, {1}, {0}, {}, {}};
  Tensor a{Aval{{3, 2}, DType::F32}, std::vector<char>(24)},
      b{Aval{{2, 3}, DType::F32}, std::vector<char>(24)};
  const float av[] = {INFINITY, 0, 1, 2, NAN, 1}, bv[] = {0, 1, 2, 1, -INFINITY, 1};
  std::memcpy(a.bytes.data(), av, 24);
  std::memcpy(b.bytes.data(), bv, 24);
  KernelRun ref = run_kernel("dot_general", dot_attrs(d), {a, b}, false);
  KernelRun fast = run_kernel("dot_general", dot_attrs(d), {a, b}, true);
  for (int i = 0; i < 9; ++i) {
    const double x = fast.outs[0].at(i), y = ref.outs[0].at(i);
    EXPECT_TRUE((std::isnan(x) && std::isnan(y)) || x == y) << i << ": " << x << " vs " << y;
  }
}

TEST(CpuDot, IntegerOverflowWraps) {
  // Random 64-bit values overflow every product: both kernels wrap (two's complement).
  std::mt19937_64 rng(45);
  DotCase d{{5, 7}, {7, 3}, {1}, {0}, {}, {}};
  for (auto [in, out] : {std::pair{DType::I64, DType::I64}, std::pair{DType::I32, DType::I32},
                         std::pair{DType::I32, DType::I64}}) {
    Tensor a = random_tensor(in, d.lhs, rng, Fill::kAnyBits);
    Tensor b = random_tensor(in, d.rhs, rng, Fill::kAnyBits);
    EXPECT_TRUE(check_dot(d, a, b, out));
    KernelRun fast = run_kernel("dot_general",
                                dot_attrs(d, out == in ? std::nullopt : std::optional<DType>(out)),
                                {a, b}, true);
    uint64_t want = 0;
    for (int k = 0; k < 7; ++k) {
      want += static_cast<uint64_t>(detail::load_int(a.bytes.data() + k * dtype_size(in), in)) *
              static_cast<uint64_t>(detail::load_int(b.bytes.data() + 3 * k * dtype_size(in), in));
    }
    const int64_t expect =
        out == DType::I32 ? static_cast<int32_t>(want) : static_cast<int64_t>(want);
    EXPECT_EQ(detail::load_int(fast.outs[0].bytes.data(), out), expect);
  }
}

TEST(CpuDot, ConcurrentCallsShareCachedPrimitives) {
  // Device workers run the same cached primitive at once (per-thread streams and scratch).
  std::mt19937_64 rng(44);
  DotCase d{{3, 96, 80}, {3, 80, 72}, {2}, {1}, {0}, {0}};
  Tensor a = random_tensor(DType::F32, d.lhs, rng), b = random_tensor(DType::F32, d.rhs, rng);
  KernelRun expect = run_kernel("dot_general", dot_attrs(d), {a, b}, true);
  std::vector<std::thread> threads;
  std::vector<int> bad(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        KernelRun r = run_kernel("dot_general", dot_attrs(d), {a, b}, true);
        bad[static_cast<size_t>(t)] += r.outs[0].bytes != expect.outs[0].bytes;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(bad[static_cast<size_t>(t)], 0) << "thread " << t;
  EXPECT_TRUE(check_dot(d, a, b, DType::F32));
}

}  // namespace
}  // namespace partix::testing_kernels
