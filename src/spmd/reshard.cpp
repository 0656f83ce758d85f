#include "spmd/reshard.h"

#include <algorithm>

#include "core/errors.h"
#include "sharding/axes.h"

namespace partix::spmd {

namespace {

using Lists = std::vector<std::vector<std::string>>;

bool is_prefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

int64_t product(const Mesh& m, const std::vector<std::string>& axes) {
  int64_t n = 1;
  for (const auto& a : axes) n *= m.axis_size(a);
  return n;
}

PartitionSpec spec_of(const Lists& lists) {
  std::vector<PartitionSpec::Entry> e(lists.begin(), lists.end());
  while (!e.empty() && e.back().empty()) e.pop_back();
  return PartitionSpec(e);
}

// A quantized value moves as its storage (see the storage_view primitive): its [..., K]
// elements are the bytes [..., K / block, block_bytes], the block dimension sharded as the
// last one was, so gathers, all-to-alls, slices and pads move whole blocks. Blocks are never
// summed: a quantized value is never unreduced.
int reshard_blocks(ReshardContext& ctx, int v, const Shape& global, const NamedSharding& from,
                   const NamedSharding& to) {
  LocalBuilder& b = ctx.builder;
  const DType dt = b.aval(v).dtype;
  const int64_t block = dtype_block_elems(dt);
  for (const NamedSharding* s : {&from, &to}) {
    const int64_t chunk = s->shard_shape(global).back();
    if (!s->unreduced().empty() || chunk % block != 0) {
      detail::internal_error(
          "reshard",
          fmt::format("{} ({}{}) cannot be {}: it would be a partial sum or split its "
                      "{}-element blocks",
                      ctx.what, dtype_name(dt), shape_to_string(global), s->to_string(), block));
    }
  }
  auto storage = [&](const NamedSharding& s) {
    Lists e;
    for (size_t d = 0; d < global.size(); ++d) e.push_back(s.spec()[static_cast<int>(d)]);
    return NamedSharding(s.mesh(), spec_of(e));
  };
  Shape bytes_shape = global;
  bytes_shape.back() /= block;
  bytes_shape.push_back(dtype_size(dt));
  int bytes = b.emit1("storage_view", {v}, {{"dtype", DType::Bool}}, storage(from));
  bytes = reshard(ctx, bytes, bytes_shape, storage(from), storage(to));
  return b.emit1("storage_view", {bytes}, {{"dtype", dt}}, to);
}

}  // namespace

int reshard(ReshardContext& ctx, int v, const Shape& global, const NamedSharding& from,
            const NamedSharding& to) {
  if (from == to) return v;
  if (is_quantized(ctx.builder.aval(v).dtype)) return reshard_blocks(ctx, v, global, from, to);
  LocalBuilder& b = ctx.builder;
  const Mesh& mesh = from.mesh();
  if (!(to.mesh() == mesh)) {
    detail::internal_error("reshard", "shardings on different meshes: " + from.to_string() +
                                          " and " + to.to_string());
  }
  const size_t rank = global.size();
  // Both sides in the common refinement of their axis parts, so that any two references are
  // equal or disjoint ('data' next to 'data:(1)4' becomes 'data:(1)4', 'data:(4)2').
  std::vector<std::string> all = from.spec().axes();
  for (const auto& a : to.spec().axes()) all.push_back(a);
  all.insert(all.end(), from.unreduced().begin(), from.unreduced().end());
  all.insert(all.end(), to.unreduced().begin(), to.unreduced().end());
  Lists cur(rank), tgt(rank);
  for (size_t d = 0; d < rank; ++d) {
    cur[d] = detail::refine_axes(mesh, from.spec()[static_cast<int>(d)], all);
    tgt[d] = detail::refine_axes(mesh, to.spec()[static_cast<int>(d)], all);
  }
  std::set<std::string> unreduced = from.unreduced();
  auto now = [&] { return NamedSharding(mesh, spec_of(cur), unreduced); };
  auto even = [&](size_t d, const std::vector<std::string>& axes) {
    return global[d] % product(mesh, axes) == 0;
  };
  // Axes B wants unreduced that A has reduced: reached at the end (step 6).
  ir::Strings make_partial;
  for (const auto& u : to.unreduced()) {
    if (!unreduced.count(u)) make_partial.push_back(u);
  }
  // 1. Unreduced axes: reduce_scatter into a dimension that B splits on that axis next,
  //    otherwise one all_reduce over all the rest.
  ir::Strings reduce_all;
  for (const auto& u : from.unreduced()) {
    if (to.unreduced().count(u)) continue;
    const std::vector<std::string> parts = detail::refine_axes(mesh, {u}, all);
    int j = -1;
    for (size_t d = 0; d < rank && j < 0; ++d) {
      std::vector<std::string> next = cur[d];
      next.insert(next.end(), parts.begin(), parts.end());
      if (is_prefix(next, tgt[d]) && even(d, next)) j = static_cast<int>(d);
    }
    unreduced.erase(u);
    if (j >= 0) {
      auto& dst = cur[static_cast<size_t>(j)];
      dst.insert(dst.end(), parts.begin(), parts.end());
      v = b.emit1("reduce_scatter", {v},
                  {{"axes", ir::Strings(parts.begin(), parts.end())}, {"axis", int64_t{j}},
                   {"tiled", true}, {"group", mesh.axis_size(u)}},
                  now());
    } else {
      reduce_all.push_back(u);
    }
  }
  if (!reduce_all.empty()) {
    v = b.emit1("all_reduce", {v},
                {{"axes", reduce_all}, {"kind", std::string("sum")},
                 {"group", product(mesh, reduce_all)}},
                now());
  }
  // 2. Uneven dimensions that change: gather whole, trim, and slice at the end.
  Lists pending(rank);
  std::vector<bool> is_pending(rank, false);
  for (size_t d = 0; d < rank; ++d) {
    if (cur[d] == tgt[d] || (even(d, cur[d]) && even(d, tgt[d]))) continue;
    is_pending[d] = true;
    pending[d] = tgt[d];
    tgt[d].clear();
    // Only a dimension split on both sides is gathered whole to be split again; gathering to
    // replicated, or slicing a replicated dimension, is what any plan would do.
    if (ctx.warnings && !cur[d].empty() && !pending[d].empty()) {
      ctx.warnings->push_back(fmt::format(
          "resharding {} from {} to {} gathers dimension {} whole and slices it again (size {} "
          "does not divide evenly)",
          ctx.what, from.spec().to_string(), to.spec().to_string(), d, global[d]));
    }
    if (!cur[d].empty()) {
      ir::Strings axes(cur[d].begin(), cur[d].end());
      int64_t k = product(mesh, cur[d]);
      cur[d].clear();
      v = b.emit1("all_gather", {v},
                  {{"axes", axes}, {"axis", static_cast<int64_t>(d)}, {"tiled", true}, {"group", k}},
                  now());
      if (b.aval(v).shape[d] != global[d]) {
        Shape start(rank, 0), stop = b.aval(v).shape;
        stop[d] = global[d];
        v = b.emit1("slice", {v}, {{"start", ir::Ints(start)}, {"stop", ir::Ints(stop)}}, now());
      }
    }
  }
  // 3. Even dimensions: pop axes that must leave a dimension (minor first). An axis that B
  //    wants next on another dimension moves there with all_to_all; the others are gathered
  //    (consecutive gathers of one dimension merged into one collective).
  for (size_t i = 0; i < rank; ++i) {
    ir::Strings batch;  // axes to gather, major to minor
    auto flush = [&] {
      if (batch.empty()) return;
      v = b.emit1("all_gather", {v},
                  {{"axes", batch}, {"axis", static_cast<int64_t>(i)}, {"tiled", true},
                   {"group", product(mesh, batch)}},
                  now());
      batch.clear();
    };
    while (!is_prefix(cur[i], tgt[i])) {
      std::string a = cur[i].back();
      int j = -1;
      for (size_t d = 0; d < rank && j < 0; ++d) {
        if (d == i || is_pending[d]) continue;
        std::vector<std::string> next = cur[d];
        next.push_back(a);
        if (is_prefix(next, tgt[d])) j = static_cast<int>(d);
      }
      cur[i].pop_back();
      if (j < 0) {
        batch.insert(batch.begin(), a);
        continue;
      }
      // The gathers popped so far are more minor than a: do them first.
      cur[i].push_back(a);
      flush();
      cur[i].pop_back();
      cur[static_cast<size_t>(j)].push_back(a);
      v = b.emit1("all_to_all", {v},
                  {{"axes", ir::Strings{a}}, {"split_axis", int64_t{j}},
                   {"concat_axis", static_cast<int64_t>(i)}, {"tiled", true},
                   {"group", mesh.axis_size(a)}},
                  now());
    }
    flush();
  }
  // 4. Axes B adds: take this device's block locally.
  for (size_t d = 0; d < rank; ++d) {
    if (cur[d].size() == tgt[d].size()) continue;
    ir::Strings add(tgt[d].begin() + static_cast<long>(cur[d].size()), tgt[d].end());
    cur[d] = tgt[d];
    v = b.emit1("axis_slice", {v},
                {{"axes", add}, {"axis", static_cast<int64_t>(d)}, {"group", product(mesh, add)}},
                now());
  }
  // 5. Uneven dimensions: pad to whole blocks and slice.
  for (size_t d = 0; d < rank; ++d) {
    if (!is_pending[d] || pending[d].empty()) continue;
    int64_t k = product(mesh, pending[d]);
    int64_t c = (global[d] + k - 1) / k;
    if (c * k != b.aval(v).shape[d]) {
      Shape low(rank, 0), high(rank, 0);
      high[d] = c * k - b.aval(v).shape[d];
      v = b.emit1("pad", {v}, {{"low", ir::Ints(low)}, {"high", ir::Ints(high)}, {"value", 0.0}}, now());
    }
    cur[d] = pending[d];
    v = b.emit1("axis_slice", {v},
                {{"axes", ir::Strings(pending[d].begin(), pending[d].end())},
                 {"axis", static_cast<int64_t>(d)}, {"group", k}},
                now());
  }
  // 6. A reduced value as a partial sum: one device of each group keeps it.
  if (!make_partial.empty()) {
    for (const auto& u : make_partial) unreduced.insert(u);
    v = b.emit1("unreduce", {v}, {{"axes", make_partial}}, now());
  }
  if (!(now() == to)) {
    detail::internal_error("reshard", fmt::format("ended at {} instead of {}", now().to_string(),
                                                  to.to_string()));
  }
  return v;
}

}  // namespace partix::spmd
