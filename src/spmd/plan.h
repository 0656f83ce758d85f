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
  kGeneric,         // factor driven
  kShardMap,        // operands to in_specs, body inlined
  kConstraint,      // with_sharding_constraint: a reshard
  kReplicatedSource,  // constants: computed whole on every device
  kTakeSharded,     // take from a table sharded along the indexed axis: masked local lookup
  kScatterSharded,  // scatter_add into a table sharded along the indexed axis: local rows
  kTakeAlongSharded,     // take_along from an axis that is split: masked local pick
  kScatterAlongSharded,  // scatter_add_along into an axis that is split: local positions
  kControlFlow,     // scan, fori_loop, while_loop, cond: regions partitioned once
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
