// Structural primitives: constant literals, sharding constraints, stop_gradient.
#include <algorithm>
#include <cstring>
#include <map>

#include "autodiff/vjp.h"
#include "core/array_impl.h"
#include "ir/hlo.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "prim/control_batching.h"
#include "prim/util.h"
#include "trace/trace.h"

namespace partix::prim {

namespace {

// ---- constant{value=<literal>} ----
class Constant final : public Primitive {
 public:
  std::string_view name() const override { return "constant"; }
  // A literal is computed whole on every device: its users slice the blocks they need.
  std::optional<PinnedShardings> pinned_shardings(const Attrs&) const override {
    return PinnedShardings{{}, {P()}};
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 0);
    const auto& lit = attrs.get<std::shared_ptr<const ir::Literal>>("value");
    return {Aval{lit->shape, lit->dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    // A literal is replicated data; every device can slice its block from it.
    return FactorRuleBuilder::created(in, out[0], /*positional=*/false);
  }
  std::vector<Array> vjp(const VjpArgs&) const override { return {}; }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    const auto& lit = c.attrs.get<std::shared_ptr<const ir::Literal>>("value");
    std::memcpy(c.out[0], lit->bytes.data(), lit->bytes.size());
  }
  bool to_hlo(ir::HloEmitter& e) const override {
    e.result(0, e.literal(*e.attrs().get<std::shared_ptr<const ir::Literal>>("value")));
    return true;
  }
  const ir::Literal* constant_value(const Attrs& attrs) const override {
    return attrs.get<std::shared_ptr<const ir::Literal>>("value").get();
  }
};

// Identity primitives share this shape.
class Identity : public Primitive {
 public:
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    return {in[0]};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::elementwise(in, out[0]);
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    std::memcpy(c.out[0], c.in[0], static_cast<size_t>(c.out_aval(0).nbytes()));
  }
};

// ---- sharding_constraint{mesh, spec, unreduced?, reduced?}: with_sharding_constraint;
// transposes to itself ----
class ShardingConstraint final : public Identity {
 public:
  std::string_view name() const override { return "sharding_constraint"; }
  bool accepts_quantized() const override { return true; }
  const Batching* batching() const override {
    static const ConstraintBatching b(*this);
    return &b;
  }
  std::optional<PinnedShardings> pinned_shardings(const Attrs& attrs) const override {
    const auto& spec = attrs.get<PartitionSpec>("spec");
    PinnedShardings p{{spec}, {spec}};
    p.constrains_operand = true;
    p.operand_unreduced = p.result_unreduced = ir::axis_sets(attrs, "unreduced", 1);
    p.operand_reduced = p.result_reduced = ir::axis_sets(attrs, "reduced", 1);
    if (attrs.has("unconstrained")) {
      for (int64_t d : attrs.ints("unconstrained")) p.unconstrained.push_back(static_cast<int>(d));
    }
    return p;
  }
  // As JAX writes a constraint: a Sharding custom call carrying the sharding.
  bool to_hlo(ir::HloEmitter& e) const override {
    NamedSharding s(e.attrs().get<Mesh>("mesh"), e.attrs().get<PartitionSpec>("spec"));
    const std::string sharding = ir::hlo_sharding(s, "with_sharding_constraint");
    std::string extra;
    if (e.attrs().has("unconstrained")) {  // as JAX writes P.UNCONSTRAINED dimensions
      extra = fmt::format(", backend_config=\"unspecified_dims=[{}]\"",
                          fmt::join(e.attrs().ints("unconstrained"), ","));
    }
    e.result(0, e.emit(e.out(0), "custom-call", {e.operand(0)},
                       "custom_call_target=\"Sharding\", sharding=" + sharding + extra));
    return true;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions& r) const override {
    auto out = Identity::infer(in, attrs, r);
    NamedSharding s(attrs.get<Mesh>("mesh"), attrs.get<PartitionSpec>("spec"));
    s.check_shape(in[0].shape);
    detail::check_block_sharding("with_sharding_constraint", in[0].dtype, in[0].shape, s);
    if (attrs.has("unconstrained")) {
      for (int64_t d : attrs.ints("unconstrained")) {
        detail::check(d >= 0 && d < in[0].ndim() && s.spec()[static_cast<int>(d)].empty(),
                      "with_sharding_constraint",
                      "unconstrained dimension {} of {} must be an unsplit dimension of {}", d,
                      in[0].to_string(), s.spec().to_string());
      }
    }
    return out;
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    if (!a.cotangents[0].valid()) return {Array()};
    // Explicit sharding: a reshard's cotangent goes back to the operand's type (as JAX
    // transposes reshard), so an FSDP weight gathered for use gets its gradient reduce-scattered
    // to its own split instead of all-reduced to the gathered layout.
    if (auto t = detail::explicit_type(a.primals[0].impl()->sharding)) {
      return {detail::give_type(a.cotangents[0], *t)};
    }
    return {detail::bind1(*this, {a.cotangents[0]}, a.attrs)};
  }
};

// ---- stop_gradient: identity with a zero VJP ----
class StopGradient final : public Identity {
 public:
  std::string_view name() const override { return "stop_gradient"; }
  bool accepts_quantized() const override { return true; }
  const Batching* batching() const override {
    static const SameShapeBatching b(*this);
    return &b;
  }
  std::vector<Array> vjp(const VjpArgs&) const override { return {Array()}; }
  bool is_view(const Aval&, const Aval&, const Attrs&) const override { return true; }
  bool to_hlo(ir::HloEmitter& e) const override {  // no instruction: gradients only
    e.result(0, e.operand(0));
    return true;
  }
};

// ---- copy: an explicit copy (the partitioner's and optimiser's identity) ----
class Copy final : public Identity {
 public:
  std::string_view name() const override { return "copy"; }
  bool accepts_quantized() const override { return true; }
  bool to_hlo(ir::HloEmitter& e) const override {
    e.result(0, e.emit(e.out(0), "copy", {e.operand(0)}));
    return true;
  }
  const Batching* batching() const override {
    static const SameShapeBatching b(*this);
    return &b;
  }
  std::vector<Array> vjp(const VjpArgs& a) const override { return {a.cotangents[0]}; }
};

Register<Constant> r_constant;
Register<ShardingConstraint> r_constraint;
Register<StopGradient> r_stop;
Register<Copy> r_copy;

}  // namespace
}  // namespace partix::prim

namespace partix::prim {
namespace {

// Whether a remat region's save policy keeps the results of `in` (attribute "save": "dots"
// the results of contractions, "dots_no_batch" those without batch dimensions, "names" the
// checkpoint_name values whose names are listed, "names_except" those whose names are not,
// "primitives" the results of the primitives listed and the values named `name=N` for each N
// listed: a policy function's answers, or two policies together).
bool saves(const ir::Instr& in, const Attrs& attrs) {
  const std::string& save = attrs.str("save");
  const auto listed = [&](const std::string& name) {
    const ir::Strings& names = attrs.get<ir::Strings>("names");
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const std::string_view prim = in.prim->name();
  if (save == "primitives") {  // a primitive listed, or a value whose name is listed as name=...
    return listed(std::string(prim)) ||
           (prim == "checkpoint_name" && listed("name=" + in.attrs.str("name")));
  }
  if (prim == "dot_general") {
    return save == "dots" || (save == "dots_no_batch" &&
                              (!in.attrs.has("lhs_batch") || in.attrs.ints("lhs_batch").empty()));
  }
  if (prim == "checkpoint_name") {
    if (save == "names") return listed(in.attrs.str("name"));
    if (save == "names_except") return !listed(in.attrs.str("name"));
  }
  return false;
}

// The values of a remat region its save policy keeps, in program order.
std::vector<int> saved_values(const ir::Program& body, const Attrs& attrs) {
  std::vector<int> out;
  for (const ir::Instr& in : body.instrs) {
    if (saves(in, attrs)) out.insert(out.end(), in.outputs.begin(), in.outputs.end());
  }
  return out;
}

// ---- checkpoint_name{name}: names a value for a remat save policy; an identity ----
class CheckpointName final : public Identity {
 public:
  std::string_view name() const override { return "checkpoint_name"; }
  bool accepts_quantized() const override { return true; }
  bool to_hlo(ir::HloEmitter& e) const override {  // no instruction: a remat policy's name
    e.result(0, e.operand(0));
    return true;
  }
  const Batching* batching() const override {
    static const SameShapeBatching b(*this);
    return &b;
  }
  std::vector<Array> vjp(const VjpArgs& a) const override { return {a.cotangents[0]}; }
  bool is_view(const Aval&, const Aval&, const Attrs&) const override { return true; }
};

Register<CheckpointName> r_checkpoint_name;

// ---- remat: calls its region; its VJP evaluates the region again (rematerialisation) ----
class Remat final : public Primitive {
 public:
  std::string_view name() const override { return "remat"; }
  const Batching* batching() const override {  // vmap: the region batched
    static const RegionsBatching b(*this);
    return &b;
  }
  bool accepts_quantized() const override { return true; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions& regions) const override {
    detail::check(regions.size() == 1, name(), "needs exactly one region");
    const ir::Program& body = *regions[0];
    detail::check(in.size() == body.params.size(), name(), "{} operands for {} parameters",
                  in.size(), body.params.size());
    std::vector<Aval> out;
    for (int v : body.results) out.push_back(body.aval(v));
    return out;
  }
  // Inside shard_map: results vary as the region's results do.
  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>&,
                                             const Attrs&, const Regions& regions,
                                             size_t) const override {
    return results_varying(*regions[0]);
  }
  // Each region parameter takes its own operand's varying axes (checkpoint() traces them so):
  // joining the operands outside too would widen them twice, and the gradient would sum over
  // the widened axes twice.
  bool joins_operand_varying() const override { return false; }
  // Under a save policy (attribute "save"): the forward pass keeps the values it names.
  bool evaluate_saving(const std::vector<Array>& operands, const Attrs& attrs,
                       const Regions& regions, const std::vector<bool>*,
                       std::vector<Array>* results, std::vector<Array>* residuals) const override {
    if (!attrs.has("save")) return false;
    const ir::Program& body = *regions[0];
    const std::vector<Array> env = autodiff::evaluate(body, operands);
    results->clear();
    for (int v : body.results) results->push_back(env[static_cast<size_t>(v)]);
    for (int v : saved_values(body, attrs)) residuals->push_back(env[static_cast<size_t>(v)]);
    return true;
  }
  // Recomputes the region's activations from its inputs (but for those saved), then goes
  // backward through it.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const ir::Program& body = *a.regions[0];
    std::map<int, Array> known;
    if (a.residuals != nullptr && a.attrs.has("save")) {
      const std::vector<int> ids = saved_values(body, a.attrs);
      for (size_t i = 0; i < ids.size() && i < a.residuals->size(); ++i)
        known[ids[i]] = (*a.residuals)[i];
      // A saved name saves the value it names: what computes it is not recomputed either.
      for (const ir::Instr& in : body.instrs) {
        if (in.prim->name() != "checkpoint_name") continue;
        if (auto it = known.find(in.outputs[0]); it != known.end())
          known[in.inputs[0]] = it->second;
      }
    }
    autodiff::Residuals saved;
    std::vector<Array> env = autodiff::evaluate(body, a.primals, &saved, a.active, &known);
    return autodiff::backward(body, env, a.cotangents, &saved, a.active);
  }
  // Partitioning sees through the recomputation boundary.
  bool inlined_when_compiled() const override { return true; }
  void reference(const KernelCall&) const override {
    detail::internal_error("remat", "a remat region reached the interpreter uninlined");
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
};

Register<Remat> r_remat;

}  // namespace
}  // namespace partix::prim
