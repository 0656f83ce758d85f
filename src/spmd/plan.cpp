#include "spmd/plan.h"

#include <algorithm>

#include "core/errors.h"
#include "sharding/axes.h"
#include "spmd/control_flow.h"

namespace partix::spmd {

namespace {

bool uses_axis(const NamedSharding& s, const std::string& a) {
  return detail::overlaps_any(s.mesh(), a, s.spec().axes());
}

// The indexed axis of a gather / scatter is split in a known sharding of the table (or, for a
// scatter, of its result).
std::optional<AxisList> table_axis_sharding(const ir::Instr& in, const ValueFacts& f, int axis,
                                            bool include_result) {
  std::vector<int> candidates{in.inputs[0]};
  if (include_result) candidates.push_back(in.outputs[0]);
  for (int v : candidates) {
    const auto& s = f.sharding(v);
    if (s && !s->spec()[axis].empty()) return s->spec()[axis];
  }
  return std::nullopt;
}

// An op that fixes its shardings (shard_map, a constraint, a literal) keeps them.
InstrPlan plan_pinned(const Mesh& mesh, const prim::Partitioning::PinnedShardings& pin) {
  InstrPlan plan;
  plan.handler = pin.per_device_body      ? Handler::kShardMap
                 : pin.constrains_operand ? Handler::kConstraint
                                          : Handler::kPinned;
  for (size_t i = 0; i < pin.operands.size(); ++i) plan.operands.push_back(pin.operand(mesh, i));
  for (size_t k = 0; k < pin.results.size(); ++k) plan.results.push_back(pin.result(mesh, k));
  plan.reduce_now.assign(plan.results.size(), {});
  return plan;
}

// A constraint's unconstrained dimensions (P.UNCONSTRAINED) split as its result is already
// known to be, else as its operand is: the constrained dimensions as the constraint says, no
// axis twice. Operand and result then agree (the constraint reshards to it).
void fill_unconstrained(const Mesh& mesh, const ir::Program& g, const ir::Instr& in,
                        const ValueFacts& f, const std::vector<int>& free, InstrPlan& plan) {
  const PartitionSpec& spec = plan.results[0].spec();
  std::vector<PartitionSpec::Entry> entries;
  for (int d = 0; d < g.aval(in.outputs[0]).ndim(); ++d) entries.push_back(spec[d]);
  std::vector<std::string> used = spec.axes();
  for (int d : free) {
    for (int v : {in.outputs[0], in.inputs[0]}) {
      const auto& s = f.sharding(v);
      if (!s || s->spec()[d].empty()) continue;
      for (const auto& a : s->spec()[d]) {
        if (!detail::overlaps_any(mesh, a, used)) {
          entries[static_cast<size_t>(d)].push_back(a);
          used.push_back(a);
        }
      }
      break;
    }
  }
  NamedSharding merged(mesh, PartitionSpec(entries));
  plan.results[0] = merged;
  plan.operands[0] = merged;
}

bool takes_sharded(const InstrPlan& plan) {
  return plan.handler == Handler::kTakeSharded || plan.handler == Handler::kTakeAlongSharded;
}

// Gathers and scatters along a split axis work on each device's block: the indexed factor
// becomes a reduction (masked local lookups, summed) or, for scatters, passes through (each
// device adds into its own rows).
void plan_axis_indexing(const Mesh& mesh, const ir::Instr& in, const ValueFacts& f,
                        const std::vector<ir::Aval>& ia, const std::vector<ir::Aval>& oa,
                        InstrPlan& plan) {
  auto ix = in.prim->partitioning().axis_indexing(ia, in.attrs);
  if (!ix || !table_axis_sharding(in, f, ix->axis, /*include_result=*/ix->scatter)) return;
  const Handler h =
      ix->scatter ? (ix->elementwise ? Handler::kScatterAlongSharded : Handler::kScatterSharded)
                  : (ix->elementwise ? Handler::kTakeAlongSharded : Handler::kTakeSharded);
  if (h == Handler::kTakeSharded) {
    // Masked row lookups cost an all-reduce of this device's rows of the result (about twice
    // its bytes); gathering the table costs the table.
    double local_out = static_cast<double>(oa[0].nbytes());
    if (const auto& ids = f.sharding(in.inputs[1]); ids) {
      local_out /= static_cast<double>(mesh.size()) / static_cast<double>(ids->num_replicas());
    }
    // Not for quantized rows: the masked lookups would be summed, and blocks cannot be.
    if (is_quantized(ia[0].dtype) || 2.0 * local_out >= static_cast<double>(ia[0].nbytes())) return;
  }
  plan.handler = h;
  const int fac = plan.rule.operands[0][static_cast<size_t>(ix->axis)][0];
  plan.rule.factors[static_cast<size_t>(fac)].kind =
      ix->scatter ? prim::FactorKind::kPassThrough : prim::FactorKind::kReduction;
}

// The unreduced axes a linear op consumes as they are (its result stays a partial sum over
// them): a linear op's when all operands share them; a multilinear op's when one operand holds
// them and no other is split on them (an elementwise product only when the others are
// scalars: against a full tensor it just moves the reduction later, usually after the reduced
// value was made anyway, e.g. a residual stream feeding an RMSNorm).
std::set<std::string> passed_unreduced(const ir::Program& g, const ir::Instr& in,
                                       const ValueFacts& f, prim::Linearity lin,
                                       const std::vector<std::set<std::string>>& op_unred) {
  std::set<std::string> pass;
  if (lin == prim::Linearity::kLinear && !in.inputs.empty()) {
    pass = op_unred[0];
    for (size_t i = 1; i < op_unred.size(); ++i) {
      if (op_unred[i] != pass) pass.clear();
    }
    return pass;
  }
  if (lin != prim::Linearity::kMultilinear) return pass;
  int holder = -1, count = 0;
  for (size_t i = 0; i < op_unred.size(); ++i) {
    if (!op_unred[i].empty()) {
      holder = static_cast<int>(i);
      count++;
    }
  }
  if (count != 1) return pass;
  pass = op_unred[static_cast<size_t>(holder)];
  if (in.prim->execution().is_elementwise()) {
    for (size_t i = 0; i < in.inputs.size(); ++i) {
      if (static_cast<int>(i) != holder && g.aval(in.inputs[i]).ndim() > 0) pass.clear();
    }
  }
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    const auto& s = f.sharding(in.inputs[i]);
    if (static_cast<int>(i) == holder || !s) continue;
    for (const auto& a : pass) {
      if (uses_axis(*s, a)) pass.clear();
      if (pass.empty()) break;
    }
  }
  return pass;
}

// The operands' and results' known shardings as factor-assignment views, minus the axes passed
// through unreduced (they cannot shard a factor here).
std::vector<TensorView> factor_views(const Mesh& mesh, const ir::Program& g, const ir::Instr& in,
                                     const ValueFacts& f, prim::FactorRule& rule,
                                     const std::set<std::string>& pass) {
  std::vector<TensorView> views;
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    views.push_back({&rule.operands[i], f.sharding(in.inputs[i]), f.priority(in.inputs[i]),
                     dtype_block_elems(g.aval(in.inputs[i]).dtype)});
  }
  for (size_t k = 0; k < in.outputs.size(); ++k) {
    views.push_back({&rule.results[k], f.sharding(in.outputs[k]), f.priority(in.outputs[k]),
                     dtype_block_elems(g.aval(in.outputs[k]).dtype)});
  }
  if (pass.empty()) return views;
  const std::vector<std::string> passed(pass.begin(), pass.end());
  for (auto& v : views) {
    if (!v.sharding) continue;
    std::vector<PartitionSpec::Entry> e;
    for (const auto& entry : v.sharding->spec().entries()) {
      PartitionSpec::Entry kept;
      for (const auto& a : entry) {
        if (detail::overlaps_any(mesh, a, passed)) break;
        kept.push_back(a);
      }
      e.push_back(kept);
    }
    v.sharding = NamedSharding(mesh, PartitionSpec(e));
  }
  return views;
}

// Results: reduction factors that are split leave sums unreduced; max/min reduce at once.
void plan_results(const Mesh& mesh, const ir::Instr& in, const std::set<std::string>& pass,
                  InstrPlan& plan) {
  const prim::FactorRule& rule = plan.rule;
  const Assignment& a = plan.assignment;
  std::set<std::string> result_unred = pass, now_axes;
  prim::ReduceKind now_kind = prim::ReduceKind::kSum;
  for (size_t fi = 0; fi < rule.factors.size(); ++fi) {
    const prim::Factor& fac = rule.factors[fi];
    if (fac.kind != prim::FactorKind::kReduction) continue;
    for (const auto& ax : a.factor_axes[fi]) {
      if (fac.reduce == prim::ReduceKind::kSum) {
        result_unred.insert(ax);
      } else {
        now_axes.insert(ax);
        now_kind = fac.reduce;
      }
    }
  }
  for (size_t k = 0; k < in.outputs.size(); ++k) {
    plan.results.push_back(back_project(mesh, a, rule.results[k], rule, result_unred));
    plan.reduce_now.push_back(now_axes);
    plan.reduce_now_kind.push_back(now_kind);
  }
}

// Operands: each keeps the unreduced axes passed through; an operand without a split sum
// factor (scatter_add's operand, which the op is linear in) must arrive as a partial sum over
// that factor's axes, or it would be counted repeatedly.
void plan_operands(const Mesh& mesh, const ir::Instr& in,
                   const std::vector<std::set<std::string>>& op_unred,
                   const std::set<std::string>& pass, InstrPlan& plan) {
  const prim::FactorRule& rule = plan.rule;
  const Assignment& a = plan.assignment;
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    std::set<std::string> keep;
    for (const auto& ax : op_unred[i]) {
      if (pass.count(ax)) keep.insert(ax);
    }
    for (size_t fi = 0; fi < rule.factors.size() && !takes_sharded(plan); ++fi) {
      const prim::Factor& fac = rule.factors[fi];
      if (fac.kind != prim::FactorKind::kReduction || fac.reduce != prim::ReduceKind::kSum ||
          a.factor_axes[fi].empty()) {
        continue;
      }
      bool has = false;
      for (const auto& d : rule.operands[i]) {
        has = has || std::find(d.begin(), d.end(), static_cast<int>(fi)) != d.end();
      }
      if (!has) keep.insert(a.factor_axes[fi].begin(), a.factor_axes[fi].end());
    }
    plan.operands.push_back(back_project(mesh, a, rule.operands[i], rule, keep));
  }
}

}  // namespace

InstrPlan plan_instr(const Mesh& mesh, const ir::Program& g, const ir::Instr& in,
                     const ValueFacts& f) {
  if (auto pin = in.prim->partitioning().pinned_shardings(in.attrs)) {
    InstrPlan plan = plan_pinned(mesh, *pin);
    if (!pin->unconstrained.empty()) fill_unconstrained(mesh, g, in, f, pin->unconstrained, plan);
    return plan;
  }
  if (in.prim->execution().runs_regions() && regions_propagated(in))
    return plan_control_flow(mesh, in);
  std::vector<ir::Aval> ia, oa;
  for (int v : in.inputs) ia.push_back(g.aval(v));
  for (int v : in.outputs) oa.push_back(g.aval(v));
  InstrPlan plan;
  plan.rule = in.prim->partitioning().factor_rule(ia, oa, in.attrs);
  plan_axis_indexing(mesh, in, f, ia, oa, plan);

  // Unreduced operands linear ops may consume as they are.
  std::vector<std::set<std::string>> op_unred(in.inputs.size());
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    if (const auto& s = f.sharding(in.inputs[i]); s) op_unred[i] = s->unreduced();
  }
  const prim::Linearity lin =
      takes_sharded(plan) ? prim::Linearity::kNone : in.prim->partitioning().linearity(in.attrs);
  const std::set<std::string> pass = passed_unreduced(g, in, f, lin, op_unred);

  // Factor assignment; axes consumed unreduced are not available to factors.
  std::vector<TensorView> views = factor_views(mesh, g, in, f, plan.rule, pass);
  plan.assignment = assign_factors(mesh, plan.rule, views);
  plan_results(mesh, in, pass, plan);
  plan_operands(mesh, in, op_unred, pass, plan);
  if (!in.prim->partitioning().mirrored_dims(ia, in.attrs).empty()) {
    plan.handler = Handler::kMirrorSharded;
  }
  return plan;
}

}  // namespace partix::spmd
