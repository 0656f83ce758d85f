// Control flow on 8 devices: values under several shardings (uneven included) against the
// single-device run; carries keep one sharding (a constraint in the body wins); collectives in
// bodies run every iteration and cost_analysis counts them per trip; a control-flow primitive
// the compiler does not know is partitioned from its stated facts.
#include <cmath>
#include <functional>

#include "ir/primitive.h"
#include "spmd_test_util.h"
#include "trace/trace.h"

using namespace partix;
using testing_util::count_op;

namespace {

Mesh mesh42() { return make_mesh({4, 2}, {"x", "y"}); }

Array rnd(const Shape& s, uint64_t seed) { return random::normal(random::key(seed), s); }

void expect_close(const Array& got, const Array& want, double tol = 1e-4) {
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << "element " << i;
  }
}

// An RNN over T steps: h = tanh(h w + x_t), y_t = sum(h, 1); then a fori_loop, a while_loop and
// a cond on the result. B 6 and C 10 split 4 ways are uneven.
std::pair<Array, Array> rnn(const Array& h0, const Array& xs, const Array& w) {
  auto [h, ys] = scan(
      [&](const Array& c, const Array& x) {
        Array n = tanh(matmul(c, w) + x);
        return std::pair{n, sum(n, {1})};
      },
      h0, xs);
  Array g = fori_loop(
      0, 3,
      [&](const Array& i, const Array& c) {
        return c * 0.5 + matmul(c, w) * 0.1 + astype(i, DType::F32);
      },
      h);
  Array k = while_loop(
      [](const Array& c) {
        return max(abs(c), {0, 1}) < 40.0;
      },
      [](const Array& c) { return c * 1.5 + 1.0; }, g);
  Array out = cond(
      sum(k) > 0.0, [&](const Array& a) { return a + matmul(a, w); },
      [](const Array& a) { return -a; }, k);
  return {out, ys};
}

}  // namespace

TEST(ControlFlowSharding, MatchesOneDeviceUnderSeveralShardings) {
  const int64_t T = 5, B = 6, C = 10;
  Array h0 = rnd({B, C}, 1) * 0.5, xs = rnd({T, B, C}, 2) * 0.5, w = rnd({C, C}, 3) * 0.3;
  auto [want_out, want_ys] = rnn(h0, xs, w);  // eager, one device
  Mesh m = mesh42();
  struct Case {
    PartitionSpec h, xs, w;
  };
  const std::vector<Case> cases{
      {P(), P(), P()},
      {P("x"), P(None, "x"), P()},
      {P(None, "y"), P(None, None, "y"), P("y")},
      {P("x", "y"), P("x", None, "y"), P(None, "y")},  // xs split on the scanned axis
      {P(Axes{"x", "y"}), P(), P("x", "y")},
  };
  auto f = jit(rnn);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.h.to_string() + " " + c.xs.to_string() + " " + c.w.to_string());
    auto [out, ys] =
        f(device_put(h0, NamedSharding(m, c.h)), device_put(xs, NamedSharding(m, c.xs)),
          device_put(w, NamedSharding(m, c.w)));
    expect_close(out, want_out);
    expect_close(ys, want_ys);
  }
}

TEST(ControlFlowSharding, CarryKeepsItsShardingAndAConstraintInTheBodyWins) {
  Mesh m = mesh42();
  auto f = jit([&](const Array& h, const Array& xs) {
    return scan(
               [&](const Array& c, const Array& x) {
                 Array n = with_sharding_constraint(c * 0.5 + x, NamedSharding(m, P("x")));
                 return std::pair{n, n};
               },
               h, xs)
        .first;
  });
  Array h = rnd({8, 4}, 4), xs = rnd({3, 8, 4}, 5);
  Lowered l = f.lower(device_put(h, NamedSharding(m, P())), device_put(xs, NamedSharding(m, P())));
  const std::string text = l.as_text();
  // The body's carry parameter is the block of P('x'): 2 rows of 8.
  EXPECT_NE(text.find("program @scan_body mesh<'x': 4, 'y': 2> (%0: f32[2,4] P('x')"),
            std::string::npos)
      << text;
  std::vector<float> hv = h.to_vector<float>(), xv = xs.to_vector<float>();
  for (int t = 0; t < 3; ++t) {
    for (size_t i = 0; i < hv.size(); ++i) hv[i] = hv[i] * 0.5f + xv[t * hv.size() + i];
  }
  expect_close(f(device_put(h, NamedSharding(m, P())), device_put(xs, NamedSharding(m, P()))),
               from_vector(hv, {8, 4}));
}

TEST(ControlFlowSharding, CollectivesInTheBodyRunEveryIterationAndAreCostedPerTrip) {
  Mesh m = mesh42();
  // The contraction dimension of h w is split over 'y': each step all-reduces partial sums.
  auto lower = [&](int64_t T) {
    auto g = jit([T](const Array& h, const Array& w) {
      return fori_loop(
          0, T, [&](const Array&, const Array& c) { return tanh(matmul(c, w)); }, h);
    });
    Array h = device_put(rnd({16, 32}, 6), NamedSharding(m, P("x", "y")));
    Array w = device_put(rnd({32, 32}, 7), NamedSharding(m, P("y", None)));
    return std::pair{g.lower(h, w), g(h, w)};
  };
  auto [l1, y1] = lower(1);
  auto [l2, y2] = lower(2);
  auto [l5, y5] = lower(5);
  // The body is printed once whatever the trip count.
  EXPECT_EQ(l2.as_text().size(), l5.as_text().size());
  const auto c1 = l1.cost_analysis(), c2 = l2.cost_analysis(), c5 = l5.cost_analysis();
  double b1 = 0, b2 = 0, b5 = 0;
  for (const auto& [k, v] : c1.bytes_per_device) b1 += v;
  for (const auto& [k, v] : c2.bytes_per_device) b2 += v;
  for (const auto& [k, v] : c5.bytes_per_device) b5 += v;
  const double per_trip = b2 - b1;
  EXPECT_GT(per_trip, 0) << l2.as_text();
  EXPECT_NEAR(b5 - b1, 4 * per_trip, 1e-6);
  EXPECT_NEAR(c5.flops - c1.flops, 4 * (c2.flops - c1.flops), 1e-6);
  EXPECT_GT(c2.flops - c1.flops, 2.0 * 16 * 32 * 32 / 8 * 0.99);
  // Values: against the unrolled loop on one device.
  Array h = rnd({16, 32}, 6), w = rnd({32, 32}, 7);
  Array u = h;
  for (int t = 0; t < 5; ++t) u = tanh(matmul(u, w));
  expect_close(y5, u);
}

TEST(ControlFlowSharding, ShardMapBodyLoopsWithExplicitCollectives) {
  Mesh m = mesh42();
  // Each step adds the sum over 'x' of the blocks: the psum runs every iteration on every device.
  auto f = shard_map(
      [](const Array& b) {
        return fori_loop(
            0, 3,
            [](const Array& i, const Array& c) {
              Array s = psum(c, "x");
              return cond(
                  equal(i % 2.0, 0.0), [&](const Array& a) { return a + s * 0.1; },
                  [&](const Array& a) { return a - s * 0.2; }, c);
            },
            b);
      },
      m, {P("x")}, {P("x")});
  Array x = rnd({8, 3}, 8);
  Array got = jit(f)(device_put(x, NamedSharding(m, P("x"))));
  Array eager = f(device_put(x, NamedSharding(m, P("x"))));
  // Reference: blocks of 2 rows; s = sum of the 4 blocks.
  std::vector<float> v = x.to_vector<float>();
  for (int t = 0; t < 3; ++t) {
    std::vector<float> s(6, 0.0f);
    for (int blk = 0; blk < 4; ++blk) {
      for (int e = 0; e < 6; ++e) s[e] += v[blk * 6 + e];
    }
    for (int blk = 0; blk < 4; ++blk) {
      for (int e = 0; e < 6; ++e) v[blk * 6 + e] += (t % 2 == 0 ? 0.1f : -0.2f) * s[e];
    }
  }
  expect_close(got, from_vector(v, {8, 3}));
  expect_close(eager, from_vector(v, {8, 3}));
  EXPECT_EQ(count_op(jit(f).lower(device_put(x, NamedSharding(m, P("x")))).as_text(), "all_reduce"),
            1);
}

// Regression: a shard_map inside a loop body or a branch, on uncommitted (host) operands, ran
// the program around it on the default device and then refused the shard_map's mesh; the
// program now runs where a shard_map anywhere in it names, eager and under jit.
TEST(ControlFlowSharding, ShardMapInsideLoopBodiesAndBranchesNamesTheProgramsMesh) {
  Mesh m = mesh42();
  auto total = shard_map(
      [](const Array& b) {
        return psum(sum(b), Axes{"x", "y"});
      },
      m, {P("x", "y")}, {P()});
  Array a = reshape(arange(32, DType::F32), {8, 4});  // uncommitted, on the default device
  const float whole = 496.0f;                         // 0 + 1 + ... + 31
  auto in_scan = [&](const Array& x) {
    return scan(
               [&](const Array& c, const Array&) {
                 return std::pair{c + total(x), c};
               },
               full({}, 0.0f), zeros({3}))
        .first;
  };
  auto in_fori = [&](const Array& x) {
    return fori_loop(
        0, 3, [&](const Array&, const Array& c) { return c + total(x); }, full({}, 0.0f));
  };
  auto in_cond = [&](const Array& x) {
    return cond(
        sum(x) > 0.0f, [&](const Array& v) { return total(v); },
        [](const Array&) { return full({}, 0.0f); }, x);
  };
  EXPECT_EQ(in_scan(a).item<float>(), 3 * whole);
  EXPECT_EQ(jit(in_scan)(a).item<float>(), 3 * whole);
  EXPECT_EQ(in_fori(a).item<float>(), 3 * whole);
  EXPECT_EQ(jit(in_fori)(a).item<float>(), 3 * whole);
  EXPECT_EQ(jit(in_cond)(a).item<float>(), whole);
  EXPECT_EQ(jit(in_scan)(a).sharding().mesh(), m);
  // Operands committed to another mesh are still refused, naming that mesh.
  Array elsewhere = device_put(a, NamedSharding(make_mesh({8}, {"x"}), P()));
  EXPECT_PARTIX_ERROR(jit(in_scan)(elsewhere), "mesh axis 'y' in P('x', 'y')", "Mesh('x': 8)");
}

// Regression: a loop's operands were joined like an elementwise op's, so a varying capture made
// every carry vary, and a trip counter driven by a pmax could not leave shard_map as P().
TEST(ControlFlowSharding, ShardMapLoopCarriesVaryOnlyAsTheirBodiesMakeThem) {
  Mesh m = mesh42();
  Array x = device_put(rnd({8, 3}, 9), NamedSharding(m, P("x")));
  // while: the predicate pmax's a varying capture, so it agrees everywhere and the counter stays
  // invariant, while the buffer beside it varies.
  auto w = shard_map(
      [](const Array& b) {
        Array top = max(abs(b));
        using Carry = std::pair<Array, Array>;
        return while_loop(
            [&](const Carry& c) { return pmax(top, "x") > astype(c.first, DType::F32); },
            [&](const Carry& c) {
              return Carry{c.first + 1.0, c.second + b};
            },
            Carry{zeros({}, DType::I32), pvary(zeros(b.shape()), Axes{"x"})});
      },
      m, {P("x")}, {P(), P("x")});
  auto [steps, acc] = w(x);
  const int32_t want = static_cast<int32_t>(std::ceil(max(abs(x)).item<float>()));
  EXPECT_EQ(steps.item<int32_t>(), want);
  expect_close(acc, x * static_cast<double>(want));
  // fori_loop: a varying capture used only by the body's second carry.
  auto f = shard_map(
      [](const Array& b) {
        using Carry = std::pair<Array, Array>;
        return fori_loop(
            0, 2,
            [&](const Array&, const Carry& c) {
              return Carry{c.first * 2.0, c.second + b};
            },
            Carry{ones({}), pvary(zeros(b.shape()), Axes{"x"})});
      },
      m, {P("x")}, {P(), P("x")});
  EXPECT_EQ(f(x).first.item<float>(), 4.0f);
}

// JAX 0.10's rule (check_vma): a user's loop keeps each carry's varying axes. A carry that
// enters invariant and leaves varying is refused, naming the pvary (pcast) of its initial
// value; a cond's branches must agree on their results' varying axes, up to the predicate's.
TEST(ControlFlowSharding, ShardMapLoopCarriesKeepTheirVaryingAxes) {
  Mesh m = mesh42();
  Array x = device_put(rnd({8, 3}, 9), NamedSharding(m, P("x")));
  auto bad_scan = shard_map(
      [](const Array& b) {
        return scan(
                   [&](const Array& c, const Array&) {
                     return std::pair{c + b, c};
                   },
                   zeros(b.shape()), zeros({2}))
            .first;
      },
      m, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(bad_scan(x), "[scan] scan body function carry input and carry output",
                      "has type f32[2,3] but the corresponding output carry component has "
                      "type f32[2,3]{V:x}",
                      "pcast(..., ('x',), to='varying')` to the initial carry value");
  auto bad_fori = shard_map(
      [](const Array& b) {
        return fori_loop(
            0, 2, [&](const Array&, const Array& c) { return c + b; }, zeros(b.shape()));
      },
      m, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(bad_fori(x), "[fori_loop] fori_loop body function carry input");
  // A carry that enters varying and leaves invariant is refused too (no fix to suggest).
  auto lost = shard_map(
      [](const Array& b) {
        return fori_loop(
            0, 2,
            [&](const Array&, const Array&) {
              return zeros({2, 3});
            },
            b);
      },
      m, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(lost(x),
                      "has type f32[2,3]{V:x} but the corresponding output carry "
                      "component has type f32[2,3]");
  auto bad_cond = shard_map(
      [](const Array& b) {
        return cond(
            scalar(1.0f) > 0.0, [&](const Array& v) { return v; },
            [&](const Array& v) { return zeros(v.shape()); }, b);
      },
      m, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(bad_cond(x), "[cond] cond branches must have equal output types",
                      "applying `jax.lax.pcast(..., ('x',), to='varying')` to the output of "
                      "false_fun at path [0]");
  // The named fixes run; the loops autodiff builds (grad of a well-typed scan) widen freely.
  auto good = shard_map(
      [](const Array& b) {
        Array acc = scan(
                        [&](const Array& c, const Array&) {
                          return std::pair{c + b, c};
                        },
                        pvary(zeros(b.shape()), Axes{"x"}), zeros({2}))
                        .first;
        return psum(sum(acc * acc), "x");
      },
      m, {P("x")}, {P()});
  expect_close(good(x), sum(4.0 * x * x));
  Array g = grad([&](const Array& v) { return good(v); })(x);
  expect_close(g, 8.0 * x);
}

// A predicate that varies gives devices their own trip counts: every carry then varies with it
// (claiming a counter replicated is an error) and each device counts its own trips.
TEST(ControlFlowSharding, ShardMapWhileWithVaryingPredicateMakesCarriesVary) {
  Mesh m = mesh42();
  Array x = device_put(from_vector(std::vector<float>{0, 1, 2, 3}, {4}), NamedSharding(m, P("x")));
  auto steps = [&](PartitionSpec out) {
    return shard_map(
        [](const Array& b) {
          using Carry = std::pair<Array, Array>;
          Carry done = while_loop([](const Carry& c) { return sum(c.second) < 3.0; },
                                  [](const Carry& c) {
                                    return Carry{c.first + 1.0, c.second + 1.0};
                                  },
                                  Carry{zeros({}, DType::I32), b});
          return reshape(done.first, {1});
        },
        m, {P("x")}, {out});
  };
  EXPECT_THROW(steps(P())(x), Error);
  Array got = steps(P("x"))(x);
  EXPECT_EQ(got.to_vector<int32_t>(), (std::vector<int32_t>{3, 2, 1, 0}));
}

// Regression: a cond whose predicate differs between devices, with psum in one branch and an
// all_gather of the same group in the other, paired devices that ran different collectives and
// returned wrong values silently. Collectives over an axis the predicate varies over are now
// refused at trace time (as in JAX), with check_vma or without, also in nested regions.
TEST(ControlFlowSharding, ShardMapCondWithVaryingPredicateRefusesCollectivesOverItsAxes) {
  Mesh m = mesh42();
  Array x = device_put(rnd({8, 4}, 11), NamedSharding(m, P("x")));
  // Both branches give psum(v, 'x'): one with psum, one by summing an all_gather.
  auto psum_both_ways = [](bool pred_invariant) {
    return [=](const Array& b) {
      Array s = sum(b);
      Array p = (pred_invariant ? pmax(s, "x") : s) > 0.0;
      return cond(
          p, [](const Array& v) { return psum(v, "x"); },
          [](const Array& v) { return sum(all_gather(v, "x", 0, false), {0}); }, b);
    };
  };
  for (bool check_vma : {true, false}) {
    auto f = shard_map(psum_both_ways(false), m, {P("x")}, {P()}, check_vma);
    EXPECT_PARTIX_ERROR(f(x), "[cond]", "predicate varies over 'x'", "true branch", "psum",
                        "different collectives");
    EXPECT_PARTIX_ERROR(jit(f)(x), "[cond]", "psum over 'x'");
  }
  // A predicate made invariant over 'x' is fine: every device takes the same branch. (A cond's
  // results vary with its operands, so P() needs check_vma off.)
  auto ok = shard_map(psum_both_ways(true), m, {P("x")}, {P()}, false);
  Array blocks = reshape(x, {4, 2, 4});
  expect_close(ok(x), sum(blocks, {0}));
  // Only the axes the predicate varies over matter: varying over 'y', a psum over 'x' pairs
  // devices with the same predicate. Each 'y' block is 4 * itself where its sum is positive.
  Array xy = device_put(rnd({4, 8}, 12), NamedSharding(m, P(None, "y")));
  auto by_y = shard_map(
      [](const Array& b) {
        return cond(
            sum(b) > 0.0, [](const Array& v) { return psum(v, "x"); },
            [](const Array& v) { return -v; }, b);
      },
      m, {P(None, "y")}, {P(None, "y")});
  std::vector<float> v = xy.to_vector<float>(), want(v.size());
  for (int half = 0; half < 2; ++half) {
    double s = 0;
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 4; ++c) s += v[static_cast<size_t>(r * 8 + half * 4 + c)];
    }
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 4; ++c) {
        const size_t i = static_cast<size_t>(r * 8 + half * 4 + c);
        want[i] = s > 0 ? 4 * v[i] : -v[i];
      }
    }
  }
  expect_close(by_y(xy), from_vector(want, {4, 8}));
  // Nested: the collective sits in a fori_loop inside the false branch.
  auto nested = shard_map(
      [](const Array& b) {
        return cond(
            sum(b) > 0.0, [](const Array& v) { return v; },
            [](const Array& v) {
              return fori_loop(
                  0, 2,
                  [](const Array&, const Array& c) {
                    return ppermute(c, "x", {{0, 1}, {1, 0}});
                  },
                  v);
            },
            b);
      },
      m, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(nested(x), "[cond]", "false branch", "ppermute over 'x'");
}

// The same for while_loop: a condition that varies gives devices different trip counts, so
// neither the body nor the condition may hold a collective over its axes.
TEST(ControlFlowSharding, ShardMapWhileWithVaryingConditionRefusesCollectivesOverItsAxes) {
  Mesh m = mesh42();
  Array x = device_put(from_vector(std::vector<float>{0, 1, 2, 3}, {4}), NamedSharding(m, P("x")));
  auto in_body = shard_map(
      [](const Array& b) {
        return while_loop([](const Array& c) { return sum(c) < 3.0; },
                          [](const Array& c) { return c + psum(c, "x") * 0.0 + 1.0; }, b);
      },
      m, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(in_body(x), "[while_loop]", "predicate varies over 'x'",
                      "different numbers of iterations", "the body", "psum");
  auto in_cond = shard_map(
      [](const Array& b) {
        return while_loop([](const Array& c) { return sum(c) + psum(sum(c), "x") * 0.0 < 3.0; },
                          [](const Array& c) { return c + 1.0; }, b);
      },
      m, {P("x")}, {P("x")});
  EXPECT_PARTIX_ERROR(in_cond(x), "[while_loop]", "the condition", "psum over 'x'");
  // A condition reduced over 'x' agrees everywhere: a psum in the body is fine. Every block
  // grows by the total until the total reaches 40: 6 -> 30 -> 150.
  auto agreed = shard_map(
      [](const Array& b) {
        return while_loop([](const Array& c) { return psum(sum(c), "x") < 40.0; },
                          [](const Array& c) { return c + psum(c, "x"); }, b);
      },
      m, {P("x")}, {P("x")});
  Array got = agreed(x);
  std::vector<float> v{0, 1, 2, 3};
  float total = 6;
  while (total < 40) {
    for (float& e : v) e += total;
    total = v[0] + v[1] + v[2] + v[3];
  }
  expect_close(got, from_vector(v, {4}));
}

// Regression: where no trace-time check applies (a program given as text), devices of one group
// that took different branches met in different collectives and the run failed with "internal
// error ... wrong size", or mixed their buffers. Each device now raises an error naming every
// device's collective and size.
TEST(ControlFlowSharding, DevicesEnteringDifferentCollectivesRaiseNamingThem) {
  const std::string text =
      "program @f mesh<'x': 4> (%0: f32[8] P('x')) -> (%1) {\n"
      "  %1 = shard_map(%0) {check_vma=false, in_specs=[P('x')], mesh=mesh<'x': 4>, "
      "out_specs=[P()]} : f32[2] P() region {\n"
      "    program @body (%0: f32[2] vary('x')) -> (%4) {\n"
      "      %1 = reduce_sum(%0) {axes=[0]} : f32[] vary('x')\n"
      "      %2 = constant() {value=<f32[]: 0>} : f32[]\n"
      "      %3 = gt(%1, %2) : bool[] vary('x')\n"
      "      %4 = cond(%3, %0) : f32[2] vary('x') region {\n"
      "        program @cond_true (%0: f32[2] vary('x')) -> (%1) {\n"
      "          %1 = all_reduce(%0) {axes=['x'], group=4, kind=\"sum\"} : f32[2]\n"
      "        }\n"
      "      } region {\n"
      "        program @cond_false (%0: f32[2] vary('x')) -> (%2) {\n"
      "          %1 = all_gather(%0) {axes=['x'], axis=0, group=4, tiled=false} : f32[4,2]\n"
      "          %2 = reduce_sum(%1) {axes=[0]} : f32[2]\n"
      "        }\n"
      "      }\n"
      "    }\n"
      "  }\n"
      "}\n";
  ir::Program p = ir::parse_program(text);
  spmd::CompileOptions options;
  for (int v : p.params) options.in_shardings.push_back(p.info(v).sharding);
  auto exe = spmd::compile(p, options)->executable;
  Mesh m = make_mesh({4}, {"x"});
  auto run = [&](std::vector<float> v) {
    return exe->run({device_put(from_vector(v, {8}), NamedSharding(m, P("x")))})[0];
  };
  // Blocks 0 and 2 sum above zero (psum), blocks 1 and 3 below (all_gather).
  EXPECT_PARTIX_ERROR(run({1, 2, -1, -2, 3, 4, -3, -4}), "entered different collectives",
                      "group [0,1,2,3]", "device 0: all_reduce of 8 bytes (sum f32)",
                      "device 1: all_gather of 8 bytes");
  // All devices on one branch: both branches give the sum of the blocks.
  for (const std::vector<float>& v : {std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8},
                                      std::vector<float>{-1, -2, -3, -4, -5, -6, -7, -8}}) {
    const float s = v[0] + v[2] + v[4] + v[6], t = v[1] + v[3] + v[5] + v[7];
    EXPECT_EQ(run(v).to_vector<float>(), (std::vector<float>{s, t}));
  }
}

namespace {

// A control-flow primitive the compiler has never heard of: its body runs twice over its
// carries. Propagation, partitioning, the interpreter and cost analysis must handle it from the
// facts it states (region layout, trip count, execute) alone.
class Twice final : public prim::Primitive {
 public:
  std::string_view name() const override { return "test_twice"; }
  std::vector<ir::Aval> infer(const std::vector<ir::Aval>&, const ir::Attrs&,
                              const prim::Regions& regions) const override {
    std::vector<ir::Aval> out;
    for (int v : regions[0]->results) out.push_back(regions[0]->aval(v));
    return out;
  }
  // Each carry keeps its factors from operand to result.
  prim::FactorRule factor_rule(const std::vector<ir::Aval>& in, const std::vector<ir::Aval>&,
                               const ir::Attrs&) const override {
    prim::FactorRuleBuilder b;
    for (const ir::Aval& a : in) {
      std::vector<prim::DimFactors> dims;
      for (int64_t d : a.shape) dims.push_back({b.add(d)});
      b.rule().operands.push_back(dims);
      b.rule().results.push_back(dims);
    }
    return b.rule();
  }
  void reference(const prim::KernelCall&) const override { ADD_FAILURE() << "runs regions"; }
  double flops(const std::vector<ir::Aval>&, const std::vector<ir::Aval>&,
               const ir::Attrs&) const override {
    return 0;
  }
  bool runs_regions() const override { return true; }
  std::vector<detail::Buffer> execute(const prim::KernelCall&, std::vector<detail::Buffer> args,
                                      const prim::RegionRunner& run) const override {
    for (int t = 0; t < 2; ++t) args = run(0, std::move(args));
    return args;
  }
  double trip_count(const ir::Attrs&, size_t) const override { return 2; }
  RegionLayout region_layout(const ir::Attrs& attrs) const override {
    RegionLayout l;
    l.num_carry = static_cast<size_t>(attrs.i("num_carry"));
    return l;
  }
};

Array twice(const Array& x, const std::function<Array(const Array&)>& body) {
  static Twice prim_twice;
  static const bool registered = (prim::register_primitive(&prim_twice), true);
  (void)registered;
  ir::Program region = detail::trace_probe({ir::Aval{x.shape(), x.dtype()}}, {{}},
                                           [&](const std::vector<Array>& t, detail::TraceState&) {
                                             return std::vector<Array>{body(t[0])};
                                           });
  ir::Attrs attrs;
  attrs.set("num_carry", int64_t{1});
  return detail::bind1(prim_twice, {x}, attrs, {std::make_shared<const ir::Program>(region)});
}

}  // namespace

TEST(ControlFlowSharding, ANewControlFlowPrimitiveNeedsOnlyItsFacts) {
  Mesh m = mesh42();
  auto body = [](const Array& c) { return c * 2.0 + 1.0; };
  Array x = rnd({8, 4}, 10);
  std::vector<float> want = x.to_vector<float>();
  for (float& v : want) v = (v * 2 + 1) * 2 + 1;
  expect_close(twice(x, body), from_vector(want, {8, 4}));  // eager
  auto f = jit([&](const Array& a) { return twice(a, body); });
  Array xs = device_put(x, NamedSharding(m, P("x", "y")));
  Array got = f(xs);
  expect_close(got, from_vector(want, {8, 4}));
  // The carry keeps its sharding: each device runs the body on its 2x2 block, no collective.
  EXPECT_EQ(got.sharding().spec(), P("x", "y"));
  const Lowered l = f.lower(xs);
  const std::string text = l.as_text();
  EXPECT_EQ(count_op(text, "test_twice"), 1) << text;
  EXPECT_EQ(count_op(text, "all_gather") + count_op(text, "all_reduce"), 0) << text;
  EXPECT_NE(text.find("(%0: f32[2,2] P('x', 'y')"), std::string::npos) << text;
  // Costed per trip: as the body written out twice.
  auto unrolled = jit([&](const Array& a) { return body(body(a)); });
  EXPECT_DOUBLE_EQ(l.cost_analysis().flops, unrolled.lower(xs).cost_analysis().flops);
}
