// Bytes a device sends for a collective instruction (ring conventions), and the
// cost of a reshard, used to choose between partitioning plans.
#pragma once

#include "ir/program.h"

namespace partix::spmd {

// The collective kind ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
// "collective_permute") and bytes per device; kind empty for other instructions.
std::pair<std::string, double> collective_bytes(const ir::Program& p, const ir::Instr& in);

// Bytes per device that resharding a value of `aval` from `from` to `to` moves.
double reshard_bytes(const ir::Aval& aval, const NamedSharding& from, const NamedSharding& to);

}  // namespace partix::spmd
