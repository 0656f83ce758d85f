#include "spmd/simplify.h"

#include <algorithm>
#include <numeric>

#include "ir/primitive.h"

namespace partix::spmd {

void drop_trivial_collectives(ir::Program& p) {
  std::vector<int> subst(p.values.size());
  std::iota(subst.begin(), subst.end(), 0);
  std::vector<ir::Instr> kept;
  kept.reserve(p.instrs.size());
  for (ir::Instr& in : p.instrs) {
    for (int& v : in.inputs) v = subst[static_cast<size_t>(v)];
    if (in.prim->partitioning().identity_on_one_device(in.attrs) && in.inputs.size() == 1 &&
        in.outputs.size() == 1) {
      const ir::Aval& from = p.aval(in.inputs[0]);
      const ir::Aval& to = p.aval(in.outputs[0]);
      if (from.shape == to.shape && from.dtype == to.dtype) {
        subst[static_cast<size_t>(in.outputs[0])] = in.inputs[0];
        // Same values: the operand now reads as the result did (e.g. reduced, not unreduced
        // over the size-1 axis).
        const bool param =
            std::find(p.params.begin(), p.params.end(), in.inputs[0]) != p.params.end();
        if (!param) p.info(in.inputs[0]) = p.info(in.outputs[0]);
        continue;
      }
      if (from.dtype == to.dtype && from.size() == to.size()) {
        in.prim = &prim::get_primitive("reshape");
        in.attrs = ir::Attrs{{"shape", ir::Ints(to.shape)}};
      }
    }
    kept.push_back(std::move(in));
  }
  p.instrs = std::move(kept);
  for (int& r : p.results) r = subst[static_cast<size_t>(r)];
}

}  // namespace partix::spmd
