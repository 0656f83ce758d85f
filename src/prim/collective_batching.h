// The collectives' batching rules (vmap), beside the collectives (collective.cpp).
#pragma once

#include <vector>

#include "ir/primitive.h"
#include "prim/batching.h"

namespace partix::prim {

// The collectives' batching rules (vmap; collective_batching.cpp). Over mesh axes only, a
// batched operand keeps its batch dimension: `fields` name the integer attributes that are axes
// of the operand (shifted past the batch; none: the collective keeps shapes and the batch stays
// where it is). A collective that names vmap's axis_name acts on the examples (examples()); the
// base refuses that by name.
class CollectiveBatching : public Batching {
 public:
  CollectiveBatching(const Primitive& p, std::vector<const char*> fields)
      : p_(p), fields_(std::move(fields)) {}
  std::vector<Batched> batch(const BatchArgs& a) const final;

 protected:
  virtual std::vector<Batched> examples(const BatchArgs& a) const;
  const Primitive& p_;

 private:
  std::vector<const char*> fields_;
};

// psum / pmax / pmin over the examples: one value for all of them (then over the mesh axes).
class AllReduceBatching final : public CollectiveBatching {
 public:
  explicit AllReduceBatching(const Primitive& p) : CollectiveBatching(p, {}) {}
  std::vector<Batched> examples(const BatchArgs& a) const override;
};
// all_gather over the examples: them all, stacked (or concatenated) along `axis`.
class AllGatherBatching final : public CollectiveBatching {
 public:
  explicit AllGatherBatching(const Primitive& p) : CollectiveBatching(p, {"axis"}) {}
  std::vector<Batched> examples(const BatchArgs& a) const override;
};
// psum_scatter over the examples: their sum, example i keeping piece i.
class ReduceScatterBatching final : public CollectiveBatching {
 public:
  explicit ReduceScatterBatching(const Primitive& p) : CollectiveBatching(p, {"axis"}) {}
  std::vector<Batched> examples(const BatchArgs& a) const override;
};
// ppermute over the examples: example d takes the value of the source sending to it (zeros
// where none does).
class PpermuteBatching final : public CollectiveBatching {
 public:
  explicit PpermuteBatching(const Primitive& p) : CollectiveBatching(p, {}) {}
  std::vector<Batched> examples(const BatchArgs& a) const override;
};
// all_to_all over the examples: example e gets piece e of every example's split dimension,
// concatenated (tiled) or stacked (untiled) along concat_axis in the examples' order.
class AllToAllBatching final : public CollectiveBatching {
 public:
  explicit AllToAllBatching(const Primitive& p)
      : CollectiveBatching(p, {"split_axis", "concat_axis"}) {}
  std::vector<Batched> examples(const BatchArgs& a) const override;
};
// axis_index over vmap's axis: each example's position (mixed radix with mesh axes).
class AxisIndexBatching final : public CollectiveBatching {
 public:
  explicit AxisIndexBatching(const Primitive& p) : CollectiveBatching(p, {}) {}
  std::vector<Batched> examples(const BatchArgs& a) const override;
};

}  // namespace partix::prim
