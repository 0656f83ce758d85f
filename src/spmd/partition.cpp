#include "spmd/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/errors.h"
#include "ir/primitive.h"
#include "sharding/axes.h"
#include "spmd/control_flow.h"
#include "spmd/cost.h"
#include "spmd/handlers.h"
#include "spmd/plan.h"
#include "spmd/reshard.h"

namespace partix::spmd {

namespace {

class Partitioner : public PartitionContext {
 public:
  Partitioner(const ir::Program& global, const Mesh& m)
      : PartitionContext(global, m),
        local_of_(global.values.size(), -1),
        producer_(global.values.size(), -1),
        is_param_(global.values.size(), false) {
    out.local.name = g.name;
    out.local.mesh = mesh;
    for (const auto& v : g.values) sh_.push_back(v.sharding);
    for (size_t i = 0; i < g.instrs.size(); ++i) {
      for (int o : g.instrs[i].outputs) producer_[static_cast<size_t>(o)] = static_cast<int>(i);
    }
    for (int v : g.params) is_param_[static_cast<size_t>(v)] = true;
  }

  Partitioned run(const std::vector<std::optional<NamedSharding>>& out_shardings) {
    for (int v : g.params) {
      const NamedSharding& s = sharding(v);
      local_of_[static_cast<size_t>(v)] =
          builder.param(ir::Aval{s.shard_shape(g.aval(v).shape), g.aval(v).dtype}, s);
    }
    for (const ir::Instr& in : g.instrs) partition(in);
    block_ = 0;
    for (size_t k = 0; k < g.results.size(); ++k) {
      int v = g.results[k];
      NamedSharding want =
          k < out_shardings.size() && out_shardings[k] ? *out_shardings[k] : default_result(v);
      out.local.results.push_back(local(v, want));
      out.out_shardings.push_back(want);
    }
    ir::eliminate_dead_code(out.local);
    return std::move(out);
  }

  // A layout as Python writes it: P('x', None), P(None, unreduced={'x'}).
  static std::string spec_text(const NamedSharding& s) {
    std::string t = s.spec().to_string();
    if (s.unreduced().empty()) return t;
    std::vector<std::string> q;
    for (const auto& a : s.unreduced()) q.push_back("'" + a + "'");
    t.pop_back();
    return fmt::format("{}{}unreduced={{{}}})", t, s.spec().size() ? ", " : "", fmt::join(q, ", "));
  }

  // A result no out_sharding names: reduced, except over the Explicit axes its type leaves
  // unreduced, or those a shard_map's out_specs name (the partial sums the user asked for
  // stay, as JAX returns them).
  // Reduced axes (a type) stay likewise: an argument's, a typed value's, a shard_map's.
  NamedSharding default_result(int v) const {
    const NamedSharding& s = sharding(v);
    std::set<std::string> keep, reduced;
    if (g.info(v).typed) {
      for (const auto& a : s.unreduced()) {
        if (detail::is_axis_type(mesh, a, AxisType::Explicit)) keep.insert(a);
      }
    }
    if (g.info(v).typed || is_param(v)) reduced = s.reduced();
    if (const int i = producer_[static_cast<size_t>(v)]; i >= 0) {
      const ir::Instr& in = g.instrs[static_cast<size_t>(i)];
      const auto pin = in.prim->partitioning().pinned_shardings(in.attrs);
      for (size_t k = 0; pin && k < in.outputs.size(); ++k) {
        if (in.outputs[k] != v) continue;
        for (const auto& a : pin->at(pin->result_unreduced, k)) {
          if (s.unreduced().count(a)) keep.insert(a);
        }
        const auto r = pin->at(pin->result_reduced, k);
        reduced.insert(r.begin(), r.end());
      }
    }
    return NamedSharding(mesh, s.spec(), keep, reduced);
  }

  // ---- PartitionContext ----
  int local(int v, const NamedSharding& want) override {
    const NamedSharding& have = sharding(v);
    int lv = local_of_[static_cast<size_t>(v)];
    if (have == want) return lv;
    // One resharded copy per value, layout and rematerialised block (see Instr::remat_block).
    auto& copies = resharded_[{v, block_}];
    for (const auto& [layout, r] : copies) {
      if (layout == want) return r;
    }
    ReshardContext ctx{builder, &out.warnings, describe(v)};
    int r = reshard(ctx, lv, g.aval(v).shape, have, want);
    copies.emplace_back(want, r);
    const double moved = is_param(v) ? reshard_bytes(g.aval(v), have, want) : 0;
    if (moved > 0 && !only_gathers(have, want, g.aval(v).ndim())) {
      // A layout change of an argument repeats on every call; passing the argument in the
      // layout its users want moves nothing. (Gathers alone are FSDP by design: not warned.)
      out.warnings.push_back(fmt::format(
          "{} {}{} is resharded from {} to {} on every call ({:.0f} bytes sent per device); "
          "device_put it in {} once to avoid this",
          describe(v), dtype_name(g.aval(v).dtype), shape_to_string(g.aval(v).shape),
          spec_text(have), spec_text(want), moved, spec_text(want)));
    }
    return r;
  }
  void bind_result(int v, int local_value, const NamedSharding& computed) override {
    // The result as computed; reshard if propagation recorded another sharding for it.
    const NamedSharding& want = sharding(v);
    if (computed == want) {
      local_of_[static_cast<size_t>(v)] = local_value;
      return;
    }
    ReshardContext ctx{builder, &out.warnings, describe(v)};
    local_of_[static_cast<size_t>(v)] = reshard(ctx, local_value, g.aval(v).shape, computed, want);
  }

 private:
  const NamedSharding& sharding(int v) const {
    const auto& s = sh_[static_cast<size_t>(v)];
    if (!s) detail::internal_error("partition", fmt::format("%{} has no sharding", v));
    return *s;
  }

  std::string describe(int v) const {
    const int i = producer_[static_cast<size_t>(v)];
    if (i >= 0) {
      const ir::Instr& in = g.instrs[static_cast<size_t>(i)];
      std::string s = fmt::format("%{} ({}", v, in.prim->name());
      if (!in.scope.empty()) s += " in " + in.scope;
      return s + ")";
    }
    const std::string& path = g.info(v).name;
    if (!path.empty()) return fmt::format("%{} (argument {})", v, path);
    return fmt::format("%{} (argument)", v);
  }

  bool is_param(int v) const { return is_param_[static_cast<size_t>(v)]; }

  // Whether `want` is `have` with some axes dropped from the minor end of dimensions (only
  // all_gathers, no layout change).
  static bool only_gathers(const NamedSharding& have, const NamedSharding& want, int rank) {
    if (!want.unreduced().empty() || !have.unreduced().empty()) return false;
    for (int d = 0; d < rank; ++d) {
      auto h = have.spec()[d], w = want.spec()[d];
      if (w.size() > h.size() || !std::equal(w.begin(), w.end(), h.begin())) return false;
    }
    return true;
  }

  // Bytes moved to bring operands into a plan's shardings and its results into theirs.
  double plan_cost(const ir::Instr& in, const InstrPlan& plan) const {
    double cost = 0;
    for (size_t i = 0; i < in.inputs.size() && i < plan.operands.size(); ++i) {
      cost += reshard_bytes(g.aval(in.inputs[i]), sharding(in.inputs[i]), plan.operands[i]);
    }
    for (size_t k = 0; k < in.outputs.size() && k < plan.results.size(); ++k) {
      NamedSharding r = plan.results[k];
      cost += reshard_bytes(g.aval(in.outputs[k]), r, sharding(in.outputs[k]));
    }
    return cost;
  }

  void partition(const ir::Instr& in) {
    block_ = in.remat_block;
    auto known = [this](int v) -> const std::optional<NamedSharding>& {
      return sh_[static_cast<size_t>(v)];
    };
    // Two candidate plans: operands lead (bigger tensors stay put) or results lead (compute
    // what propagation recorded). The one that moves fewer bytes wins.
    ValueFacts by_size{known, [this, &in](int v) {
                         for (int o : in.outputs) {
                           if (o == v) return 0.0;
                         }
                         return static_cast<double>(g.aval(v).nbytes());
                       }};
    ValueFacts by_result{known, [&in](int v) {
                           for (int o : in.outputs) {
                             if (o == v) return 1.0;
                           }
                           return 0.0;
                         }};
    InstrPlan plan = plan_instr(mesh, g, in, by_size);
    if (plan.handler == Handler::kGeneric) {
      double cost = plan_cost(in, plan);
      auto consider = [&](InstrPlan alt) {
        if (alt.handler != Handler::kGeneric) return;
        double c = plan_cost(in, alt);
        if (c < cost) {
          plan = std::move(alt);
          cost = c;
        }
      };
      consider(plan_instr(mesh, g, in, by_result));
      // Each operand leading in turn: propagation may have chosen the plan in which a smaller
      // operand keeps its sharding (a weight split on the contraction, left in place).
      for (int lead : in.inputs) {
        consider(plan_instr(mesh, g, in, ValueFacts{known, [&](int v) {
                                                      return v == lead ? 1e30 : by_size.priority(v);
                                                    }}));
      }
    }
    switch (plan.handler) {
      case Handler::kShardMap:
        return emit_shard_map(*this, in, plan);
      case Handler::kConstraint:
        bind_result(in.outputs[0], local(in.inputs[0], plan.operands[0]), plan.results[0]);
        return;
      case Handler::kTakeSharded:
        return emit_take_sharded(*this, in, plan);
      case Handler::kScatterSharded:
        return emit_scatter_sharded(*this, in, plan);
      case Handler::kTakeAlongSharded:
        return emit_take_along_sharded(*this, in, plan);
      case Handler::kScatterAlongSharded:
        return emit_scatter_along_sharded(*this, in, plan);
      case Handler::kMirrorSharded:
        return emit_mirror_sharded(*this, in, plan);
      case Handler::kControlFlow:
        return emit_control_flow(*this, in, plan);
      case Handler::kPinned:
      case Handler::kGeneric:
        return emit_generic(*this, in, plan);
    }
  }

  std::vector<std::optional<NamedSharding>> sh_;
  std::vector<int> local_of_;
  std::vector<int> producer_;  // per global value: the instruction computing it, or -1
  std::vector<bool> is_param_;
  std::map<std::pair<int, int>, std::vector<std::pair<NamedSharding, int>>> resharded_;
  int block_ = 0;  // the remat block of the instruction being partitioned
};

}  // namespace

Partitioned partition(const ir::Program& global, const Mesh& mesh,
                      const std::vector<std::optional<NamedSharding>>& out_shardings) {
  return Partitioner(global, mesh).run(out_shardings);
}

}  // namespace partix::spmd
