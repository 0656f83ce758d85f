// Reverse mode through scan, fori_loop and cond against the unrolled programs and finite
// differences; a while_loop the gradient flows through refuses with an error, one it does not
// needs no VJP.
#include <cmath>

#include "test_util.h"

using namespace partix;

namespace {

Array rnd(const Shape& s, uint64_t seed, DType dt = DType::F32) {
  return random::normal(random::key(seed), s, dt);
}

void expect_close(const Array& got, const Array& want, double tol = 1e-4) {
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<double> g = astype(got, DType::F64).to_vector<double>();
  std::vector<double> w = astype(want, DType::F64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << "element " << i;
  }
}

// h = tanh(h w + x_t) over the rows of xs (in reverse if asked), y_t = h * h; loss sums both.
Array rnn_loss(const Array& h0, const Array& xs, const Array& w, bool reverse) {
  auto [h, ys] = scan(
      [&](const Array& c, const Array& x) {
        Array n = tanh(matmul(c, w) + x);
        return std::pair{n, n * n};
      },
      h0, xs, reverse);
  return sum(h) + sum(ys * 0.5);
}

Array rnn_loss_unrolled(const Array& h0, const Array& xs, const Array& w, bool reverse) {
  const int64_t T = xs.shape()[0];
  Array h = h0, total = zeros({}, h0.dtype());
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    Shape start{t, 0, 0}, stop{t + 1, xs.shape()[1], xs.shape()[2]};
    Array x = reshape(slice(xs, start, stop), {xs.shape()[1], xs.shape()[2]});
    h = tanh(matmul(h, w) + x);
    total = total + sum(h * h * 0.5);
  }
  return sum(h) + total;
}

}  // namespace

TEST(ScanGrad, MatchesTheUnrolledProgram) {
  Array h0 = rnd({3, 4}, 1) * 0.5, xs = rnd({5, 3, 4}, 2) * 0.5, w = rnd({4, 4}, 3) * 0.4;
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    auto loss = [reverse](const Array& a, const Array& b, const Array& c) {
      return rnn_loss(a, b, c, reverse);
    };
    auto unrolled = [reverse](const Array& a, const Array& b, const Array& c) {
      return rnn_loss_unrolled(a, b, c, reverse);
    };
    expect_close(loss(h0, xs, w), unrolled(h0, xs, w));
    auto g = jit(grad(loss, std::vector<int>{0, 1, 2}))(h0, xs, w);
    auto want = grad(unrolled, std::vector<int>{0, 1, 2})(h0, xs, w);
    for (size_t k = 0; k < 3; ++k) expect_close(g[k], want[k]);
    // Eagerly, too.
    expect_close(grad(loss, 2)(h0, xs, w), want[2]);
  }
}

TEST(ScanGrad, FiniteDifferencesInF64) {
  Array h0 = rnd({2, 3}, 4, DType::F64) * 0.5, xs = rnd({3, 2, 3}, 5, DType::F64) * 0.5;
  Array w = rnd({3, 3}, 6, DType::F64) * 0.5;
  auto loss =
      jit([](const Array& a, const Array& b, const Array& c) { return rnn_loss(a, b, c, false); });
  auto g = jit(
      grad([](const Array& a, const Array& b, const Array& c) { return rnn_loss(a, b, c, false); },
           std::vector<int>{0, 1, 2}))(h0, xs, w);
  std::vector<Array> args{h0, xs, w};
  const double h = 1e-6;
  for (size_t k = 0; k < 3; ++k) {
    std::vector<double> x = args[k].to_vector<double>(), an = Array(g[k]).to_vector<double>();
    for (size_t e = 0; e < x.size(); ++e) {
      std::vector<Array> plus = args, minus = args;
      std::vector<double> xp = x, xm = x;
      xp[e] += h;
      xm[e] -= h;
      plus[k] = from_vector(xp, args[k].shape());
      minus[k] = from_vector(xm, args[k].shape());
      const double fd = (loss(plus[0], plus[1], plus[2]).item<double>() -
                         loss(minus[0], minus[1], minus[2]).item<double>()) /
                        (2 * h);
      ASSERT_NEAR(an[e], fd, 1e-6 * (1 + std::abs(fd))) << "argument " << k << " element " << e;
    }
  }
}

TEST(ForiLoopGrad, MatchesTheUnrolledProgramWithTheIndex) {
  Array x = rnd({4}, 7) * 0.5, w = rnd({4}, 8) * 0.5;
  auto loss = [](const Array& a, const Array& b) {
    Array c = fori_loop(
        1, 5,
        [&](const Array& i, const Array& c) { return sin(c * b) + astype(i, DType::F32) * b; }, a);
    return sum(c * c);
  };
  auto unrolled = [](const Array& a, const Array& b) {
    Array c = a;
    for (int i = 1; i < 5; ++i) c = sin(c * b) + static_cast<double>(i) * b;
    return sum(c * c);
  };
  auto g = jit(grad(loss, std::vector<int>{0, 1}))(x, w);
  auto want = grad(unrolled, std::vector<int>{0, 1})(x, w);
  expect_close(g[0], want[0]);
  expect_close(g[1], want[1]);
}

TEST(ScanGrad, ShardedOnEightDevicesMatchesOneDevice) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array h0 = rnd({6, 4}, 9) * 0.5, xs = rnd({3, 6, 4}, 10) * 0.5, w = rnd({4, 4}, 11) * 0.4;
  auto loss = [](const Array& a, const Array& b, const Array& c) {
    return rnn_loss(a, b, c, false);
  };
  auto want = grad(loss, std::vector<int>{0, 2})(h0, xs, w);
  auto g = jit(grad(loss, std::vector<int>{0, 2}))(
      device_put(h0, NamedSharding(m, P("x"))), device_put(xs, NamedSharding(m, P(None, "x", "y"))),
      device_put(w, NamedSharding(m, P("y"))));
  expect_close(g[0], want[0]);
  expect_close(g[1], want[1]);
}

TEST(CondGrad, DifferentiatesThroughTheTakenBranch) {
  Array x = rnd({3}, 12), w = rnd({3}, 13);
  auto loss = [](const Array& p, const Array& a, const Array& b) {
    Array r = cond(
        p, [&](const Array& v) { return sin(v) * b; }, [&](const Array& v) { return v * v; }, a);
    return sum(r);
  };
  for (bool taken : {true, false}) {
    Array p = full({}, taken ? 1 : 0, DType::Bool);
    auto g = jit(grad(loss, std::vector<int>{1, 2}))(p, x, w);
    Array gx = taken ? cos(x) * w : x * 2.0;
    Array gw = taken ? sin(x) : zeros({3});
    expect_close(g[0], gx);
    expect_close(g[1], gw);
  }
}

// Inside shard_map: a branch taken per device (the predicate varies over 'stage') that sums
// over another axis ('model') and mixes an operand invariant over 'model' with one split over
// it. The gradients must be those of the same program without the cond, both of the
// shard_map (grad outside) and inside it (grad in the body); operands once widened both outside
// and inside the branch summed their gradients over 'model' twice.
TEST(CondGrad, BranchesWithCollectivesInsideShardMapSumEachGradientOnce) {
  const Mesh mesh = make_mesh({2, 2}, {"stage", "model"});
  Array x = rnd({3, 4}, 21), w = rnd({4, 6}, 22);
  auto branch = [](const Array& h, const Array& wl) { return sum(tanh(psum(tanh(matmul(h, wl)), "model"))); };
  for (bool with_cond : {false, true}) {
    auto j = [&](const Array& h, const Array& wl) {
      if (!with_cond) return branch(h, wl);
      return cond(
          astype(axis_index("stage"), DType::I32) >= 0.0,
          [&](const std::pair<Array, Array>& o) { return branch(o.first, o.second); },
          [&](const std::pair<Array, Array>&) { return zeros({}); }, std::pair{h, wl});
    };
    // grad inside the body: x is each stage device's own copy, w one value for both.
    auto inside = jit(shard_map(
        [&](const Array& h, const Array& wl) {
          auto g = grad(j, std::vector<int>{0, 1})(pvary(h, "stage"), wl);
          return std::vector<Array>{pmean(Array(g[0]), "stage"), pmean(Array(g[1]), "stage")};
        },
        mesh, {P(), P(None, "model")}, {P(), P(None, "model")}));
    // grad of the shard_map: its result summed over 'stage' by the out_spec.
    auto outside = jit(grad(
        [&](const Array& h, const Array& wl) {
          return sum(shard_map([&](const Array& a, const Array& b) { return reshape(j(pvary(a, "stage"), b), {1}); },
                               mesh, {P(), P(None, "model")}, {P("stage")})(h, wl));
        },
        std::vector<int>{0, 1}));
    auto ref = jit(grad(
        [&](const Array& h, const Array& wf) {
          return sum(tanh(tanh(matmul(h, slice_axis(wf, 1, 0, 3))) +
                          tanh(matmul(h, slice_axis(wf, 1, 3, 6)))));
        },
        std::vector<int>{0, 1}))(x, w);
    SCOPED_TRACE(with_cond ? "with cond" : "without cond");
    auto gi = inside(x, w);
    expect_close(gi[0], ref[0]);
    {
      // w is one value for both stage devices, so its gradient sums theirs.
      SCOPED_TRACE("inside, w");
      expect_close(gi[1], Array(ref[1]) * 2.0);
    }
    auto go = outside(x, w);
    {
      SCOPED_TRACE("outside, x");
      expect_close(go[0], Array(ref[0]) * 2.0);  // two stage devices each add the same value
    }
    SCOPED_TRACE("outside, w");
    expect_close(go[1], Array(ref[1]) * 2.0);
  }
}

TEST(WhileLoopGrad, RefusesWithAClearError) {
  auto loss = [](const Array& x) {
    return sum(while_loop([](const Array& c) { return sum(c) < 10.0; },
                          [](const Array& c) { return c * 2.0; }, x));
  };
  EXPECT_PARTIX_ERROR(grad(loss)(full({2}, 1.0f)), "[while_loop]", "not supported", "fori_loop");
  // Also where the input reaches only what the body reads, or the loop sits in a region.
  auto via_body = [](const Array& x) {
    return sum(while_loop([](const Array& c) { return sum(c) < 10.0; },
                          [&](const Array& c) { return c * 2.0 + x; }, full({2}, 1.0f)));
  };
  EXPECT_PARTIX_ERROR(grad(via_body)(full({2}, 1.0f)), "[while_loop]", "not supported");
  auto in_scan = [&](const Array& x) {
    return sum(fori_loop(
        0, 2,
        [&](const Array&, const Array& c) {
          return while_loop([](const Array& v) { return sum(v) < 10.0; },
                            [](const Array& v) { return v * 2.0; }, c);
        },
        x));
  };
  EXPECT_PARTIX_ERROR(jit(grad(in_scan))(full({2}, 1.0f)), "[while_loop]", "not supported");
}

// Regression: a while_loop on values the differentiated input does not reach was refused under
// grad. It needs no VJP (as in JAX): the gradient flows around it.
TEST(WhileLoopGrad, AcceptsALoopTheGradientDoesNotFlowThrough) {
  // Doubles `c` until its sum reaches `limit`.
  auto grow = [](const Array& c, const Array& limit) {
    return while_loop([&](const Array& v) { return sum(v) < limit; },
                      [](const Array& v) { return v * 2.0; }, c);
  };
  Array x = rnd({3}, 21, DType::F64), y = from_vector(std::vector<double>{1, 2, 3}, {3});
  Array ten = full({}, 10.0, DType::F64);
  // 1. The loop runs on a constant: d/dx sum(x * w + sin(x)) = w + cos(x), w = 2 * [1, 2, 3].
  auto on_constant = [&](const Array& a) {
    Array w = grow(from_vector(std::vector<double>{1, 2, 3}, {3}), ten);
    return sum(a * w + sin(a));
  };
  Array want = y * 2.0 + cos(x);
  expect_close(grad(on_constant)(x), want, 1e-12);
  expect_close(jit(grad(on_constant))(x), want, 1e-12);
  // 2. The loop runs on an argument not differentiated with respect to.
  auto on_other = [&](const Array& a, const Array& b) { return sum(a * grow(b, ten) + sin(a)); };
  expect_close(grad(on_other, 0)(x, y), want, 1e-12);
  // 3. x reaches only the condition (the predicate is a bool): the trip count is piecewise
  // constant in x, so its gradient through the loop is zero, as finite differences say.
  auto in_cond = [&](const Array& a) { return sum(grow(y, sum(a) * 4.0)) + sum(a * a); };
  Array g = jit(grad(in_cond))(x);
  expect_close(g, x * 2.0, 1e-12);
  const std::vector<double> xv = x.to_vector<double>(), gv = g.to_vector<double>();
  for (size_t e = 0; e < xv.size(); ++e) {
    std::vector<double> xp = xv, xm = xv;
    xp[e] += 1e-6;
    xm[e] -= 1e-6;
    const double fd = (in_cond(from_vector(xp, {3})).item<double>() -
                       in_cond(from_vector(xm, {3})).item<double>()) /
                      2e-6;
    EXPECT_NEAR(gv[e], fd, 1e-6 * (1 + std::abs(fd))) << "element " << e;
  }
  // 4. Inside regions the gradient flows through: a fori_loop body and a cond branch.
  auto nested = [&](const Array& a) {
    Array c = fori_loop(
        0, 2, [&](const Array&, const Array& v) { return v * grow(y, ten) + sin(v); }, a);
    Array p = full({}, true, DType::Bool);
    return sum(cond(
        p, [&](const Array& v) { return v * grow(y, ten); }, [](const Array& v) { return v; }, c));
  };
  auto unrolled = [&](const Array& a) {
    Array w = y * 2.0;
    Array c = a;
    for (int i = 0; i < 2; ++i) c = c * w + sin(c);
    return sum(c * w);
  };
  expect_close(jit(grad(nested))(x), grad(unrolled)(x), 1e-12);
  expect_close(jit(nested)(x), unrolled(x), 1e-12);
}

TEST(ScanGrad, TheBackwardReadsSavedValuesAndRecomputesOnlyUnderCheckpoint) {
  // The forward scan keeps, per iteration, the values the backward pass reads (tanh's output);
  // the backward scan does not run the body's matmul again. Under checkpoint it does.
  Array h0 = rnd({3, 4}, 1) * 0.5, xs = rnd({5, 3, 4}, 2) * 0.5, w = rnd({4, 4}, 3) * 0.4;
  auto count = [](const std::string& s, const std::string& op) {
    int n = 0;
    for (size_t p = s.find(op); p != std::string::npos; p = s.find(op, p + 1)) n++;
    return n;
  };
  for (bool remat : {false, true}) {
    SCOPED_TRACE(remat ? "checkpointed body" : "plain body");
    auto loss = [remat](const Array& h, const Array& x, const Array& m) {
      auto step = [&m](const Array& c, const Array& xt) { return tanh(matmul(c, m) + xt); };
      auto [last, ys] = scan(
          [&](const Array& c, const Array& xt) {
            Array n = remat ? checkpoint(step)(c, xt) : step(c, xt);
            return std::pair{n, n * n};
          },
          h, x);
      return sum(last) + sum(ys * 0.5);
    };
    auto g = jit(grad(loss, std::vector<int>{0, 1, 2}));
    const std::string text = g.lower(h0, xs, w).as_text();
    // Forward: one matmul. Backward: the two of the VJP (cotangents of c and of m), plus the
    // recomputed one under checkpoint.
    EXPECT_EQ(count(text, "= dot_general("), remat ? 4 : 3) << text;
    EXPECT_EQ(count(text, "= tanh("), remat ? 2 : 1) << text;
    auto want = grad(
        [](const Array& a, const Array& b, const Array& c) { return rnn_loss_unrolled(a, b, c, false); },
        std::vector<int>{0, 1, 2})(h0, xs, w);
    auto got = g(h0, xs, w);
    for (size_t k = 0; k < 3; ++k) expect_close(got[k], want[k]);
  }
}
