// vmap of loops, branches, random draws, collectives over vmap's axis_name, shard_map and
// spmd_axis_name. The oracle is always the unbatched function applied to each example in turn
// (or, for collectives over the examples, the reduction written out over them).
#include <cmath>

#include "test_util.h"

using namespace partix;

namespace {

std::vector<double> vec(const Array& a) { return astype(a, DType::F64).to_vector<double>(); }

Array example(const Array& x, int64_t i) { return squeeze(slice_axis(x, 0, i, i + 1), {0}); }

// f applied to example i of every argument (all mapped at 0), results stacked on axis 0.
std::vector<Array> loop(const ArraysFn& f, const std::vector<Array>& args) {
  const int64_t n = args[0].shape()[0];
  std::vector<std::vector<Array>> per;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<Array> ex;
    for (const Array& a : args) ex.push_back(example(a, i));
    per.push_back(f(ex));
  }
  std::vector<Array> out;
  for (size_t k = 0; k < per[0].size(); ++k) {
    std::vector<Array> col;
    for (const auto& p : per) col.push_back(expand_dims(p[k], 0));
    out.push_back(concatenate(col, 0));
  }
  return out;
}

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  std::vector<double> a = vec(got), b = vec(want);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << what << " element " << i;
  }
}

// vmap(f) against the loop, eagerly and under jit.
void expect_batched_as_looped(const ArraysFn& f, const std::vector<Array>& args, double tol) {
  const std::vector<Array> want = loop(f, args);
  std::vector<int> zeros(args.size(), 0);
  const std::vector<Array> got = vmap(f, zeros)(args);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k)
    expect_close(got[k], want[k], tol, "eager result " + std::to_string(k));
  auto jitted = jit([&](const std::vector<Array>& a) { return vmap(f, zeros)(a); });
  const std::vector<Array> jg = jitted(args);
  for (size_t k = 0; k < want.size(); ++k)
    expect_close(jg[k], want[k], tol, "jit result " + std::to_string(k));
}

}  // namespace

TEST(VmapControl, ScanCarriesBatchedFromTheStartOrByTheBody) {
  Array x = random::normal(random::key(1), {4, 5, 3}, DType::F64);  // 4 examples of [5, 3]
  Array h = random::normal(random::key(2), {4, 3}, DType::F64);
  // A batched carry and scanned input, and an unbatched carry the body makes batched.
  ArraysFn f = [](const std::vector<Array>& a) {
    auto body = [](const std::pair<Array, Array>& c, const Array& xt) {
      Array hn = tanh(c.first * 0.5 + xt);
      return std::pair{std::pair{hn, c.second + sum(hn)}, hn * 2.0};
    };
    auto [carry, ys] = scan(body, std::pair{a[1], zeros({}, DType::F64)}, a[0]);
    return std::vector<Array>{carry.first, carry.second, ys};
  };
  expect_batched_as_looped(f, {x, h}, 1e-12);
  // Reverse, with the scanned input batched on another axis.
  ArraysFn r = [](const std::vector<Array>& a) {
    auto body = [](const Array& c, const Array& xt) { return std::pair{c * 0.9 + xt, c}; };
    auto [c, ys] = scan(body, zeros({3}, DType::F64), a[0], /*reverse=*/true);
    return std::vector<Array>{c, ys};
  };
  expect_batched_as_looped(r, {x}, 1e-12);
  std::vector<Array> moved = vmap(r, {1})({moveaxis(x, 0, 1)});
  expect_close(moved[1], loop(r, {x})[1], 1e-12, "in_axes 1");
}

TEST(VmapControl, ForiLoopAndItsGradientPerExample) {
  Array x = random::normal(random::key(3), {5, 4}, DType::F64);
  ArraysFn f = [](const std::vector<Array>& a) {
    Array r = fori_loop(
        0, 6, [](const Array& i, const Array& c) { return sin(c) + astype(i, DType::F64) * 0.1; },
        a[0]);
    return std::vector<Array>{r};
  };
  expect_batched_as_looped(f, {x}, 1e-12);
  ArraysFn g = [&](const std::vector<Array>& a) {
    return std::vector<Array>{Array(grad([&](const Array& v) { return sum(f({v})[0]); })(a[0]))};
  };
  expect_batched_as_looped(g, {x}, 1e-12);
}

TEST(VmapControl, WhileLoopWithPerExampleTripCounts) {
  // Each example doubles until it passes its own limit: the trip counts differ.
  Array x = from_vector<float>({1, 3, 0.5f, 7}, {4});
  Array limit = from_vector<float>({10, 10, 100, 5}, {4});
  ArraysFn f = [](const std::vector<Array>& a) {
    auto [v, n] = while_loop([&](const std::pair<Array, Array>& c) { return c.first < a[1]; },
                             [](const std::pair<Array, Array>& c) {
                               return std::pair{c.first * 2.0, c.second + 1.0};
                             },
                             std::pair{a[0], zeros({})});
    return std::vector<Array>{v, n};
  };
  expect_batched_as_looped(f, {x, limit}, 0);
  std::vector<Array> r = vmap(f, {0, 0})({x, limit});
  EXPECT_EQ(r[1].to_vector<float>(), (std::vector<float>{4, 2, 8, 0}));
  // An unbatched predicate keeps one trip count: the carries it does not touch stay unbatched.
  ArraysFn g = [](const std::vector<Array>& a) {
    auto [i, v] = while_loop([](const std::pair<Array, Array>& c) { return c.first < 3.0; },
                             [](const std::pair<Array, Array>& c) {
                               return std::pair{c.first + 1.0, c.second * 1.5};
                             },
                             std::pair{zeros({}), a[0]});
    return std::vector<Array>{i, v};
  };
  std::vector<Array> rg = vmap(g, {0}, {-1, 0})({x});
  EXPECT_EQ(rg[0].shape(), Shape{});
  expect_close(rg[1], x * 3.375, 1e-6, "unbatched predicate");
}

TEST(VmapControl, CondWithSharedOrPerExamplePredicate) {
  Array x = random::normal(random::key(4), {6, 3}, DType::F64);
  // A predicate per example becomes a select between both branches.
  ArraysFn f = [](const std::vector<Array>& a) {
    Array r = cond(
        sum(a[0]) > 0.0, [](const Array& v) { return sin(v); },
        [](const Array& v) { return v * v - 1.0; }, a[0]);
    return std::vector<Array>{r};
  };
  expect_batched_as_looped(f, {x}, 1e-12);
  // A shared predicate keeps the cond, its branches batched.
  for (bool p : {true, false}) {
    ArraysFn g = [p](const std::vector<Array>& a) {
      Array r = cond(
          scalar(p), [](const Array& v) { return exp(v); }, [](const Array& v) { return -v; },
          a[0]);
      return std::vector<Array>{r};
    };
    expect_batched_as_looped(g, {x}, 1e-12);
  }
  // Its gradient per example.
  ArraysFn gf = [&](const std::vector<Array>& a) {
    return std::vector<Array>{Array(grad([&](const Array& v) { return sum(f({v})[0]); })(a[0]))};
  };
  expect_batched_as_looped(gf, {x}, 1e-12);
}

TEST(VmapControl, RandomDrawsFromPerExampleKeys) {
  Array keys = random::split(random::key(7), 5);
  ArraysFn f = [](const std::vector<Array>& a) {
    auto [k1, k2] = random::split2(a[0]);
    return std::vector<Array>{random::normal(k1, {3}), random::uniform(k2, {2, 2}),
                              random::fold_in(a[0], 3)};
  };
  const std::vector<Array> got = vmap(f, {0})(std::vector<Array>{keys});
  const std::vector<Array> want = loop(f, {keys});
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(vec(got[k]), vec(want[k])) << "result " << k;  // the same bits, not close ones
  }
  // A per-example fold_in of a shared key.
  ArraysFn g = [](const std::vector<Array>& a) {
    return std::vector<Array>{random::normal(random::fold_in(random::key(0), a[0]), {2})};
  };
  const std::vector<Array> ids{arange(4, DType::I32)};
  EXPECT_EQ(vec(vmap(g, {0})(ids)[0]), vec(loop(g, ids)[0]));
}

TEST(VmapControl, CollectivesOverTheVmappedAxis) {
  Array x = random::normal(random::key(8), {4, 3}, DType::F64);
  const std::vector<double> xs = vec(x);
  ArraysFn f = [](const std::vector<Array>& a) {
    const Axes i{"i"};
    return std::vector<Array>{
        psum(a[0], i), a[0] / pmax(a[0], i), pmean(a[0], i),
        astype(axis_index(i), DType::F64) + a[0] * 0.0, all_gather(a[0], i, 0, false),
        all_gather(a[0], i, 0, true), ppermute(a[0], i, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}),
        ppermute(a[0], i, {{0, 2}}),
        // a dimension of 4 splits into one piece per example
        psum_scatter(broadcast_to(expand_dims(sum(a[0]), 0), {4}), i, 0, true)};
  };
  for (bool jitted : {false, true}) {
    SCOPED_TRACE(jitted ? "jit" : "eager");
    ArraysFn vf = vmap(f, {0}, {0}, std::nullopt, "i");
    std::vector<Array> r = jitted ? jit(vf)(std::vector<Array>{x}) : vf({x});
    std::vector<double> col_sum(3, 0), col_max(3, -1e300);
    for (int e = 0; e < 4; ++e) {
      for (int c = 0; c < 3; ++c) {
        col_sum[c] += xs[e * 3 + c];
        col_max[c] = std::max(col_max[c], xs[e * 3 + c]);
      }
    }
    const std::vector<double> ps = vec(r[0]), pm = vec(r[1]), pmn = vec(r[2]), idx = vec(r[3]);
    for (int e = 0; e < 4; ++e) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_NEAR(ps[e * 3 + c], col_sum[c], 1e-12);
        EXPECT_NEAR(pm[e * 3 + c], xs[e * 3 + c] / col_max[c], 1e-12);
        EXPECT_NEAR(pmn[e * 3 + c], col_sum[c] / 4, 1e-12);
        EXPECT_EQ(idx[e * 3 + c], e);
      }
    }
    // all_gather: every example sees the whole batch (stacked at 0; tiled, concatenated).
    EXPECT_EQ(r[4].shape(), (Shape{4, 4, 3}));
    expect_close(example(r[4], 2), x, 0, "all_gather");
    EXPECT_EQ(r[5].shape(), (Shape{4, 12}));
    expect_close(example(r[5], 1), reshape(x, {12}), 0, "tiled all_gather");
    // ppermute: a ring shift, and a single pair (the others receive zeros).
    expect_close(example(r[6], 1), example(x, 0), 0, "ring");
    expect_close(example(r[6], 0), example(x, 3), 0, "ring wraps");
    expect_close(example(r[7], 2), example(x, 0), 0, "pair");
    expect_close(example(r[7], 0), zeros({3}, DType::F64), 0, "no sender");
    // psum_scatter: example e keeps piece e of the summed vector.
    double total = 0;
    for (double v : xs) total += v;
    EXPECT_EQ(r[8].shape(), (Shape{4, 1}));
    for (double v : vec(r[8])) EXPECT_NEAR(v, total, 1e-12);
  }
}

TEST(VmapControl, AllToAllOverTheExamples) {
  Array x = reshape(arange(32, DType::F32), {4, 8});  // 4 examples of [8]
  const std::vector<float> xs = x.to_vector<float>();
  ArraysFn tiled = [](const std::vector<Array>& a) {
    return std::vector<Array>{all_to_all(a[0], Axes{"i"}, 0, 0, true)};
  };
  // Example e gets piece e (2 values) of every example, in the examples' order.
  const std::vector<float> t = vmap(tiled, {0}, {0}, std::nullopt, "i")({x})[0].to_vector<float>();
  for (int e = 0; e < 4; ++e) {
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 2; ++k) EXPECT_EQ(t[e * 8 + j * 2 + k], xs[j * 8 + e * 2 + k]);
    }
  }
  // Untiled over [4, 2] examples: example e stacks row e of every example at concat_axis 1.
  Array y = reshape(arange(32, DType::F32), {4, 4, 2});
  const std::vector<float> ys = y.to_vector<float>();
  ArraysFn untiled = [](const std::vector<Array>& a) {
    return std::vector<Array>{all_to_all(a[0], Axes{"i"}, 0, 1, false)};
  };
  Array u = vmap(untiled, {0}, {0}, std::nullopt, "i")({y})[0];
  ASSERT_EQ(u.shape(), (Shape{4, 2, 4}));
  const std::vector<float> us = u.to_vector<float>();
  for (int e = 0; e < 4; ++e) {
    for (int c = 0; c < 2; ++c) {
      for (int j = 0; j < 4; ++j) EXPECT_EQ(us[e * 8 + c * 4 + j], ys[j * 8 + e * 2 + c]);
    }
  }
  // Under jit, and its gradient (all_to_all transposes to the swapped all_to_all).
  ArraysFn g = [&](const std::vector<Array>& a) {
    return std::vector<Array>{Array(grad([](const Array& v) {
      return sum(square(all_to_all(v, Axes{"i"}, 0, 0, true)) * 0.5);
    })(a[0]))};
  };
  Array gx = jit([&](const Array& v) { return vmap(g, {0}, {0}, std::nullopt, "i")({v})[0]; })(x);
  expect_close(gx, x, 1e-6, "gradient of a permutation: the identity on the values");
}

TEST(VmapControl, NestedVmapsNameTheirOwnAxes) {
  Array x = random::normal(random::key(9), {3, 4}, DType::F64);  // outer 3, inner 4
  ArraysFn inner = [](const std::vector<Array>& a) {
    return std::vector<Array>{a[0] - pmean(a[0], Axes{"j"}) + psum(a[0], Axes{"i"}) * 0.0 +
                              astype(axis_index(Axes{"i"}), DType::F64) * 100.0};
  };
  ArraysFn outer = [&](const std::vector<Array>& a) {
    return vmap(inner, {0}, {0}, std::nullopt, "j")(a);
  };
  Array r = vmap(outer, VmapOptions{.in_axes = {0}, .axis_name = "i"})({x})[0];
  const std::vector<double> xs = vec(x), rs = vec(r);
  for (int i = 0; i < 3; ++i) {
    double m = 0;
    for (int j = 0; j < 4; ++j) m += xs[i * 4 + j] / 4;
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(rs[i * 4 + j], xs[i * 4 + j] - m + 100.0 * i, 1e-12);
  }
}

TEST(VmapControl, ShardMapInsideVmapAndCollectivesOverMeshAxes) {
  Mesh m = make_mesh({4}, {"x"});
  Array x = random::normal(random::key(10), {3, 8, 2}, DType::F64);  // 3 examples of [8, 2]
  auto body = [](const Array& b) { return psum(sum(b, {0}), Axes{"x"}) + b * 0.0; };
  ArraysFn f = [&](const std::vector<Array>& a) {
    return std::vector<Array>{shard_map(body, m, {P("x")}, {P("x")})(a[0])};
  };
  expect_batched_as_looped(f, {x}, 1e-12);
}

TEST(VmapControl, SpmdAxisNameSplitsTheExamplesWhereAShardingIsConstrained) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array x = random::normal(random::key(11), {8, 6, 4});
  ArraysFn f = [&](const std::vector<Array>& a) {
    return std::vector<Array>{with_sharding_constraint(tanh(a[0]), NamedSharding(m, P(None, "y")))};
  };
  Array r =
      jit([&](const Array& v) { return vmap(f, {0}, {0}, std::nullopt, "", {"x"})({v})[0]; })(x);
  EXPECT_EQ(r.sharding(), NamedSharding(m, P("x", None, "y")));
  expect_close(r, tanh(x), 1e-6, "values");
  // Without spmd_axis_name the constraint still holds for every example, and the examples'
  // dimension is unconstrained (as JAX's batching rule marks it): it keeps the operand's split
  // over 'x' instead of being gathered.
  Array whole = jit([&](const Array& v) { return vmap(f, {0}, {0})({v})[0]; })(
      device_put(x, NamedSharding(m, P("x", "y"))));
  EXPECT_EQ(whole.sharding(), NamedSharding(m, P("x", None, "y")));
  expect_close(whole, tanh(x), 1e-6, "values without spmd_axis_name");
  // The axes the examples split over are vmap's: a constraint or a shard_map inside may not
  // name them (as JAX).
  ArraysFn names_x = [&](const std::vector<Array>& a) {
    return std::vector<Array>{with_sharding_constraint(a[0], NamedSharding(m, P(None, "x")))};
  };
  EXPECT_PARTIX_ERROR(vmap(names_x, {0}, {0}, std::nullopt, "", {"x"})({x}),
                      "[vmap] vmap spmd_axis_name 'x' cannot appear in with_sharding_constraint");
  ArraysFn maps_x = [&](const std::vector<Array>& a) {
    return std::vector<Array>{
        shard_map([](const Array& b) { return b; }, m, {P("y")}, {P("y", "x")}, false)(a[0])};
  };
  EXPECT_PARTIX_ERROR(vmap(maps_x, {0}, {0}, std::nullopt, "", {"x"})({x}),
                      "vmap spmd_axis_name cannot appear in shard_map in_specs or out_specs");
  // spmd_axis_name must name the mesh's axes.
  EXPECT_PARTIX_ERROR(
      jit([&](const Array& v) { return vmap(f, {0}, {0}, std::nullopt, "", {"z"})({v})[0]; })(x),
      "spmd_axis_name 'z' is not an axis of");
}

// As JAX: a batch dimension split over an Explicit mesh axis stays split through a shard_map
// inside vmap (the axis acts as spmd_axis_name), eagerly and under jit; the map may not name
// the axis, and a different spmd_axis_name is refused.
TEST(VmapControl, ExplicitlyShardedExamplesStaySplitThroughAShardMap) {
  Mesh m = make_mesh({2, 4}, {"x", "y"}, {AxisType::Explicit, AxisType::Explicit});
  Array host = random::normal(random::key(14), {4, 8});
  Array x = device_put(host, NamedSharding(m, P("x", "y")));
  auto body = [](const Array& b) { return psum(b, Axes{"y"}); };
  ArraysFn f = [&](const std::vector<Array>& a) {
    return std::vector<Array>{shard_map(body, m, {P("y")}, {P()})(a[0])};
  };
  Array ref = slice_axis(host, 1, 0, 2) + slice_axis(host, 1, 2, 4) + slice_axis(host, 1, 4, 6) +
              slice_axis(host, 1, 6, 8);
  Array eager = vmap(f, {0}, {0})({x})[0];
  EXPECT_EQ(eager.sharding(), NamedSharding(m, P("x", None)));
  expect_close(eager, ref, 1e-5, "eager");
  Array jitted = jit([&](const Array& v) { return vmap(f, {0}, {0})({v})[0]; })(x);
  EXPECT_EQ(jitted.sharding(), NamedSharding(m, P("x", None)));
  expect_close(jitted, ref, 1e-5, "jit");
  ArraysFn names_x = [&](const std::vector<Array>& a) {
    return std::vector<Array>{
        shard_map([](const Array& b) { return b; }, m, {P("x")}, {P("x")})(a[0])};
  };
  EXPECT_PARTIX_ERROR(vmap(names_x, {0}, {0})({x}), "[vmap] vmapped away explicit mesh axis 'x'",
                      "cannot appear in shard_map in_specs");
  EXPECT_PARTIX_ERROR(vmap(f, {0}, {0}, std::nullopt, "", {"y"})({x}),
                      "Only one of spmd_axis_name or arrays sharded on `Explicit` mesh axis");
}

TEST(VmapControl, CollectivesNamingUnboundOrMixedAxesAreErrors) {
  auto id = [](const std::vector<Array>& a) { return std::vector<Array>{psum(a[0], Axes{"k"})}; };
  EXPECT_PARTIX_ERROR(vmap(id, {0}, {0}, std::nullopt, "i")({ones({3})}), "[psum] collective over",
                      "'k' is not bound");
  auto groups = [](const std::vector<Array>& a) {
    return std::vector<Array>{psum(a[0], Axes{"i"}, IndexGroups{{0, 1}, {2, 3}})};
  };
  EXPECT_PARTIX_ERROR(vmap(groups, {0}, {0}, std::nullopt, "i")({ones({4})}),
                      "axis_index_groups over vmap's axis_name");
  // A collective over vmap's axis and a mesh axis at once is refused where the rule covers only
  // the examples.
  Mesh m = make_mesh({2}, {"x"});
  auto mixed = [](const std::vector<Array>& a) {
    return std::vector<Array>{all_gather(a[0], Axes{"i", "x"}, 0, false)};
  };
  auto in_body = [&](const Array& b) { return vmap(mixed, {0}, {0}, std::nullopt, "i")({b})[0]; };
  EXPECT_PARTIX_ERROR(shard_map(in_body, m, {P()}, {P()}, false)(ones({4, 2})),
                      "all_gather over vmap's axis 'i' together with mesh axes");
}

TEST(VmapCost, ShardedBatchMovesNoMoreBytesThanTheExplicitBatch) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array x = device_put(random::normal(random::key(12), {8, 16}), NamedSharding(m, P("x", "y")));
  Array w = device_put(random::normal(random::key(13), {16, 6}), NamedSharding(m, P("y", None)));
  auto one = [](const Array& xi, const Array& wv) { return tanh(matmul(xi, wv)) * sum(xi); };
  auto vmapped = jit([&](const Array& a, const Array& b) {
    return vmap([&](const std::vector<Array>& e) { return std::vector<Array>{one(e[0], e[1])}; },
                {0, -1})({a, b})[0];
  });
  auto explicit_batch = jit([](const Array& a, const Array& b) {
    return tanh(matmul(a, b)) * sum(a, {1}, /*keepdims=*/true);
  });
  const CostAnalysis cv = vmapped.lower(x, w).cost_analysis();
  const CostAnalysis ce = explicit_batch.lower(x, w).cost_analysis();
  double bv = 0, be = 0;
  for (const auto& [k, b] : cv.bytes_per_device) bv += b;
  for (const auto& [k, b] : ce.bytes_per_device) be += b;
  EXPECT_LE(bv, be) << "vmap moves " << bv << " bytes per device, the explicit batch " << be;
  EXPECT_GT(be, 0);  // the contraction over 'y' needs a reduction in both
  EXPECT_EQ(vmapped(x, w).sharding(), explicit_batch(x, w).sharding());
  expect_close(vmapped(x, w), explicit_batch(x, w), 1e-5, "values");
}
