// custom_vjp_call and custom_jvp_call: a function whose derivative is the user's rule. Region 0
// is the function (what runs: the compiler inlines it, as remat's); the other regions are the
// rules, run only by the VJP. Operands: the arguments, then each region's captures in region
// order (attrs num_args and num_*_captures).
#include "autodiff/vjp.h"
#include "core/errors.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "prim/util.h"
#include "trace/loop_carries.h"
#include "trace/trace.h"

namespace partix::prim {

namespace {

// Operands [first, first + n).
std::vector<Array> slice_of(const std::vector<Array>& v, size_t first, size_t n) {
  return {v.begin() + static_cast<std::ptrdiff_t>(first),
          v.begin() + static_cast<std::ptrdiff_t>(first + n)};
}

std::vector<Array> concat(std::vector<Array> a, const std::vector<Array>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The values of region `p`'s results from its evaluation `env`.
std::vector<Array> results_of(const ir::Program& p, const std::vector<Array>& env, size_t first,
                              size_t n) {
  std::vector<Array> out;
  for (size_t k = first; k < first + n; ++k) out.push_back(env[static_cast<size_t>(p.results[k])]);
  return out;
}

// Cotangents of the outputs, zeros where none flows (an empty Array).
std::vector<Array> dense(const std::vector<Array>& cts, const std::vector<Array>& outputs) {
  std::vector<Array> out;
  for (size_t k = 0; k < cts.size(); ++k) {
    out.push_back(cts[k].valid() ? cts[k] : autodiff::zeros_like(outputs[k]));
  }
  return out;
}

// A captured value that a gradient would flow back through gets none from the user's rule:
// refused, as JAX does, rather than silently given a zero gradient.
void check_captures_inactive(const char* api, const VjpArgs& a, size_t first) {
  if (!a.active) return;
  for (size_t i = first; i < a.active->size(); ++i) {
    if ((*a.active)[i]) {
      detail::fail(api, "the function or its rules close over a value being differentiated "
                        "({}); pass it as an argument so that the rule gives its cotangent",
                   ir::Aval{a.primals[i].shape(), a.primals[i].dtype()}.to_string());
    }
  }
}

// Inside shard_map (with check_vma), as JAX: the user's bwd rule gives each argument a
// cotangent of the argument's own type, varying over the same mesh axes (a psum'd cotangent of
// a varying argument would be summed again by the transpose of its pvary).
void check_cotangent_types(const VjpArgs& a, const std::vector<Array>& cts, size_t n) {
  const detail::TraceState* t = detail::current_trace();
  if (t == nullptr || !t->manual_mesh || detail::loose_carries()) return;
  for (size_t i = 0; i < n && i < cts.size(); ++i) {
    if (!cts[i].valid() || !is_floating(a.primals[i].dtype())) continue;
    const detail::Vary want = detail::vary_of(a.primals[i]), got = detail::vary_of(cts[i]);
    if (want == got) continue;
    auto text = [](const Array& x, const detail::Vary& v) {
      std::string s = ir::Aval{x.shape(), x.dtype()}.to_string();
      if (!v.empty()) s += fmt::format("{{V:{}}}", fmt::join(v, ","));
      return s;
    };
    detail::fail("custom_vjp",
                 "Custom VJP bwd rule must produce an output with the same type as the args "
                 "tuple of the primal function, but at output[{}] the bwd rule produced an output "
                 "of type {} corresponding to an input of type {} (inside shard_map the "
                 "cotangent varies over the mesh axes its argument varies over: drop the psum, "
                 "or lax.pcast it to='varying')",
                 i, text(cts[i], got), text(a.primals[i], want));
  }
}

// What both share: region 0 is the function, inlined when compiled.
class CustomCall : public Primitive {
 public:
  bool accepts_quantized() const override { return true; }
  // vmap: the function and its rules batched, each for every example (their parameters and
  // results line up with every operand and result at the front).
  const Batching* batching() const override { return &batching_; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions& regions) const override {
    detail::check(regions.size() == num_regions(), name(), "needs {} regions", num_regions());
    size_t n = static_cast<size_t>(attrs.i("num_args") + attrs.i("num_f_captures"));
    detail::check(n <= in.size() && n == regions[0]->params.size(), name(),
                  "{} operands for a function of {} parameters", in.size(),
                  regions[0]->params.size());
    std::vector<Aval> out;
    for (int v : regions[0]->results) out.push_back(regions[0]->aval(v));
    return out;
  }
  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>&,
                                             const Attrs&, const Regions& regions,
                                             size_t) const override {
    return results_varying(*regions[0]);
  }
  // The regions were traced with each operand's own varying axes (as checkpoint's).
  bool joins_operand_varying() const override { return false; }
  bool inlined_when_compiled() const override { return true; }
  void reference(const KernelCall&) const override {
    detail::internal_error(name(), "a custom derivative's function reached the interpreter");
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }

 protected:
  virtual size_t num_regions() const = 0;

 private:
  RegionsBatching batching_{*this};
};

// Regions: f(args, f captures), fwd(args, fwd captures) -> outputs, residuals,
// bwd(residuals, cotangents, bwd captures) -> one cotangent per argument.
class CustomVjpCall final : public CustomCall {
 public:
  std::string_view name() const override { return "custom_vjp_call"; }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const size_t n = static_cast<size_t>(a.attrs.i("num_args"));
    const size_t nf = static_cast<size_t>(a.attrs.i("num_f_captures"));
    const size_t nw = static_cast<size_t>(a.attrs.i("num_fwd_captures"));
    const size_t nb = static_cast<size_t>(a.attrs.i("num_bwd_captures"));
    check_captures_inactive("custom_vjp", a, n);
    const ir::Program& fwd = *a.regions[1];
    const ir::Program& bwd = *a.regions[2];
    std::vector<Array> env = autodiff::evaluate(fwd, concat(slice_of(a.primals, 0, n),
                                                             slice_of(a.primals, n + nf, nw)));
    const size_t n_out = a.outputs.size();
    std::vector<Array> res = results_of(fwd, env, n_out, fwd.results.size() - n_out);
    std::vector<Array> bargs = concat(concat(res, dense(a.cotangents, a.outputs)),
                                      slice_of(a.primals, n + nf + nw, nb));
    std::vector<Array> benv = autodiff::evaluate(bwd, bargs);
    std::vector<Array> cts = results_of(bwd, benv, 0, n);
    check_cotangent_types(a, cts, n);
    cts.resize(a.primals.size());  // captures: none (checked inactive above)
    return cts;
  }

 protected:
  size_t num_regions() const override { return 3; }
};

// Regions: f(args, f captures), jvp(primals, tangents, jvp captures) -> outputs, tangents.
// The rule is linear in the tangents, so its VJP with respect to them is its transpose: the
// cotangents of the arguments.
class CustomJvpCall final : public CustomCall {
 public:
  std::string_view name() const override { return "custom_jvp_call"; }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const size_t n = static_cast<size_t>(a.attrs.i("num_args"));
    const size_t nf = static_cast<size_t>(a.attrs.i("num_f_captures"));
    const size_t nj = static_cast<size_t>(a.attrs.i("num_jvp_captures"));
    check_captures_inactive("custom_jvp", a, n);
    const ir::Program& rule = *a.regions[1];
    std::vector<Array> primals = slice_of(a.primals, 0, n), tangents;
    for (const Array& p : primals) tangents.push_back(autodiff::zeros_like(p));
    std::vector<Array> args = concat(concat(primals, tangents), slice_of(a.primals, n + nf, nj));
    // Differentiate with respect to the float tangents only.
    std::vector<bool> active(args.size(), false);
    for (size_t i = 0; i < n; ++i) active[n + i] = is_floating(primals[i].dtype());
    autodiff::Residuals saved;
    std::vector<Array> env = autodiff::evaluate(rule, args, &saved, &active);
    const size_t n_out = a.outputs.size();
    std::vector<Array> cts(2 * n_out);  // none on the primal outputs
    for (size_t k = 0; k < n_out; ++k) cts[n_out + k] = a.cotangents[k];
    std::vector<Array> back = autodiff::backward(rule, env, cts, &saved, &active);
    std::vector<Array> out(a.primals.size());
    for (size_t i = 0; i < n; ++i) out[i] = back[n + i];
    return out;
  }

 protected:
  size_t num_regions() const override { return 2; }
};

Register<CustomVjpCall> r_custom_vjp;
Register<CustomJvpCall> r_custom_jvp;

}  // namespace
}  // namespace partix::prim
