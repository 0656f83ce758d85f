#include "spmd/local_builder.h"

#include "core/errors.h"
#include "ir/primitive.h"

namespace partix::spmd {

int LocalBuilder::param(const ir::Aval& aval, std::optional<NamedSharding> sharding) {
  int v = p_.add_value(aval);
  p_.info(v).sharding = std::move(sharding);
  p_.params.push_back(v);
  return v;
}

std::vector<int> LocalBuilder::emit(std::string_view prim, const std::vector<int>& inputs,
                                    ir::Attrs attrs, std::optional<NamedSharding> sharding,
                                    const std::string& scope, const prim::Regions& regions) {
  const prim::Primitive& pr = prim::get_primitive(prim);
  std::vector<ir::Aval> in;
  for (int v : inputs) in.push_back(p_.aval(v));
  std::vector<ir::Aval> out = pr.typing().infer(in, attrs, regions);
  ir::Instr instr;
  instr.prim = &pr;
  instr.inputs = inputs;
  instr.attrs = std::move(attrs);
  instr.regions = regions;
  instr.scope = scope;
  for (ir::Aval& a : out) {
    int v = p_.add_value(std::move(a));
    p_.info(v).sharding = sharding;
    instr.outputs.push_back(v);
  }
  p_.instrs.push_back(std::move(instr));
  return p_.instrs.back().outputs;
}

int LocalBuilder::emit1(std::string_view prim, const std::vector<int>& inputs, ir::Attrs attrs,
                        std::optional<NamedSharding> sharding, const std::string& scope) {
  auto outs = emit(prim, inputs, std::move(attrs), std::move(sharding), scope);
  if (outs.size() != 1) detail::internal_error("LocalBuilder", "expected one result");
  return outs[0];
}

}  // namespace partix::spmd
