#include "spmd/control_flow.h"

#include "core/errors.h"
#include "spmd/partition.h"
#include "spmd/propagate.h"
#include "spmd/simplify.h"

namespace partix::spmd {

namespace {

using Layout = prim::Primitive::RegionLayout;

Layout layout_of(const ir::Instr& in) { return in.prim->region_layout(in.attrs); }

// A scanned value's sharding from its slice's, and back: axis 0 is never split.
NamedSharding with_leading(const NamedSharding& s) {
  std::vector<PartitionSpec::Entry> e{{}};
  e.insert(e.end(), s.spec().entries().begin(), s.spec().entries().end());
  return NamedSharding(s.mesh(), PartitionSpec(e));
}

NamedSharding without_leading(const NamedSharding& s) {
  const auto& entries = s.spec().entries();
  std::vector<PartitionSpec::Entry> e;
  if (!entries.empty()) e.assign(entries.begin() + 1, entries.end());
  return NamedSharding(s.mesh(), PartitionSpec(e));
}

NamedSharding reduced(const Mesh& mesh, const std::optional<NamedSharding>& s) {
  return s ? NamedSharding(mesh, s->spec()) : NamedSharding(mesh, P());
}

bool is_scanned_operand(const Layout& l, size_t j) {
  return j >= l.num_carry && j < l.num_carry + l.num_xs;
}

constexpr int kFixedPointRounds = 4;

}  // namespace

bool regions_propagated(const ir::Instr& in) {
  for (const auto& r : in.regions) {
    for (int v : r->params) {
      if (!r->info(v).sharding) return false;
    }
    for (int v : r->results) {
      if (!r->info(v).sharding) return false;
    }
  }
  return true;
}

InstrPlan plan_control_flow(const Mesh& mesh, const ir::Instr& in) {
  const Layout l = layout_of(in);
  const ir::Program& body = *in.regions[l.body];
  InstrPlan plan;
  plan.handler = Handler::kControlFlow;
  auto param = [&](size_t j) {
    return reduced(mesh, body.info(body.params[l.param_offset + j]).sharding);
  };
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    if (i < l.first_operand) {
      plan.operands.emplace_back(mesh, P());
      continue;
    }
    const size_t j = i - l.first_operand;
    plan.operands.push_back(is_scanned_operand(l, j) ? with_leading(param(j)) : param(j));
  }
  for (size_t k = 0; k < in.outputs.size(); ++k) {
    if (k < l.num_carry) {
      plan.results.push_back(param(k));
    } else if (l.stacks_results) {
      plan.results.push_back(with_leading(reduced(mesh, body.info(body.results[k]).sharding)));
    } else {
      plan.results.push_back(reduced(mesh, body.info(body.results[k]).sharding));
    }
  }
  plan.reduce_now.assign(plan.results.size(), {});
  plan.reduce_now_kind.assign(plan.results.size(), prim::ReduceKind::kSum);
  return plan;
}

void propagate_regions(ir::Program& g, const Mesh& mesh) {
  for (ir::Instr& in : g.instrs) {
    if (!in.prim->execution().runs_regions()) continue;
    const Layout l = layout_of(in);
    std::vector<NamedSharding> params;
    // Parameters made per run (fori_loop's index) are replicated.
    for (size_t j = 0; j < l.param_offset; ++j) params.emplace_back(mesh, P());
    for (size_t i = l.first_operand; i < in.inputs.size(); ++i) {
      NamedSharding s = reduced(mesh, g.info(in.inputs[i]).sharding);
      params.push_back(is_scanned_operand(l, i - l.first_operand) ? without_leading(s) : s);
    }
    // A carry starts as the loop's result was propagated (that is its init's sharding unless
    // users downstream asked for another).
    for (size_t k = 0; k < l.num_carry; ++k) {
      params[l.param_offset + k] = reduced(mesh, g.info(in.outputs[k]).sharding);
    }
    // A stacked output (ys) that nothing outside split is left to the body: asking a value the
    // body splits to be whole would gather it every iteration, where resharding the stack
    // outside the loop costs one collective.
    std::vector<std::optional<NamedSharding>> outs;
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      NamedSharding s = reduced(mesh, g.info(in.outputs[k]).sharding);
      if (!l.stacks_results || k < l.num_carry) {
        outs.emplace_back(s);
      } else if (s.is_fully_replicated()) {
        outs.emplace_back(std::nullopt);
      } else {
        outs.emplace_back(without_leading(s));
      }
    }
    // The carries' fixed point: what the body makes of a carry is the carry's next sharding
    // (so a constraint inside the body wins), until an iteration changes nothing.
    const ir::Program& source = *in.regions[l.body];
    for (int round = 0; round < kFixedPointRounds && l.num_carry > 0; ++round) {
      ir::Program body = source;
      std::vector<std::optional<NamedSharding>> free = outs;
      for (size_t k = 0; k < l.num_carry; ++k) free[k] = std::nullopt;
      propagate(body, mesh, params, free);
      bool stable = true;
      for (size_t k = 0; k < l.num_carry; ++k) {
        NamedSharding r = reduced(mesh, body.info(body.results[k]).sharding);
        if (!(r == params[l.param_offset + k])) {
          params[l.param_offset + k] = r;
          stable = false;
        }
      }
      if (stable) break;
    }
    for (size_t k = 0; k < l.num_carry; ++k) outs[k] = params[l.param_offset + k];
    for (size_t r = 0; r < in.regions.size(); ++r) {
      ir::Program region = *in.regions[r];
      region.mesh = mesh;
      // A predicate is wanted replicated: every device decides alike.
      std::vector<std::optional<NamedSharding>> want = outs;
      if (static_cast<int>(r) == l.predicate_region) want = {NamedSharding(mesh, P())};
      propagate(region, mesh, params, want);
      in.regions[r] = std::make_shared<const ir::Program>(std::move(region));
    }
  }
}

void emit_control_flow(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan) {
  std::vector<int> ins;
  for (size_t i = 0; i < in.inputs.size(); ++i)
    ins.push_back(c.local(in.inputs[i], plan.operands[i]));
  // Each region is partitioned once: the per-device body every iteration runs.
  prim::Regions regions;
  for (const auto& r : in.regions) {
    Partitioned p = partition(*r, c.mesh, {});
    drop_trivial_collectives(p.local);
    p.local.name = r->name;
    c.out.warnings.insert(c.out.warnings.end(), p.warnings.begin(), p.warnings.end());
    regions.push_back(std::make_shared<const ir::Program>(std::move(p.local)));
  }
  std::vector<int> outs =
      c.builder.emit(in.prim->name(), ins, in.attrs, std::nullopt, in.scope, regions);
  for (size_t k = 0; k < outs.size(); ++k) {
    c.builder.program().info(outs[k]).sharding = plan.results[k];
    c.bind_result(in.outputs[k], outs[k], plan.results[k]);
  }
}

}  // namespace partix::spmd
