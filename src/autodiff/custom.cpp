// custom_vjp and custom_jvp: a function with a derivative of the user's own. Each traces the
// function and its rules into regions of one instruction (prim/custom.cpp), whose VJP runs the
// rules instead of differentiating the function. See ARCHITECTURE.md, "Transformations".
#include <set>

#include "autodiff/vjp.h"
#include "core/errors.h"
#include "partix/transforms.h"
#include "trace/trace.h"

namespace partix::detail {

namespace {

// A region parameter made from a value of another region (a residual, a cotangent).
struct ParamOf {
  ir::Aval aval;
  std::optional<NamedSharding> sharding;
  std::set<std::string> varying;
};

ParamOf param_of(const Array& a) {
  return {ir::Aval{a.shape(), a.dtype()}, a.impl()->sharding, vary_of(a)};
}

ParamOf param_of_result(const ir::Program& p, size_t k) {
  const int v = p.results[k];
  return {p.aval(v), p.info(v).sharding, p.info(v).varying};
}

// A trace whose parameters are `params` (nested_trace for values that exist only inside
// another region).
std::shared_ptr<TraceState> trace_of(const char* name, const std::vector<ParamOf>& params,
                                     std::vector<Array>& tracers) {
  std::vector<Array> none;
  auto ts = nested_trace(name, none, tracers);
  for (const ParamOf& p : params) tracers.push_back(ts->add_param(p.aval, p.sharding, p.varying));
  return ts;
}

struct Traced {
  std::shared_ptr<const ir::Program> program;
  std::vector<Array> captures;
};

Traced run_trace(const std::shared_ptr<TraceState>& ts, const std::vector<Array>& tracers,
                 const CustomRuleFn& fn, std::shared_ptr<void>& proto) {
  {
    TraceScope scope(ts);
    ts->set_results(fn(tracers, proto));
  }
  return {std::make_shared<const ir::Program>(ts->program()), ts->captures()};
}

std::string avals_text(const ir::Program& p, size_t first, size_t n) {
  std::string s;
  for (size_t k = first; k < first + n && k < p.results.size(); ++k) {
    s += (s.empty() ? "" : ", ") + p.aval(p.results[k]).to_string();
  }
  return "(" + s + ")";
}

// The rule's first `n` results must be the function's results, aval for aval.
void check_same_results(const char* api, const char* rule, const ir::Program& f,
                        const ir::Program& r, size_t n_rule) {
  const size_t n = f.results.size();
  bool same = n_rule >= n;
  for (size_t k = 0; same && k < n; ++k) same = f.aval(f.results[k]) == r.aval(r.results[k]);
  if (!same) {
    fail(api, "{} must return the function's outputs {} first, got {}", rule,
         avals_text(f, 0, n), avals_text(r, 0, std::min(n, r.results.size())));
  }
}

ir::Attrs counts(std::initializer_list<std::pair<const char*, size_t>> kv) {
  ir::Attrs a;
  for (const auto& [k, v] : kv) a.set(k, static_cast<int64_t>(v));
  return a;
}

}  // namespace

std::vector<Array> custom_vjp_call(const std::vector<Array>& args, const CustomRuleFn& f,
                                   const CustomRuleFn& fwd, const CustomRuleFn& bwd,
                                   CustomProtos& protos) {
  constexpr const char* kApi = "custom_vjp";
  std::vector<Array> ft, wt, bt;
  Traced tf = run_trace(nested_trace(kApi, args, ft), ft, f, protos.f);
  Traced tw = run_trace(nested_trace(kApi, args, wt), wt, fwd, protos.fwd);
  const size_t n_out = tf.program->results.size();
  check_same_results(kApi, "fwd", *tf.program, *tw.program, tw.program->results.size());
  // bwd takes the residuals (fwd's results after the outputs) and one cotangent per output.
  std::vector<ParamOf> bp;
  for (size_t k = n_out; k < tw.program->results.size(); ++k) bp.push_back(param_of_result(*tw.program, k));
  for (size_t k = 0; k < n_out; ++k) bp.push_back(param_of_result(*tf.program, k));
  Traced tb = run_trace(trace_of(kApi, bp, bt), bt, bwd, protos.bwd);
  const ir::Program& b = *tb.program;
  bool same = b.results.size() == args.size();
  for (size_t i = 0; same && i < args.size(); ++i) {
    same = b.aval(b.results[i]) == ir::Aval{args[i].shape(), args[i].dtype()};
  }
  if (!same) {
    std::string want;
    for (const Array& a : args) want += (want.empty() ? "" : ", ") + ir::Aval{a.shape(), a.dtype()}.to_string();
    fail(kApi, "bwd must return one cotangent per differentiable input, shaped as the input: "
               "({}), got {}", want, avals_text(b, 0, b.results.size()));
  }
  std::vector<Array> operands = args;
  for (const Traced* t : {&tf, &tw, &tb}) operands.insert(operands.end(), t->captures.begin(), t->captures.end());
  ir::Attrs attrs = counts({{"num_args", args.size()}, {"num_f_captures", tf.captures.size()},
                            {"num_fwd_captures", tw.captures.size()},
                            {"num_bwd_captures", tb.captures.size()}});
  return bind(prim::get_primitive("custom_vjp_call"), operands, attrs,
              {tf.program, tw.program, tb.program});
}

std::vector<Array> custom_jvp_call(const std::vector<Array>& args, const CustomRuleFn& f,
                                   const CustomRuleFn& jvp, CustomProtos& protos) {
  constexpr const char* kApi = "custom_jvp";
  std::vector<Array> ft, jt;
  Traced tf = run_trace(nested_trace(kApi, args, ft), ft, f, protos.f);
  // The rule takes the primals, then one tangent per primal (typed and varying as it).
  std::vector<ParamOf> jp;
  for (int pass = 0; pass < 2; ++pass) {
    for (const Array& a : args) jp.push_back(param_of(a));
  }
  Traced tj = run_trace(trace_of(kApi, jp, jt), jt, jvp, protos.fwd);
  const size_t n_out = tf.program->results.size();
  check_same_results(kApi, "the jvp rule", *tf.program, *tj.program, tj.program->results.size());
  const ir::Program& j = *tj.program;
  bool same = j.results.size() == 2 * n_out;
  for (size_t k = 0; same && k < n_out; ++k) same = j.aval(j.results[n_out + k]) == j.aval(j.results[k]);
  if (!same) {
    fail(kApi, "the jvp rule must return (primal outputs, tangent outputs) with one tangent per "
               "output, shaped as it: outputs {}, tangents {}",
         avals_text(*tf.program, 0, n_out), avals_text(j, n_out, j.results.size() - std::min(n_out, j.results.size())));
  }
  std::vector<Array> operands = args;
  for (const Traced* t : {&tf, &tj}) operands.insert(operands.end(), t->captures.begin(), t->captures.end());
  ir::Attrs attrs = counts({{"num_args", args.size()}, {"num_f_captures", tf.captures.size()},
                            {"num_jvp_captures", tj.captures.size()}});
  return bind(prim::get_primitive("custom_jvp_call"), operands, attrs, {tf.program, tj.program});
}

}  // namespace partix::detail

namespace partix {

namespace {
detail::CustomRuleFn rule(const ArraysFn& fn) {
  return [fn](const std::vector<Array>& t, std::shared_ptr<void>&) { return fn(t); };
}
}  // namespace

// Outside any trace nothing can differentiate the call: f runs as it is.
ArraysFn custom_vjp(ArraysFn f, ArraysFn fwd, ArraysFn bwd) {
  return [f, fwd, bwd](const std::vector<Array>& args) {
    if (!detail::is_tracing()) return f(args);
    detail::CustomProtos protos;
    return detail::custom_vjp_call(args, rule(f), rule(fwd), rule(bwd), protos);
  };
}

ArraysFn custom_jvp(ArraysFn f, ArraysFn jvp) {
  return [f, jvp](const std::vector<Array>& args) {
    if (!detail::is_tracing()) return f(args);
    detail::CustomProtos protos;
    return detail::custom_jvp_call(args, rule(f), rule(jvp), protos);
  };
}

}  // namespace partix
