// Every primitive, under a grid of input shardings on 8 devices, equals the unsharded run.
#include <functional>
#include <numeric>

#include "test_util.h"

using namespace partix;

namespace {

std::vector<Mesh> meshes() {
  return {Mesh({8}, {"a"}), Mesh({4, 2}, {"a", "b"}), Mesh({2, 2, 2}, {"a", "b", "c"})};
}

// Specs for a shape on a mesh: every dim None, one axis, or (for the first dims) two axes;
// no axis twice. Deterministically thinned to at most `limit`.
std::vector<PartitionSpec> specs_for(const Mesh& m, int rank, size_t limit = 10) {
  std::vector<std::vector<PartitionSpec::Entry>> all{{}};
  std::vector<PartitionSpec::Entry> choices{{}};
  for (const auto& a : m.axis_names()) choices.push_back({a});
  for (const auto& a : m.axis_names()) {
    for (const auto& b : m.axis_names()) {
      if (a != b) choices.push_back({a, b});
    }
  }
  for (int d = 0; d < rank; ++d) {
    std::vector<std::vector<PartitionSpec::Entry>> next;
    for (const auto& cur : all) {
      for (const auto& c : choices) {
        bool clash = false;
        for (const auto& e : cur) {
          for (const auto& x : e) clash = clash || std::find(c.begin(), c.end(), x) != c.end();
        }
        if (!clash || c.empty()) {
          auto n = cur;
          n.push_back(c);
          next.push_back(n);
        }
      }
    }
    all = next;
  }
  std::vector<PartitionSpec> out;
  size_t step = std::max<size_t>(1, all.size() / limit);
  for (size_t i = 0; i < all.size() && out.size() < limit; i += step) out.emplace_back(all[i]);
  if (std::find(out.begin(), out.end(), PartitionSpec(all.back())) == out.end()) out.emplace_back(all.back());
  return out;
}

Array input(const Shape& s, DType dt, uint64_t seed) {
  Array x = random::normal(random::key(seed), s);
  if (dt == DType::I32) return astype(x * 10.0, DType::I32);
  return astype(x, dt);
}

void expect_same(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  Array g = astype(got, DType::F64), w = astype(want, DType::F64);
  auto gv = g.to_vector<double>(), wv = w.to_vector<double>();
  for (size_t i = 0; i < gv.size(); ++i) {
    ASSERT_NEAR(gv[i], wv[i], tol * (1 + std::abs(wv[i]))) << what << " at " << i;
  }
}

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::function<Array(const std::vector<Array>&)> f;
  double tol = 1e-5;
  // Inputs that must stay replicated (index operands, keys).
  std::vector<bool> replicated = {};
};

std::vector<OpCase> cases() {
  using V = std::vector<Array>;
  std::vector<OpCase> c;
  auto unary = [&](std::string n, std::function<Array(const Array&)> op) {
    c.push_back({n, {{12, 6}}, {DType::F32}, [op](const V& a) { return op(a[0]); }});
  };
  unary("neg", [](const Array& x) { return -x; });
  unary("exp", [](const Array& x) { return exp(x); });
  unary("log", [](const Array& x) { return log(abs(x) + 1.0); });
  unary("tanh", [](const Array& x) { return tanh(x); });
  unary("sqrt_rsqrt", [](const Array& x) { return sqrt(abs(x)) + rsqrt(abs(x) + 1.0); });
  unary("sin_cos", [](const Array& x) { return sin(x) * cos(x); });
  unary("abs_sign", [](const Array& x) { return abs(x) * sign(x); });
  unary("floor_ceil_round", [](const Array& x) { return floor(x) + ceil(x) + round(x); });
  unary("logistic_erf", [](const Array& x) { return logistic(x) + erf(x); });
  unary("erf_inv", [](const Array& x) { return erf_inv(tanh(x) * 0.9); });
  unary("log1p_expm1", [](const Array& x) { return log1p(abs(x)) + expm1(x * 0.1); });
  unary("not", [](const Array& x) { return astype(logical_not(x > 0.0), DType::F32); });
  unary("convert", [](const Array& x) { return astype(astype(x, DType::BF16), DType::F32); });
  unary("stop_gradient", [](const Array& x) { return stop_gradient(x); });
  c.push_back({"binary", {{12, 6}, {12, 6}}, {DType::F32, DType::F32}, [](const V& a) {
                 return a[0] + a[1] * a[0] - a[1] / (abs(a[0]) + 1.0) + maximum(a[0], a[1]) +
                        minimum(a[0], a[1]) + pow(abs(a[0]) + 1.0, a[1]);
               }});
  c.push_back({"compare_select", {{12, 6}, {12, 6}}, {DType::F32, DType::F32}, [](const V& a) {
                 Array m = logical_or(logical_and(a[0] < a[1], a[0] >= 0.0), equal(a[0], a[1]));
                 return where(m, a[0], a[1]) + astype(not_equal(a[0], a[1]), DType::F32);
               }});
  c.push_back({"int_arith", {{12, 6}, {12, 6}}, {DType::I32, DType::I32},
               [](const V& a) { return a[0] * a[1] + a[0] / (abs(a[1]) + 1.0) - a[1]; }});
  c.push_back({"broadcast_scalar", {{12, 6}, {6}}, {DType::F32, DType::F32},
               [](const V& a) { return a[0] * a[1] + 2.0; }});
  c.push_back({"reduce_sum", {{12, 6, 4}}, {DType::F32}, [](const V& a) { return sum(a[0], {1}); }});
  c.push_back({"reduce_sum_all", {{12, 6}}, {DType::F32}, [](const V& a) { return sum(a[0]); }});
  c.push_back({"reduce_max_min", {{12, 6}}, {DType::F32},
               [](const V& a) { return max(a[0], {0}) + min(a[0], {0}); }});
  c.push_back({"argmax", {{12, 6}}, {DType::F32}, [](const V& a) { return argmax(a[0], 1) + argmin(a[0], 1); }});
  c.push_back({"cumsum", {{12, 6}}, {DType::F32}, [](const V& a) { return cumsum(a[0], 0) + cumsum(a[0], 1, true); }});
  c.push_back({"matmul", {{12, 8}, {8, 6}}, {DType::F32, DType::F32}, [](const V& a) { return matmul(a[0], a[1]); }});
  c.push_back({"batched_einsum", {{4, 6, 8}, {4, 8, 2}}, {DType::F32, DType::F32},
               [](const V& a) { return einsum("bij,bjk->bki", {a[0], a[1]}); }});
  c.push_back({"reshape_split", {{8, 32}}, {DType::F32}, [](const V& a) { return reshape(a[0], {8, 16, 2}) * 2.0; }});
  c.push_back({"reshape_merge", {{4, 6, 8}}, {DType::F32}, [](const V& a) { return reshape(a[0], {24, 8}) + 1.0; }});
  c.push_back({"transpose", {{12, 6, 4}}, {DType::F32}, [](const V& a) { return transpose(a[0], {2, 0, 1}); }});
  c.push_back({"broadcast_in_dim", {{6, 1}}, {DType::F32}, [](const V& a) { return broadcast_to(a[0], {4, 6, 8}); }});
  c.push_back({"slice", {{12, 6}}, {DType::F32}, [](const V& a) { return slice(a[0], {1, 0}, {11, 6}, {3, 1}); }});
  c.push_back({"concatenate", {{12, 6}, {12, 2}}, {DType::F32, DType::F32},
               [](const V& a) { return concatenate({a[0], a[1]}, 1); }});
  c.push_back({"pad", {{12, 6}}, {DType::F32}, [](const V& a) { return pad(a[0], {1, 0}, {2, 0}, 0.5); }});
  c.push_back({"rev", {{12, 6}}, {DType::F32}, [](const V& a) { return flip(a[0], {0}); }});
  c.push_back({"dynamic_slice", {{12, 6}}, {DType::F32}, [](const V& a) {
                 return dynamic_slice(a[0], {scalar<int32_t>(3), scalar<int32_t>(0)}, {5, 6});
               }});
  c.push_back({"dynamic_update_slice", {{12, 6}, {3, 6}}, {DType::F32, DType::F32}, [](const V& a) {
                 return dynamic_update_slice(a[0], a[1], {scalar<int32_t>(7), scalar<int32_t>(0)});
               }});
  c.push_back({"take", {{16, 6}}, {DType::F32}, [](const V& a) {
                 return take(a[0], from_vector<int32_t>({3, 15, 0, 7, 7, 9}, {2, 3}), 0);
               }});
  c.push_back({"take_along", {{12, 6}}, {DType::F32}, [](const V& a) {
                 return take_along_axis(a[0], astype(abs(a[0] * 2.0), DType::I32), 1);
               }});
  c.push_back({"scatter_add", {{16, 6}, {6, 6}}, {DType::F32, DType::F32}, [](const V& a) {
                 return scatter_add(a[0], from_vector<int32_t>({3, 15, 0, 3, 7, 3}, {6}), a[1], 0);
               }});
  c.push_back({"iota_random", {{12, 6}}, {DType::F32}, [](const V& a) {
                 return a[0] + astype(iota({12, 6}, 1), DType::F32) + random::uniform(random::key(9), {12, 6});
               }});
  c.push_back({"top_k", {{12, 6}}, {DType::F32}, [](const V& a) {
                 auto [v, i] = top_k(a[0], 3);
                 return v + astype(i, DType::F32);
               }});
  c.push_back({"softmax_layernorm", {{12, 8}, {8}, {8}}, {DType::F32, DType::F32, DType::F32}, [](const V& a) {
                 return layer_norm(softmax(a[0]), a[1], a[2]);
               }});
  return c;
}

}  // namespace

TEST(Equivalence, EveryPrimitiveUnderAGridOfShardings) {
  int runs = 0;
  for (const OpCase& oc : cases()) {
    std::vector<Array> full;
    for (size_t i = 0; i < oc.shapes.size(); ++i) full.push_back(input(oc.shapes[i], oc.dtypes[i], 17 + i));
    Array want = oc.f(full);
    for (const Mesh& mesh : meshes()) {
      // Specs per input, combined round-robin so every input sees every spec once.
      std::vector<std::vector<PartitionSpec>> per;
      size_t n = 0;
      for (const Shape& s : oc.shapes) {
        per.push_back(specs_for(mesh, static_cast<int>(s.size())));
        n = std::max(n, per.back().size());
      }
      for (size_t k = 0; k < n; ++k) {
        std::vector<Array> args;
        std::string desc = oc.name + " on " + mesh.to_string() + ":";
        for (size_t i = 0; i < full.size(); ++i) {
          const PartitionSpec& s = per[i][(k + i) % per[i].size()];
          args.push_back(device_put(full[i], NamedSharding(mesh, s)));
          desc += " " + s.to_string();
        }
        auto f = jit([&](const std::vector<Array>& a) { return oc.f(a); });
        Array got = f(args);
        expect_same(got, want, oc.tol, desc);
        ASSERT_EQ(got.sharding().mesh(), mesh) << desc;
        runs++;
      }
    }
  }
  EXPECT_GT(runs, 800);
}

TEST(Equivalence, UnevenShardingsOfCoreOps) {
  // 13 rows over 4 or 8 devices: blocks of 4 (last holds 1) or of 2 (last empty).
  Mesh mesh({4, 2}, {"x", "y"});
  Array a = input({13, 6}, DType::F32, 1), b = input({6, 5}, DType::F32, 2);
  Array c = input({13, 5}, DType::F32, 3);
  for (const PartitionSpec& s : {P("x"), P(Axes{"x", "y"}), P("y", "x"), P(None, "y")}) {
    SCOPED_TRACE(s.to_string());
    Array as = device_put(a, NamedSharding(mesh, s));
    Array cs = device_put(c, NamedSharding(mesh, P(s[0])));
    auto f = jit([](const Array& x, const Array& w, const Array& z) {
      Array h = matmul(exp(x) * 0.5, w) + z;
      return std::vector<Array>{h, sum(h, {0}), max(h, {0}), transpose(h), reshape(h, {13, 5, 1}),
                                mean(softmax(x, 0), {1})};
    });
    auto got = f(as, b, cs);
    Array h = matmul(exp(a) * 0.5, b) + c;
    expect_same(got[0], h, 1e-5, "elementwise+dot");
    expect_same(got[1], sum(h, {0}), 1e-5, "sum over the uneven dim");
    expect_same(got[2], max(h, {0}), 1e-6, "max over the uneven dim");
    expect_same(got[3], transpose(h), 1e-5, "transpose");
    expect_same(got[4], reshape(h, {13, 5, 1}), 1e-5, "reshape");
    expect_same(got[5], mean(softmax(a, 0), {1}), 1e-5, "softmax over the uneven dim");
  }
}

TEST(Equivalence, EagerOpsOnShardedArraysKeepShardings) {
  Mesh mesh({4, 2}, {"x", "y"});
  Array a = device_put(input({8, 6}, DType::F32, 4), NamedSharding(mesh, P("x", "y")));
  Array b = exp(a) + 1.0;
  EXPECT_EQ(b.sharding(), NamedSharding(mesh, P("x", "y")));
  Array t = transpose(b);
  EXPECT_EQ(t.sharding(), NamedSharding(mesh, P("y", "x")));
  Array s = sum(b, {1});
  EXPECT_EQ(s.sharding(), NamedSharding(mesh, P("x")));
  expect_same(s, sum(exp(device_put(a, Device{0})) + 1.0, {1}), 1e-5, "eager sum");
}

TEST(Equivalence, ShardMapInsideJitAndJitInsideShardMap) {
  Mesh mesh({4, 2}, {"x", "y"});
  Array a = device_put(input({8, 6}, DType::F32, 5), NamedSharding(mesh, P("x")));
  auto inner = jit([](const Array& x) { return x * 2.0 + 1.0; });
  auto sm = shard_map([&](const Array& blk) { return psum(inner(blk), "x"); }, mesh, {P("x")}, {P()});
  auto f = jit([&](const Array& x) { return sm(exp(x)) - 1.0; });
  Array got = f(a);
  Array e = exp(device_put(a, Device{0})) * 2.0 + 1.0;
  Array want = sum(reshape(e, {4, 2, 6}), {0}) - 1.0;
  expect_same(got, want, 1e-5, "shard_map in jit");
  std::string text = f.lower(a).as_text();
  EXPECT_NE(text.find("all_reduce"), std::string::npos) << text;
}
