// The collectives' batching rules (vmap). Over shard_map's mesh axes a batched operand's batch
// dimension is data like any other (the rule keeps it, shifting the axis attributes past it).
// Over vmap's axis_name the examples are the group: psum sums them, all_gather stacks them,
// psum_scatter gives each example its piece, ppermute moves examples, axis_index numbers them.
// ARCHITECTURE.md, "Transformations" (vmap).
#include "prim/collective_batching.h"

#include <algorithm>

#include "core/errors.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "trace/trace.h"

namespace partix::prim {

namespace {

// The collective's axes that are not vmap's, and their group size.
struct Rest {
  ir::Strings axes;
  int64_t group = 1;
};

bool over_examples(const Attrs& attrs, const std::string& axis_name) {
  if (axis_name.empty() || !attrs.has("axes")) return false;
  const ir::Strings& a = attrs.get<ir::Strings>("axes");
  return std::find(a.begin(), a.end(), axis_name) != a.end();
}

Rest rest_of(const Attrs& attrs, const BatchArgs& a) {
  Rest r;
  for (const std::string& n : attrs.get<ir::Strings>("axes")) {
    if (n != a.axis.name) r.axes.push_back(n);
  }
  r.group = attrs.i_or("group", a.size) / a.size;
  return r;
}

// Refuses a collective over vmap's axis together with mesh axes where the rule covers only the
// examples.
void examples_only(std::string_view user, const Attrs& attrs, const BatchArgs& a) {
  if (!rest_of(attrs, a).axes.empty()) {
    detail::fail("vmap", "{} over vmap's axis '{}' together with mesh axes ({}) is not "
                 "supported: apply it over one, then the other", user, a.axis.name,
                 fmt::join(attrs.get<ir::Strings>("axes"), ", "));
  }
}

Array same_dtype(const Array& r, DType dt) { return r.dtype() == dt ? r : astype(r, dt); }

}  // namespace

std::vector<Batched> CollectiveBatching::batch(const BatchArgs& a) const {
  if (over_examples(a.attrs, a.axis.name)) return examples(a);
  if (fields_.empty()) {  // shape-preserving over devices: the batch stays where it is
    const Batched& x = a.operands[0];
    return {{detail::bind(p_, {x.value}, a.attrs, a.regions)[0], x.bdim}};
  }
  return AxesBatching(p_, fields_).batch(a);
}

std::vector<Batched> CollectiveBatching::examples(const BatchArgs& a) const {
  detail::fail("vmap", "{} over vmap's axis '{}' is not supported", p_.name(), a.axis.name);
}

std::vector<Batched> AllReduceBatching::examples(const BatchArgs& a) const {
  const Array x = at_front(a.operands[0], a.size);
  const std::string& kind = a.attrs.str("kind");
  Array r = kind == "sum" ? sum(x, {0}) : kind == "max" ? max(x, {0}) : min(x, {0});
  r = same_dtype(r, x.dtype());
  const Rest rest = rest_of(a.attrs, a);
  if (!rest.axes.empty()) {
    Attrs attrs = a.attrs;
    attrs.set("axes", rest.axes);
    attrs.set("group", rest.group);
    r = detail::bind(p_, {r}, attrs, a.regions)[0];
  }
  return {{r, -1}};  // the same for every example
}

std::vector<Batched> AllGatherBatching::examples(const BatchArgs& a) const {
  examples_only("all_gather", a.attrs, a);
  const Array x = at_front(a.operands[0], a.size);
  const int axis = static_cast<int>(a.attrs.i("axis"));
  Array r = moveaxis(x, 0, axis);
  if (a.attrs.b_or("tiled", false)) {  // the examples' blocks one after another along axis
    Shape s = r.shape();
    s[static_cast<size_t>(axis)] *= s[static_cast<size_t>(axis) + 1];
    s.erase(s.begin() + axis + 1);
    r = reshape(r, s);
  }
  return {{r, -1}};
}

std::vector<Batched> ReduceScatterBatching::examples(const BatchArgs& a) const {
  examples_only("psum_scatter", a.attrs, a);
  const Array x = at_front(a.operands[0], a.size);
  const Array total = same_dtype(sum(x, {0}), x.dtype());
  const int axis = static_cast<int>(a.attrs.i("axis"));
  const int64_t len = total.shape()[static_cast<size_t>(axis)];
  if (!a.attrs.b_or("tiled", false)) {
    detail::check(len == a.size, "psum_scatter", "scatter dimension {} has size {}, but vmap's "
                  "axis '{}' has {} examples", axis, len, a.axis.name, a.size);
    return {{total, axis}};
  }
  detail::check(len % a.size == 0, "psum_scatter", "scatter dimension {} of size {} does not "
                "split into {} pieces over vmap's axis '{}'", axis, len, a.size, a.axis.name);
  Shape s = total.shape();
  s[static_cast<size_t>(axis)] = len / a.size;
  s.insert(s.begin() + axis, a.size);
  return {{reshape(total, s), axis}};
}

std::vector<Batched> PpermuteBatching::examples(const BatchArgs& a) const {
  examples_only("ppermute", a.attrs, a);
  const Array x = at_front(a.operands[0], a.size);
  const ir::Ints& perm = a.attrs.ints("perm");
  std::vector<int32_t> source(static_cast<size_t>(a.size), 0);
  std::vector<bool> receives(static_cast<size_t>(a.size), false);
  for (size_t i = 0; i + 1 < perm.size(); i += 2) {
    source[static_cast<size_t>(perm[i + 1])] = static_cast<int32_t>(perm[i]);
    receives[static_cast<size_t>(perm[i + 1])] = true;
  }
  Array moved = take(x, from_vector(source, {a.size}), 0);
  if (std::find(receives.begin(), receives.end(), false) == receives.end()) return {{moved, 0}};
  std::vector<int> dims{0};
  const Array mask = broadcast_in_dim(from_vector(receives, {a.size}), x.shape(), dims);
  return {{where(mask, moved, 0.0), 0}};  // an example no one sends to gets zeros
}

std::vector<Batched> AllToAllBatching::examples(const BatchArgs& a) const {
  examples_only("all_to_all", a.attrs, a);
  const Array x = at_front(a.operands[0], a.size);  // [j (source), example dims...]
  const int split = static_cast<int>(a.attrs.i("split_axis"));
  const int concat = static_cast<int>(a.attrs.i("concat_axis"));
  if (!a.attrs.b_or("tiled", false)) {
    // x[j] has size B at split; example e takes x[j][..., e, ...] for every j, stacked at concat.
    const Array y = moveaxis(x, split + 1, 0);  // [e, j, the rest]
    return {{moveaxis(y, 1, concat + 1), 0}};
  }
  Shape s = x.shape();
  const int64_t len = s[static_cast<size_t>(split) + 1];
  detail::check(len % a.size == 0, "all_to_all", "split dimension {} of size {} does not split "
                "into {} pieces over vmap's axis '{}'", split, len, a.size, a.axis.name);
  s[static_cast<size_t>(split) + 1] = len / a.size;
  s.insert(s.begin() + split + 1, a.size);  // [j, ..., e, piece, ...]
  Array y = moveaxis(reshape(x, s), split + 1, 0);  // [e, j, the example's dims, piece at split]
  y = moveaxis(y, 1, concat + 1);  // j just before the concat dimension, then merged with it
  Shape m = y.shape();
  m[static_cast<size_t>(concat) + 1] *= m[static_cast<size_t>(concat) + 2];
  m.erase(m.begin() + concat + 2);
  return {{reshape(y, m), 0}};
}

std::vector<Batched> AxisIndexBatching::examples(const BatchArgs& a) const {
  // The mixed-radix index over the axes in order, vmap's numbering the examples.
  Array r = full({a.size}, 0, DType::I32);
  for (const std::string& n : a.attrs.get<ir::Strings>("axes")) {
    if (n == a.axis.name) {
      r = r * static_cast<double>(a.size) + iota({a.size}, 0, DType::I32);
      continue;
    }
    const detail::TraceState* t = detail::current_trace();
    const int64_t size = t && t->manual_mesh ? t->manual_mesh->axis_size(n) : 1;
    Array idx = detail::bind(p_, {}, {{"axes", ir::Strings{n}}}, {})[0];
    r = r * static_cast<double>(size) + idx;
  }
  return {{same_dtype(r, DType::I32), 0}};
}

}  // namespace partix::prim
