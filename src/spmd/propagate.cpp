#include "spmd/propagate.h"

#include "core/errors.h"
#include "prim/primitive.h"

namespace partix::spmd {

void propagate(ir::Program& g, const Mesh& mesh, const std::vector<NamedSharding>& in,
               const std::vector<std::optional<NamedSharding>>&) {
  NamedSharding replicated(mesh, P());
  for (auto& v : g.values) v.sharding = replicated;
  for (size_t i = 0; i < g.params.size(); ++i) g.info(g.params[i]).sharding = in[i];
  for (const ir::Instr& instr : g.instrs) {
    std::string_view n = instr.prim->name();
    if (n == "shard_map") {
      const auto& specs = instr.attrs.get<ir::Specs>("out_specs");
      for (size_t k = 0; k < instr.outputs.size(); ++k) {
        g.info(instr.outputs[k]).sharding = NamedSharding(mesh, specs[k]);
      }
    } else if (n == "sharding_constraint") {
      g.info(instr.outputs[0]).sharding =
          NamedSharding(mesh, instr.attrs.get<PartitionSpec>("spec"));
    }
  }
}

}  // namespace partix::spmd
