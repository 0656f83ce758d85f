// Resharding between all pairs of shardings on (2,2) and (2,2,2) meshes, including unreduced
// sources (partial sums) and targets, and uneven shapes: every device's block is checked.
#include <cstring>
#include <functional>
#include <set>

#include "core/array_impl.h"
#include "spmd/compile.h"
#include "test_util.h"

using namespace partix;

namespace {

// Every spec of a rank-2 array: each dimension gets an ordered list of unused axes.
std::vector<PartitionSpec> all_specs(const std::vector<std::string>& axes) {
  std::vector<std::vector<std::string>> lists{{}};
  std::function<void(std::vector<std::string>)> rec = [&](std::vector<std::string> cur) {
    for (const auto& a : axes) {
      if (std::find(cur.begin(), cur.end(), a) != cur.end()) continue;
      auto n = cur;
      n.push_back(a);
      lists.push_back(n);
      rec(n);
    }
  };
  rec({});
  std::vector<PartitionSpec> out;
  for (const auto& l0 : lists) {
    for (const auto& l1 : lists) {
      bool clash = false;
      for (const auto& a : l0) clash = clash || std::find(l1.begin(), l1.end(), a) != l1.end();
      if (!clash) out.push_back(PartitionSpec({l0, l1}));
    }
  }
  return out;
}

// Shardings with unreduced axes: the spec's unused axes, each non-empty subset.
std::vector<NamedSharding> with_unreduced(const Mesh& m, const PartitionSpec& s) {
  std::vector<std::string> free;
  auto used = s.axes();
  for (const auto& a : m.axis_names()) {
    if (std::find(used.begin(), used.end(), a) == used.end()) free.push_back(a);
  }
  std::vector<NamedSharding> out;
  for (size_t mask = 1; mask < (1u << free.size()); ++mask) {
    std::set<std::string> u;
    for (size_t i = 0; i < free.size(); ++i) {
      if (mask & (1u << i)) u.insert(free[i]);
    }
    out.emplace_back(m, s, u);
  }
  return out;
}

// Integer-valued global data (exact in f32 under any summation order).
std::vector<float> global_values(const Shape& s) {
  std::vector<float> v(static_cast<size_t>(shape_size(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i * 7 % 23) - 11);
  return v;
}

// The block of device k under sharding s, padded with `pad` values.
std::vector<float> block_of(const std::vector<float>& g, const Shape& shape, const NamedSharding& s,
                            int64_t k) {
  Shape local = s.shard_shape(shape);
  auto idx = s.device_index(shape, k);
  std::vector<float> out(static_cast<size_t>(shape_size(local)), 0.0f);
  for (int64_t i = 0; i < idx[0].size(); ++i) {
    for (int64_t j = 0; j < idx[1].size(); ++j) {
      out[static_cast<size_t>(i * local[1] + j)] = g[static_cast<size_t>((idx[0].start + i) * shape[1] + idx[1].start + j)];
    }
  }
  return out;
}

// The rank of device k over the unreduced axes (mixed radix in mesh order).
int64_t unreduced_rank(const Mesh& m, const std::set<std::string>& u, int64_t k, int64_t* n) {
  auto c = m.coords(k);
  int64_t r = 0;
  *n = 1;
  for (int i = 0; i < m.num_axes(); ++i) {
    if (!u.count(m.axis_names()[static_cast<size_t>(i)])) continue;
    r = r * m.axis_sizes()[static_cast<size_t>(i)] + c[static_cast<size_t>(i)];
    *n *= m.axis_sizes()[static_cast<size_t>(i)];
  }
  return r;
}

// An array in sharding `s`: unreduced axes hold partial sums with nonzero parts on every rank.
Array make_source(const std::vector<float>& g, const Shape& shape, const NamedSharding& s) {
  std::vector<detail::Buffer> shards;
  for (int64_t k = 0; k < s.mesh().size(); ++k) {
    std::vector<float> b = block_of(g, shape, s, k);
    int64_t n;
    int64_t r = unreduced_rank(s.mesh(), s.unreduced(), k, &n);
    for (size_t i = 0; i < b.size(); ++i) {
      float part = static_cast<float>(static_cast<int>(i % 3) - 1);  // parts sum to the value
      b[i] = r == 0 ? b[i] - static_cast<float>(n - 1) * part : part;
    }
    detail::Buffer buf = detail::Buffer::allocate(s.mesh().devices()[static_cast<size_t>(k)].id,
                                                  static_cast<int64_t>(b.size() * 4));
    std::memcpy(buf.data(), b.data(), b.size() * 4);
    shards.push_back(buf);
  }
  return detail::make_array(shape, DType::F32, s, std::move(shards));
}

// Runs the reshard from `from` to `to` and checks each device's valid block (summed over the
// target's unreduced group when it has one).
void check_pair(const Shape& shape, const NamedSharding& from, const NamedSharding& to) {
  std::vector<float> g = global_values(shape);
  Array src = make_source(g, shape, from);
  ir::Program p;
  int v = p.add_value(ir::Aval{shape, DType::F32});
  p.params = {v};
  p.results = {v};
  spmd::CompileOptions o;
  o.in_shardings = {from};
  o.out_shardings = {to};
  auto c = spmd::compile(p, o);
  Array out = c->executable->run({src})[0];
  const Mesh& m = to.mesh();
  Shape local = to.shard_shape(shape);
  std::vector<std::vector<float>> blocks;
  for (int64_t k = 0; k < m.size(); ++k) {
    const auto& buf = out.impl()->shards[static_cast<size_t>(k)];
    blocks.emplace_back(buf.as<float>(), buf.as<float>() + shape_size(local));
  }
  for (int64_t k = 0; k < m.size(); ++k) {
    std::vector<float> want = block_of(g, shape, to, k);
    std::vector<float> got(want.size(), 0.0f);
    // Sum over the devices that share k's coordinates except on the unreduced axes.
    for (int64_t j = 0; j < m.size(); ++j) {
      auto ck = m.coords(k), cj = m.coords(j);
      bool same = true;
      for (int i = 0; i < m.num_axes(); ++i) {
        if (!to.unreduced().count(m.axis_names()[static_cast<size_t>(i)])) same = same && ck[static_cast<size_t>(i)] == cj[static_cast<size_t>(i)];
      }
      if (!same) continue;
      for (size_t i = 0; i < got.size(); ++i) got[i] += blocks[static_cast<size_t>(j)][i];
    }
    auto idx = to.device_index(shape, k);
    for (int64_t i = 0; i < idx[0].size(); ++i) {
      for (int64_t jj = 0; jj < idx[1].size(); ++jj) {
        size_t at = static_cast<size_t>(i * local[1] + jj);
        ASSERT_EQ(got[at], want[at]) << from.to_string() << " -> " << to.to_string() << " shape "
                                     << shape_to_string(shape) << " device " << k;
      }
    }
  }
}

void all_pairs(const Mesh& mesh, const std::vector<Shape>& shapes, size_t unreduced_stride) {
  std::vector<PartitionSpec> specs = all_specs(mesh.axis_names());
  std::vector<NamedSharding> targets, sources;
  for (const auto& s : specs) targets.emplace_back(mesh, s);
  sources = targets;
  for (size_t i = 0; i < specs.size(); i += unreduced_stride) {
    for (auto& u : with_unreduced(mesh, specs[i])) sources.push_back(u);
  }
  // Unreduced targets: reached from reduced sources by keeping one part per group.
  std::vector<NamedSharding> partial_targets;
  for (size_t i = 0; i < specs.size(); i += 3 * unreduced_stride) {
    for (auto& u : with_unreduced(mesh, specs[i])) partial_targets.push_back(u);
  }
  for (const Shape& shape : shapes) {
    for (const auto& a : sources) {
      for (const auto& b : targets) check_pair(shape, a, b);
      for (const auto& b : partial_targets) {
        // Keep unreduced axes the source has; a reduced source may become partial.
        bool ok = true;
        for (const auto& u : a.unreduced()) ok = ok && b.unreduced().count(u);
        if (ok) check_pair(shape, a, b);
      }
    }
  }
}

}  // namespace

TEST(Reshard, AllPairsOn2x2EvenAndUneven) {
  all_pairs(Mesh({2, 2}, {"a", "b"}), {Shape{4, 8}, Shape{5, 3}, Shape{1, 6}}, 1);
}

TEST(Reshard, AllPairsOn2x2x2EvenAndUneven) {
  all_pairs(Mesh({2, 2, 2}, {"a", "b", "c"}), {Shape{8, 8}, Shape{6, 3}}, 4);
}
