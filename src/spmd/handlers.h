// Emitters of the partitioner: the generic factor-driven one and the special handlers.
#pragma once

#include "spmd/local_builder.h"
#include "spmd/partition.h"
#include "spmd/plan.h"

namespace partix::spmd {

struct PartitionContext {
  PartitionContext(const ir::Program& global, const Mesh& m)
      : g(global), mesh(m), builder(out.local, m) {}
  virtual ~PartitionContext() = default;
  // The local value of global value v in sharding `want` (resharded once per target).
  virtual int local(int v, const NamedSharding& want) = 0;
  // Records the local value computed for global value v, in sharding `computed`.
  virtual void bind_result(int v, int local_value, const NamedSharding& computed) = 0;

  const ir::Program& g;
  Mesh mesh;
  Partitioned out;
  LocalBuilder builder;
};

void emit_generic(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan);
void emit_shard_map(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan);
void emit_take_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan);
void emit_scatter_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan);
void emit_take_along_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan);
void emit_scatter_along_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan);
void emit_mirror_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan);

}  // namespace partix::spmd
