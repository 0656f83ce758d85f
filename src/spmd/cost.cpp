#include "spmd/cost.h"

#include "ir/primitive.h"
#include "spmd/reshard.h"

namespace partix::spmd {

std::pair<std::string, double> collective_bytes(const ir::Program& p, const ir::Instr& in) {
  std::string_view n = in.prim->name();
  if (!in.prim->is_collective() || in.inputs.empty()) return {"", 0.0};
  double g = static_cast<double>(in.attrs.i_or("group", 1));
  double B = static_cast<double>(p.aval(in.inputs[0]).nbytes());
  if (n == "all_reduce") return {"all_reduce", 2 * (g - 1) / g * B};
  if (n == "all_gather") {
    return {"all_gather", (g - 1) / g * static_cast<double>(p.aval(in.outputs[0]).nbytes())};
  }
  if (n == "reduce_scatter") return {"reduce_scatter", (g - 1) / g * B};
  if (n == "all_to_all") return {"all_to_all", (g - 1) / g * B};
  if (n == "ppermute") return {"collective_permute", B};
  return {"", 0.0};
}

double reshard_bytes(const ir::Aval& aval, const NamedSharding& from, const NamedSharding& to) {
  if (from == to) return 0;
  ir::Program scratch;
  LocalBuilder b(scratch, from.mesh());
  int v = b.param(ir::Aval{from.shard_shape(aval.shape), aval.dtype}, from);
  ReshardContext ctx{b, nullptr, ""};
  reshard(ctx, v, aval.shape, from, to);
  double total = 0;
  for (const ir::Instr& in : scratch.instrs) total += collective_bytes(scratch, in).second;
  return total;
}

}  // namespace partix::spmd
