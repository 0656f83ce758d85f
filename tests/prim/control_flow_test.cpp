// scan, fori_loop, while_loop and cond: values (eager, under jit, nested, with trees), the IR
// text of their regions (golden, and a print/parse round trip), in-place carries, bad input.
#include <cmath>
#include <numeric>

#include "ir/program.h"
#include "spmd/compile.h"
#include "test_util.h"

using namespace partix;

namespace {

std::vector<float> floats(const Array& a) { return a.to_vector<float>(); }

Array iota_f32(int64_t n, const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 1.0f);
  return from_vector(v, shape);
}

// The cumulative sum of the rows of xs, with the running total as carry.
std::pair<Array, Array> cumsum_rows(const Array& xs, bool reverse) {
  return scan(
      [](const Array& c, const Array& x) {
        return std::pair{c + x, c + x};
      },
      zeros({xs.shape()[1]}), xs, reverse);
}

}  // namespace

TEST(Scan, CumulativeSumEagerAndJit) {
  Array xs = iota_f32(8, {4, 2});  // rows (1,2) (3,4) (5,6) (7,8)
  for (bool use_jit : {false, true}) {
    auto [c, ys] = use_jit ? jit([](const Array& x) { return cumsum_rows(x, false); })(xs)
                           : cumsum_rows(xs, false);
    EXPECT_EQ(floats(c), (std::vector<float>{16, 20}));
    EXPECT_EQ(floats(ys), (std::vector<float>{1, 2, 4, 6, 9, 12, 16, 20}));
    EXPECT_EQ(ys.shape(), (Shape{4, 2}));
  }
}

TEST(Scan, ReverseVisitsRowsLastFirst) {
  auto [c, ys] = cumsum_rows(iota_f32(8, {4, 2}), true);
  EXPECT_EQ(floats(c), (std::vector<float>{16, 20}));
  EXPECT_EQ(floats(ys), (std::vector<float>{16, 20, 15, 18, 12, 14, 7, 8}));
}

TEST(Scan, TreesOfCarriesAndScannedInputsWithCapturedConstant) {
  Array w = full({2}, 10.0f);  // captured: an extra operand of the instruction
  Params xs{{"a", iota_f32(6, {3, 2})}, {"b", iota_f32(3, {3})}};
  auto run = [&](const Params& x) {
    std::pair<Array, Array> init{zeros({2}), zeros({}, DType::F32)};
    return scan(
        [&](const std::pair<Array, Array>& c, const Params& p) {
          std::pair<Array, Array> next{c.first + p.at("a") * w, c.second + p.at("b")};
          return std::pair{next, std::vector<Array>{next.second * 2.0}};
        },
        init, x);
  };
  for (bool use_jit : {false, true}) {
    auto [carry, ys] = use_jit ? jit(run)(xs) : run(xs);
    EXPECT_EQ(floats(carry.first), (std::vector<float>{90, 120}));
    EXPECT_EQ(carry.second.item<float>(), 6.0f);
    ASSERT_EQ(ys.size(), 1u);
    EXPECT_EQ(floats(ys[0]), (std::vector<float>{2, 6, 12}));
  }
}

TEST(ForiLoop, IndexAndCarry) {
  // sum of i*i for i in [2, 6), and a power of two, in one tuple carry.
  auto f = [](const Array& x) {
    return fori_loop(
        2, 6,
        [](const Array& i, const std::tuple<Array, Array>& c) {
          Array fi = astype(i, DType::F32);
          return std::tuple<Array, Array>{std::get<0>(c) + fi * fi, std::get<1>(c) * 2.0};
        },
        std::tuple<Array, Array>{zeros({}), x});
  };
  for (bool use_jit : {false, true}) {
    auto [s, p] = use_jit ? jit(f)(full({3}, 1.5f)) : f(full({3}, 1.5f));
    EXPECT_EQ(s.item<float>(), 4.0f + 9 + 16 + 25);
    EXPECT_EQ(floats(p), (std::vector<float>{24, 24, 24}));
  }
  // An empty range leaves the carry as it is.
  Array x = full({2}, 3.0f);
  EXPECT_EQ(floats(fori_loop(
                5, 5, [](const Array&, const Array& c) { return c * 0.0; }, x)),
            (std::vector<float>{3, 3}));
}

TEST(WhileLoop, RunsUntilTheConditionFails) {
  auto collatz_steps = [](const Array& n) {
    auto [v, steps] = while_loop(
        [](const std::pair<Array, Array>& c) { return logical_not(equal(c.first, 1.0)); },
        [](const std::pair<Array, Array>& c) {
          Array even = equal(c.first % 2.0, 0.0);
          return std::pair{where(even, c.first / 2, c.first * 3 + 1), c.second + 1};
        },
        std::pair{n, zeros({}, DType::I32)});
    (void)v;
    return steps;
  };
  Array n = from_vector(std::vector<int32_t>{27}, {});
  EXPECT_EQ(collatz_steps(n).item<int32_t>(), 111);
  EXPECT_EQ(jit(collatz_steps)(n).item<int32_t>(), 111);
}

TEST(Cond, TakesOneBranch) {
  auto f = [](const Array& p, const Array& x) {
    return cond(
        p, [](const Array& a) { return a * 2.0; }, [](const Array& a) { return a - 1.0; }, x);
  };
  Array x = iota_f32(3, {3});
  Array yes = full({}, 1, DType::Bool), no = full({}, 0, DType::Bool);
  EXPECT_EQ(floats(f(yes, x)), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(floats(f(no, x)), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(floats(jit(f)(yes, x)), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(floats(jit(f)(no, x)), (std::vector<float>{0, 1, 2}));
}

TEST(ControlFlow, NestsInsideEachOther) {
  // A fori_loop whose body scans, branches and loops: sum over 3 steps of cumsum(x)[-1] or -1.
  auto f = [](const Array& xs) {
    return fori_loop(
        0, 3,
        [&](const Array& i, const Array& acc) {
          auto [total, ys] = cumsum_rows(xs, false);
          (void)ys;
          Array odd = equal(i % 2.0, 1.0);
          Array add = cond(
              odd, [](const Array& t) { return t * 0.0 - 1.0; }, [](const Array& t) { return t; },
              total);
          Array twice = while_loop([](const Array& c) { return sum(c) < 100.0; },
                                   [](const Array& c) { return c * 2.0; }, add + 1000.0);
          return acc + add + twice * 0.0;
        },
        zeros({2}));
  };
  Array xs = iota_f32(8, {4, 2});
  const std::vector<float> want{16 - 1 + 16, 20 - 1 + 20};
  EXPECT_EQ(floats(f(xs)), want);
  EXPECT_EQ(floats(jit(f)(xs)), want);
}

TEST(ControlFlowIr, GoldenTextOfAScanUnderJit) {
  Lowered l =
      jit([](const Array& xs) { return cumsum_rows(xs, true).second; }).lower(iota_f32(8, {4, 2}));
  EXPECT_EQ(l.as_text(),
            "program @jit mesh<> (%0: f32[4,2] P()) -> (%4) {\n"
            "  %1 = constant() {value=<f32[]: 0>} : f32[] P()\n"
            "  %2 = broadcast_in_dim(%1) {dims=[], shape=[2]} : f32[2] P()\n"
            "  %3, %4 = scan(%2, %0) {length=4, num_carry=1, num_xs=1, reverse=true} : f32[2] P(), "
            "f32[4,2] P(None) region {\n"
            "    program @scan_body mesh<> (%0: f32[2] P(), %1: f32[2] P()) -> (%2, %3) {\n"
            "      %2 = add(%0, %1) : f32[2] P()\n"
            "      %3 = add(%0, %1) : f32[2] P()\n"
            "    }\n"
            "  }\n"
            "}\n");
}

TEST(ControlFlowIr, EveryPrimitivePrintsAndParsesBack) {
  auto f = [](const Array& p, const Array& xs) {
    auto [c, ys] = cumsum_rows(xs, false);
    Array n = fori_loop(
        0, 4, [](const Array& i, const Array& a) { return a + astype(i, DType::F32); }, c);
    Array w = while_loop([](const Array& a) { return sum(a) < 50.0; },
                         [](const Array& a) { return a * 2.0; }, n);
    return cond(
        p, [](const Array& a) { return a + 1.0; }, [](const Array& a) { return -a; }, w + sum(ys));
  };
  Lowered l = jit(f).lower(full({}, 1, DType::Bool), iota_f32(8, {4, 2}));
  for (const std::string& text : {l.as_text(), l.global_text()}) {
    for (const char* op : {"= scan(", "= fori_loop(", "= while_loop(", "= cond("}) {
      EXPECT_NE(text.find(op), std::string::npos) << op << " in\n" << text;
    }
    ir::Program parsed = ir::parse_program(text);
    ir::verify(parsed);
    EXPECT_EQ(ir::to_text(parsed), text);
  }
}

TEST(ControlFlowIr, ParsedLoopRunsAsTraced) {
  // A hand-written program: the parser and verifier accept control flow as text.
  const std::string text =
      "program @p (%0: f32[3]) -> (%1) {\n"
      "  %1 = fori_loop(%0) {lower=0, num_carry=1, upper=3} : f32[3] region {\n"
      "    program @body (%0: i32[], %1: f32[3]) -> (%2) {\n"
      "      %2 = add(%1, %1) : f32[3]\n"
      "    }\n"
      "  }\n"
      "}\n";
  ir::Program p = ir::parse_program(text);
  ir::verify(p);
  EXPECT_EQ(ir::to_text(p), text);
  // Compiled and run, it doubles three times, as the same loop from the API does.
  Array x = iota_f32(3, {3});
  spmd::CompileOptions options;
  options.in_shardings = {x.sharding()};
  std::vector<Array> out = spmd::compile(p, options)->executable->run({x});
  EXPECT_EQ(floats(out[0]), (std::vector<float>{8, 16, 24}));
  EXPECT_EQ(floats(fori_loop(
                0, 3, [](const Array&, const Array& c) { return c + c; }, x)),
            (std::vector<float>{8, 16, 24}));
}

TEST(ControlFlowRuntime, CarryIsUpdatedInPlace) {
  // 64 iterations over a 4 MiB carry: in place, the loop needs about one carry beyond its
  // argument, not one per iteration.
  const int64_t n = 1 << 20;
  Array x = zeros({n});
  auto f = jit([](const Array& c) {
    return fori_loop(
        0, 64, [](const Array&, const Array& a) { return a * 0.5 + 1.0; }, c);
  });
  Array warm = f(x);
  reset_peak_memory_stats();
  const int64_t before = memory_stats(0).bytes_in_use;
  Array y = f(x);
  const int64_t peak = memory_stats(0).peak_bytes_in_use - before;
  EXPECT_NEAR(y.to_vector<float>()[0], 2.0f, 1e-5);
  EXPECT_LE(peak, 3 * n * 4) << "peak " << peak << " bytes over " << before;
}

TEST(ControlFlowBadInput, ErrorsNameTheApiAndTheValue) {
  Array v8 = zeros({8}), v4 = zeros({4});
  EXPECT_PARTIX_ERROR(scan(
                          [&](const Array&, const Array& x) {
                            return std::pair{v4 + x, x};
                          },
                          v8, zeros({3, 4})),
                      "[scan]", "carry 0 f32[4] where init is f32[8]");
  EXPECT_PARTIX_ERROR(scan(
                          [](const Array& c, const Array& x) {
                            return std::pair{c, x};
                          },
                          v8, full({}, 1.0f)),
                      "[scan]", "scanned input 0 is f32[]", "leading axis");
  EXPECT_PARTIX_ERROR(
      fori_loop(
          0, 3, [](const Array&, const Array& c) { return astype(c, DType::I32); }, v8),
      "[fori_loop]", "i32[8] where init is f32[8]");
  EXPECT_PARTIX_ERROR(
      while_loop([](const Array& c) { return sum(c); }, [](const Array& c) { return c; }, v8),
      "[while_loop]", "cond's result must be a bool scalar", "f32[]");
  EXPECT_PARTIX_ERROR(cond(
                          zeros({2}, DType::Bool), [](const Array& a) { return a; },
                          [](const Array& a) { return a; }, v8),
                      "[cond]", "predicate must be a bool scalar", "bool[2]");
  EXPECT_PARTIX_ERROR(
      cond(
          full({}, 1.0f), [](const Array& a) { return a; }, [](const Array& a) { return a; }, v8),
      "[cond]", "predicate must be a bool scalar", "f32[]");
  EXPECT_PARTIX_ERROR(cond(
                          full({}, 1, DType::Bool), [](const Array& a) { return a; },
                          [](const Array& a) { return sum(a); }, v8),
                      "[cond]", "result 0 of true_fn is f32[8] but false_fn's is f32[]");
  EXPECT_PARTIX_ERROR((fori_loop(
                          0, 2,
                          [](const Array&, const std::pair<Array, Array>& c) {
                            return std::pair{std::pair{c.first, c.second}, c.first};
                          },
                          std::pair{v8, v8})),
                      "[fori_loop]", "structure");
  // An empty range runs no iteration (as JAX's fori_loop): init comes back, eager and in jit.
  {
    auto add = [](const Array&, const Array& c) { return c + 1.0f; };
    Array eager = fori_loop(3, 1, add, v8);
    EXPECT_EQ(eager.to_vector<float>(), v8.to_vector<float>());
    Array jitted = jit([&](const Array& x) { return fori_loop(5, -5, add, x); })(v8);
    EXPECT_EQ(jitted.to_vector<float>(), v8.to_vector<float>());
  }
  EXPECT_PARTIX_ERROR(fori_loop(
                          0, int64_t{1} << 40, [](const Array&, const Array& c) { return c; }, v8),
                      "[fori_loop]", "do not fit the int32 index");
}

TEST(ControlFlowReadme, TheSnippetRunsAsDocumented) {
  auto rnn = jit([](const Array& h0, const Array& xs, const Array& w) {
    return scan(
        [&](const Array& h, const Array& x) {
          Array n = tanh(matmul(h, w) + x);
          return std::pair{n, sum(n, {1})};
        },
        h0, xs);
  });
  Array h0 = zeros({2, 3}), xs = full({4, 2, 3}, 0.1f), w = full({3, 3}, 0.2f);
  auto [h, ys] = rnn(h0, xs, w);
  EXPECT_EQ(h.shape(), (Shape{2, 3}));
  EXPECT_EQ(ys.shape(), (Shape{4, 2}));
  float want = 0;
  for (int t = 0; t < 4; ++t) want = std::tanh(3 * 0.2f * want + 0.1f);
  EXPECT_NEAR(h.to_vector<float>()[0], want, 1e-6);
  EXPECT_NEAR(ys.to_vector<float>()[7], 3 * want, 1e-5);
  Array x = full({2}, 8.0f);
  Array c = fori_loop(
      0, 10, [](const Array& i, const Array& c) { return c * 0.5 + astype(i, DType::F32); }, x);
  double v = 8;
  for (int i = 0; i < 10; ++i) v = v * 0.5 + i;
  EXPECT_NEAR(c.to_vector<float>()[1], v, 1e-5);
}

// A scanned slice on the allocator's alignment is a view of the stacked input, not a copy: the
// body reading it, returning it as its carry, and updating that carry in the next step never
// writes the stacked input, which the caller still reads afterwards; slices off the alignment
// (rows of 3 floats) are copied and give the same values.
TEST(Scan, SlicesAreViewsOfTheStackedInputThatAreNeverWrittenThrough) {
  for (int64_t row : {int64_t{16}, int64_t{3}}) {  // 64 bytes: views; 12 bytes: copies
    Array xs = iota_f32(4 * row, {4, row});
    const std::vector<float> before = floats(xs);
    auto f = jit([](const Array& x) {
      // The carry is the previous slice doubled in place where the runtime may: a view of the
      // stacked input must not be that buffer.
      auto [c, ys] = scan(
          [](const Array& carry, const Array& s) {
            return std::pair{s, carry * 2.0 + s};
          },
          zeros({x.shape()[1]}), x);
      return std::pair{c * 3.0, ys};
    });
    auto [c, ys] = f(xs);
    std::vector<float> want_ys, want_c;
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t k = 0; k < row; ++k) {
        const float prev = i == 0 ? 0.0f : before[static_cast<size_t>((i - 1) * row + k)];
        want_ys.push_back(prev * 2.0f + before[static_cast<size_t>(i * row + k)]);
      }
    }
    for (int64_t k = 0; k < row; ++k) want_c.push_back(3.0f * before[static_cast<size_t>(3 * row + k)]);
    EXPECT_EQ(floats(ys), want_ys) << row;
    EXPECT_EQ(floats(c), want_c) << row;
    EXPECT_EQ(floats(xs), before) << "the stacked input was written through a view (" << row << ")";
  }
}
