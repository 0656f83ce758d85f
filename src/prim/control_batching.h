// The batching rules (vmap) of the primitives with regions that decide what runs: scan and
// fori_loop, while_loop, cond, and shard_map (control_batching.cpp). ARCHITECTURE.md,
// "Transformations" (vmap).
#pragma once

#include "ir/primitive.h"
#include "prim/batching.h"

namespace partix::prim {

// scan / fori_loop: a carry is batched when its initial value is or when the body makes it so
// (fixed point over the body); scanned inputs carry their batch at dimension 1 (the loop's
// axis stays first), and so do the stacked ys. Unbatched carries and operands stay unbatched.
class ScanBatching final : public Batching {
 public:
  std::vector<Batched> batch(const BatchArgs& a) const override;
};

// while_loop: as scan for the carries. A predicate that depends on the batch runs the loop
// while any example's holds, each example keeping its carries once its own predicate fails
// (every carry then batched), as JAX does.
class WhileBatching final : public Batching {
 public:
  std::vector<Batched> batch(const BatchArgs& a) const override;
};

// cond: an unbatched predicate keeps the cond with batched branches; a batched one evaluates
// both branches and selects per example (JAX's rule: a select).
class CondBatching final : public Batching {
 public:
  std::vector<Batched> batch(const BatchArgs& a) const override;
};

// shard_map: the body batched on its blocks, each batched operand's and every result's spec
// gaining a leading entry: spmd_axis_name's mesh axes (the examples split over them), else
// None.
class ShardMapBatching final : public Batching {
 public:
  explicit ShardMapBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override;

 private:
  const Primitive& p_;
};

// sharding_constraint: under spmd_axis_name the batch dimension is constrained to split over
// those mesh axes and the example's dimensions as the constraint says. Without it the batch
// dimension is unconstrained (P.UNCONSTRAINED, as JAX's): propagation places it, where
// P(None, ...) would gather a split batch.
class ConstraintBatching final : public Batching {
 public:
  explicit ConstraintBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override;

 private:
  const Primitive& p_;
};

}  // namespace partix::prim
