// Every collective on every mesh shape, over every ordered subset of mesh axes, against an
// oracle that simulates the devices' blocks directly.
#include <functional>
#include <numeric>

#include "test_util.h"

using namespace partix;

namespace {

struct MeshCase {
  Shape sizes;
  std::vector<std::string> names;
};

std::vector<MeshCase> meshes() {
  return {{{1}, {"a"}},           {{2}, {"a"}},           {{4}, {"a"}},
          {{8}, {"a"}},           {{4, 2}, {"a", "b"}},   {{2, 4}, {"a", "b"}},
          {{2, 2, 2}, {"a", "b", "c"}}, {{8, 1}, {"a", "b"}}, {{1, 8}, {"a", "b"}}};
}

// Every non-empty ordered selection of the mesh's axes.
std::vector<std::vector<std::string>> axis_lists(const std::vector<std::string>& names) {
  std::vector<std::vector<std::string>> out;
  std::function<void(std::vector<std::string>, std::vector<bool>)> rec =
      [&](std::vector<std::string> cur, std::vector<bool> used) {
        if (!cur.empty()) out.push_back(cur);
        for (size_t i = 0; i < names.size(); ++i) {
          if (used[i]) continue;
          auto c = cur;
          auto u = used;
          c.push_back(names[i]);
          u[i] = true;
          rec(c, u);
        }
      };
  rec({}, std::vector<bool>(names.size(), false));
  return out;
}

// The group of device k over `axes` (devices sharing the other coordinates, ordered by their
// mixed-radix index over axes) and k's rank in it.
std::pair<std::vector<int64_t>, int64_t> group(const Mesh& m, int64_t k,
                                               const std::vector<std::string>& axes) {
  auto ck = m.coords(k);
  std::vector<std::pair<int64_t, int64_t>> members;  // (rank, device position)
  int64_t rank_k = 0;
  for (int64_t j = 0; j < m.size(); ++j) {
    auto cj = m.coords(j);
    bool same = true;
    for (int i = 0; i < m.num_axes(); ++i) {
      bool listed = std::find(axes.begin(), axes.end(), m.axis_names()[static_cast<size_t>(i)]) != axes.end();
      if (!listed && cj[static_cast<size_t>(i)] != ck[static_cast<size_t>(i)]) same = false;
    }
    if (!same) continue;
    int64_t r = 0;
    for (const auto& a : axes) {
      int ai = m.axis_index(a);
      r = r * m.axis_sizes()[static_cast<size_t>(ai)] + cj[static_cast<size_t>(ai)];
    }
    members.emplace_back(r, j);
    if (j == k) rank_k = r;
  }
  std::sort(members.begin(), members.end());
  std::vector<int64_t> g;
  for (auto& [r, j] : members) g.push_back(j);
  return {g, rank_k};
}

// Runs body on a [D, m] input whose row k lives on device k, collecting each device's result
// (out_spec splits dim 0 over all axes; check_vma off so invariant results are allowed too).
std::vector<std::vector<float>> run(const Mesh& mesh, int64_t m,
                                    const std::function<Array(const Array&)>& body,
                                    const std::vector<float>& input) {
  int64_t D = mesh.size();
  PartitionSpec all = P(Axes(mesh.axis_names()));
  Array x = device_put(from_vector(input, {D, m}), NamedSharding(mesh, all));
  Array y = shard_map(body, mesh, {all}, {all}, false)(x);
  std::vector<float> v = y.to_vector<float>();
  int64_t per = static_cast<int64_t>(v.size()) / D;
  std::vector<std::vector<float>> out;
  for (int64_t k = 0; k < D; ++k) out.emplace_back(v.begin() + k * per, v.begin() + (k + 1) * per);
  return out;
}

std::vector<float> iota_input(int64_t D, int64_t m) {
  std::vector<float> v(static_cast<size_t>(D * m));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 97) + 0.25f * static_cast<float>(i / 97);
  return v;
}

}  // namespace

TEST(Collectives, EveryCollectiveOnEveryMeshAndAxisSubset) {
  for (const MeshCase& mc : meshes()) {
    Mesh mesh(mc.sizes, mc.names);
    const int64_t D = mesh.size();
    for (const auto& axes : axis_lists(mc.names)) {
      Axes ax{std::vector<std::string>(axes)};
      int64_t n = 1;
      for (const auto& a : axes) n *= mesh.axis_size(a);
      SCOPED_TRACE(mesh.to_string() + " over " + ax.to_string());
      const int64_t q = 3, m = n * q;
      std::vector<float> in = iota_input(D, m);
      auto row = [&](int64_t k) { return std::vector<float>(in.begin() + k * m, in.begin() + (k + 1) * m); };

      auto sum = run(mesh, m, [&](const Array& b) { return psum(b, ax); }, in);
      auto mx = run(mesh, m, [&](const Array& b) { return pmax(b * -1.0, ax); }, in);
      auto gath = run(mesh, m, [&](const Array& b) { return all_gather(b, ax, 0, true); }, in);
      auto stacked = run(mesh, m, [&](const Array& b) { return reshape(all_gather(b, ax, 1, false), {1, n * m}); }, in);
      auto scat = run(mesh, m, [&](const Array& b) { return psum_scatter(b, ax, 1, true); }, in);
      std::vector<std::pair<int, int>> shift;
      for (int r = 0; r < n; ++r) shift.emplace_back(r, static_cast<int>((r + 1) % n));
      auto perm = run(mesh, m, [&](const Array& b) { return ppermute(b, ax, shift); }, in);
      auto a2a = run(mesh, m, [&](const Array& b) { return all_to_all(b, ax, 1, 0, true); }, in);
      auto idx = run(mesh, 1, [&](const Array& b) { return reshape(astype(axis_index(ax), DType::F32), {1, 1}) + b * 0.0; }, iota_input(D, 1));

      for (int64_t k = 0; k < D; ++k) {
        auto [g, r] = group(mesh, k, axes);
        std::vector<float> es(static_cast<size_t>(m), 0.0f), em(static_cast<size_t>(m), -1e30f);
        for (int64_t j : g) {
          auto rj = row(j);
          for (int64_t i = 0; i < m; ++i) {
            es[static_cast<size_t>(i)] += rj[static_cast<size_t>(i)];
            em[static_cast<size_t>(i)] = std::max(em[static_cast<size_t>(i)], -rj[static_cast<size_t>(i)]);
          }
        }
        ASSERT_EQ(sum[static_cast<size_t>(k)], es) << "psum device " << k;
        ASSERT_EQ(mx[static_cast<size_t>(k)], em) << "pmax device " << k;
        std::vector<float> eg;
        for (int64_t j : g) {
          auto rj = row(j);
          eg.insert(eg.end(), rj.begin(), rj.end());
        }
        ASSERT_EQ(gath[static_cast<size_t>(k)], eg) << "all_gather device " << k;
        ASSERT_EQ(stacked[static_cast<size_t>(k)], eg) << "untiled all_gather device " << k;
        std::vector<float> esc(es.begin() + r * q, es.begin() + (r + 1) * q);
        ASSERT_EQ(scat[static_cast<size_t>(k)], esc) << "psum_scatter device " << k;
        ASSERT_EQ(perm[static_cast<size_t>(k)], row(g[static_cast<size_t>((r + n - 1) % n)])) << "ppermute device " << k;
        std::vector<float> ea;
        for (int64_t j : g) {
          auto rj = row(j);
          ea.insert(ea.end(), rj.begin() + r * q, rj.begin() + (r + 1) * q);
        }
        ASSERT_EQ(a2a[static_cast<size_t>(k)], ea) << "all_to_all device " << k;
        ASSERT_EQ(idx[static_cast<size_t>(k)][0], static_cast<float>(r)) << "axis_index device " << k;
      }
    }
  }
}

TEST(Collectives, PsumOfAnInvariantValueMultipliesByTheAxisSize) {
  Mesh mesh({4, 2}, {"x", "y"});
  Array x = device_put(from_vector<float>({1, 2, 3}, {3}), NamedSharding(mesh, P()));
  // x enters replicated (invariant): psum over x sums four identical copies.
  Array r = shard_map([](const Array& b) { return psum(b, "x"); }, mesh, {P()}, {P()})(x);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{4, 8, 12}));
  Array r2 = shard_map([](const Array& b) { return psum(b, Axes{"x", "y"}); }, mesh, {P()}, {P()})(x);
  EXPECT_EQ(r2.to_vector<float>(), (std::vector<float>{8, 16, 24}));
  Array m = shard_map([](const Array& b) { return pmean(b, "y"); }, mesh, {P()}, {P()})(x);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(shard_map([](const Array&) { return scalar<float>(static_cast<float>(axis_size("x"))); }, mesh,
                      {P()}, {P()})(x).item<float>(), 4.0f);
}

TEST(Collectives, IntegerAndHalfPrecisionReductions) {
  Mesh mesh({8}, {"x"});
  // bf16 is reduced in f32: eight copies of 1 + 2^-7 sum exactly to 8.0625, which sequential
  // bf16 additions would round away.
  std::vector<bfloat16> v(8, bfloat16(1.0078125f));
  Array b = device_put(from_vector(v, {8}), NamedSharding(mesh, P("x")));
  Array s = shard_map([](const Array& t) { return psum(t, "x"); }, mesh, {P("x")}, {P()})(b);
  EXPECT_EQ(static_cast<float>(s.to_vector<bfloat16>()[0]), 8.0625f);
  std::vector<int64_t> big(8, int64_t{1} << 40);
  Array i = device_put(from_vector(big, {8}), NamedSharding(mesh, P("x")));
  Array si = shard_map([](const Array& t) { return psum(t, "x"); }, mesh, {P("x")}, {P()})(i);
  EXPECT_EQ(si.to_vector<int64_t>()[0], int64_t{8} << 40);
  std::vector<int32_t> small{5, -3, 7, 1, 0, 9, -8, 2};
  Array j = device_put(from_vector(small, {8}), NamedSharding(mesh, P("x")));
  Array mx = shard_map([](const Array& t) { return pmax(t, "x"); }, mesh, {P("x")}, {P()})(j);
  Array mn = shard_map([](const Array& t) { return pmin(t, "x"); }, mesh, {P("x")}, {P()})(j);
  EXPECT_EQ(mx.to_vector<int32_t>()[0], 9);
  EXPECT_EQ(mn.to_vector<int32_t>()[0], -8);
}

TEST(Collectives, UntiledScatterAndAllToAll) {
  Mesh mesh({4}, {"x"});
  // Each device holds [4, 2]; untiled psum_scatter over dim 0 gives device r row r of the sum.
  Array x = device_put(arange(32, DType::F32), NamedSharding(mesh, P("x")));
  Array x2 = reshape(x, {16, 2});
  Array r = shard_map([](const Array& b) { return psum_scatter(b, "x", 0, false); }, mesh,
                      {P("x")}, {P("x")})(device_put(x2, NamedSharding(mesh, P("x"))));
  // Device r: sum over devices d of rows (4d + r).
  std::vector<float> want;
  for (int rr = 0; rr < 4; ++rr) {
    for (int c = 0; c < 2; ++c) {
      float t = 0;
      for (int d = 0; d < 4; ++d) t += static_cast<float>((4 * d + rr) * 2 + c);
      want.push_back(t);
    }
  }
  EXPECT_EQ(r.to_vector<float>(), want);
  // Untiled all_to_all: split axis of size 4 removed, new axis of size 4 at concat position.
  Array y = device_put(reshape(arange(64, DType::F32), {16, 4}), NamedSharding(mesh, P("x")));
  Array z = shard_map([](const Array& b) { return all_to_all(b, "x", 1, 0, false); }, mesh,
                      {P("x")}, {P("x")})(y);
  EXPECT_EQ(z.shape(), (Shape{16, 4}));
  auto zv = z.to_vector<float>();
  auto yv = y.to_vector<float>();
  // Device k's result [4 (source), 4 (rows)]: element [s, i] = y on device s, row i, column k.
  for (int k = 0; k < 4; ++k) {
    for (int s = 0; s < 4; ++s) {
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(zv[static_cast<size_t>((k * 4 + s) * 4 + i)], yv[static_cast<size_t>((s * 4 + i) * 4 + k)]);
      }
    }
  }
}

TEST(Collectives, BadInput) {
  Mesh mesh({4, 2}, {"x", "y"});
  Array x = device_put(arange(8, DType::F32), NamedSharding(mesh, P("x")));
  EXPECT_PARTIX_ERROR(psum(x, "x"), "[psum]", "outside shard_map", "'x'");
  EXPECT_PARTIX_ERROR(jit([](const Array& a) { return psum(a, "x"); })(x), "[psum]", "outside shard_map");
  auto sm = [&](auto f, std::vector<PartitionSpec> in, std::vector<PartitionSpec> out) {
    return shard_map(f, mesh, std::move(in), std::move(out))(x);
  };
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return psum(b, "q"); }, {P("x")}, {P()}), "[psum]",
                      "mesh axis 'q'");
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return ppermute(b, "x", {{0, 1}, {1, 1}}); }, {P("x")}, {P("x")}),
                      "[ppermute]", "not a permutation");
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return ppermute(b, "x", {{0, 1}, {0, 2}}); }, {P("x")}, {P("x")}),
                      "[ppermute]", "not a permutation");
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return all_to_all(reshape(b, {1, 2}), "x", 1, 0, true); }, {P("x")},
                         {P("x")}),
                      "[all_to_all]", "not divisible by the axis size 4");
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return b; }, {P("x"), P()}, {P("x")}), "[shard_map]",
                      "2 in_specs for 1 arguments");
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return b; }, {P("x", "y")}, {P("x")}), "[shard_map]",
                      "in_specs entry P('x', 'y') for argument 0, which has length 2",
                      "too long for its shape [8], which has rank 1");
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return b; }, {P("x")}, {P()}), "[shard_map]",
                      "replicated over 'x'", "varies over 'x'");
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return psum(b, "y"); }, {P("x")}, {P()}), "[shard_map]",
                      "'x'");
  EXPECT_PARTIX_ERROR(sm([](const Array& b) { return b; }, {P("z")}, {P()}), "[NamedSharding]", "'z'");
  // Turning the check off allows the claim.
  Array ok = shard_map([](const Array& b) { return b; }, mesh, {P("x")}, {P()}, false)(x);
  EXPECT_EQ(ok.shape(), (Shape{2}));
}

// axis_index_groups: each collective runs within the group of ranks holding the device (ranks
// over the axes, as axis_index numbers them); sizes are the group size; grads transpose within
// the group.
TEST(Collectives, AxisIndexGroups) {
  Mesh mesh({4, 2}, {"x", "y"});
  const IndexGroups groups{{0, 5}, {1, 4}, {2, 7}, {3, 6}};  // ranks over (x, y): 2x + y
  Axes ax{"x", "y"};
  const int64_t D = 8, q = 3, m = 2 * q;
  std::vector<float> in = iota_input(D, m);
  auto row = [&](int64_t k) { return std::vector<float>(in.begin() + k * m, in.begin() + (k + 1) * m); };
  auto mate = [&](int64_t k) {  // (the other member of k's group, k's position in it)
    for (const auto& g : groups) {
      if (g[0] == k) return std::make_pair(g[1], int64_t{0});
      if (g[1] == k) return std::make_pair(g[0], int64_t{1});
    }
    return std::make_pair(int64_t{-1}, int64_t{-1});
  };
  auto summed = run(mesh, m, [&](const Array& b) { return psum(b, ax, groups); }, in);
  auto gath = run(mesh, m, [&](const Array& b) { return all_gather(b, ax, 1, true, groups); }, in);
  auto scat = run(mesh, m, [&](const Array& b) { return psum_scatter(b, ax, 1, true, groups); }, in);
  auto a2a = run(mesh, m, [&](const Array& b) { return all_to_all(b, ax, 1, 1, true, groups); }, in);
  for (int64_t k = 0; k < D; ++k) {
    auto [j, pos] = mate(k);
    auto rk = row(k), rj = row(j);
    std::vector<float> es(static_cast<size_t>(m)), eg, ea;
    for (size_t i = 0; i < es.size(); ++i) es[i] = rk[i] + rj[i];
    const auto& first = pos == 0 ? rk : rj;
    const auto& second = pos == 0 ? rj : rk;
    eg.insert(eg.end(), first.begin(), first.end());
    eg.insert(eg.end(), second.begin(), second.end());
    for (const auto* r : {&first, &second}) {
      ea.insert(ea.end(), r->begin() + pos * q, r->begin() + (pos + 1) * q);
    }
    ASSERT_EQ(summed[static_cast<size_t>(k)], es) << "psum device " << k;
    ASSERT_EQ(gath[static_cast<size_t>(k)], eg) << "all_gather device " << k;
    ASSERT_EQ(scat[static_cast<size_t>(k)],
              std::vector<float>(es.begin() + pos * q, es.begin() + (pos + 1) * q))
        << "psum_scatter device " << k;
    ASSERT_EQ(a2a[static_cast<size_t>(k)], ea) << "all_to_all device " << k;
  }
  // The grad of sum(psum_grouped(x) * w) is psum_grouped(w): each group's two rows of w summed.
  PartitionSpec all = P(ax);
  Array x = device_put(from_vector(in, {D, m}), NamedSharding(mesh, all));
  Array w = device_put(from_vector(iota_input(D, m), {D, m}) * 0.5, NamedSharding(mesh, all));
  auto loss = [&](const Array& a) {
    return sum(shard_map([&](const Array& b) { return psum(b, ax, groups); }, mesh, {all}, {all})(a) * w);
  };
  std::vector<float> gw = Array(grad(loss)(x)).to_vector<float>(), wv = w.to_vector<float>();
  for (int64_t k = 0; k < D; ++k) {
    const int64_t j = mate(k).first;
    for (int64_t i = 0; i < m; ++i) {
      ASSERT_EQ(gw[static_cast<size_t>(k * m + i)], wv[static_cast<size_t>(k * m + i)] + wv[static_cast<size_t>(j * m + i)]);
    }
  }
  auto sm = [&](auto f) { return shard_map(f, mesh, {all}, {all})(x); };
  EXPECT_PARTIX_ERROR(sm([&](const Array& b) { return psum(b, ax, {{0, 1, 2}, {3, 4, 5, 6, 7}}); }),
                      "[psum]", "axis_index_groups", "one size");
  EXPECT_PARTIX_ERROR(sm([&](const Array& b) { return all_gather(b, ax, 0, true, {{0, 1}, {2, 3}}); }),
                      "[all_gather]", "axis_index_groups", "cover");
  EXPECT_PARTIX_ERROR(sm([&](const Array& b) { return psum_scatter(b, "x", 0, true, {{0, 9}, {1, 2}}); }),
                      "[psum_scatter]", "out of range");
}
