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

}  // namespace

InstrPlan plan_instr(const Mesh& mesh, const ir::Program& g, const ir::Instr& in,
                     const ValueFacts& f) {
  InstrPlan plan;
  if (auto pin = in.prim->partitioning().pinned_shardings(in.attrs)) {
    plan.handler = pin->per_device_body      ? Handler::kShardMap
                   : pin->constrains_operand ? Handler::kConstraint
                                             : Handler::kPinned;
    for (const auto& s : pin->operands) plan.operands.emplace_back(mesh, s);
    for (const auto& s : pin->results) plan.results.emplace_back(mesh, s);
    plan.reduce_now.assign(plan.results.size(), {});
    return plan;
  }
  if (in.prim->execution().runs_regions() && regions_propagated(in))
    return plan_control_flow(mesh, in);
  std::vector<ir::Aval> ia, oa;
  for (int v : in.inputs) ia.push_back(g.aval(v));
  for (int v : in.outputs) oa.push_back(g.aval(v));
  plan.rule = in.prim->partitioning().factor_rule(ia, oa, in.attrs);
  prim::FactorRule& rule = plan.rule;

  // Gathers and scatters along a split axis work on each device's block: the indexed factor
  // becomes a reduction (masked local lookups, summed) or, for scatters, passes through (each
  // device adds into its own rows).
  if (auto ix = in.prim->partitioning().axis_indexing(ia, in.attrs);
      ix && table_axis_sharding(in, f, ix->axis, /*include_result=*/ix->scatter)) {
    Handler h = ix->scatter
                    ? (ix->elementwise ? Handler::kScatterAlongSharded : Handler::kScatterSharded)
                    : (ix->elementwise ? Handler::kTakeAlongSharded : Handler::kTakeSharded);
    bool worth = true;
    if (h == Handler::kTakeSharded) {
      // Masked row lookups cost an all-reduce of this device's rows of the result (about twice
      // its bytes); gathering the table costs the table.
      double local_out = static_cast<double>(oa[0].nbytes());
      if (const auto& ids = f.sharding(in.inputs[1]); ids) {
        local_out /= static_cast<double>(mesh.size()) / static_cast<double>(ids->num_replicas());
      }
      // Not for quantized rows: the masked lookups would be summed, and blocks cannot be.
      worth = !is_quantized(ia[0].dtype) && 2.0 * local_out < static_cast<double>(ia[0].nbytes());
    }
    if (worth) {
      plan.handler = h;
      int fac = rule.operands[0][static_cast<size_t>(ix->axis)][0];
      rule.factors[static_cast<size_t>(fac)].kind =
          ix->scatter ? prim::FactorKind::kPassThrough : prim::FactorKind::kReduction;
    }
  }

  // Unreduced operands linear ops may consume as they are.
  std::vector<std::set<std::string>> op_unred(in.inputs.size());
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    const auto& s = f.sharding(in.inputs[i]);
    if (s) op_unred[i] = s->unreduced();
  }
  std::set<std::string> pass;
  prim::Linearity lin = in.prim->partitioning().linearity(in.attrs);
  if (plan.handler == Handler::kTakeSharded || plan.handler == Handler::kTakeAlongSharded) {
    lin = prim::Linearity::kNone;
  }
  if (lin == prim::Linearity::kLinear && !in.inputs.empty()) {
    pass = op_unred[0];
    for (size_t i = 1; i < op_unred.size(); ++i) {
      if (op_unred[i] != pass) pass.clear();
    }
  } else if (lin == prim::Linearity::kMultilinear) {
    int holder = -1, count = 0;
    for (size_t i = 0; i < op_unred.size(); ++i) {
      if (!op_unred[i].empty()) {
        holder = static_cast<int>(i);
        count++;
      }
    }
    if (count == 1) {
      pass = op_unred[static_cast<size_t>(holder)];
      // An elementwise product keeps a partial sum only when scaled by a scalar: against a
      // full tensor it just moves the reduction later, usually after the reduced value was
      // made anyway (e.g. a residual stream feeding an RMSNorm).
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
    }
  }

  // Factor assignment; axes consumed unreduced are not available to factors.
  std::vector<TensorView> views;
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    auto s = f.sharding(in.inputs[i]);
    views.push_back({&rule.operands[i], s, f.priority(in.inputs[i]),
                     dtype_block_elems(g.aval(in.inputs[i]).dtype)});
  }
  for (size_t k = 0; k < in.outputs.size(); ++k) {
    views.push_back({&rule.results[k], f.sharding(in.outputs[k]), f.priority(in.outputs[k]),
                     dtype_block_elems(g.aval(in.outputs[k]).dtype)});
  }
  // Known shardings minus the passed-through axes (they cannot shard a factor here).
  for (auto& v : views) {
    if (!v.sharding || pass.empty()) continue;
    std::vector<PartitionSpec::Entry> e;
    for (const auto& entry : v.sharding->spec().entries()) {
      PartitionSpec::Entry kept;
      const std::vector<std::string> passed(pass.begin(), pass.end());
      for (const auto& a : entry) {
        if (detail::overlaps_any(mesh, a, passed)) break;
        kept.push_back(a);
      }
      e.push_back(kept);
    }
    v.sharding = NamedSharding(mesh, PartitionSpec(e));
  }
  plan.assignment = assign_factors(mesh, rule, views);
  Assignment& a = plan.assignment;

  // Results: reduction factors that are split leave sums unreduced; max/min reduce at once.
  std::set<std::string> sum_axes;
  std::set<std::string> now_axes;
  prim::ReduceKind now_kind = prim::ReduceKind::kSum;
  for (size_t fi = 0; fi < rule.factors.size(); ++fi) {
    const prim::Factor& fac = rule.factors[fi];
    if (fac.kind != prim::FactorKind::kReduction || a.factor_axes[fi].empty()) continue;
    for (const auto& ax : a.factor_axes[fi]) {
      if (fac.reduce == prim::ReduceKind::kSum) {
        sum_axes.insert(ax);
      } else {
        now_axes.insert(ax);
        now_kind = fac.reduce;
      }
    }
  }
  std::set<std::string> result_unred = sum_axes;
  result_unred.insert(pass.begin(), pass.end());
  for (size_t k = 0; k < in.outputs.size(); ++k) {
    plan.results.push_back(back_project(mesh, a, rule.results[k], rule, result_unred));
    plan.reduce_now.push_back(now_axes);
    plan.reduce_now_kind.push_back(now_kind);
  }
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    std::set<std::string> keep;
    for (const auto& ax : op_unred[i]) {
      if (pass.count(ax)) keep.insert(ax);
    }
    // An operand without a split sum factor (scatter_add's operand, which the op is linear in)
    // must arrive as a partial sum over that factor's axes, or it would be counted repeatedly.
    for (size_t fi = 0; fi < rule.factors.size(); ++fi) {
      const prim::Factor& fac = rule.factors[fi];
      if (plan.handler == Handler::kTakeSharded || plan.handler == Handler::kTakeAlongSharded ||
          fac.kind != prim::FactorKind::kReduction || fac.reduce != prim::ReduceKind::kSum ||
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
  return plan;
}

}  // namespace partix::spmd
