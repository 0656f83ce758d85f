#include "spmd/cost.h"

#include "ir/primitive.h"
#include "spmd/reshard.h"

namespace partix::spmd {

std::pair<std::string, double> collective_bytes(const ir::Program& p, const ir::Instr& in) {
  const std::string_view kind = in.prim->cost().comm_kind();
  if (!in.prim->is_collective() || in.inputs.empty() || kind.empty()) return {"", 0.0};
  std::vector<ir::Aval> ia, oa;
  for (int v : in.inputs) ia.push_back(p.aval(v));
  for (int v : in.outputs) oa.push_back(p.aval(v));
  return {std::string(kind), in.prim->cost().comm_bytes(ia, oa, in.attrs)};
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
