// vjp's saved pullback and forward mode (jvp, linearize) against grad, finite differences and
// each other: eagerly, under jit, on 8 devices with sharded operands, through scan, fori_loop,
// cond and shard_map; bad tangents name jvp.
#include <cmath>

#include "test_util.h"

using namespace partix;

namespace {

Array rnd(const Shape& s, uint64_t seed, DType dt = DType::F64) {
  return random::normal(random::key(seed), s, dt);
}

std::vector<double> host(const Array& a) { return astype(a, DType::F64).to_vector<double>(); }

void expect_close(const Array& got, const Array& want, double tol = 1e-9) {
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<double> g = host(got), w = host(want);
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << "element " << i;
  }
}

// A vector-valued function of two arguments: y[3,2] = tanh(x w) * x[:, :2].
Array f2(const Array& x, const Array& w) { return tanh(matmul(x, w)) * slice_axis(x, 1, 0, 2); }

// Central differences of f along direction t at x (f64).
template <class F>
Array fd_jvp(F f, const Array& x, const Array& w, const Array& tx, const Array& tw, double h = 1e-6) {
  return (f(x + tx * h, w + tw * h) - f(x - tx * h, w - tw * h)) * (1.0 / (2 * h));
}

}  // namespace

TEST(Vjp, PullbackMatchesGradAndFiniteDifferencesAndCanBeCalledTwice) {
  Array x = rnd({3, 4}, 1), w = rnd({4, 2}, 2);
  auto [y, pullback] = vjp(f2, x, w);
  expect_close(y, f2(x, w));
  for (uint64_t seed : {3, 4}) {  // two calls with different cotangents
    Array ct = rnd({3, 2}, seed);
    auto [gx, gw] = pullback(ct);
    auto want = grad([&](const Array& a, const Array& b) { return sum(f2(a, b) * ct); },
                     std::vector<int>{0, 1})(x, w);
    expect_close(gx, want[0]);
    expect_close(gw, want[1]);
    // <ct, J t> = <J^T ct, t> with J t from finite differences.
    Array tx = rnd({3, 4}, 10 + seed), tw = rnd({4, 2}, 20 + seed);
    const double lhs = sum(ct * fd_jvp(f2, x, w, tx, tw)).item<double>();
    const double rhs = sum(gx * tx).item<double>() + sum(gw * tw).item<double>();
    EXPECT_NEAR(lhs, rhs, 1e-6 * (1 + std::abs(rhs)));
  }
}

TEST(Jvp, MatchesFiniteDifferencesAndTheJacobianFromVjp) {
  Array x = rnd({3, 4}, 5), w = rnd({4, 2}, 6), tx = rnd({3, 4}, 7), tw = rnd({4, 2}, 8);
  auto [y, t] = jvp(f2, std::tuple{x, w}, std::tuple{tx, tw});
  expect_close(y, f2(x, w));
  expect_close(t, fd_jvp(f2, x, w, tx, tw), 1e-7);
  // Row k of J from the pullback at the one-hot cotangent e_k: (J t)_k = <row_k, t>.
  auto [y2, pullback] = vjp(f2, x, w);
  std::vector<double> jt;
  for (int k = 0; k < 6; ++k) {
    std::vector<double> e(6, 0.0);
    e[static_cast<size_t>(k)] = 1;
    auto [rx, rw] = pullback(from_vector(e, {3, 2}));
    jt.push_back(sum(rx * tx).item<double>() + sum(rw * tw).item<double>());
  }
  expect_close(t, from_vector(jt, {3, 2}));
}

TEST(Jvp, LinearizeReusesTheForwardPassAndMatchesJvp) {
  Array x = rnd({3, 4}, 9), w = rnd({4, 2}, 10);
  int traces = 0;
  auto counted = [&](const Array& a, const Array& b) {
    ++traces;
    return f2(a, b);
  };
  auto [y, f_jvp] = linearize(counted, x, w);
  expect_close(y, f2(x, w));
  for (uint64_t seed : {11, 12}) {
    Array tx = rnd({3, 4}, seed), tw = rnd({4, 2}, seed + 100);
    expect_close(f_jvp(tx, tw), jvp(f2, std::tuple{x, w}, std::tuple{tx, tw}).second);
  }
  EXPECT_EQ(traces, 1);
}

TEST(Jvp, IntegerResultsGetZeroTangentsAndIntegerPrimalsAreIgnored) {
  Array x = rnd({4}, 13), n = from_vector<int32_t>({1, 2, 3, 4}, {4});
  auto f = [](const Array& a, const Array& k) {
    return std::vector<Array>{a * astype(k, DType::F64), astype(a * 10.0, DType::I32)};
  };
  auto [y, t] = jvp(f, std::tuple{x, n}, std::tuple{ones({4}, DType::F64), zeros({4}, DType::I32)});
  expect_close(t[0], astype(n, DType::F64));
  EXPECT_EQ(t[1].dtype(), DType::I32);
  expect_close(t[1], zeros({4}, DType::I32));
  auto [v, pullback] = vjp(f, x, n);
  auto [gx, gn] = pullback(std::vector<Array>{ones({4}, DType::F64), zeros({4}, DType::I32)});
  expect_close(gx, astype(n, DType::F64));
  expect_close(gn, zeros({4}, DType::I32));
}

TEST(Jvp, BadTangentsAndCotangentsNameTheApiAndTheLeaf) {
  Array x = rnd({3, 4}, 14), w = rnd({4, 2}, 15);
  EXPECT_PARTIX_ERROR(jvp(f2, std::tuple{x, w}, std::tuple{x, rnd({2, 4}, 1)}), "[jvp]",
                      "tangent 1", "[2,4]", "[4,2]");
  EXPECT_PARTIX_ERROR(jvp(f2, std::tuple{x, w}, std::tuple{astype(x, DType::F32), w}),
                      "[jvp]", "tangent 0", "f32");
  auto [y, pullback] = vjp(f2, x, w);
  EXPECT_PARTIX_ERROR(pullback(rnd({2, 3}, 1)), "[vjp]", "cotangent 0");
}

TEST(Vjp, ShardedOnEightDevicesEagerAndUnderJit) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array x = rnd({8, 4}, 16), w = rnd({4, 6}, 17), ct = rnd({8, 6}, 18);
  Array tx = rnd({8, 4}, 19), tw = rnd({4, 6}, 20);
  NamedSharding sx(m, P("x", "y")), sw(m, P("y", None));
  Array xs = device_put(x, sx), ws = device_put(w, sw), cts = device_put(ct, NamedSharding(m, P("x")));
  auto f = [](const Array& a, const Array& b) { return tanh(matmul(a, b)); };
  auto want = grad([&](const Array& a, const Array& b) { return sum(f(a, b) * ct); },
                   std::vector<int>{0, 1})(x, w);
  auto want_t = jvp(f, std::tuple{x, w}, std::tuple{tx, tw}).second;
  // Eagerly: cotangents keep the primals' shardings.
  auto [y, pullback] = vjp(f, xs, ws);
  for (int call = 0; call < 2; ++call) {
    auto [gx, gw] = pullback(cts);
    expect_close(gx, want[0]);
    expect_close(gw, want[1]);
    EXPECT_EQ(gx.sharding(), sx);
    EXPECT_EQ(gw.sharding(), sw);
  }
  auto [y2, t] = jvp(f, std::tuple{xs, ws}, std::tuple{device_put(tx, sx), device_put(tw, sw)});
  expect_close(t, want_t);
  EXPECT_EQ(t.sharding(), y2.sharding());
  // Under jit: vjp and jvp inside the traced function.
  auto jitted = jit([&](const Array& a, const Array& b, const Array& c, const Array& ta,
                        const Array& tb) {
    auto [out, pb] = vjp(f, a, b);
    auto [g1, g2] = pb(c);
    auto [g3, g4] = pb(c * 2.0);
    return std::vector<Array>{g1, g2, g3, g4, jvp(f, std::tuple{a, b}, std::tuple{ta, tb}).second};
  });
  std::vector<Array> r = jitted(xs, ws, cts, device_put(tx, sx), device_put(tw, sw));
  expect_close(r[0], want[0]);
  expect_close(r[1], want[1]);
  expect_close(r[2], want[0] * 2.0);
  expect_close(r[3], want[1] * 2.0);
  expect_close(r[4], want_t);
  EXPECT_EQ(r[0].sharding(), sx);
  EXPECT_EQ(r[1].sharding(), sw);
}

// For a scalar loss, J t = <grad, t>.
template <class F>
void expect_jvp_is_grad_dot(F loss, const Array& a, const Array& b, double tol = 1e-9) {
  Array ta = rnd(a.shape(), 31), tb = rnd(b.shape(), 32);
  auto [v, t] = jvp(loss, std::tuple{a, b}, std::tuple{ta, tb});
  auto g = grad(loss, std::vector<int>{0, 1})(a, b);
  const double want = sum(Array(g[0]) * ta).item<double>() + sum(Array(g[1]) * tb).item<double>();
  EXPECT_NEAR(Array(t).item<double>(), want, tol * (1 + std::abs(want)));
  Array jt = jit([&](const Array& p, const Array& q, const Array& tp, const Array& tq) {
    return jvp(loss, std::tuple{p, q}, std::tuple{tp, tq}).second;
  })(a, b, ta, tb);
  EXPECT_NEAR(jt.item<double>(), want, tol * (1 + std::abs(want)));
}

TEST(Jvp, ThroughScanAndForiLoop) {
  Array h0 = rnd({3, 4}, 21) * 0.5, w = rnd({4, 4}, 22) * 0.4, xs = rnd({5, 3, 4}, 23) * 0.5;
  auto scan_loss = [&](const Array& h, const Array& wl) {
    auto [c, ys] = scan([&](const Array& carry, const Array& xt) {
      Array n = tanh(matmul(carry, wl) + xt);
      return std::pair{n, n * n};
    }, h, xs);
    return sum(c) + sum(ys);
  };
  expect_jvp_is_grad_dot(scan_loss, h0, w);
  auto fori_loss = [](const Array& a, const Array& b) {
    return sum(fori_loop(0, 4, [&](const Array&, const Array& c) { return sin(c * b) + b; }, a));
  };
  expect_jvp_is_grad_dot(fori_loss, rnd({4}, 24), rnd({4}, 25));
  // The pullback of a vector-valued scan against finite differences.
  auto [y, pullback] = vjp([&](const Array& h, const Array& wl) {
    return scan([&](const Array& c, const Array& xt) {
      Array n = tanh(matmul(c, wl) + xt);
      return std::pair{n, n};
    }, h, xs).second;
  }, h0, w);
  Array ct = rnd({5, 3, 4}, 26);
  auto [gh, gw] = pullback(ct);
  auto want = grad([&](const Array& h, const Array& wl) { return sum(scan([&](const Array& c, const Array& xt) {
    Array n = tanh(matmul(c, wl) + xt);
    return std::pair{n, n};
  }, h, xs).second * ct); }, std::vector<int>{0, 1})(h0, w);
  expect_close(gh, want[0]);
  expect_close(gw, want[1]);
}

TEST(Jvp, ThroughCond) {
  for (bool taken : {true, false}) {
    SCOPED_TRACE(taken ? "true branch" : "false branch");
    Array p = full({}, taken ? 1 : 0, DType::Bool);
    auto loss = [&](const Array& a, const Array& b) {
      return sum(cond(p, [&](const Array& v) { return sin(v) * b; },
                      [&](const Array& v) { return v * v * b; }, a));
    };
    expect_jvp_is_grad_dot(loss, rnd({3}, 27), rnd({3}, 28));
  }
}

TEST(Jvp, ThroughShardMapWithPsum) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array x = rnd({8, 4}, 29), w = rnd({4, 2}, 30);
  auto loss = [&](const Array& a, const Array& b) {
    Array r = shard_map([](const Array& blk, const Array& wl) {
      return psum(sum(tanh(matmul(blk, wl))), "x");
    }, m, {P("x"), P()}, {P()})(a, b);
    return r;
  };
  expect_jvp_is_grad_dot(loss, device_put(x, NamedSharding(m, P("x"))), w);
  // The unsharded program gives the same tangent.
  Array tx = rnd({8, 4}, 31), tw = rnd({4, 2}, 32);
  auto t = jvp(loss, std::tuple{device_put(x, NamedSharding(m, P("x"))), w}, std::tuple{tx, tw}).second;
  auto ref = jvp([](const Array& a, const Array& b) { return sum(tanh(matmul(a, b))); },
                 std::tuple{x, w}, std::tuple{tx, tw}).second;
  expect_close(t, ref);
}

TEST(Jacobian, JacrevJacfwdAndHessianAgreeWithFiniteDifferences) {
  Array x = rnd({3, 4}, 40), w = rnd({4, 2}, 41);
  ArraysFn f = [](const std::vector<Array>& a) {
    return std::vector<Array>{f2(a[0], a[1]), sum(square(a[0])) * sum(a[1])};
  };
  for (int argnum : {0, 1}) {
    SCOPED_TRACE(argnum);
    const Array& arg = argnum == 0 ? x : w;
    const std::vector<Array> jr = jacrev(f, argnum)({x, w}), jf = jacfwd(f, argnum)({x, w});
    ASSERT_EQ(jr.size(), 2u);
    Shape want0{3, 2};
    want0.insert(want0.end(), arg.shape().begin(), arg.shape().end());
    EXPECT_EQ(jr[0].shape(), want0);
    EXPECT_EQ(jr[1].shape(), arg.shape());
    expect_close(jf[0], jr[0]);
    expect_close(jf[1], jr[1]);
    // Each column against central differences along that argument's basis vector.
    const std::vector<double> jh = host(jr[0]);
    const int64_t n = arg.size();
    for (int64_t k = 0; k < n; ++k) {
      std::vector<double> e(static_cast<size_t>(n), 0.0);
      e[static_cast<size_t>(k)] = 1;
      Array t = from_vector(e, arg.shape());
      Array z = zeros(argnum == 0 ? w.shape() : x.shape(), DType::F64);
      const std::vector<double> col = host(argnum == 0 ? fd_jvp(f2, x, w, t, z) : fd_jvp(f2, x, w, z, t));
      for (size_t r = 0; r < col.size(); ++r) {
        EXPECT_NEAR(jh[r * static_cast<size_t>(n) + static_cast<size_t>(k)], col[r], 1e-7);
      }
    }
  }
  // hessian of sum(x^3) is diag(6x); under jit too.
  ArraysFn cube = [](const std::vector<Array>& a) { return std::vector<Array>{sum(a[0] * a[0] * a[0])}; };
  Array v = rnd({5}, 42);
  const std::vector<double> vs = host(v);
  for (bool jitted : {false, true}) {
    Array h = jitted ? jit([&](const Array& u) { return hessian(cube)({u})[0]; })(v)
                     : hessian(cube)({v})[0];
    ASSERT_EQ(h.shape(), (Shape{5, 5}));
    const std::vector<double> hs = host(h);
    for (int i = 0; i < 5; ++i) {
      for (int j = 0; j < 5; ++j) EXPECT_NEAR(hs[i * 5 + j], i == j ? 6 * vs[i] : 0.0, 1e-9);
    }
  }
  EXPECT_PARTIX_ERROR(jacrev(f, 2)({x, w}), "[jacrev] argnum 2 is out of range");
  EXPECT_PARTIX_ERROR(jacfwd(f, 0)({astype(x, DType::I32), w}), "[jacfwd] differentiates floating");
}

TEST(Jacobian, ShardedArgumentOnEightDevices) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array x = device_put(rnd({8, 2}, 43), NamedSharding(m, P("x", "y")));
  ArraysFn f = [](const std::vector<Array>& a) { return std::vector<Array>{sin(a[0]) * 2.0}; };
  Array j = jacrev(f)({x})[0];  // diag(2 cos x) over the 16 elements, shaped [8, 2, 8, 2]
  ASSERT_EQ(j.shape(), (Shape{8, 2, 8, 2}));
  const std::vector<double> js = host(j), xs = host(x);
  for (size_t a = 0; a < 16; ++a) {
    for (size_t b = 0; b < 16; ++b) EXPECT_NEAR(js[a * 16 + b], a == b ? 2 * std::cos(xs[a]) : 0.0, 1e-12);
  }
  expect_close(jacfwd(f)({x})[0], j);
}
