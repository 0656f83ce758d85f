// Helpers of the primitives' batching rules (vmap; ir::Batching): where a batched value's batch
// dimension is, moving it to the front, and materialising an unbatched value for every example.
#pragma once

#include <functional>
#include <vector>

#include "autodiff/batch.h"
#include "ir/primitive.h"

namespace partix::prim {

// b's value with its batch dimension at 0; an unbatched value is broadcast to [size, ...].
using autodiff::at_front;

// Every operand at_front: the rule of ops whose operands share one shape (elementwise ops).
std::vector<Array> all_at_front(const std::vector<Batched>& operands, int64_t size);

// Axis numbers of the unbatched op, shifted past a leading batch dimension.
ir::Ints shifted(const ir::Ints& axes);

// `v` with `x` prepended.
ir::Ints prepended(int64_t x, const ir::Ints& v);

// The primitive bound on operands with their batch dimensions at 0, `attrs` adjusted by the
// caller; every result batched at 0.
std::vector<Batched> bind_batched(const Primitive& p, const std::vector<Array>& operands,
                                  const Attrs& attrs, const Regions& regions = {});

// The rule of ops whose operands share one shape and whose attributes name no axis
// (elementwise ops, select, convert, stop_gradient, copy): bound on the operands at the front.
class SameShapeBatching final : public Batching {
 public:
  explicit SameShapeBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override;

 private:
  const Primitive& p_;
};

// The rule of ops of one operand whose integer attributes `fields` are axes of it (reduce's
// "axes", cumsum's "axis", rev's "axes"): the operand at the front, those axes shifted by one.
class AxesBatching final : public Batching {
 public:
  AxesBatching(const Primitive& p, std::vector<const char*> fields) : p_(p), fields_(std::move(fields)) {}
  std::vector<Batched> batch(const BatchArgs& a) const override;

 private:
  const Primitive& p_;
  std::vector<const char*> fields_;
};

// The rule of ops that act on every example alike once their attributes are rewritten for a
// leading batch dimension (reshape's shape, transpose's perm, slice's bounds, ...): the operands
// at the front, the attributes from `adjust(attrs, size)`.
class AttrsBatching final : public Batching {
 public:
  using Adjust = std::function<Attrs(const Attrs&, int64_t size)>;
  AttrsBatching(const Primitive& p, Adjust adjust) : p_(p), adjust_(std::move(adjust)) {}
  std::vector<Batched> batch(const BatchArgs& a) const override;

 private:
  const Primitive& p_;
  Adjust adjust_;
};

// The rule of a one-operand identity that has no meaning per example: the operand as it is.
class PassThroughBatching final : public Batching {
 public:
  std::vector<Batched> batch(const BatchArgs& a) const override { return {a.operands[0]}; }
};

// The rule of ops whose regions take their operands (remat, custom derivatives): every operand
// at the front and every region batched whole (autodiff::batch_region), results at the front.
class RegionsBatching final : public Batching {
 public:
  explicit RegionsBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override;

 private:
  const Primitive& p_;
};

// The rule of ops with no vectorised form over a batch (random draws from per-example keys):
// the op applied to each example in turn by a loop over the batch (lax.map), results stacked.
class MapBatching final : public Batching {
 public:
  explicit MapBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override;

 private:
  const Primitive& p_;
};

// dynamic_slice (`update` false) and dynamic_update_slice: with unbatched starts the operand
// (and update) go in front, sliced from 0 along the batch (dynamic_slice keeping all of it);
// starts that differ per example slice each example in turn (MapBatching).
class DynamicSliceBatching final : public Batching {
 public:
  DynamicSliceBatching(const Primitive& p, bool update) : p_(p), update_(update) {}
  std::vector<Batched> batch(const BatchArgs& a) const override;

 private:
  const Primitive& p_;
  bool update_;
};

}  // namespace partix::prim
