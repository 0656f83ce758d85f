#include "spmd/propagate.h"

#include <algorithm>

#include "core/errors.h"
#include "sharding/axes.h"
#include "spmd/control_flow.h"
#include "spmd/cost.h"
#include "spmd/plan.h"

namespace partix::spmd {

namespace {

// Bytes per device a plan moves, as far as propagation knows: operands from their known
// shardings, results into their known ones, and the reduction of the partial sums the plan
// creates, estimated as a reduce_scatter ((n-1)/n of the local result).
double plan_bytes(const ir::Program& g, const Mesh& mesh, const ir::Instr& in,
                  const InstrPlan& plan, const ValueFacts& facts) {
  double cost = 0;
  std::set<std::string> operand_unreduced;
  for (size_t i = 0; i < in.inputs.size() && i < plan.operands.size(); ++i) {
    const auto& s = facts.sharding(in.inputs[i]);
    if (!s) continue;
    operand_unreduced.insert(s->unreduced().begin(), s->unreduced().end());
    cost += reshard_bytes(g.aval(in.inputs[i]), *s, plan.operands[i]);
  }
  for (size_t k = 0; k < in.outputs.size() && k < plan.results.size(); ++k) {
    const NamedSharding& r = plan.results[k];
    const ir::Aval& aval = g.aval(in.outputs[k]);
    double n = 1;
    for (const auto& a : r.unreduced()) {
      if (!operand_unreduced.count(a)) n *= static_cast<double>(mesh.axis_size(a));
    }
    const ir::Aval local{r.shard_shape(aval.shape), aval.dtype};
    cost += (n - 1) / n * static_cast<double>(local.nbytes());
    const auto& s = facts.sharding(in.outputs[k]);
    if (s) {
      cost += reshard_bytes(aval, NamedSharding(mesh, r.spec()), NamedSharding(mesh, s->spec()));
    }
  }
  return cost;
}

// The plan for `in`: by default the bigger tensors lead; where letting one known tensor lead
// instead gives another factor assignment that moves fewer bytes, that one. (A small weight
// split on its contraction dimension is gathered when the partial sums it would create are
// the bigger cost, and stays put when they are not.)
InstrPlan choose_plan(const ir::Program& g, const Mesh& mesh, const ir::Instr& in,
                      const ValueFacts& facts) {
  InstrPlan best = plan_instr(mesh, g, in, facts);
  if (best.handler != Handler::kGeneric) return best;
  double best_cost = -1;
  std::vector<int> tensors(in.inputs);
  tensors.insert(tensors.end(), in.outputs.begin(), in.outputs.end());
  for (int lead : tensors) {
    if (!facts.sharding(lead)) continue;
    ValueFacts led{facts.sharding, [&](int v) { return v == lead ? 1e30 : facts.priority(v); }};
    InstrPlan alt = plan_instr(mesh, g, in, led);
    if (alt.handler != Handler::kGeneric ||
        alt.assignment.factor_axes == best.assignment.factor_axes) {
      continue;
    }
    if (best_cost < 0) best_cost = plan_bytes(g, mesh, in, best, facts);
    double cost = plan_bytes(g, mesh, in, alt, facts);
    if (cost < best_cost) {
      best = std::move(alt);
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace

namespace {

// Whether `s` keeps the dimensions a constraint with unconstrained ones fixes for value `v`
// (any sharding does when `pin` is empty).
bool keeps_constrained(const ir::Program& g,
                       const std::optional<prim::Partitioning::PinnedShardings>& pin, int v,
                       const NamedSharding& s) {
  if (!pin) return true;
  const auto& free = pin->unconstrained;
  const PartitionSpec& want = pin->results[0];
  for (int d = 0; d < g.aval(v).ndim(); ++d) {
    if (std::find(free.begin(), free.end(), d) != free.end()) continue;
    if (s.spec()[d] != want[d]) return false;
  }
  return s.unreduced().empty();
}

void propagate_flat(ir::Program& g, const Mesh& mesh, const std::vector<NamedSharding>& in,
                    const std::vector<std::optional<NamedSharding>>& out) {
  const size_t n = g.values.size();
  std::vector<std::optional<NamedSharding>> sh(n);
  std::vector<bool> fixed(n, false);
  auto fix = [&](int v, const NamedSharding& s) {
    if (fixed[static_cast<size_t>(v)]) return;  // the first user-given sharding wins
    sh[static_cast<size_t>(v)] = s;
    fixed[static_cast<size_t>(v)] = true;
  };
  for (size_t i = 0; i < g.params.size(); ++i) fix(g.params[i], in[i]);
  // Explicit sharding: a typed value's sharding along the Explicit axes of its
  // own mesh (the program's, or the same devices with other axis types inside auto_axes or
  // explicit_axes) is its type. Without Auto axes that is its whole sharding; otherwise
  // propagation starts from it and may only add Auto axes (see `keeps_type`).
  std::vector<std::optional<NamedSharding>> type(n);  // on the value's own mesh
  auto explicit_part = [&](const NamedSharding& s, const Mesh& types, int rank) {
    std::vector<PartitionSpec::Entry> out;
    for (int d = 0; d < rank; ++d) {
      PartitionSpec::Entry e;
      for (const std::string& a : s.spec()[d]) {
        if (detail::is_axis_type(types, a, AxisType::Explicit)) e.push_back(a);
      }
      out.push_back(e);
    }
    return out;
  };
  // A broadcast's result is a view its users read in place: its type is kept for the user,
  // but its layout is left to them (split as they are, it costs nothing), as in Auto mode.
  std::vector<bool> broadcast(n, false), is_result(n, false);
  for (int r : g.results) is_result[static_cast<size_t>(r)] = true;
  for (const ir::Instr& instr : g.instrs) {
    if (!instr.prim->partitioning().is_broadcast()) continue;
    for (int o : instr.outputs) broadcast[static_cast<size_t>(o)] = true;
  }
  for (size_t v = 0; v < n; ++v) {
    const ir::ValueInfo& info = g.values[v];
    if (!info.typed || !info.sharding || (broadcast[v] && !is_result[v])) continue;
    // A value typed replicated (made from replicated values: a mask drawn from a replicated
    // key, a broadcast bias) is laid out as its users are, as in Auto mode: computing it split
    // where they are split moves nothing, and its type says only that no Explicit axis splits
    // it in the program's meaning.
    // A result is what the user holds: its sharding is its type.
    if (info.sharding->spec().axes().empty() && info.sharding->unreduced().empty() &&
        !is_result[v]) {
      continue;
    }
    NamedSharding s(mesh, info.sharding->spec(), info.sharding->unreduced());
    if (!detail::has_axis_type(info.sharding->mesh(), AxisType::Auto)) {
      fix(static_cast<int>(v), s);
    } else {
      type[v] = info.sharding;
      if (!fixed[v]) sh[v] = s;
    }
  }
  auto keeps_type = [&](size_t v, const NamedSharding& s) {
    if (!type[v]) return true;
    const int rank = g.aval(static_cast<int>(v)).ndim();
    const Mesh& types = type[v]->mesh();
    return explicit_part(s, types, rank) == explicit_part(*type[v], types, rank);
  };
  // A constraint with unconstrained dimensions (P.UNCONSTRAINED) fixes only the others: its
  // result starts as it says and propagation may split the free dimensions.
  std::vector<std::optional<prim::Partitioning::PinnedShardings>> partial(n);
  for (const ir::Instr& instr : g.instrs) {
    if (auto pin = instr.prim->partitioning().pinned_shardings(instr.attrs)) {
      for (size_t k = 0; k < instr.outputs.size(); ++k) {
        const auto v = static_cast<size_t>(instr.outputs[k]);
        if (!pin->unconstrained.empty()) {
          if (!fixed[v] && !sh[v]) sh[v] = NamedSharding(mesh, pin->results[k]);
          partial[v] = pin;
          continue;
        }
        fix(instr.outputs[k], pin->result(mesh, k));
      }
    }
  }
  for (size_t k = 0; k < g.results.size() && k < out.size(); ++k) {
    if (out[k]) fix(g.results[k], *out[k]);
  }
  // Control flow whose regions are propagated: its results are the carries' shardings (one
  // for every iteration) and the regions' results.
  for (const ir::Instr& instr : g.instrs) {
    if (!instr.prim->execution().runs_regions() || !regions_propagated(instr)) continue;
    InstrPlan plan = plan_control_flow(mesh, instr);
    for (size_t k = 0; k < instr.outputs.size(); ++k) fix(instr.outputs[k], plan.results[k]);
  }
  // A constraint also speaks for the value it constrains (as a GSPMD annotation does): its
  // operand starts in that sharding unless the operand is itself user-given, so that the
  // producer is planned for it (a scatter into a table split over rows scatters blockwise).
  for (const ir::Instr& instr : g.instrs) {
    auto pin = instr.prim->partitioning().pinned_shardings(instr.attrs);
    if (!pin || !pin->constrains_operand) continue;
    const size_t v = static_cast<size_t>(instr.inputs[0]);
    if (!fixed[v] && !sh[v]) sh[v] = NamedSharding(mesh, pin->operands[0]);
  }
  // Conflicts go to the tensor that is costlier to move: the bigger one (ties: operands in
  // order, then results). A user-given sharding is never overridden, but it does not outrank
  // a bigger value: an FSDP weight split on its contraction dimension is gathered rather than
  // splitting the activations' contraction and leaving them unreduced.
  ValueFacts facts{
      [&](int v) -> const std::optional<NamedSharding>& { return sh[static_cast<size_t>(v)]; },
      [&](int v) { return static_cast<double>(g.aval(v).nbytes()); }};
  bool changed = true;
  auto propose = [&](int v, const NamedSharding& s) {
    size_t i = static_cast<size_t>(v);
    if (fixed[i] || !keeps_type(i, s) || !keeps_constrained(g, partial[i], v, s)) return;
    const int rank = g.aval(v).ndim();
    if (!sh[i] ||
        (!(*sh[i] == s) && sh[i]->unreduced() == s.unreduced() && refines(*sh[i], s, rank))) {
      sh[i] = s;
      changed = true;
    }
  };
  // Phase 0 holds back the forward step through broadcasts: a broadcast result takes its
  // sharding from its users when they have one, so a mismatch is fixed on the small operand
  // before broadcasting rather than by moving the broadcast result. Phase 1 lets the
  // operands' shardings reach the broadcasts nothing else decided.
  for (int phase = 0; phase < 2; ++phase) {
    changed = true;
    for (int round = 0; round < 16 && changed; ++round) {
      changed = false;
      for (const ir::Instr& instr : g.instrs) {  // forward: results from operands
        if (phase == 0 && instr.prim->partitioning().is_broadcast()) continue;
        InstrPlan plan = choose_plan(g, mesh, instr, facts);
        if (plan.handler == Handler::kPinned) continue;  // results fixed above
        for (size_t k = 0; k < instr.outputs.size(); ++k) {
          NamedSharding r = plan.results[k];
          if (!plan.reduce_now[k].empty()) r = NamedSharding(mesh, r.spec(), r.unreduced());
          propose(instr.outputs[k], r);
        }
      }
      for (auto it = g.instrs.rbegin(); it != g.instrs.rend(); ++it) {  // backward
        InstrPlan plan = choose_plan(g, mesh, *it, facts);
        for (size_t i = 0; i < it->inputs.size() && i < plan.operands.size(); ++i) {
          const NamedSharding& want = plan.operands[i];
          // Operands are asked for reduced values; unreduced ones stay as they are.
          propose(it->inputs[i], NamedSharding(mesh, want.spec()));
        }
      }
    }
  }
  NamedSharding replicated(mesh, P());
  for (size_t v = 0; v < n; ++v) g.values[v].sharding = sh[v] ? *sh[v] : replicated;
}

}  // namespace

void propagate(ir::Program& g, const Mesh& mesh, const std::vector<NamedSharding>& in,
               const std::vector<std::optional<NamedSharding>>& out) {
  propagate_flat(g, mesh, in, out);
  bool any = false;
  for (const ir::Instr& instr : g.instrs) any = any || instr.prim->execution().runs_regions();
  if (!any) return;
  // Regions from the shardings around them; then the program again with the loops' results
  // fixed to their carries', and the regions once more for operands that moved.
  propagate_regions(g, mesh);
  propagate_flat(g, mesh, in, out);
  propagate_regions(g, mesh);
}

}  // namespace partix::spmd
