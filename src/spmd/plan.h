// How one instruction runs sharded: its factor assignment, the sharding each operand must
// arrive in, the sharding of each result as computed, and the handler that emits it. Shared
// by propagation (with partial knowledge) and the partitioner (with the final shardings), so
// the two always agree.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "spmd/factors.h"

namespace partix::spmd {

enum class Handler {
  kGeneric,  // factor driven
  // Pinned shardings (Primitive::pinned_shardings):
  kShardMap,    // a per-device body (shard_map): operands to in_specs, body inlined
  kConstraint,  // a sharding annotation (with_sharding_constraint): a reshard
  kPinned,      // computed on the pinned blocks (a constant: whole on every device)
  // Gathers and scatters whose indexed axis is split (Primitive::axis_indexing):
  kTakeSharded,          // rows from a table sharded along the indexed axis: masked local lookup
  kScatterSharded,       // rows added into a table sharded along the indexed axis: local rows
  kTakeAlongSharded,     // one element per index from an axis that is split: masked local pick
  kScatterAlongSharded,  // one element per index into an axis that is split: local positions
  kControlFlow,          // scan, fori_loop, while_loop, cond: regions partitioned once
  kMirrorSharded,        // rev (Partitioning::mirrored_dims): local reverse, blocks exchanged
};

struct InstrPlan {
  Handler handler = Handler::kGeneric;
  prim::FactorRule rule;
  Assignment assignment;
  std::vector<NamedSharding> operands;  // desired operand shardings
  std::vector<NamedSharding> results;   // result shardings as computed
  // Per result: axes of max/min reduction factors that must be all-reduced right away.
  std::vector<std::set<std::string>> reduce_now;
  std::vector<prim::ReduceKind> reduce_now_kind;
};

struct ValueFacts {
  std::function<const std::optional<NamedSharding>&(int)> sharding;
  std::function<double(int)> priority;
};

InstrPlan plan_instr(const Mesh& mesh, const ir::Program& g, const ir::Instr& in,
                     const ValueFacts& facts);

}  // namespace partix::spmd
