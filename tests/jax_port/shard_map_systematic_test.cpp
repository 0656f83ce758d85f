// shard_map against a reference implementation, over sampled functions, meshes and specs:
// a port of JAX's tests/shard_map_test.py ShardMapSystematicTest (test_eager_against_ref,
// test_jit_against_ref, test_grads with check_vma true and false). The sampler and reference
// are written here: the reference runs the body on each device's blocks with single-device
// ops and assembles the blocks as out_specs say, so it is differentiable and gives reference
// gradients as well as values.
#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include "jax_port/jax_port_util.h"

using namespace partix;

namespace {

struct FunSpec {
  std::string name;
  int num_inputs;
  std::function<std::vector<Array>(const std::vector<Array>&)> fun;
  // Which inputs' replication carries to each output (JAX's out_rep): the output is
  // replicated over the axes every listed input is replicated over.
  std::vector<std::vector<int>> out_deps;
  std::function<bool(const std::vector<Shape>&)> valid = nullptr;
};

// jnp.dot: contracts a's last axis with b's second-to-last (or only) axis.
Array np_dot(const Array& a, const Array& b) {
  return dot_general(a, b, {a.ndim() - 1}, {b.ndim() > 1 ? b.ndim() - 2 : 0});
}

bool dot_valid(const std::vector<Shape>& s) {
  return s[0].back() == s[1][s[1].size() > 1 ? s[1].size() - 2 : 0];
}

const std::vector<FunSpec>& fun_specs() {
  static const std::vector<FunSpec> v = {
      {"id", 1, [](const auto& a) { return std::vector<Array>{a[0]}; }, {{0}}},
      {"flip",
       2,
       [](const auto& a) {
         return std::vector<Array>{a[1], a[0]};
       },
       {{1}, {0}}},
      {"transpose", 1, [](const auto& a) { return std::vector<Array>{transpose(a[0])}; }, {{0}}},
      {"ravel", 1, [](const auto& a) { return std::vector<Array>{flatten(a[0])}; }, {{0}}},
      {"dot",
       2,
       [](const auto& a) { return std::vector<Array>{np_dot(a[0], a[1])}; },
       {{0, 1}},
       dot_valid},
      {"sin_dot_sin",
       2,
       [](const auto& a) { return std::vector<Array>{sin(np_dot(sin(a[0]), a[1]))}; },
       {{0, 1}},
       dot_valid},
      {"relu", 1, [](const auto& a) { return std::vector<Array>{relu(a[0] + 1.0) - 1.0}; }, {{0}}},
  };
  return v;
}

struct MeshShape {
  Shape sizes;
  std::vector<std::string> names;
};

const std::vector<MeshShape>& mesh_shapes() {
  static const std::vector<MeshShape> v = {{{1}, {"i"}},         {{1, 1}, {"i", "j"}},
                                           {{1, 2}, {"i", "j"}}, {{2, 2}, {"i", "j"}},
                                           {{2, 4}, {"i", "j"}}, {{4, 2}, {"i", "j"}}};
  return v;
}

// Body input shapes: permutations of (1, 2, 3) of length 2 and 3 (JAX skips all-equal shapes).
const std::vector<Shape>& input_shapes() {
  static const std::vector<Shape> v = [] {
    std::vector<Shape> out;
    std::vector<int64_t> base{1, 2, 3};
    for (size_t k : {2u, 3u}) {
      std::vector<int64_t> p = base;
      std::sort(p.begin(), p.end());
      std::set<Shape> seen;
      do {
        Shape s(p.begin(), p.begin() + static_cast<long>(k));
        if (seen.insert(s).second) out.push_back(s);
      } while (std::next_permutation(p.begin(), p.end()));
    }
    return out;
  }();
  return v;
}

struct Case {
  std::string name;
  const FunSpec* fun;
  MeshShape mesh;
  std::vector<Shape> body_in;
  std::vector<PartitionSpec> in_specs, out_specs;
};

int64_t axes_size(const MeshShape& m, const PartitionSpec::Entry& e) {
  int64_t n = 1;
  for (const auto& a : e) {
    n *= m.sizes[static_cast<size_t>(std::find(m.names.begin(), m.names.end(), a) -
                                     m.names.begin())];
  }
  return n;
}

// A random spec using a random subset of the mesh axes, each on a random dimension.
PartitionSpec random_spec(std::mt19937& rng, const MeshShape& m, size_t rank,
                          const std::set<std::string>& must) {
  std::vector<PartitionSpec::Entry> entries(rank);
  for (const auto& a : m.names) {
    const bool use = must.count(a) || (rng() % 2 == 0);
    if (use && rank > 0) entries[rng() % rank].push_back(a);
  }
  return PartitionSpec(entries);
}

std::string spec_name(const PartitionSpec& s) {
  std::string out;
  for (int d = 0; d < s.size(); ++d) {
    out += d ? "_" : "";
    if (s[d].empty()) out += "N";
    for (const auto& a : s[d]) out += a;
  }
  return out.empty() ? "R" : out;
}

// Deterministic sample of distinct cases (JAX samples with numpy's RandomState(0); this
// sampler draws from the same option sets with its own generator).
std::vector<Case> sample_cases(size_t n) {
  std::mt19937 rng(20240607);
  std::vector<Case> out;
  std::set<std::string> seen;
  while (out.size() < n) {
    const FunSpec& f = fun_specs()[rng() % fun_specs().size()];
    const MeshShape& m = mesh_shapes()[rng() % mesh_shapes().size()];
    std::vector<Shape> in;
    for (int k = 0; k < f.num_inputs; ++k)
      in.push_back(input_shapes()[rng() % input_shapes().size()]);
    if (f.valid && !f.valid(in)) continue;
    Case c{"", &f, m, in, {}, {}};
    std::vector<std::set<std::string>> unmentioned;
    for (const Shape& s : in) {
      c.in_specs.push_back(random_spec(rng, m, s.size(), {}));
      std::set<std::string> u(m.names.begin(), m.names.end());
      for (const auto& a : c.in_specs.back().axes()) u.erase(a);
      unmentioned.push_back(u);
    }
    // Result ranks, worked out on the host (cases are sampled before partix starts).
    std::vector<size_t> out_ranks;
    if (f.name == "flip")
      out_ranks = {in[1].size(), in[0].size()};
    else if (f.name == "ravel")
      out_ranks = {1};
    else if (f.num_inputs == 2)
      out_ranks = {in[0].size() + in[1].size() - 2};
    else
      out_ranks = {in[0].size()};
    for (size_t r = 0; r < out_ranks.size(); ++r) {
      // Replicated over the axes all its inputs are unmentioned in; every other axis must be
      // named by the out_spec, the replicated ones may be.
      std::set<std::string> rep(m.names.begin(), m.names.end());
      for (int dep : f.out_deps[r]) {
        std::set<std::string> keep;
        for (const auto& a : rep) {
          if (unmentioned[static_cast<size_t>(dep)].count(a)) keep.insert(a);
        }
        rep = keep;
      }
      std::set<std::string> must;
      for (const auto& a : m.names) {
        if (!rep.count(a)) must.insert(a);
      }
      if (!must.empty() && out_ranks[r] == 0) goto next;
      c.out_specs.push_back(random_spec(rng, m, out_ranks[r], must));
    }
    c.name = f.name + "_mesh";
    for (int64_t d : m.sizes) c.name += std::to_string(d);
    for (size_t k = 0; k < in.size(); ++k) {
      c.name += "_in";
      for (int64_t d : in[k]) c.name += std::to_string(d);
      c.name += "_" + spec_name(c.in_specs[k]);
    }
    for (const auto& s : c.out_specs) c.name += "_out_" + spec_name(s);
    if (seen.insert(c.name).second) out.push_back(c);
  next:;
  }
  return out;
}

Shape dilate(const MeshShape& m, const PartitionSpec& s, const Shape& body) {
  Shape g = body;
  for (size_t d = 0; d < g.size(); ++d) g[d] *= axes_size(m, s[static_cast<int>(d)]);
  return g;
}

// The block index of each dimension for mesh coordinates `coords`.
std::vector<int64_t> block_of(const MeshShape& m, const PartitionSpec& s, size_t rank,
                              const std::vector<int64_t>& coords) {
  std::vector<int64_t> b(rank, 0);
  for (size_t d = 0; d < rank; ++d) {
    for (const auto& a : s[static_cast<int>(d)]) {
      const size_t ai =
          static_cast<size_t>(std::find(m.names.begin(), m.names.end(), a) - m.names.begin());
      b[d] = b[d] * m.sizes[ai] + coords[ai];
    }
  }
  return b;
}

// Concatenates blocks (row-major by block index over `nblocks`) into one array.
Array assemble(const std::vector<Array>& blocks, const Shape& nblocks, size_t dim, size_t offset,
               size_t stride) {
  if (dim == nblocks.size()) return blocks[offset];
  std::vector<Array> parts;
  const size_t inner = stride / static_cast<size_t>(nblocks[dim]);
  for (int64_t k = 0; k < nblocks[dim]; ++k) {
    parts.push_back(
        assemble(blocks, nblocks, dim + 1, offset + static_cast<size_t>(k) * inner, inner));
  }
  return parts.size() == 1 ? parts[0] : concatenate(parts, static_cast<int>(dim));
}

// The reference: the body on every device's blocks; each result block taken from the device
// whose coordinates are zero on the axes the out_spec does not name.
std::vector<Array> reference(const Case& c, const std::vector<Array>& args) {
  const MeshShape& m = c.mesh;
  int64_t ndev = 1;
  for (int64_t d : m.sizes) ndev *= d;
  std::vector<std::vector<Array>> out_blocks(c.out_specs.size());
  std::vector<Shape> nblocks(c.out_specs.size());
  for (int64_t k = 0; k < ndev; ++k) {
    std::vector<int64_t> coords(m.sizes.size());
    for (size_t a = m.sizes.size(), rem = static_cast<size_t>(k); a-- > 0;) {
      coords[a] = static_cast<int64_t>(rem % static_cast<size_t>(m.sizes[a]));
      rem /= static_cast<size_t>(m.sizes[a]);
    }
    std::vector<Array> blocks;
    for (size_t i = 0; i < args.size(); ++i) {
      const Shape& body = c.body_in[i];
      std::vector<int64_t> b = block_of(m, c.in_specs[i], body.size(), coords);
      Shape start(body.size()), stop(body.size());
      for (size_t d = 0; d < body.size(); ++d) {
        start[d] = b[d] * body[d];
        stop[d] = start[d] + body[d];
      }
      blocks.push_back(slice(args[i], start, stop));
    }
    std::vector<Array> outs = c.fun->fun(blocks);
    for (size_t r = 0; r < outs.size(); ++r) {
      const PartitionSpec& s = c.out_specs[r];
      bool representative = true;
      auto named = s.axes();
      for (size_t a = 0; a < m.names.size(); ++a) {
        if (std::find(named.begin(), named.end(), m.names[a]) == named.end() && coords[a] != 0) {
          representative = false;
        }
      }
      if (!representative) continue;
      const size_t rank = static_cast<size_t>(outs[r].ndim());
      if (nblocks[r].empty()) {
        nblocks[r].resize(rank);
        size_t total = 1;
        for (size_t d = 0; d < rank; ++d) {
          nblocks[r][d] = axes_size(m, s[static_cast<int>(d)]);
          total *= static_cast<size_t>(nblocks[r][d]);
        }
        out_blocks[r].resize(total);
      }
      std::vector<int64_t> b = block_of(m, s, rank, coords);
      size_t flat = 0;
      for (size_t d = 0; d < rank; ++d)
        flat = flat * static_cast<size_t>(nblocks[r][d]) + static_cast<size_t>(b[d]);
      out_blocks[r][flat] = outs[r];
    }
  }
  std::vector<Array> result;
  for (size_t r = 0; r < out_blocks.size(); ++r) {
    result.push_back(assemble(out_blocks[r], nblocks[r], 0, 0, out_blocks[r].size()));
  }
  return result;
}

std::vector<Array> make_args(const Case& c) {
  std::vector<Array> args;
  for (size_t i = 0; i < c.body_in.size(); ++i) {
    Shape g = dilate(c.mesh, c.in_specs[i], c.body_in[i]);
    const int64_t n = jax_port::numel(g);
    // np.arange(size) / size, as JAX's sampler does.
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t e = 0; e < v.size(); ++e)
      v[e] = static_cast<float>(static_cast<double>(e) / static_cast<double>(n));
    args.push_back(from_vector(v, g));
  }
  return args;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

const std::vector<Case>& cases() {
  static const std::vector<Case> v = sample_cases(40);
  return v;
}

class ShardMapVsReference : public testing::TestWithParam<size_t> {};

TEST_P(ShardMapVsReference, EagerJitAndGrads) {
  const Case& c = cases()[GetParam()];
  Mesh mesh(c.mesh.sizes, c.mesh.names);
  std::vector<Array> args = make_args(c);
  std::vector<Array> want = reference(c, args);
  std::string divergence;
  for (bool check_vma : {true, false}) {
    SCOPED_TRACE(check_vma ? "check_vma" : "no check_vma");
    // One callable over a vector of arguments (specs apply per argument, so unpack).
    std::function<std::vector<Array>(const std::vector<Array>&)> run;
    if (args.size() == 1) {
      auto sm = shard_map([&](const Array& a) { return c.fun->fun({a}); }, mesh, c.in_specs,
                          c.out_specs, check_vma);
      run = [sm](const std::vector<Array>& v) { return sm(v[0]); };
    } else {
      auto sm = shard_map(
          [&](const Array& a, const Array& b) {
            return c.fun->fun({a, b});
          },
          mesh, c.in_specs, c.out_specs, check_vma);
      run = [sm](const std::vector<Array>& v) { return sm(v[0], v[1]); };
    }
    // test_eager_against_ref and test_jit_against_ref.
    for (bool jitted : {false, true}) {
      std::vector<Array> got = jitted ? jit(run)(args) : run(args);
      ASSERT_EQ(got.size(), want.size());
      for (size_t r = 0; r < got.size(); ++r) {
        ASSERT_EQ(got[r].shape(), want[r].shape()) << "result " << r;
        jax_port::expect_close(
            got[r].to_vector<float>(), as_double(want[r].to_vector<float>()), 1e-6,
            std::string(jitted ? "jit" : "eager") + " result " + std::to_string(r));
      }
    }
    // test_grads: gradients of sum_k sum(out_k * w_k) against the reference's.
    std::vector<Array> ws;
    for (size_t r = 0; r < want.size(); ++r) {
      std::vector<float> w(static_cast<size_t>(want[r].size()));
      for (size_t e = 0; e < w.size(); ++e)
        w[e] = 1.0f + static_cast<float>((7 * e + 3 * r) % 11) / 8.0f;
      ws.push_back(from_vector(w, want[r].shape()));
    }
    auto loss_of = [&](auto f) {
      return [&, f](const std::vector<Array>& v) {
        std::vector<Array> o = f(v);
        Array l = sum(o[0] * ws[0]);
        for (size_t r = 1; r < o.size(); ++r) l = l + sum(o[r] * ws[r]);
        return l;
      };
    };
    auto grads_of = [&](auto loss) {
      std::vector<Array> g;
      if (args.size() == 1) {
        g.push_back(jit([&](const Array& a) -> Array {
          return grad([&](const Array& u) { return loss(std::vector<Array>{u}); })(a);
        })(args[0]));
      } else {
        auto gs = jit([&](const Array& a, const Array& b) {
          std::vector<Tree> t = grad(
              [&](const Array& u, const Array& v) {
                return loss(std::vector<Array>{u, v});
              },
              std::vector<int>{0, 1})(a, b);
          return std::vector<Array>{t[0], t[1]};
        })(args[0], args[1]);
        g = gs;
      }
      return g;
    };
    std::vector<Array> gref =
        grads_of(loss_of([&](const std::vector<Array>& v) { return reference(c, v); }));
    // A result invariant over an axis its out_spec names (even of size 1) meets the known
    // transpose divergence: a wrong gradient, or a backward program that fails its own
    // out_specs check.
    bool invariant_named = false;
    for (size_t r = 0; r < c.out_specs.size(); ++r) {
      std::set<std::string> rep(c.mesh.names.begin(), c.mesh.names.end());
      for (int dep : c.fun->out_deps[r]) {
        for (const auto& a : c.in_specs[static_cast<size_t>(dep)].axes()) rep.erase(a);
      }
      for (const auto& a : c.out_specs[r].axes()) {
        if (rep.count(a)) invariant_named = true;
      }
    }
    std::vector<Array> g;
    try {
      g = grads_of(loss_of(run));
    } catch (const Error& e) {
      if (!invariant_named) throw;
      divergence =
          "the backward program of a result invariant over an axis that out_specs "
          "names fails its out_specs check: " +
          std::string(e.what());
      continue;
    }
    for (size_t a = 0; a < g.size(); ++a) {
      std::vector<double> want_g = as_double(gref[a].to_vector<float>());
      if (invariant_named && !jax_port::all_close(g[a].to_vector<float>(), want_g, 1e-5)) {
        divergence =
            "a result invariant over an axis that out_specs names gets only its own "
            "block's cotangent";
        continue;
      }
      jax_port::expect_close(g[a].to_vector<float>(), want_g, 1e-5,
                             "gradient " + std::to_string(a));
    }
  }
  if (!divergence.empty()) GTEST_SKIP() << "divergence: " << divergence;
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v(cases().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(JaxPortShardMap, ShardMapVsReference, testing::ValuesIn(case_indices()),
                         [](const testing::TestParamInfo<size_t>& i) {
                           return cases()[i.param].name;
                         });

}  // namespace
