// Resharding: emits the collectives that turn a local block of sharding A into a
// local block of sharding B, cheapest first: unreduced -> reduce_scatter (if B shards a
// dimension on that axis) else all_reduce; an axis moving between dimensions -> all_to_all;
// an axis dropped -> all_gather; an axis added -> local slice (no communication). Uneven
// dimensions that change are gathered whole and sliced again, reported as a warning.
#pragma once

#include <string>
#include <vector>

#include "spmd/local_builder.h"

namespace partix::spmd {

struct ReshardContext {
  LocalBuilder& builder;
  std::vector<std::string>* warnings = nullptr;
  std::string what;  // names the value in warnings ("%12 (block0/mlp)")
};

// v is a local value holding `from`'s block of a global array of shape `global`.
int reshard(ReshardContext& ctx, int v, const Shape& global, const NamedSharding& from,
            const NamedSharding& to);

}  // namespace partix::spmd
