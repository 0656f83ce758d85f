// Collectives inside shard_map.
#include <algorithm>
#include <optional>
#include <set>

#include "core/errors.h"
#include "ops/common.h"
#include "partix/transforms.h"

namespace partix {

namespace {

struct Bound {
  detail::TraceState* trace;
  ir::Strings axes;
  int64_t size;           // the group's size: the axes' product, or an index group's
  ir::Ints index_groups;  // flattened axis_index_groups (empty: the whole axes)
  ir::Strings mesh_axes;  // the axes that are the shard_map body's (the others are vmap's)
};

// The size of vmap's axis `a` where the current trace sees it (innermost first), if any.
std::optional<int64_t> vmapped(const detail::TraceState* t, const std::string& a) {
  if (t == nullptr) return std::nullopt;
  for (auto it = t->vmap_axes.rbegin(); it != t->vmap_axes.rend(); ++it) {
    if (it->first == a) return it->second;
  }
  return std::nullopt;
}

// The shard_map body or vmap this collective is traced in, and its axes checked against the
// mesh or vmap's axis_name (which shadows a mesh axis of the same name, as in JAX).
Bound bound(const char* api, const Axes& axes) {
  detail::TraceState* t = detail::current_trace();
  Bound b{t, {}, 1, {}, {}};
  for (const std::string& a : axes.names()) {
    if (std::find(b.axes.begin(), b.axes.end(), a) != b.axes.end()) {
      detail::fail(api, "axis '{}' appears twice in {}", a, axes.to_string());
    }
    if (std::optional<int64_t> n = vmapped(t, a)) {
      b.axes.push_back(a);
      b.size *= *n;
      continue;
    }
    if (t == nullptr || !t->manual_mesh) {
      detail::fail(api, "collective over {} outside shard_map: the axis name '{}' is not bound "
                   "(neither a shard_map mesh axis nor a vmap axis_name)", axes.to_string(), a);
    }
    if (!(t->manual_mesh->has_axis(a))) {
      detail::fail(api, "mesh axis '{}' is not in {}", a, t->manual_mesh->to_string());
    }
    if (!t->manual_axes.count(a)) {
      detail::fail(api,
                   "Found an unbound axis name: mesh axis '{}' is not manual in this shard_map "
                   "(its axis_names leave it automatic); collectives act over manual axes only",
                   a);
    }
    b.axes.push_back(a);
    b.mesh_axes.push_back(a);
    b.size *= t->manual_mesh->axis_size(a);
  }
  detail::check(!b.axes.empty(), api, "needs at least one axis");
  return b;
}

// Marks x varying over the collective's mesh axes it is invariant over (JAX semantics: a psum
// of an invariant value sums identical copies).
Array vary_over(const Array& x, const Bound& b) {
  if (b.mesh_axes.empty()) return b.trace->tracer(b.trace->value_of(x));
  const auto& vary = b.trace->program().info(b.trace->value_of(x)).varying;
  ir::Strings missing;
  for (const auto& a : b.mesh_axes) {
    if (!vary.count(a)) missing.push_back(a);
  }
  // This trace's view of x: a value captured from an enclosing trace may vary over more axes
  // here (a branch sees its operands widened by its predicate's axes).
  if (missing.empty()) return b.trace->tracer(b.trace->value_of(x));
  return ops::bind("pvary", {x}, {{"axes", missing}});
}

// Checks `groups` partitions the b.size ranks into groups of one size, and narrows b to them.
void with_groups(const char* api, Bound& b, const IndexGroups& groups) {
  if (groups.empty()) return;
  if (b.mesh_axes.size() != b.axes.size()) {
    detail::fail(api, "axis_index_groups over vmap's axis_name ({}) are not supported: give "
                 "them over shard_map's mesh axes only", fmt::join(b.axes, ","));
  }
  const int64_t n = static_cast<int64_t>(groups[0].size());
  std::set<int64_t> seen;
  for (const auto& g : groups) {
    if (static_cast<int64_t>(g.size()) != n || n == 0) {
      detail::fail(api, "axis_index_groups must be non-empty groups of one size, got sizes {} "
                   "and {}", n, g.size());
    }
    for (int64_t r : g) {
      if (r < 0 || r >= b.size || !seen.insert(r).second) {
        detail::fail(api, "axis_index_groups must hold each index of {} (size {}) once; index "
                     "{} is {}", fmt::join(b.axes, ","), b.size, r,
                     r < 0 || r >= b.size ? "out of range" : "repeated");
      }
      b.index_groups.push_back(r);
    }
  }
  if (static_cast<int64_t>(seen.size()) != b.size) {
    detail::fail(api, "axis_index_groups cover {} of the {} indices of {}", seen.size(), b.size,
                 fmt::join(b.axes, ","));
  }
  b.size = n;
}

Bound bound(const char* api, const Axes& axes, const IndexGroups& groups) {
  Bound b = bound(api, axes);
  with_groups(api, b, groups);
  return b;
}

// The attributes every collective carries: axes, group size and the index groups if any.
ir::Attrs attrs_of(const Bound& b, ir::Attrs extra) {
  extra.set("axes", b.axes);
  extra.set("group", b.size);
  if (!b.index_groups.empty()) extra.set("index_groups", b.index_groups);
  return extra;
}

Array reduce(const char* api, const char* kind, const Array& x, const Axes& axes,
             const IndexGroups& groups) {
  Bound b = bound(api, axes, groups);
  return ops::bind("all_reduce", {vary_over(x, b)}, attrs_of(b, {{"kind", std::string(kind)}}));
}

}  // namespace

Array psum(const Array& x, Axes axes, const IndexGroups& groups) {
  return reduce("psum", "sum", x, axes, groups);
}
Array pmax(const Array& x, Axes axes, const IndexGroups& groups) {
  return reduce("pmax", "max", x, axes, groups);
}
Array pmin(const Array& x, Axes axes, const IndexGroups& groups) {
  return reduce("pmin", "min", x, axes, groups);
}
Array pmean(const Array& x, Axes axes, const IndexGroups& groups) {
  int64_t n = bound("pmean", axes, groups).size;
  Array s = reduce("pmean", "sum", is_floating(x.dtype()) ? x : astype(x, DType::F32), axes,
                   groups);
  return s / static_cast<double>(n);
}
Array psum(const Array& x, Axes axes) { return psum(x, std::move(axes), {}); }
Array pmax(const Array& x, Axes axes) { return pmax(x, std::move(axes), {}); }
Array pmin(const Array& x, Axes axes) { return pmin(x, std::move(axes), {}); }
Array pmean(const Array& x, Axes axes) { return pmean(x, std::move(axes), {}); }

Array all_gather(const Array& x, Axes axes, int axis, bool tiled, const IndexGroups& groups) {
  Bound b = bound("all_gather", axes, groups);
  Shape out_rank_shape = x.shape();
  if (!tiled) out_rank_shape.insert(out_rank_shape.begin(), 1);  // untiled adds a dimension
  axis = ops::norm_axis("all_gather", axis, out_rank_shape);
  return ops::bind("all_gather", {vary_over(x, b)},
                   attrs_of(b, {{"axis", static_cast<int64_t>(axis)}, {"tiled", tiled}}));
}
Array all_gather(const Array& x, Axes axes, int axis, bool tiled) {
  return all_gather(x, std::move(axes), axis, tiled, {});
}

Array psum_scatter(const Array& x, Axes axes, int scatter_dimension, bool tiled,
                   const IndexGroups& groups) {
  Bound b = bound("psum_scatter", axes, groups);
  int axis = ops::norm_axis("psum_scatter", scatter_dimension, x.shape());
  return ops::bind("reduce_scatter", {vary_over(x, b)},
                   attrs_of(b, {{"axis", static_cast<int64_t>(axis)}, {"tiled", tiled}}));
}
Array psum_scatter(const Array& x, Axes axes, int scatter_dimension, bool tiled) {
  return psum_scatter(x, std::move(axes), scatter_dimension, tiled, {});
}

Array ppermute(const Array& x, Axes axes, std::vector<std::pair<int, int>> perm) {
  Bound b = bound("ppermute", axes);
  ir::Ints flat;
  for (const auto& [s, d] : perm) {
    flat.push_back(s);
    flat.push_back(d);
  }
  return ops::bind("ppermute", {vary_over(x, b)},
                   {{"axes", b.axes}, {"perm", flat}, {"group", b.size}});
}

Array all_to_all(const Array& x, Axes axes, int split_axis, int concat_axis, bool tiled,
                 const IndexGroups& groups) {
  Bound b = bound("all_to_all", axes, groups);
  split_axis = ops::norm_axis("all_to_all", split_axis, x.shape());
  concat_axis = ops::norm_axis("all_to_all", concat_axis, x.shape());
  return ops::bind("all_to_all", {vary_over(x, b)},
                   attrs_of(b, {{"split_axis", static_cast<int64_t>(split_axis)},
                                {"concat_axis", static_cast<int64_t>(concat_axis)},
                                {"tiled", tiled}}));
}
Array all_to_all(const Array& x, Axes axes, int split_axis, int concat_axis, bool tiled) {
  return all_to_all(x, std::move(axes), split_axis, concat_axis, tiled, {});
}

Array axis_index(Axes axes) {
  Bound b = bound("axis_index", axes);
  return detail::bind1("axis_index", {}, {{"axes", b.axes}});
}

int64_t axis_size(Axes axes) { return bound("axis_size", axes).size; }

int64_t collective_size(const char* api, Axes axes, const IndexGroups& groups) {
  return bound(api, axes, groups).size;
}

Array pvary(const Array& x, Axes axes) { return vary_over(x, bound("pvary", axes)); }

Array valid_size(int64_t n, Axes axes) {
  Bound b = bound("valid_size", axes);
  detail::check(n >= 0, "valid_size", "the global size must be non-negative, got {}", n);
  int64_t c = (n + b.size - 1) / b.size;
  Array start = axis_index(axes) * static_cast<double>(c);
  return minimum(maximum(static_cast<double>(n) - start, 0.0), static_cast<double>(c));
}

}  // namespace partix
