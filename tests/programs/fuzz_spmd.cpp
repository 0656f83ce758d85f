// Differential fuzzer of the SPMD compiler: random small programs (elementwise, dot, reshape,
// transpose, reductions, slice/concatenate, gather/scatter, cumsum/softmax, constraints,
// shard_map with collectives, and gradients of all of it) under random shardings (uneven
// included) on meshes of 1-8 devices, each compared with the same program run op by op on one
// device. Every case derives from (seed, index), so a failure is replayed with
// `partix_fuzz_spmd --seed S --first I --cases 1 --verbose`.
//
// Usage: partix_fuzz_spmd [--cases N] [--seed S] [--first I] [--verbose]
// Exit status: 0 when every case agreed, 1 otherwise (each disagreement is printed).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "partix/partix.h"

using namespace partix;

namespace {

using Rng = std::mt19937_64;

int64_t pick(Rng& r, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(r);
}
bool chance(Rng& r, double p) { return std::uniform_real_distribution<double>(0, 1)(r) < p; }

// One operation of a random program; `in` index values computed so far (inputs first).
struct Step {
  enum Kind {
    kUnary, kBinary, kScalar, kMatmul, kReshape, kTranspose, kSum, kMax, kSlice, kConcat,
    kTake, kTakeAlong, kScatter, kCumsum, kSoftmax, kConstraint, kCreate, kPsum, kAllGather,
    kPpermute, kPsumScatter, kPad, kFlip, kBroadcast, kMean2, kMatmulT
  };
  Kind kind;
  std::vector<int> in;
  int64_t a = 0, b = 0;
  Shape shape;
  std::vector<int> perm;
  PartitionSpec spec;
  std::string axis;  // mesh axis of a collective
};

struct Input {
  Shape shape;
  bool index = false;  // int32 indices in [0, bound)
  int64_t bound = 0;
  PartitionSpec spec;
};

struct Case {
  Mesh mesh = Mesh({1}, {"a"});
  std::vector<Input> inputs;
  std::vector<Step> steps;
  std::vector<Shape> shapes;  // of every value, inputs first
  std::vector<bool> is_index;
  int out = 0;
  bool grad = false;
  std::optional<PartitionSpec> out_spec;
};

const std::vector<std::pair<Shape, std::vector<std::string>>> kMeshes = {
    {{1}, {"a"}},         {{2}, {"a"}},         {{4}, {"a"}},         {{8}, {"a"}},
    {{3}, {"a"}},         {{2, 2}, {"a", "b"}}, {{4, 2}, {"a", "b"}}, {{2, 4}, {"a", "b"}},
    {{2, 2, 2}, {"a", "b", "c"}}, {{3, 2}, {"a", "b"}}, {{8, 1}, {"a", "b"}}};

// A random spec for a value of `shape`: each mesh axis used at most once.
PartitionSpec random_spec(Rng& r, const Mesh& m, const Shape& shape) {
  std::vector<std::string> free = m.axis_names();
  std::shuffle(free.begin(), free.end(), r);
  std::vector<PartitionSpec::Entry> e(shape.size());
  for (const auto& a : free) {
    if (shape.empty() || !chance(r, 0.6)) continue;
    e[static_cast<size_t>(pick(r, 0, static_cast<int64_t>(shape.size()) - 1))].push_back(a);
  }
  while (!e.empty() && e.back().empty()) e.pop_back();
  return PartitionSpec(e);
}

Shape random_shape(Rng& r, int rank) {
  static const int64_t kSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16};
  Shape s;
  for (int i = 0; i < rank; ++i) s.push_back(kSizes[pick(r, 0, 10)]);
  return s;
}

class Generator {
 public:
  Generator(uint64_t seed, uint64_t index) : r_(seed * 1000003 + index) {}

  Case make() {
    const auto& [sizes, names] = kMeshes[static_cast<size_t>(pick(r_, 0, kMeshes.size() - 1))];
    c_.mesh = Mesh(sizes, names);
    const int n_in = static_cast<int>(pick(r_, 1, 3));
    for (int i = 0; i < n_in; ++i) add_input(random_shape(r_, static_cast<int>(pick(r_, 1, 3))));
    const int n_steps = static_cast<int>(pick(r_, 1, 10));
    for (int i = 0; i < n_steps; ++i) step();
    c_.out = static_cast<int>(c_.shapes.size()) - 1;
    while (c_.is_index[static_cast<size_t>(c_.out)]) c_.out--;
    c_.grad = chance(r_, 0.35);
    if (!c_.grad && chance(r_, 0.3)) c_.out_spec = random_spec(r_, c_.mesh, c_.shapes[c_.out]);
    return c_;
  }

 private:
  int add_input(Shape s, bool index = false, int64_t bound = 0) {
    Input in{s, index, bound, random_spec(r_, c_.mesh, s)};
    c_.inputs.push_back(in);
    // Inputs come first among values: shift every step's references.
    for (Step& st : c_.steps) {
      for (int& v : st.in) {
        if (v >= static_cast<int>(c_.inputs.size()) - 1) v++;
      }
    }
    c_.shapes.insert(c_.shapes.begin() + static_cast<long>(c_.inputs.size()) - 1, s);
    c_.is_index.insert(c_.is_index.begin() + static_cast<long>(c_.inputs.size()) - 1, index);
    return static_cast<int>(c_.inputs.size()) - 1;
  }

  int push(Step st, Shape s) {
    c_.steps.push_back(std::move(st));
    c_.shapes.push_back(std::move(s));
    c_.is_index.push_back(false);
    return static_cast<int>(c_.shapes.size()) - 1;
  }

  int float_value() {
    std::vector<int> ok;
    for (size_t v = 0; v < c_.shapes.size(); ++v) {
      if (!c_.is_index[v] && !c_.shapes[v].empty()) ok.push_back(static_cast<int>(v));
    }
    if (ok.empty()) return add_input(random_shape(r_, 2));
    // Prefer recent values: programs grow as chains.
    if (chance(r_, 0.6)) return ok.back();
    return ok[static_cast<size_t>(pick(r_, 0, static_cast<int64_t>(ok.size()) - 1))];
  }

  void step() {
    int v = float_value();
    Shape s = c_.shapes[static_cast<size_t>(v)];
    const int rank = static_cast<int>(s.size());
    const int ax = static_cast<int>(pick(r_, 0, rank - 1));
    Step st;
    st.in = {v};
    switch (pick(r_, 0, 24)) {
      case 0:
      case 1:
        st.kind = Step::kUnary;
        st.a = pick(r_, 0, 3);
        push(st, s);
        return;
      case 2: {
        st.kind = Step::kBinary;
        st.a = pick(r_, 0, 2);
        int w = -1;
        for (size_t u = 0; u < c_.shapes.size(); ++u) {
          if (!c_.is_index[u] && c_.shapes[u] == s && static_cast<int>(u) != v) w = static_cast<int>(u);
        }
        if (w < 0) w = add_input(s), v = v >= w ? v + 1 : v;
        st.in = {v, w};
        push(st, s);
        return;
      }
      case 3:
        st.kind = Step::kScalar;
        push(st, s);
        return;
      case 4:
      case 5:
      case 24: {  // [..., K] times a new weight [K, N], or one stored transposed [N, K]
        st.kind = chance(r_, 0.7) ? Step::kMatmul : Step::kMatmulT;
        const int64_t n = pick(r_, 1, 12);
        int w = add_input(st.kind == Step::kMatmul ? Shape{s.back(), n} : Shape{n, s.back()});
        if (v >= w) v++;
        st.in = {v, w};
        Shape o = s;
        o.back() = n;
        push(st, o);
        return;
      }
      case 6: {  // reshape: split one dimension into two factors, or merge two neighbours
        st.kind = Step::kReshape;
        Shape o;
        std::vector<int64_t> divs;
        for (int64_t f = 2; f < s[ax]; ++f) {
          if (s[ax] % f == 0) divs.push_back(f);
        }
        if (!divs.empty() && (rank < 3 || chance(r_, 0.5))) {
          const int64_t f = divs[static_cast<size_t>(pick(r_, 0, static_cast<int64_t>(divs.size()) - 1))];
          for (int d = 0; d < rank; ++d) {
            if (d == ax) {
              o.push_back(f);
              o.push_back(s[d] / f);
            } else {
              o.push_back(s[d]);
            }
          }
        } else if (rank >= 2) {
          const int d0 = std::min(ax, rank - 2);
          for (int d = 0; d < rank; ++d) {
            if (d == d0) {
              o.push_back(s[d] * s[d + 1]);
              ++d;
            } else {
              o.push_back(s[d]);
            }
          }
        } else {
          o = {s[0], 1};
        }
        st.shape = o;
        push(st, o);
        return;
      }
      case 7: {
        st.kind = Step::kTranspose;
        st.perm.resize(static_cast<size_t>(rank));
        std::iota(st.perm.begin(), st.perm.end(), 0);
        std::shuffle(st.perm.begin(), st.perm.end(), r_);
        Shape o;
        for (int p : st.perm) o.push_back(s[static_cast<size_t>(p)]);
        push(st, o);
        return;
      }
      case 8:
      case 9: {
        if (rank < 2) return step();
        st.kind = chance(r_, 0.7) ? Step::kSum : Step::kMax;
        st.a = ax;
        Shape o = s;
        o.erase(o.begin() + ax);
        push(st, o);
        return;
      }
      case 10: {
        st.kind = Step::kSlice;
        st.a = ax;
        const int64_t lo = pick(r_, 0, s[ax] - 1);
        const int64_t hi = pick(r_, lo + 1, s[ax]);
        st.b = lo;
        st.shape = {hi};
        Shape o = s;
        o[ax] = hi - lo;
        push(st, o);
        return;
      }
      case 11: {
        st.kind = Step::kConcat;
        st.a = ax;
        st.in = {v, v};
        Shape o = s;
        o[ax] *= 2;
        push(st, o);
        return;
      }
      case 12: {  // take rows of v with an index input
        st.kind = Step::kTake;
        st.a = ax;
        Shape idx = random_shape(r_, static_cast<int>(pick(r_, 1, 2)));
        int i = add_input(idx, true, s[ax]);
        if (v >= i) v++;
        st.in = {v, i};
        Shape o;
        for (int d = 0; d < ax; ++d) o.push_back(s[d]);
        for (int64_t d : idx) o.push_back(d);
        for (int d = ax + 1; d < rank; ++d) o.push_back(s[d]);
        push(st, o);
        return;
      }
      case 13: {
        st.kind = Step::kTakeAlong;
        st.a = ax;
        Shape idx = s;
        idx[ax] = pick(r_, 1, 6);
        int i = add_input(idx, true, s[ax]);
        if (v >= i) v++;
        st.in = {v, i};
        push(st, idx);
        return;
      }
      case 14: {  // scatter_add rows into v
        st.kind = Step::kScatter;
        const int64_t k = pick(r_, 1, 6);
        int i = add_input({k}, true, s[0]);
        if (v >= i) v++;
        Shape u = s;
        u[0] = k;
        int w = add_input(u);
        if (v >= w) v++;
        if (i >= w) i++;
        st.in = {v, i, w};
        push(st, s);
        return;
      }
      case 15:
        st.kind = chance(r_, 0.5) ? Step::kCumsum : Step::kSoftmax;
        st.a = ax;
        push(st, s);
        return;
      case 16:
        st.kind = Step::kConstraint;
        st.spec = random_spec(r_, c_.mesh, s);
        push(st, s);
        return;
      case 17:
        st.kind = Step::kCreate;  // v + a created iota/zeros mix
        push(st, s);
        return;
      case 20: {
        st.kind = Step::kPad;
        st.a = ax;
        st.b = pick(r_, 0, 3);
        st.shape = {pick(r_, 0, 3)};
        Shape o = s;
        o[ax] += st.b + st.shape[0];
        push(st, o);
        return;
      }
      case 21:
        st.kind = Step::kFlip;
        st.a = ax;
        push(st, s);
        return;
      case 22: {  // v + w where w lacks dimension ax (broadcast)
        if (rank < 2) return step();
        st.kind = Step::kBroadcast;
        st.a = ax;
        Shape ws = s;
        ws.erase(ws.begin() + ax);
        int w = add_input(ws);
        if (v >= w) v++;
        st.in = {v, w};
        push(st, s);
        return;
      }
      case 23: {
        if (rank < 3) return step();
        st.kind = Step::kMean2;
        st.a = 0;
        st.b = rank - 1;
        Shape o(s.begin() + 1, s.end() - 1);
        push(st, o);
        return;
      }
      default: {  // shard_map with one collective over an axis that divides dimension ax
        std::vector<std::string> fit;
        for (const auto& a : c_.mesh.axis_names()) {
          if (s[ax] % c_.mesh.axis_size(a) == 0) fit.push_back(a);
        }
        if (fit.empty()) return step();
        st.axis = fit[static_cast<size_t>(pick(r_, 0, static_cast<int64_t>(fit.size()) - 1))];
        st.a = ax;
        const int64_t k = c_.mesh.axis_size(st.axis);
        Shape o = s;
        switch (pick(r_, 0, 3)) {
          case 0:
            st.kind = Step::kPsum;
            o[ax] /= k;
            break;
          case 1:
            st.kind = Step::kAllGather;
            break;
          case 2:
            st.kind = Step::kPpermute;
            break;
          default:
            if ((s[ax] / k) % k != 0) return step();
            st.kind = Step::kPsumScatter;
            o[ax] /= k;
            break;
        }
        push(st, o);
        return;
      }
    }
  }

  Rng r_;
  Case c_;
};

PartitionSpec spec_on(int rank, int dim, const std::string& axis) {
  std::vector<PartitionSpec::Entry> e(static_cast<size_t>(rank));
  e[static_cast<size_t>(dim)] = {axis};
  return PartitionSpec(e);
}

// Sum of the k blocks of dimension `dim` (what psum over an axis splitting it gives).
Array block_sum(const Array& x, int dim, int64_t k) {
  Shape s = x.shape();
  Shape r;
  for (int d = 0; d < x.ndim(); ++d) {
    if (d == dim) {
      r.push_back(k);
      r.push_back(s[static_cast<size_t>(d)] / k);
    } else {
      r.push_back(s[static_cast<size_t>(d)]);
    }
  }
  return sum(reshape(x, r), {dim});
}

// Runs the case's steps. `sharded`: inside jit on the mesh (shard_map, constraints);
// otherwise the single-device meaning of every step.
Array run_steps(const Case& c, std::vector<Array> vals, bool sharded) {
  const Mesh& m = c.mesh;
  for (const Step& st : c.steps) {
    const Array& x = vals[static_cast<size_t>(st.in[0])];
    const int ax = static_cast<int>(st.a);
    Array y;
    switch (st.kind) {
      case Step::kUnary:
        y = st.a == 0 ? tanh(x) : st.a == 1 ? sin(x) : st.a == 2 ? square(x) * 0.25f : relu(x);
        break;
      case Step::kBinary: {
        const Array& w = vals[static_cast<size_t>(st.in[1])];
        y = st.a == 0 ? x + w : st.a == 1 ? x * w : maximum(x, w);
        break;
      }
      case Step::kScalar:
        y = x * 0.5f - 1.0f;
        break;
      case Step::kMatmul:
        y = matmul(x, vals[static_cast<size_t>(st.in[1])]) * 0.3f;
        break;
      case Step::kReshape:
        y = reshape(x, st.shape);
        break;
      case Step::kTranspose:
        y = transpose(x, st.perm);
        break;
      case Step::kSum:
        y = sum(x, {ax}) * 0.5f;
        break;
      case Step::kMax:
        y = max(x, {ax});
        break;
      case Step::kSlice:
        y = slice_axis(x, ax, st.b, st.shape[0]);
        break;
      case Step::kConcat:
        y = concatenate({x, tanh(x)}, ax);
        break;
      case Step::kTake:
        y = take(x, vals[static_cast<size_t>(st.in[1])], ax);
        break;
      case Step::kTakeAlong:
        y = take_along_axis(x, vals[static_cast<size_t>(st.in[1])], ax);
        break;
      case Step::kScatter:
        y = scatter_add(x, vals[static_cast<size_t>(st.in[1])], vals[static_cast<size_t>(st.in[2])], 0);
        break;
      case Step::kCumsum:
        y = cumsum(x, ax) * 0.5f;
        break;
      case Step::kSoftmax:
        y = softmax(x, ax);
        break;
      case Step::kConstraint:
        y = sharded ? with_sharding_constraint(x, NamedSharding(m, st.spec)) : x;
        break;
      case Step::kPad: {
        Shape lo(static_cast<size_t>(x.ndim()), 0), hi(static_cast<size_t>(x.ndim()), 0);
        lo[static_cast<size_t>(ax)] = st.b;
        hi[static_cast<size_t>(ax)] = st.shape[0];
        y = pad(x, lo, hi, 0.5);
        break;
      }
      case Step::kFlip:
        y = flip(x, {ax});
        break;
      case Step::kBroadcast:
        y = x - expand_dims(vals[static_cast<size_t>(st.in[1])], ax);
        break;
      case Step::kMean2:
        y = mean(x, {0, static_cast<int>(st.b)});
        break;
      case Step::kMatmulT: {
        const Array& w = vals[static_cast<size_t>(st.in[1])];
        y = dot_general(x, w, {x.ndim() - 1}, {1}) * 0.3f;
        break;
      }
      case Step::kCreate: {
        Array i = astype(iota(x.shape(), x.ndim() - 1, DType::I32), DType::F32);
        y = x + i * 0.1f + zeros(x.shape()) + full(x.shape(), 0.25);
        break;
      }
      case Step::kPsum:
      case Step::kAllGather:
      case Step::kPpermute:
      case Step::kPsumScatter: {
        const int64_t k = m.axis_size(st.axis);
        const int rank = x.ndim();
        const PartitionSpec split = spec_on(rank, ax, st.axis);
        if (sharded) {
          const std::string a = st.axis;
          if (st.kind == Step::kPsum) {
            y = shard_map([a](const Array& b) { return psum(b, a); }, m, {split}, {P()})(x);
          } else if (st.kind == Step::kAllGather) {
            y = shard_map([a, ax](const Array& b) { return all_gather(b, a, ax, true); }, m,
                          {split}, {P()})(x);
          } else if (st.kind == Step::kPpermute) {
            std::vector<std::pair<int, int>> shift;
            for (int i = 0; i < k; ++i) shift.push_back({i, static_cast<int>((i + 1) % k)});
            y = shard_map([a, shift](const Array& b) { return ppermute(b, a, shift); }, m,
                          {split}, {split})(x);
          } else {
            y = shard_map([a, ax](const Array& b) { return psum_scatter(b, a, ax, true); }, m,
                          {split}, {split})(x);
          }
        } else if (st.kind == Step::kPsum) {
          y = block_sum(x, ax, k);
        } else if (st.kind == Step::kAllGather) {
          y = x;
        } else if (st.kind == Step::kPpermute) {
          // Block i moves to block i + 1: the blocks roll by one.
          const int64_t n = x.shape()[static_cast<size_t>(ax)], c = n / k;
          y = concatenate({slice_axis(x, ax, n - c, n), slice_axis(x, ax, 0, n - c)}, ax);
        } else {
          // psum_scatter of block b (size n/k) over devices: device j keeps piece j of the sum.
          y = block_sum(x, ax, k);
        }
        break;
      }
    }
    vals.push_back(y);
  }
  return vals[static_cast<size_t>(c.out)];
}

std::string describe(const Case& c) {
  std::string s = c.mesh.to_string() + "\n";
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    s += fmt::format("  %{} input {}{} {}\n", i, c.inputs[i].index ? "i32" : "f32",
                     shape_to_string(c.inputs[i].shape), c.inputs[i].spec.to_string());
  }
  static const char* kNames[] = {"unary", "binary", "scalar", "matmul", "reshape", "transpose",
                                 "sum", "max", "slice", "concat", "take", "take_along",
                                 "scatter_add", "cumsum", "softmax", "constraint", "create",
                                 "psum", "all_gather", "ppermute", "psum_scatter", "pad", "flip",
                                 "broadcast", "mean2", "matmul_t"};
  size_t v = c.inputs.size();
  for (const Step& st : c.steps) {
    s += fmt::format("  %{} = {}(%{}) a={} b={} shape={} spec={} axis={} -> {}\n", v,
                     kNames[st.kind], fmt::join(st.in, ", %"), st.a, st.b,
                     shape_to_string(st.shape), st.spec.to_string(), st.axis,
                     shape_to_string(c.shapes[v]));
    v++;
  }
  s += fmt::format("  result %{}{}{}\n", c.out, c.grad ? " (gradient of sum(tanh(result)))" : "",
                   c.out_spec ? " out " + c.out_spec->to_string() : "");
  return s;
}

struct Outcome {
  bool ok = true;
  bool skipped = false;
  std::string why;
};

bool close(const std::vector<float>& a, const std::vector<float>& b, std::string& why) {
  if (a.size() != b.size()) {
    why = fmt::format("{} values against {}", a.size(), b.size());
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (!(std::fabs(a[i] - b[i]) <= 1e-3f * (1.0f + std::fabs(b[i])))) {
      why = fmt::format("value {}: sharded {} against {}", i, a[i], b[i]);
      return false;
    }
  }
  return true;
}

Outcome check(const Case& c, uint64_t seed) {
  // Input values, the same on both sides.
  Params floats, ints;
  std::vector<std::string> names;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Input& in = c.inputs[i];
    const std::string name = fmt::format("in{:02}", i);
    names.push_back(name);
    Array key = random::key(seed + i);
    if (in.index) ints[name] = random::randint(key, in.shape, 0, in.bound);
    else floats[name] = random::normal(key, in.shape);
  }
  auto program = [&](const Params& f, const Params& n, bool sharded) {
    std::vector<Array> vals;
    for (const auto& name : names) vals.push_back(f.count(name) ? f.at(name) : n.at(name));
    return run_steps(c, vals, sharded);
  };
  auto loss = [&](bool sharded) {
    return [&, sharded](const Params& f, const Params& n) {
      return sum(tanh(program(f, n, sharded)));
    };
  };
  Outcome o;
  // The reference: every op eagerly on device 0.
  std::vector<float> want;
  Params want_grads;
  try {
    if (c.grad) {
      auto [value, g] = value_and_grad(loss(false))(floats, ints);
      want = value.to_vector<float>();
      want_grads = g;
    } else {
      want = program(floats, ints, false).to_vector<float>();
    }
  } catch (const Error& e) {
    o.skipped = true;  // not a valid program on one device either
    o.why = e.what();
    return o;
  }
  try {
    Params fs, is;
    for (const auto& [k, v] : floats) {
      const size_t i = static_cast<size_t>(std::stoi(k.substr(2)));
      fs[k] = device_put(v, NamedSharding(c.mesh, c.inputs[i].spec));
    }
    for (const auto& [k, v] : ints) {
      const size_t i = static_cast<size_t>(std::stoi(k.substr(2)));
      is[k] = device_put(v, NamedSharding(c.mesh, c.inputs[i].spec));
    }
    if (c.grad) {
      auto f = jit([&](const Params& f, const Params& n) { return value_and_grad(loss(true))(f, n); });
      auto [value, g] = f(fs, is);
      if (!close(value.to_vector<float>(), want, o.why)) {
        o.ok = false;
        o.why = "loss: " + o.why;
        return o;
      }
      const Params gp = g;
      for (const auto& [k, v] : want_grads) {
        if (!close(gp.at(k).to_vector<float>(), v.to_vector<float>(), o.why)) {
          o.ok = false;
          o.why = "gradient of " + k + ": " + o.why;
          return o;
        }
      }
    } else {
      JitOptions opts;
      if (c.out_spec) opts.out_shardings = {NamedSharding(c.mesh, *c.out_spec)};
      auto f = jit([&](const Params& f, const Params& n) { return program(f, n, true); }, opts);
      Array y = f(fs, is);
      if (c.out_spec && !(y.sharding() == NamedSharding(c.mesh, *c.out_spec))) {
        o.ok = false;
        o.why = "result sharding " + y.sharding().to_string() + " instead of out_shardings";
        return o;
      }
      if (!close(y.to_vector<float>(), want, o.why)) o.ok = false;
    }
  } catch (const std::exception& e) {
    o.ok = false;
    o.why = std::string("sharded run failed: ") + e.what();
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t cases = 100;
  uint64_t seed = 1, first = 0;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cases" && i + 1 < argc) cases = std::atoll(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--first" && i + 1 < argc) first = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--verbose") verbose = true;
    else {
      std::fprintf(stderr, "usage: partix_fuzz_spmd [--cases N] [--seed S] [--first I] [--verbose]\n");
      return 2;
    }
  }
  init({.num_cpu_devices = 8});
  int64_t failed = 0, skipped = 0, graded = 0;
  for (uint64_t k = first; k < first + static_cast<uint64_t>(cases); ++k) {
    Case c = Generator(seed, k).make();
    if (verbose) std::printf("case %llu:\n%s", static_cast<unsigned long long>(k), describe(c).c_str());
    Outcome o = check(c, seed * 7919 + k);
    graded += c.grad;
    if (o.skipped) {
      skipped++;
      if (verbose) std::printf("  skipped: %s\n", o.why.c_str());
    } else if (!o.ok) {
      failed++;
      std::printf("MISMATCH seed %llu case %llu: %s\n%s", static_cast<unsigned long long>(seed),
                  static_cast<unsigned long long>(k), o.why.c_str(), describe(c).c_str());
    }
  }
  std::printf("%lld cases (%lld with gradients): %lld disagreed, %lld skipped as invalid\n",
              static_cast<long long>(cases), static_cast<long long>(graded),
              static_cast<long long>(failed), static_cast<long long>(skipped));
  return failed == 0 ? 0 : 1;
}
