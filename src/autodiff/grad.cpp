// grad / value_and_grad and checkpoint (remat).
#include "autodiff/vjp.h"
#include "core/errors.h"
#include "partix/ops.h"
#include "partix/transforms.h"
#include "trace/dispatch_hooks.h"
#include "trace/trace.h"

namespace partix {

const Array& Tree::array() const {
  if (!is_array_)
    detail::fail("grad", "this gradient is Params (the argument was Params), not an Array");
  return array_;
}

const Params& Tree::params() const {
  if (is_array_)
    detail::fail("grad", "this gradient is an Array (the argument was an Array), not Params");
  return params_;
}

namespace detail {

void grad_bad_argnum(int argnum, size_t num_args) {
  fail("grad", "argnum {} is out of range for a function of {} arguments", argnum, num_args);
}

void grad_bad_argument_kind(int argnum) {
  fail("grad", "argument {} is neither an Array nor Params; grad differentiates those", argnum);
}

// The trace of a function of `leaves` that grad or checkpoint records, and its parameters
// (`tracers`, one per leaf). Inside shard_map it sees the manual axes, and each parameter
// varies as its argument does where the call is made: a value captured from an enclosing trace
// may vary over more axes there than where it was made (a branch widens its operands by its
// predicate's axes). Collectives and their transposes then follow the varying-axes rules
// (ARCHITECTURE.md).
std::shared_ptr<TraceState> nested_trace(const char* name, const std::vector<Array>& leaves,
                                         std::vector<Array>& tracers) {
  auto ts = std::make_shared<TraceState>(name);
  ts->inherit(current_trace());
  for (const Array& a : leaves) {
    tracers.push_back(
        ts->add_param(ir::Aval{a.shape(), a.dtype()}, a.impl()->sharding, vary_of(a)));
  }
  return ts;
}

namespace {

GradOutput grad_impl(const std::vector<Array>& leaves, const std::vector<bool>& wrt,
                     const std::function<std::vector<Array>(const std::vector<Array>&)>& f) {
  // 1. Trace f on fresh tracers.
  std::vector<Array> tracers;
  auto ts = nested_trace("grad", leaves, tracers);
  {
    TraceScope scope(ts);
    std::vector<Array> outs = f(tracers);
    check(!outs.empty(), "grad", "the function returned nothing; it must return a float scalar");
    const Array& out = outs[0];
    if (!(out.valid() && out.ndim() == 0 && is_floating(out.dtype()))) {
      fail("grad", "the function must return a float scalar, got {}{}",
           out.valid() ? dtype_name(out.dtype()) : "nothing",
           out.valid() ? shape_to_string(out.shape()) : "");
    }
    ts->set_results(outs);
  }
  const ir::Program& prog = ts->program();
  // 2. Evaluate it in the current context (eagerly, or into the enclosing trace) and
  // 3. run it backward.
  std::vector<Array> args = leaves;
  for (const Array& c : ts->captures()) args.push_back(c);
  // Only the arguments differentiated with respect to want cotangents (captures never do).
  std::vector<bool> active(wrt.begin(), wrt.end());
  active.resize(args.size(), false);
  autodiff::Residuals saved;
  std::vector<Array> env = autodiff::evaluate(prog, args, &saved, &active);
  GradOutput out;
  out.value = env[static_cast<size_t>(prog.results[0])];
  for (size_t r = 1; r < prog.results.size(); ++r) {
    out.aux.push_back(env[static_cast<size_t>(prog.results[r])]);
  }
  std::vector<Array> result_cts(prog.results.size());  // aux results: zero cotangents
  result_cts[0] = autodiff::ones_like(out.value);
  std::vector<Array> cts = autodiff::backward(prog, env, result_cts, &saved, &active);
  out.grads.resize(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!wrt[i]) continue;
    if (is_quantized(leaves[i].dtype())) {
      fail("grad",
           "cannot differentiate with respect to a quantized argument ({}{}): quantized weights "
           "are constants (their blocks have no gradient); differentiate with respect to the "
           "float inputs, or astype the weight to f32 to train it",
           dtype_name(leaves[i].dtype()), shape_to_string(leaves[i].shape()));
    }
    if (!(is_floating(leaves[i].dtype()))) {
      fail("grad", "cannot differentiate with respect to an integer argument ({}{})",
           dtype_name(leaves[i].dtype()), shape_to_string(leaves[i].shape()));
    }
    Array g = cts[i].valid() ? cts[i] : autodiff::zeros_like(leaves[i]);
    // A parameter's gradient carries the parameter's sharding, with its reduced and unreduced
    // axes swapped (JAX's transposes: a reduced value's cotangent is partial sums over those
    // axes, a partial sum's cotangent the one value every partial shares).
    if (const auto& s = leaves[i].impl()->sharding; s) {
      const NamedSharding t(s->mesh(), s->spec(), s->reduced(), s->unreduced());
      g = is_tracing() ? detail::constrain_to(g, t) : detail::put_on(g, t);
    }
    out.grads[i] = g;
  }
  return out;
}

}  // namespace

GradOutput grad_engine(const std::vector<Array>& leaves, const std::vector<bool>& wrt,
                       const std::function<Array(const std::vector<Array>&)>& f) {
  return grad_impl(leaves, wrt,
                   [&](const std::vector<Array>& t) { return std::vector<Array>{f(t)}; });
}

GradOutput grad_engine_aux(const std::vector<Array>& leaves, const std::vector<bool>& wrt,
                           const std::function<std::vector<Array>(const std::vector<Array>&)>& f) {
  return grad_impl(leaves, wrt, f);
}

std::vector<Array> remat_call(
    const std::vector<Array>& leaves,
    const std::function<std::vector<Array>(const std::vector<Array>&, std::shared_ptr<void>&)>&
        trace,
    std::shared_ptr<void>& out_proto, const SavePolicy& policy) {
  using Kind = SavePolicy::Kind;
  if (policy.kind == Kind::kEverything) return trace(leaves, out_proto);  // nothing to recompute
  std::vector<Array> tracers;
  auto ts = nested_trace("checkpoint", leaves, tracers);
  {
    TraceScope scope(ts);
    ts->set_results(trace(tracers, out_proto));
  }
  std::vector<Array> operands = leaves;
  for (const Array& c : ts->captures()) operands.push_back(c);
  auto region = std::make_shared<const ir::Program>(ts->program());
  ir::Attrs attrs;
  switch (policy.kind) {
    case Kind::kDots:
      attrs.set("save", std::string("dots"));
      break;
    case Kind::kDotsWithNoBatchDims:
      attrs.set("save", std::string("dots_no_batch"));
      break;
    case Kind::kNames:
    case Kind::kNamesExcept:
    case Kind::kPrimitives:
      attrs.set("save", std::string(policy.kind == Kind::kNames         ? "names"
                                    : policy.kind == Kind::kNamesExcept ? "names_except"
                                                                        : "primitives"));
      attrs.set("names", ir::Strings(policy.names.begin(), policy.names.end()));
      break;
    default:
      break;
  }
  return bind(prim::get_primitive("remat"), operands, std::move(attrs), {region});
}

}  // namespace detail
}  // namespace partix

namespace partix {

Array checkpoint_name(const Array& x, const std::string& name) {
  detail::check(!name.empty(), "checkpoint_name", "the name must not be empty");
  return detail::bind1("checkpoint_name", {x}, {{"name", name}});
}

}  // namespace partix
