#include "spmd/factors.h"

#include <algorithm>
#include <numeric>

#include "core/errors.h"
#include "sharding/axes.h"

namespace partix::spmd {

int64_t axes_product(const Mesh& mesh, const AxisList& axes) {
  int64_t n = 1;
  for (const auto& a : axes) n *= mesh.axis_size(a);
  return n;
}

std::map<int, AxisList> project(const NamedSharding& s, const std::vector<prim::DimFactors>& dims,
                                const prim::FactorRule& rule) {
  std::map<int, AxisList> out;
  const Mesh& mesh = s.mesh();
  for (size_t d = 0; d < dims.size(); ++d) {
    auto axes = s.spec()[static_cast<int>(d)];
    const prim::DimFactors& fs = dims[d];
    if (fs.empty() || axes.empty()) continue;
    if (fs.size() == 1) {  // a dimension of one factor may be split unevenly
      out[fs[0]] = axes;
      continue;
    }
    // Major to minor: an axis fits a factor if its size divides what is left of it; an axis
    // bigger than what is left is split (Shardy's sub-axes): its major part finishes this
    // factor, the rest goes on to the next (on 'data' of 8, [64] -> [4, 16] maps 'data:(1)4'
    // to the 4 and 'data:(4)2' to the 16).
    size_t k = 0;
    int64_t rem = rule.factors[static_cast<size_t>(fs[0])].size;
    for (const auto& a : axes) {
      detail::AxisRef r = detail::axis_ref(mesh, a);
      int64_t pre = r.pre, left = r.size;
      while (left > 1) {
        while (k < fs.size() && rem == 1) {
          if (++k < fs.size()) rem = rule.factors[static_cast<size_t>(fs[k])].size;
        }
        if (k >= fs.size()) break;
        int64_t take = 0;
        if (rem % left == 0) take = left;
        else if (left % rem == 0) take = rem;
        if (take == 0) break;
        out[fs[k]].push_back(detail::axis_part_name(mesh, r.axis, pre, take));
        rem /= take;
        pre *= take;
        left /= take;
      }
      if (left > 1) break;  // the rest of this axis fits no factor: minor axes cannot follow
    }
  }
  return out;
}

NamedSharding back_project(const Mesh& mesh, const Assignment& a,
                           const std::vector<prim::DimFactors>& dims, const prim::FactorRule&,
                           std::set<std::string> unreduced) {
  std::vector<PartitionSpec::Entry> entries;
  for (const prim::DimFactors& fs : dims) {
    PartitionSpec::Entry e;
    for (int f : fs) {
      const AxisList& ax = a.factor_axes[static_cast<size_t>(f)];
      e.insert(e.end(), ax.begin(), ax.end());
    }
    entries.push_back(e);
  }
  while (!entries.empty() && entries.back().empty()) entries.pop_back();
  return NamedSharding(mesh, PartitionSpec(entries), std::move(unreduced));
}

bool refines(const NamedSharding& a, const NamedSharding& b, int rank) {
  for (int d = 0; d < rank; ++d) {
    auto x = a.spec()[d], y = b.spec()[d];
    if (x.size() > y.size() || !std::equal(x.begin(), x.end(), y.begin())) return false;
  }
  return true;
}

namespace {

// Trims assignments that no tensor layout can express: in a dimension of several factors, a
// factor may be split only if every more-major factor of that dimension is split completely,
// and then only by axes whose product divides its size.
void legalize(const Mesh& mesh, const prim::FactorRule& rule, Assignment& a) {
  auto all_dims = [&](auto&& fn) {
    for (const auto& t : rule.operands) for (const auto& d : t) fn(d);
    for (const auto& t : rule.results) for (const auto& d : t) fn(d);
  };
  bool changed = true;
  while (changed) {
    changed = false;
    all_dims([&](const prim::DimFactors& fs) {
      if (fs.size() < 2) return;
      bool whole_so_far = true;
      for (int f : fs) {
        AxisList& ax = a.factor_axes[static_cast<size_t>(f)];
        int64_t size = rule.factors[static_cast<size_t>(f)].size;
        if (!whole_so_far && !ax.empty()) {
          ax.clear();
          changed = true;
        }
        while (!ax.empty() && size % axes_product(mesh, ax) != 0) {
          ax.pop_back();
          changed = true;
        }
        whole_so_far = whole_so_far && axes_product(mesh, ax) == size;
      }
    });
  }
}

}  // namespace

Assignment assign_factors(const Mesh& mesh, const prim::FactorRule& rule,
                          const std::vector<TensorView>& tensors) {
  Assignment a;
  a.factor_axes.assign(rule.factors.size(), {});
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return tensors[x].priority > tensors[y].priority;
  });
  std::vector<std::string> used;
  for (size_t t : order) {
    const TensorView& tv = tensors[t];
    if (!tv.sharding) continue;
    for (auto& [f, axes] : project(*tv.sharding, *tv.dims, rule)) {
      const prim::Factor& fac = rule.factors[static_cast<size_t>(f)];
      if (fac.kind == prim::FactorKind::kNeedReplication) continue;
      AxisList& cur = a.factor_axes[static_cast<size_t>(f)];
      // The proposal must extend what the factor has (a prefix), else it lost.
      if (cur.size() > axes.size() || !std::equal(cur.begin(), cur.end(), axes.begin())) continue;
      for (size_t i = cur.size(); i < axes.size(); ++i) {
        if (detail::overlaps_any(mesh, axes[i], used)) break;
        cur.push_back(axes[i]);
        used.push_back(axes[i]);
      }
    }
  }
  legalize(mesh, rule, a);
  // Quantization blocks never straddle devices: axes leave a quantized tensor's
  // last dimension, minor first, until each chunk holds whole blocks.
  for (bool trimmed = true; trimmed;) {
    trimmed = false;
    for (const TensorView& tv : tensors) {
      if (tv.block <= 1 || tv.dims->empty()) continue;
      const prim::DimFactors& last = tv.dims->back();
      int64_t size = 1, k = 1;
      for (int f : last) {
        size *= rule.factors[static_cast<size_t>(f)].size;
        k *= axes_product(mesh, a.factor_axes[static_cast<size_t>(f)]);
      }
      if (((size + k - 1) / k) % tv.block == 0) continue;
      for (auto f = last.rbegin(); f != last.rend(); ++f) {
        AxisList& ax = a.factor_axes[static_cast<size_t>(*f)];
        if (!ax.empty()) {
          ax.pop_back();
          break;
        }
      }
      trimmed = true;
    }
    if (trimmed) legalize(mesh, rule, a);
  }
  return a;
}

}  // namespace partix::spmd
