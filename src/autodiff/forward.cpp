// vjp with a saved pullback, forward mode (jvp, linearize) and the traced program's text
// (make_jaxpr).
//
// Forward mode has no per-primitive JVP rules yet (future work): it is derived from reverse mode.
// The pullback u -> VJP(u) is linear in u, so for tangents t, <VJP(u), t> = <u, J t> and
// J t = grad over u of <VJP(u), t>, a gradient of the backward pass (nested reverse mode, which
// every primitive's VJP supports since each is written with ops). This costs one forward pass
// (saved) and two backward passes: the pullback's, and the gradient of it.
#include "autodiff/traced_program.h"
#include "autodiff/vjp.h"
#include "core/errors.h"
#include "ir/program.h"
#include "partix/ops.h"
#include "partix/transforms.h"
#include "trace/dispatch_hooks.h"
#include "trace/trace.h"

namespace partix {
namespace detail {

struct VjpState {
  std::shared_ptr<const ir::Program> program;
  std::vector<Array> primals;  // the user's leaves (captures follow them in the program)
  std::vector<Array> env;      // every program value, evaluated where vjp ran
  autodiff::Residuals saved;
  std::vector<bool> active;  // per program parameter: float primals
  std::vector<Array> outputs;
};

namespace {

// A trace of f on tracers for `leaves` (as grad's): inside shard_map it sees the manual axes,
// and each parameter varies as its argument does.
std::shared_ptr<TraceState> trace_leaves(const char* name, const std::vector<Array>& leaves,
                                         const LeavesFn& f) {
  auto ts = std::make_shared<TraceState>(name);
  ts->inherit(current_trace());
  std::vector<Array> tracers;
  for (const Array& a : leaves) {
    tracers.push_back(
        ts->add_param(ir::Aval{a.shape(), a.dtype()}, a.impl()->sharding, vary_of(a)));
  }
  TraceScope scope(ts);
  ts->set_results(f(tracers));
  return ts;
}

bool differentiable(const Array& a) { return is_floating(a.dtype()); }

// `value` (a cotangent or tangent) carries `like`'s sharding, as grad's gradients do.
Array with_sharding_of(Array value, const Array& like) {
  if (const auto& s = like.impl()->sharding; s && s->unreduced().empty()) {
    value = is_tracing() ? detail::constrain_to(value, *s) : detail::put_on(value, *s);
  }
  return value;
}

void check_like(std::string_view api, const char* what, size_t i, const Array& got,
                const Array& want, bool check_dtype) {
  if (!got.valid()) return;
  if (got.shape() != want.shape() || (check_dtype && got.dtype() != want.dtype())) {
    fail(api, "{} {} is {}{} but must be {}{} to match {}", what, i, dtype_name(got.dtype()),
         shape_to_string(got.shape()), dtype_name(want.dtype()), shape_to_string(want.shape()),
         std::string_view(what) == "tangent" ? "its primal" : "the primal result");
  }
}

// The pullback's raw cotangents (empty where zero), without placement.
std::vector<Array> backward_raw(const VjpState& s, const std::vector<Array>& cotangents) {
  std::vector<Array> cts(s.program->results.size());
  for (size_t r = 0; r < cts.size(); ++r) {
    if (differentiable(s.outputs[r])) cts[r] = cotangents[r];
  }
  return autodiff::backward(*s.program, s.env, cts, &s.saved, &s.active);
}

}  // namespace

std::vector<Array> Pullback::operator()(const std::vector<Array>& cotangents) const {
  check(s_ != nullptr, "vjp", "this pullback is empty");
  const VjpState& s = *s_;
  if (cotangents.size() != s.outputs.size()) {
    fail("vjp", "the pullback takes {} cotangents (one per result leaf), got {}", s.outputs.size(),
         cotangents.size());
  }
  for (size_t r = 0; r < cotangents.size(); ++r) {
    check_like("vjp", "cotangent", r, cotangents[r], s.outputs[r], differentiable(s.outputs[r]));
  }
  std::vector<Array> cts = backward_raw(s, cotangents);
  std::vector<Array> out;
  for (size_t i = 0; i < s.primals.size(); ++i) {
    const Array& p = s.primals[i];
    Array g = differentiable(p) && cts[i].valid() ? cts[i] : autodiff::zeros_like(p);
    out.push_back(with_sharding_of(g, p));
  }
  return out;
}

const std::vector<Array>& Pullback::primals() const { return s_->primals; }
const std::vector<Array>& Pullback::outputs() const { return s_->outputs; }

VjpOutput vjp_engine(const std::vector<Array>& leaves, const LeavesFn& f) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (is_quantized(leaves[i].dtype())) {
      fail("vjp", "primal {} is quantized ({}{}); differentiate with respect to float inputs", i,
           dtype_name(leaves[i].dtype()), shape_to_string(leaves[i].shape()));
    }
  }
  auto ts = trace_leaves("vjp", leaves, f);
  auto s = std::make_shared<VjpState>();
  s->program = std::make_shared<const ir::Program>(ts->program());
  s->primals = leaves;
  std::vector<Array> args = leaves;
  for (const Array& c : ts->captures()) args.push_back(c);
  s->active.assign(args.size(), false);
  for (size_t i = 0; i < leaves.size(); ++i) s->active[i] = differentiable(leaves[i]);
  s->env = autodiff::evaluate(*s->program, args, &s->saved, &s->active);
  for (int v : s->program->results) s->outputs.push_back(s->env[static_cast<size_t>(v)]);
  VjpOutput out{s->outputs, Pullback(s)};
  return out;
}

std::vector<Array> jvp_of_pullback(const Pullback& pb, const std::vector<Array>& tangents,
                                   std::string_view api) {
  check(pb.valid(), api, "the linearization is empty");
  const std::vector<Array>& primals = pb.primals();
  const std::vector<Array>& outs = pb.outputs();
  if (tangents.size() != primals.size()) {
    fail(api, "got {} tangents for {} primals (one per leaf, in the primals' structure)",
         tangents.size(), primals.size());
  }
  for (size_t i = 0; i < tangents.size(); ++i) {
    if (!tangents[i].valid()) fail(api, "tangent {} is missing", i);
    check_like(api, "tangent", i, tangents[i], primals[i], differentiable(primals[i]));
  }
  // u: the float results (any value does: the pullback is linear in u; the results carry the
  // shardings the tangents should have).
  std::vector<size_t> float_results;
  std::vector<Array> u;
  for (size_t r = 0; r < outs.size(); ++r) {
    if (differentiable(outs[r])) {
      float_results.push_back(r);
      u.push_back(outs[r]);
    }
  }
  bool wide = false;  // accumulate <VJP(u), t> in f64 where an f64 takes part
  for (const Array& p : primals) wide = wide || p.dtype() == DType::F64;
  for (const Array& o : u) wide = wide || o.dtype() == DType::F64;
  const DType acc = wide ? DType::F64 : DType::F32;
  std::vector<Array> tangents_out(outs.size());
  if (!u.empty()) {
    auto inner = [&](const std::vector<Array>& us) {
      std::vector<Array> cts(outs.size());
      for (size_t k = 0; k < us.size(); ++k) cts[float_results[k]] = us[k];
      std::vector<Array> back = backward_raw(pb.state(), cts);
      Array total = zeros({}, acc);
      for (size_t i = 0; i < primals.size(); ++i) {
        if (!differentiable(primals[i]) || !back[i].valid()) continue;
        total = total + sum(astype(back[i], acc) * astype(tangents[i], acc));
      }
      return total;
    };
    GradOutput g = grad_engine(u, std::vector<bool>(u.size(), true), inner);
    for (size_t k = 0; k < u.size(); ++k) tangents_out[float_results[k]] = g.grads[k];
  }
  for (size_t r = 0; r < outs.size(); ++r) {
    if (!tangents_out[r].valid())
      tangents_out[r] = with_sharding_of(autodiff::zeros_like(outs[r]), outs[r]);
  }
  return tangents_out;
}

JvpOutput jvp_engine(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                     const LeavesFn& f) {
  if (tangents.size() != primals.size()) {
    fail("jvp",
         "got {} tangent leaves for {} primal leaves (tangents must have the primals' "
         "structure)",
         tangents.size(), primals.size());
  }
  for (size_t i = 0; i < tangents.size(); ++i) {
    check_like("jvp", "tangent", i, tangents[i], primals[i], differentiable(primals[i]));
  }
  VjpOutput v = vjp_engine(primals, f);
  return {v.outputs, jvp_of_pullback(v.pullback, tangents, "jvp")};
}

std::string trace_text(const std::vector<Array>& leaves, const LeavesFn& f) {
  auto ts = trace_leaves("make_jaxpr", leaves, f);
  ir::PrintOptions o;
  o.full_literals = false;
  return ir::to_text(ts->program(), o);
}

TracedProgram trace_program(const std::vector<Array>& leaves, const LeavesFn& f) {
  auto ts = trace_leaves("make_jaxpr", leaves, f);
  ir::PrintOptions o;
  o.full_literals = false;
  TracedProgram out;
  out.program = std::make_shared<const ir::Program>(ts->program());
  out.captures = ts->captures();
  out.text = ir::to_text(*out.program, o);
  return out;
}

std::vector<Array> eval_program(const TracedProgram& p, const std::vector<Array>& args) {
  const ir::Program& prog = *p.program;
  check(args.size() == prog.params.size(), "eval_jaxpr",
        "the program takes {} values (arguments, then consts) but got {}", prog.params.size(),
        args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ir::Aval& want = prog.aval(prog.params[i]);
    check(args[i].valid() && args[i].shape() == want.shape && args[i].dtype() == want.dtype,
          "eval_jaxpr", "value {} is {}{} but the program's parameter is {}", i,
          args[i].valid() ? dtype_name(args[i].dtype()) : "nothing",
          args[i].valid() ? shape_to_string(args[i].shape()) : "", want.to_string());
  }
  const std::vector<Array> env = autodiff::evaluate(prog, args);
  std::vector<Array> out;
  for (int v : prog.results) out.push_back(env[v]);
  return out;
}

}  // namespace detail
}  // namespace partix
