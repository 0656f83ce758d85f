#include "autodiff/vjp.h"

#include <algorithm>

#include "core/errors.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "partix/transforms.h"
#include "trace/dispatch_hooks.h"
#include "trace/trace.h"

namespace partix::autodiff {

Array zeros_like(const Array& x) {
  return broadcast_in_dim(detail::literal(0.0, x.dtype()), x.shape(), {});
}

Array ones_like(const Array& x) {
  return broadcast_in_dim(detail::literal(1.0, x.dtype()), x.shape(), {});
}

std::vector<Array> evaluate(const ir::Program& p, const std::vector<Array>& args, Residuals* saved,
                            const std::vector<bool>* active, const std::map<int, Array>* known) {
  if (args.size() != p.params.size()) {
    detail::internal_error(
        "evaluate", fmt::format("{} arguments for {} parameters", args.size(), p.params.size()));
  }
  std::vector<Array> env(p.values.size());
  for (size_t i = 0; i < args.size(); ++i) env[static_cast<size_t>(p.params[i])] = args[i];
  const std::vector<bool> on = saved ? active_values(p, active) : std::vector<bool>();
  for (const ir::Instr& in : p.instrs) {
    if (known != nullptr && !in.outputs.empty() &&
        std::all_of(in.outputs.begin(), in.outputs.end(), [&](int v) { return known->count(v); })) {
      for (int v : in.outputs) env[static_cast<size_t>(v)] = known->at(v);
      continue;
    }
    std::vector<Array> ins;
    for (int v : in.inputs) ins.push_back(env[static_cast<size_t>(v)]);
    std::vector<Array> outs, residuals;
    const std::vector<bool> in_active = saved ? active_inputs(in, on) : std::vector<bool>();
    // Explicit sharding: the trace already checked every op's rule; re-applied, an op whose
    // type was ambiguous there (resolved by an out_sharding= on a later result) must not raise,
    // and results whose types the trace fixed (an out_sharding=, a reshard) keep them.
    {
      detail::ExplicitLenientScope lenient;
      if (saved && in.prim->differentiation().evaluate_saving(ins, in.attrs, in.regions, &in_active,
                                                              &outs, &residuals)) {
        (*saved)[&in] = std::move(residuals);
      } else {
        outs = detail::bind(*in.prim, ins, in.attrs, in.regions);
      }
    }
    for (size_t k = 0; k < outs.size() && k < in.outputs.size(); ++k) {
      const ir::ValueInfo& info = p.info(in.outputs[k]);
      if (info.typed && info.sharding) outs[k] = detail::give_type(outs[k], *info.sharding);
    }
    for (size_t k = 0; k < outs.size(); ++k) env[static_cast<size_t>(in.outputs[k])] = outs[k];
  }
  return env;
}

namespace {

bool differentiable(DType d) { return is_floating(d); }

// g with the type of `primal` where the primal has one (explicit sharding) and g's differs.
Array typed_like(const Array& g, const Array& primal) {
  if (!primal.valid()) return g;
  const std::optional<NamedSharding> want = detail::explicit_type(primal.impl()->sharding);
  if (!want) return g;
  const std::optional<NamedSharding> have = detail::explicit_type(g.impl()->sharding);
  if (have && *have == *want) return g;
  // A type is the Explicit part of a sharding: place g there along the Explicit axes (on a
  // mesh with Auto axes, replicated along them for now).
  return detail::reshard_to(g, NamedSharding(want->mesh(), want->spec()));
}

void accumulate(std::vector<Array>& ct, int v, const Array& g, const ir::Program& p,
                std::string_view what) {
  if (!g.valid()) return;
  const ir::Aval& a = p.aval(v);
  if (!differentiable(a.dtype)) return;
  if (g.shape() != a.shape) {
    detail::internal_error("grad", fmt::format("the VJP of {} gave a cotangent {} for a value {}",
                                               what, shape_to_string(g.shape()), a.to_string()));
  }
  Array gg = g.dtype() == a.dtype ? g : astype(g, a.dtype);
  Array& slot = ct[static_cast<size_t>(v)];
  slot = slot.valid() ? slot + gg : gg;
}

}  // namespace

std::vector<bool> active_values(const ir::Program& p, const std::vector<bool>* active) {
  std::vector<bool> on(p.values.size(), false);
  for (size_t i = 0; i < p.params.size(); ++i) {
    const int v = p.params[i];
    on[static_cast<size_t>(v)] =
        (!active || (i < active->size() && (*active)[i])) && differentiable(p.aval(v).dtype);
  }
  for (const ir::Instr& in : p.instrs) {
    // Gradients reach the results only from the operands with a gradient path (not from what
    // only a while_loop's condition reads).
    const std::vector<bool> path = in.prim->differentiation().operands_with_gradient_path(
        in.attrs, in.regions, in.inputs.size());
    bool any = false;
    for (size_t k = 0; k < in.inputs.size(); ++k) {
      any = any || (path[k] && on[static_cast<size_t>(in.inputs[k])]);
    }
    for (int v : in.outputs) on[static_cast<size_t>(v)] = any && differentiable(p.aval(v).dtype);
  }
  return on;
}

std::vector<bool> active_inputs(const ir::Instr& in, const std::vector<bool>& active) {
  std::vector<bool> out;
  for (int v : in.inputs) out.push_back(active[static_cast<size_t>(v)]);
  return out;
}

std::vector<Array> backward(const ir::Program& p, const std::vector<Array>& env,
                            const std::vector<Array>& result_cotangents, const Residuals* saved,
                            const std::vector<bool>* active) {
  const std::vector<bool> on = active_values(p, active);
  std::vector<Array> ct(p.values.size());
  for (size_t k = 0; k < p.results.size(); ++k) {
    if (result_cotangents[k].valid() && on[static_cast<size_t>(p.results[k])]) {
      accumulate(ct, p.results[k], result_cotangents[k], p, "the output");
    }
  }
  for (auto it = p.instrs.rbegin(); it != p.instrs.rend(); ++it) {
    const ir::Instr& in = *it;
    std::vector<Array> cts;
    bool any = false;
    for (int v : in.outputs) {
      cts.push_back(ct[static_cast<size_t>(v)]);
      any = any || cts.back().valid();
    }
    // Cotangents reach only active values (accumulate skips the others).
    if (!any) continue;
    std::vector<Array> primals, outputs;
    for (int v : in.inputs) primals.push_back(env[static_cast<size_t>(v)]);
    for (int v : in.outputs) outputs.push_back(env[static_cast<size_t>(v)]);
    const std::vector<Array>* residuals = nullptr;
    if (saved) {
      auto found = saved->find(&in);
      if (found != saved->end()) residuals = &found->second;
    }
    const std::vector<bool> in_active = active_inputs(in, on);
    prim::VjpArgs args{primals, outputs, cts, in.attrs, in.regions, residuals, &in_active};
    std::vector<Array> gs;
    {
      // Explicit sharding: a VJP's intermediate types may be ambiguous (the weight gradient of
      // a batch-split matmul contracts the split batch in both operands); each cotangent is
      // then given its primal's type, as JAX types tangents like primals.
      detail::ExplicitLenientScope lenient;
      gs = in.prim->differentiation().vjp(args);
    }
    // Contributions to one value may come typed differently (an intermediate's cotangent is
    // typed only as far as its VJP's ops are): summing them is not a typing question.
    detail::ExplicitLenientScope lenient;
    for (size_t i = 0; i < in.inputs.size() && i < gs.size(); ++i) {
      if (in_active[i]) accumulate(ct, in.inputs[i], gs[i], p, in.prim->name());
    }
  }
  // The function's own arguments get cotangents typed like them (explicit sharding); an
  // intermediate's need not be (a replicated broadcast's cotangent stays split over the batch
  // instead of being gathered to match it).
  std::vector<Array> out;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const Array& g = ct[static_cast<size_t>(p.params[i])];
    out.push_back(g.valid() && i < env.size() ? typed_like(g, env[static_cast<size_t>(p.params[i])])
                                              : g);
  }
  return out;
}

}  // namespace partix::autodiff
