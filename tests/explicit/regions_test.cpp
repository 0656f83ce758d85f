// Explicit sharding beyond single ops: out_sharding=, auto_axes / explicit_axes, control flow,
// autodiff (cotangents typed like primals), shard_map (Manual axes), and the collectives a typed
// program lowers to: exactly those its reshards and typed ops imply.
#include <regex>

#include "explicit_util.h"

using namespace partix;
using explicit_test::iota_f32;
using explicit_test::ty;

namespace {
const AxisType kE = AxisType::Explicit;
const AxisType kA = AxisType::Auto;

Mesh xy() { return make_mesh({2, 4}, {"X", "Y"}, {kE, kE}); }

// The collectives of a per-device program, in order: "all_reduce", "all_gather", ...
std::vector<std::string> collectives(const std::string& text) {
  static const std::regex op(
      R"(= (all_reduce|all_gather|reduce_scatter|all_to_all|ppermute|collective_permute)\b)");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), op); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

void expect_near(const Array& a, const Array& b, float tol = 1e-4f) {
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol) << i;
}
}  // namespace

TEST(ExplicitOutSharding, ContractionSplitInBothOperands) {
  Mesh m = xy();
  Array a = reshard(iota_f32({8, 16}), NamedSharding(m, P("X", "Y")));
  Array b = reshard(iota_f32({16, 4}), NamedSharding(m, P("Y", None)));
  EXPECT_PARTIX_ERROR((void)matmul(a, b), "[dot_general]", "out_sharding", "float32[8@X,16@Y]",
                      "float32[16@Y,4]");
  const Array want = matmul(iota_f32({8, 16}), iota_f32({16, 4}));
  // Eagerly: the result is placed as asked.
  Array c = matmul(a, b, OutSharding{P("X", None)});
  EXPECT_EQ(ty(c), "float32[8@X,4]");
  expect_near(c, want);
  // Under jit: the partial sums over Y are reduced into the asked sharding, and nothing else
  // moves: one reduction over Y (a reduce_scatter when the result is split over Y).
  auto f =
      jit([](const Array& x, const Array& y) { return matmul(x, y, OutSharding{P("X", "Y")}); });
  Array j = f(a, b);
  EXPECT_EQ(ty(j), "float32[8@X,4@Y]");
  expect_near(j, want);
  EXPECT_EQ(collectives(f.lower(a, b).as_text()), (std::vector<std::string>{"reduce_scatter"}));
  auto g =
      jit([](const Array& x, const Array& y) { return matmul(x, y, OutSharding{P("X", None)}); });
  EXPECT_EQ(collectives(g.lower(a, b).as_text()), (std::vector<std::string>{"all_reduce"}));
  // Unreduced: no collective at all until a reshard asks for the sum.
  std::string seen;
  auto h = jit([&](const Array& x, const Array& y) {
    Array u = matmul(x, y, OutSharding{P("X", None), {"Y"}});
    seen = ty(u);
    return reshard(u, NamedSharding(m, P("X", None)));
  });
  expect_near(h(a, b), want);
  EXPECT_EQ(seen, "float32[8@X,4]{U:Y}");
  EXPECT_EQ(collectives(h.lower(a, b).as_text()), (std::vector<std::string>{"all_reduce"}));
  // Eagerly too: an unreduced Array of the same value (JAX's eager op is a jit of the op).
  Array e = matmul(a, b, OutSharding{P("X", None), {"Y"}});
  EXPECT_EQ(e.sharding(), NamedSharding(m, P("X", None), {"Y"}));
  expect_near(reshard(e, NamedSharding(m, P("X", None))), want);
}

TEST(ExplicitOutSharding, ReshapeEinsumTakeCreation) {
  Mesh m = xy();
  Array x = reshard(iota_f32({8, 4}), NamedSharding(m, P("X", "Y")));
  Array r = reshape(x, {32}, OutSharding{P("X")});
  EXPECT_EQ(ty(r), "float32[32@X]");
  expect_near(r, reshape(iota_f32({8, 4}), {32}));
  Array e = einsum("ij,kj->ik", {x, x}, OutSharding{P("X", None)});
  EXPECT_EQ(ty(e), "float32[8@X,8]");
  expect_near(e, einsum("ij,kj->ik", {iota_f32({8, 4}), iota_f32({8, 4})}));
  Array idx = from_vector<int32_t>({3, 1, 7}, {3});
  Array t = take(x, idx, 0, OutSharding{P(None, "Y")});
  EXPECT_EQ(ty(t), "float32[3,4@Y]");
  expect_near(t, take(iota_f32({8, 4}), idx, 0));
  MeshContext ctx(m);
  Array z = zeros({8, 4}, DType::F32, OutSharding{P("X")});
  EXPECT_EQ(ty(z), "float32[8@X,4]");
  Array ar = arange(16, DType::I32, OutSharding{P("Y")});
  EXPECT_EQ(ty(ar), "int32[16@Y]");
  std::string inside;
  auto f = jit([&](const Array& a) {
    Array o = ones({8, 4}, DType::F32, OutSharding{P(None, "X")});
    inside = ty(o);
    return a + o;
  });
  EXPECT_PARTIX_ERROR((void)f(x), "[add]", "float32[8@X,4@Y]", "float32[8,4@X]");
  EXPECT_EQ(inside, "float32[8,4@X]");
  EXPECT_PARTIX_ERROR((void)zeros({8, 4}, DType::F32, OutSharding{P("Z")}), "[zeros]", "Z");
}

TEST(ExplicitAxes, TutorialAutoAxesAdd) {
  Mesh m = xy();
  Array some_x = reshard(iota_f32({4, 4}), NamedSharding(m, P("X", None)));
  Array some_y = reshard(iota_f32({4, 4}), NamedSharding(m, P(None, "X")));
  EXPECT_THROW((void)(some_x + some_y), Error);
  std::string inside;
  Array result = auto_axes(
      [&](const std::vector<Array>& a) {
        inside = ty(a[0]) + " " + ty(a[1]) + " " + current_mesh().to_string();
        return std::vector<Array>{a[0] + a[1]};
      },
      {some_x, some_y}, {P("X", None)})[0];
  EXPECT_EQ(inside, "float32[4,4] float32[4,4] Mesh('X': 2, 'Y': 4)");
  EXPECT_EQ(ty(result), "float32[4@X,4]");
  expect_near(result, iota_f32({4, 4}) + iota_f32({4, 4}));
  // Under jit, auto over X only: Y stays in the types.
  std::vector<std::string> seen;
  auto f = jit([&](const Array& arr) {
    Array x = sin(arr);
    seen.push_back(ty(x));
    Array z = auto_axes(
        [&](const Array& y) {
          seen.push_back(ty(y));
          return y * 2.0;
        },
        x, P("X", "Y"), {"X"});
    seen.push_back(ty(z));
    return z + 1.0;
  });
  Array xs = reshard(iota_f32({4, 4}), NamedSharding(m, P("X", "Y")));
  Array out = f(xs);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"float32[4@X,4@Y]", "float32[4,4@Y]", "float32[4@X,4@Y]"}));
  expect_near(out, sin(iota_f32({4, 4})) * 2.0 + 1.0);
}

TEST(ExplicitAxes, TutorialExplicitAxesFromAuto) {
  Mesh auto_mesh = make_mesh({2, 4}, {"X", "Y"}, {kA, kA});
  std::vector<std::string> seen;
  auto f = jit([&](const Array& arr) {
    Array x = sin(arr);
    Array z = explicit_axes(
        [&](const Array& y) {
          Array r = y * 2.0;
          seen = {ty(y), ty(r), current_mesh().to_string()};
          return r;
        },
        x, P("X", "Y"));
    seen.push_back(ty(z));
    return z + 1.0;
  });
  Array some_x = device_put(iota_f32({4, 4}), NamedSharding(auto_mesh, P("X", "Y")));
  Array out = f(some_x);
  EXPECT_EQ(seen, (std::vector<std::string>{"float32[4@X,4@Y]", "float32[4@X,4@Y]",
                                            "Mesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit))",
                                            "float32[4,4]"}));
  expect_near(out, sin(iota_f32({4, 4})) * 2.0 + 1.0);
  EXPECT_PARTIX_ERROR((void)explicit_axes([](const Array& a) { return a; }, some_x, P("X"), {"W"}),
                      "[explicit_axes]", "'W'");
}

TEST(ExplicitGrad, CotangentsTypedLikePrimals) {
  Mesh m = make_mesh({4, 2}, {"data", "model"}, {kE, kE});
  Array x = reshard(iota_f32({8, 6}), NamedSharding(m, P("data", None)));
  Array w = reshard(iota_f32({6, 4}), NamedSharding(m, P(None, "model")));
  auto loss = [](const Array& xx, const Array& ww) { return sum(tanh(matmul(xx, ww))); };
  std::vector<std::string> seen;
  auto step = jit([&](const Array& xx, const Array& ww) {
    auto g = grad(loss, std::vector<int>{0, 1})(xx, ww);
    seen = {ty(g[0]), ty(g[1])};
    return std::vector<Array>{g[0], g[1]};
  });
  auto gs = step(x, w);
  EXPECT_EQ(seen, (std::vector<std::string>{"float32[8@data,6]", "float32[6,4@model]"}));
  EXPECT_EQ(ty(gs[1]), "float32[6,4@model]");
  // Against the unsharded gradient.
  auto ref = grad(loss, std::vector<int>{0, 1})(iota_f32({8, 6}), iota_f32({6, 4}));
  expect_near(gs[0], ref[0]);
  expect_near(gs[1], ref[1]);
}

TEST(ExplicitControlFlow, ScanCarriesKeepTypes) {
  Mesh m = xy();
  Array init = reshard(iota_f32({8}), NamedSharding(m, P("X")));
  Array xs = reshard(iota_f32({3, 8}), NamedSharding(m, P(None, "X")));
  std::vector<std::string> seen;
  auto f = jit([&](const Array& c0, const Array& s) {
    auto [c, ys] = scan(
        [&](const Array& c, const Array& x) {
          seen = {ty(c), ty(x)};
          Array n = c + sin(x);
          return std::make_pair(n, n * 2.0);
        },
        c0, s);
    seen.push_back(ty(c));
    seen.push_back(ty(ys));
    return c;
  });
  Array out = f(init, xs);
  EXPECT_EQ(seen, (std::vector<std::string>{"float32[8@X]", "float32[8@X]", "float32[8@X]",
                                            "float32[3,8@X]"}));
  expect_near(out, iota_f32({8}) + sum(sin(iota_f32({3, 8})), {0}));
  // A body that changes a carry's type is an error.
  Array rep = reshard(iota_f32({8}), NamedSharding(m, P()));
  auto g = jit([&](const Array& c0) {
    return fori_loop(
        0, 2, [&](const Array&, const Array& c) { return c + init; }, c0);
  });
  EXPECT_PARTIX_ERROR((void)g(rep), "fori_loop", "carry 0", "float32[8]", "float32[8@X]");
}

TEST(ExplicitShardMap, BodyAxesAreManual) {
  Mesh m = xy();
  Array x = reshard(iota_f32({8, 4}), NamedSharding(m, P("X", "Y")));
  std::vector<std::string> seen;
  auto body = [&](const Array& b) {
    seen = {ty(b), current_mesh().to_string()};
    return psum(b, "Y");
  };
  auto sm = shard_map(body, m, {P("X", "Y")}, {P("X", None)});
  Array r = jit([&](const Array& a) { return sm(a); })(x);
  EXPECT_EQ(seen, (std::vector<std::string>{"float32[4,1]",
                                            "Mesh('X': 2, 'Y': 4, axis_types=(Manual, Manual))"}));
  EXPECT_EQ(ty(r), "float32[8@X,1]");
}

// axis_names={X}: the body is manual over X only; along Y its values keep their types, and the
// results take the body's split along Y after the map.
TEST(ExplicitShardMap, PartialManualBodyKeepsTypesAlongTheOtherAxes) {
  Mesh m = xy();
  Array x = reshard(iota_f32({8, 8}), NamedSharding(m, P("X", "Y")));
  std::vector<std::string> seen;
  auto body = [&](const Array& b) {
    Array out = exp(b) * 2.0;
    seen = {ty(b), ty(out), current_mesh().to_string()};
    return out;
  };
  auto sm = shard_map(body, m, {P("X")}, {P("X")}).axis_names({"X"});
  Array r = jit([&](const Array& a) { return sm(a); })(x);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"float32[4,8@Y]", "float32[4,8@Y]",
                                      "Mesh('X': 2, 'Y': 4, axis_types=(Manual, Explicit))"}));
  EXPECT_EQ(ty(r), "float32[8@X,8@Y]");
  expect_near(r, exp(iota_f32({8, 8})) * 2.0);
  // A full-manual map's body stays untyped.
  auto full = shard_map(body, m, {P("X", "Y")}, {P("X", "Y")});
  Array r2 = jit([&](const Array& a) { return full(a); })(x);
  EXPECT_EQ(seen[0], "float32[4,2]");
  EXPECT_EQ(ty(r2), "float32[8@X,8@Y]");
  expect_near(r2, exp(iota_f32({8, 8})) * 2.0);
}

TEST(ExplicitCollectives, ExactlyWhatTypesAndReshardsImply) {
  Mesh m = xy();
  Array x = reshard(iota_f32({8, 16}), NamedSharding(m, P("X", "Y")));
  Array x0 = reshard(iota_f32({8, 16}), NamedSharding(m, P("X", None)));
  Array b = reshard(iota_f32({16}), NamedSharding(m, P()));
  // Elementwise ops, a broadcast bias and a reduction over an unsplit dimension: nothing moves.
  auto local =
      jit([](const Array& a, const Array& bias) { return sum(tanh(a + bias) * 2.0, {1}, true); });
  EXPECT_EQ(collectives(local.lower(x0, b).as_text()), std::vector<std::string>{});
  // The same over the dimension split by Y: one all_reduce over Y.
  EXPECT_EQ(collectives(local.lower(x, b).as_text()), (std::vector<std::string>{"all_reduce"}));
  // A reduction over a split dimension: one all_reduce over that axis.
  auto red = jit([](const Array& a) { return sum(a, {0}); });
  EXPECT_EQ(collectives(red.lower(x).as_text()), (std::vector<std::string>{"all_reduce"}));
  // A reshard that moves the split from one dimension to the other: one all_to_all.
  Array xr = reshard(iota_f32({8, 16}), NamedSharding(m, P("X", None)));
  auto move = jit([&](const Array& a) { return reshard(a, NamedSharding(m, P(None, "X"))); });
  EXPECT_EQ(collectives(move.lower(xr).as_text()), (std::vector<std::string>{"all_to_all"}));
  // Gathering a weight for use (FSDP): one all_gather, and the matmul moves nothing more.
  Array w = reshard(iota_f32({16, 4}), NamedSharding(m, P("X", None)));
  Array act = reshard(iota_f32({8, 16}), NamedSharding(m, P("X", None)));
  auto fsdp = jit([&](const Array& a, const Array& ww) {
    return matmul(a, reshard(ww, NamedSharding(m, P())));
  });
  EXPECT_EQ(collectives(fsdp.lower(act, w).as_text()), (std::vector<std::string>{"all_gather"}));
  expect_near(fsdp(act, w), matmul(iota_f32({8, 16}), iota_f32({16, 4})));
}
