// Sharding of control flow (scan, fori_loop, while_loop, cond): each region is propagated on
// its own with its parameters fixed (a carry keeps one sharding across iterations, found by
// iterating the body to a fixed point) and partitioned once into a per-device region.
#pragma once

#include "spmd/handlers.h"
#include "spmd/plan.h"

namespace partix::spmd {

// Whether every region parameter and result of `in` has a sharding (propagation has run).
bool regions_propagated(const ir::Instr& in);

// Operand and result shardings of a control-flow instruction from its propagated regions.
InstrPlan plan_control_flow(const Mesh& mesh, const ir::Instr& in);

// After propagating the program around them: propagates every control-flow region of `g` from
// the shardings its instruction's operands and results were given.
void propagate_regions(ir::Program& g, const Mesh& mesh);

void emit_control_flow(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan);

}  // namespace partix::spmd
