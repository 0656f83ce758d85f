// Sharding propagation: gives every value of a global program a sharding, from
// the user's (arguments, out_shardings, constraints, shard_map specs; never overridden).
#pragma once

#include <optional>
#include <vector>

#include "ir/program.h"

namespace partix::spmd {

void propagate(ir::Program& global, const Mesh& mesh,
               const std::vector<NamedSharding>& in_shardings,
               const std::vector<std::optional<NamedSharding>>& out_shardings);

}  // namespace partix::spmd
