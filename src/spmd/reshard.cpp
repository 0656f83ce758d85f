#include "spmd/reshard.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

// One reshard from A (`from`) to B (`to`) as a sequence of collectives, in six steps; each
// step moves the value's current sharding `cur` (per dimension, its axis parts major to minor)
// and `unreduced` towards B's `tgt`, emitting what it needs.
class Resharder {
 public:
  Resharder(ReshardContext& ctx, int v, const Shape& global, const NamedSharding& from,
            const NamedSharding& to)
      : ctx_(ctx),
        b_(ctx.builder),
        mesh_(from.mesh()),
        global_(global),
        from_(from),
        to_(to),
        rank_(global.size()),
        v_(v),
        cur_(rank_),
        tgt_(rank_),
        pending_(rank_),
        is_pending_(rank_, false),
        unreduced_(from.unreduced()) {
    // Both sides in the common refinement of their axis parts, so that any two references are
    // equal or disjoint ('data' next to 'data:(1)4' becomes 'data:(1)4', 'data:(4)2').
    all_ = from.spec().axes();
    for (const auto& a : to.spec().axes()) all_.push_back(a);
    all_.insert(all_.end(), from.unreduced().begin(), from.unreduced().end());
    all_.insert(all_.end(), to.unreduced().begin(), to.unreduced().end());
    for (size_t d = 0; d < rank_; ++d) {
      cur_[d] = detail::refine_axes(mesh_, from.spec()[static_cast<int>(d)], all_);
      tgt_[d] = detail::refine_axes(mesh_, to.spec()[static_cast<int>(d)], all_);
    }
  }

  int run() {
    reduce_unreduced();
    gather_uneven();
    move_even_axes();
    slice_added_axes();
    split_uneven();
    make_partial();
    if (!(now() == to_)) {
      detail::internal_error(
          "reshard", fmt::format("ended at {} instead of {}", now().to_string(), to_.to_string()));
    }
    return v_;
  }

 private:
  NamedSharding now() const { return NamedSharding(mesh_, spec_of(cur_), unreduced_); }
  bool even(size_t d, const std::vector<std::string>& axes) const {
    return global_[d] % product(mesh_, axes) == 0;
  }
  void emit(const char* op, ir::Attrs attrs) { v_ = b_.emit1(op, {v_}, std::move(attrs), now()); }

  // 1. A's unreduced axes that B reduces: reduce_scatter into a dimension that B splits on
  //    that axis next, otherwise one all_reduce over all the rest.
  void reduce_unreduced() {
    ir::Strings reduce_all;
    for (const auto& u : from_.unreduced()) {
      if (to_.unreduced().count(u)) continue;
      const std::vector<std::string> parts = detail::refine_axes(mesh_, {u}, all_);
      int j = -1;
      for (size_t d = 0; d < rank_ && j < 0; ++d) {
        std::vector<std::string> next = cur_[d];
        next.insert(next.end(), parts.begin(), parts.end());
        if (is_prefix(next, tgt_[d]) && even(d, next)) j = static_cast<int>(d);
      }
      unreduced_.erase(u);
      if (j < 0) {
        reduce_all.push_back(u);
        continue;
      }
      auto& dst = cur_[static_cast<size_t>(j)];
      dst.insert(dst.end(), parts.begin(), parts.end());
      emit("reduce_scatter", {{"axes", ir::Strings(parts.begin(), parts.end())},
                              {"axis", int64_t{j}},
                              {"tiled", true},
                              {"group", mesh_.axis_size(u)}});
    }
    if (!reduce_all.empty()) {
      emit("all_reduce", {{"axes", reduce_all},
                          {"kind", std::string("sum")},
                          {"group", product(mesh_, reduce_all)}});
    }
  }

  // 2. Uneven dimensions that change: gather whole, trim, and slice at the end (step 5).
  void gather_uneven() {
    for (size_t d = 0; d < rank_; ++d) {
      if (cur_[d] == tgt_[d] || (even(d, cur_[d]) && even(d, tgt_[d]))) continue;
      is_pending_[d] = true;
      pending_[d] = tgt_[d];
      tgt_[d].clear();
      // Only a dimension split on both sides is gathered whole to be split again; gathering to
      // replicated, or slicing a replicated dimension, is what any plan would do.
      if (ctx_.warnings && !cur_[d].empty() && !pending_[d].empty()) {
        ctx_.warnings->push_back(fmt::format(
            "resharding {} from {} to {} gathers dimension {} whole and slices it again (size {} "
            "does not divide evenly)",
            ctx_.what, from_.spec().to_string(), to_.spec().to_string(), d, global_[d]));
      }
      if (cur_[d].empty()) continue;
      ir::Strings axes(cur_[d].begin(), cur_[d].end());
      const int64_t k = product(mesh_, cur_[d]);
      cur_[d].clear();
      emit("all_gather",
           {{"axes", axes}, {"axis", static_cast<int64_t>(d)}, {"tiled", true}, {"group", k}});
      if (b_.aval(v_).shape[d] != global_[d]) {
        Shape start(rank_, 0), stop = b_.aval(v_).shape;
        stop[d] = global_[d];
        emit("slice", {{"start", ir::Ints(start)}, {"stop", ir::Ints(stop)}});
      }
    }
  }

  // 3. Even dimensions: pop axes that must leave a dimension (minor first). An axis that B
  //    wants next on another dimension moves there with all_to_all; the others are gathered
  //    (consecutive gathers of one dimension merged into one collective).
  void move_even_axes() {
    for (size_t i = 0; i < rank_; ++i) {
      ir::Strings batch;  // axes to gather, major to minor
      auto flush = [&] {
        if (batch.empty()) return;
        emit("all_gather", {{"axes", batch},
                            {"axis", static_cast<int64_t>(i)},
                            {"tiled", true},
                            {"group", product(mesh_, batch)}});
        batch.clear();
      };
      while (!is_prefix(cur_[i], tgt_[i])) {
        const std::string a = cur_[i].back();
        const int j = next_home(i, a);
        cur_[i].pop_back();
        if (j < 0) {
          batch.insert(batch.begin(), a);
          continue;
        }
        // The gathers popped so far are more minor than a: do them first.
        cur_[i].push_back(a);
        flush();
        cur_[i].pop_back();
        cur_[static_cast<size_t>(j)].push_back(a);
        emit("all_to_all", {{"axes", ir::Strings{a}},
                            {"split_axis", int64_t{j}},
                            {"concat_axis", static_cast<int64_t>(i)},
                            {"tiled", true},
                            {"group", mesh_.axis_size(a)}});
      }
      flush();
    }
  }
  // The other even dimension where B wants axis `a` next, or -1.
  int next_home(size_t i, const std::string& a) const {
    for (size_t d = 0; d < rank_; ++d) {
      if (d == i || is_pending_[d]) continue;
      std::vector<std::string> next = cur_[d];
      next.push_back(a);
      if (is_prefix(next, tgt_[d])) return static_cast<int>(d);
    }
    return -1;
  }

  // 4. Axes B adds: take this device's block locally.
  void slice_added_axes() {
    for (size_t d = 0; d < rank_; ++d) {
      if (cur_[d].size() == tgt_[d].size()) continue;
      ir::Strings add(tgt_[d].begin() + static_cast<long>(cur_[d].size()), tgt_[d].end());
      cur_[d] = tgt_[d];
      emit("axis_slice",
           {{"axes", add}, {"axis", static_cast<int64_t>(d)}, {"group", product(mesh_, add)}});
    }
  }

  // 5. Uneven dimensions: pad to whole blocks and slice.
  void split_uneven() {
    for (size_t d = 0; d < rank_; ++d) {
      if (!is_pending_[d] || pending_[d].empty()) continue;
      const int64_t k = product(mesh_, pending_[d]);
      const int64_t c = (global_[d] + k - 1) / k;
      if (c * k != b_.aval(v_).shape[d]) {
        Shape low(rank_, 0), high(rank_, 0);
        high[d] = c * k - b_.aval(v_).shape[d];
        emit("pad", {{"low", ir::Ints(low)}, {"high", ir::Ints(high)}, {"value", 0.0}});
      }
      cur_[d] = pending_[d];
      emit("axis_slice", {{"axes", ir::Strings(pending_[d].begin(), pending_[d].end())},
                          {"axis", static_cast<int64_t>(d)},
                          {"group", k}});
    }
  }

  // 6. Axes B wants unreduced that A has reduced: one device of each group keeps the value as
  //    a partial sum.
  void make_partial() {
    ir::Strings axes;
    for (const auto& u : to_.unreduced()) {
      if (!from_.unreduced().count(u)) axes.push_back(u);
    }
    if (axes.empty()) return;
    for (const auto& u : axes) unreduced_.insert(u);
    emit("unreduce", {{"axes", axes}});
  }

  ReshardContext& ctx_;
  LocalBuilder& b_;
  const Mesh& mesh_;
  const Shape& global_;
  const NamedSharding& from_;
  const NamedSharding& to_;
  const size_t rank_;
  int v_;
  std::vector<std::string> all_;
  Lists cur_, tgt_;
  Lists pending_;  // uneven dimensions' targets, split in step 5
  std::vector<bool> is_pending_;
  std::set<std::string> unreduced_;
};

}  // namespace

int reshard(ReshardContext& ctx, int v, const Shape& global, const NamedSharding& from,
            const NamedSharding& to) {
  if (from == to) return v;
  // Reduced axes are a type over replicated storage: nothing moves for them.
  if (!from.reduced().empty() || !to.reduced().empty()) {
    return reshard(ctx, v, global, from.layout(), to.layout());
  }
  if (is_quantized(ctx.builder.aval(v).dtype)) return reshard_blocks(ctx, v, global, from, to);
  if (!(to.mesh() == from.mesh())) {
    detail::internal_error(
        "reshard", "shardings on different meshes: " + from.to_string() + " and " + to.to_string());
  }
  return Resharder(ctx, v, global, from, to).run();
}

}  // namespace partix::spmd
