#include "spmd/simplify.h"

#include <algorithm>
#include <numeric>
#include <string_view>

#include "ir/primitive.h"

namespace partix::spmd {

namespace {

bool over_one_device(const ir::Instr& in) {
  const std::string_view n = in.prim->name();
  if (n != "all_reduce" && n != "all_gather" && n != "reduce_scatter" && n != "all_to_all" &&
      n != "axis_slice" && n != "ppermute") {
    return false;
  }
  if (!in.attrs.has("group") || in.attrs.i("group") != 1) return false;
  // A permutation over one device either keeps the value or sends nothing (zeros).
  if (n == "ppermute") return in.attrs.ints("perm") == ir::Ints{0, 0};
  return true;
}

}  // namespace

void drop_trivial_collectives(ir::Program& p) {
  std::vector<int> subst(p.values.size());
  std::iota(subst.begin(), subst.end(), 0);
  std::vector<ir::Instr> kept;
  kept.reserve(p.instrs.size());
  for (ir::Instr& in : p.instrs) {
    for (int& v : in.inputs) v = subst[static_cast<size_t>(v)];
    if (over_one_device(in) && in.inputs.size() == 1 && in.outputs.size() == 1) {
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
