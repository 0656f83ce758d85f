// scan, fori_loop, while_loop and cond: trace the user's functions into regions and bind one
// instruction (src/prim/control_flow.cpp). Values a region captures from outside become extra
// operands. Inside shard_map a user's loop keeps each carry's varying axes and a cond's branches
// agree on their results' (JAX's check_vma rule, with the fix named in the error); the loops
// autodiff and batching build widen a carry to the union over iterations (loop_carries.h).
#include "trace/loop_carries.h"

#include "core/errors.h"
#include "partix/control.h"
#include "partix/transforms.h"
#include "trace/trace.h"

namespace partix::detail {

namespace {
thread_local bool g_loose_carries = false;
}

LooseCarriesScope::LooseCarriesScope() : previous_(g_loose_carries) { g_loose_carries = true; }
LooseCarriesScope::~LooseCarriesScope() { g_loose_carries = previous_; }
bool loose_carries() { return g_loose_carries; }
bool set_loose_carries(bool on) {
  const bool previous = g_loose_carries;
  g_loose_carries = on;
  return previous;
}

void check_same_structure(const char* api, const char* what, const std::string& got,
                          const char* where, const std::string& want) {
  check(got == want, api, "{} has structure {} where {} has structure {}", what, got, where, want);
}

namespace {

// x made to vary over `missing` mesh axes too (the pvary primitive bound directly: the axes
// come from the values' own varying sets, so they are the shard_map body's).
Array widened(const Array& x, const std::vector<std::string>& missing) {
  return bind1("pvary", {x}, {{"axes", ir::Strings(missing.begin(), missing.end())}});
}

struct Region {
  std::shared_ptr<ir::Program> program;
  std::vector<Array> captures;
  std::shared_ptr<void> proto;
};

// Records fn on fresh parameters of `avals` (inside shard_map, varying as `vary` says) into a new
// trace, which it returns.
using Types = std::vector<std::optional<NamedSharding>>;

std::shared_ptr<TraceState> record(const char* name, const std::vector<ir::Aval>& avals,
                                   const std::vector<Vary>& vary, const ProbeFn& fn,
                                   const Types& types = {}, const Vary& capture_floor = {}) {
  auto ts = std::make_shared<TraceState>(name);
  if (TraceState* outer = current_trace()) {
    ts->inherit(outer);
    if (outer->manual_mesh) ts->capture_vary_floor = capture_floor;
  }
  TraceScope scope(ts);
  std::vector<Array> tracers;
  for (size_t i = 0; i < avals.size(); ++i) {
    // Explicit sharding: a region's parameters have the types of what enters them.
    std::optional<NamedSharding> type = i < types.size() ? types[i] : std::nullopt;
    tracers.push_back(ts->add_param(avals[i], type, i < vary.size() ? vary[i] : Vary{}));
    if (type) ts->program().info(ts->program().params.back()).typed = true;
  }
  ts->set_results(fn(tracers, *ts));
  return ts;
}

// Traces fn on fresh parameters of `avals` into a region program.
Region trace_region(const char* name, const std::vector<ir::Aval>& avals,
                    const std::vector<Vary>& vary, const RegionFn& fn, const Types& types = {},
                    const Vary& capture_floor = {}) {
  Region r;
  auto ts = record(
      name, avals, vary,
      [&](const std::vector<Array>& tracers, TraceState&) { return fn(tracers, r.proto); }, types,
      capture_floor);
  r.program = std::make_shared<ir::Program>(ts->program());
  // What a body computes but never uses (a backward pass's recomputation of values it was given
  // saved) would otherwise run every iteration.
  ir::eliminate_dead_code(*r.program);
  r.captures = ts->captures();
  return r;
}

std::vector<ir::Aval> avals_of(const std::vector<Array>& xs) {
  std::vector<ir::Aval> out;
  for (const Array& x : xs) {
    check(x.valid(), "trace", "an operand is an empty Array");
    out.push_back(ir::Aval{x.shape(), x.dtype()});
  }
  return out;
}

// Explicit sharding: the operands' types (none outside Explicit meshes and inside shard_map).
Types types_of(const std::vector<Array>& xs) {
  Types out;
  if (TraceState* t = current_trace(); t && t->manual_mesh) return out;
  for (const Array& x : xs) out.push_back(explicit_type(x.impl()->sharding));
  return out;
}

std::vector<Vary> varies(const std::vector<Array>& xs) {
  std::vector<Vary> out;
  for (const Array& x : xs) out.push_back(vary_of(x));
  return out;
}

// Inside shard_map a carry that the body makes vary over more axes than init enters varying
// (pvary of init); `first` is the index of the first carry among the body's parameters.
bool widen_carries(const Region& r, size_t first, std::vector<Array>& init,
                   std::vector<Vary>& vary) {
  bool changed = false;
  for (size_t k = 0; k < init.size(); ++k) {
    const Vary& out = r.program->info(r.program->results[k]).varying;
    std::vector<std::string> missing;
    for (const auto& a : out) {
      if (!vary[first + k].count(a)) missing.push_back(a);
    }
    if (missing.empty()) continue;
    init[k] = widened(init[k], missing);
    vary[first + k].insert(missing.begin(), missing.end());
    changed = true;
  }
  return changed;
}

// A value's type with its varying axes, as JAX prints it: f32[3]{V:i}, f32[3]{V:(i,j)}.
std::string vary_type(const ir::Aval& aval, const Vary& v) {
  std::string out = aval.to_string();
  if (v.empty()) return out;
  if (v.size() == 1) return out + "{V:" + *v.begin() + "}";
  return out + "{V:(" + fmt::format("{}", fmt::join(v, ",")) + ")}";
}

// Axes as a Python tuple, for the pcast a message suggests: ('i',) or ('i', 'j').
std::string axes_tuple(const Vary& v) {
  std::vector<std::string> quoted;
  for (const auto& a : v) quoted.push_back("'" + a + "'");
  return "(" + fmt::format("{}", fmt::join(quoted, ", ")) + (v.size() == 1 ? ",)" : ")");
}

Vary minus(const Vary& a, const Vary& b, const Vary& exempt) {
  Vary out;
  for (const auto& x : a) {
    if (!b.count(x) && !exempt.count(x)) out.insert(x);
  }
  return out;
}

// "A.\n" for one item, else "  * a;\n  * b.\n" (JAX's layout of these messages).
std::string bullets(const std::vector<std::string>& items) {
  if (items.size() == 1) return items[0] + ".\n";
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += "  * " + items[i] + (i + 1 < items.size() ? ";\n" : ".\n");
  }
  return out;
}

// JAX's rule for a user's loop inside shard_map: each carry leaves the body varying over
// exactly the axes it entered with (`exempt`: the axes a while_loop's predicate adds to every
// carry, which partix applies itself). Else a TypeError-like message naming, for each carry
// that gains axes, the pcast of its initial value that fixes it.
void check_carry_types(const char* api, const Region& r, size_t first, size_t n,
                       const std::vector<Vary>& vary, const Vary& exempt = {}) {
  std::vector<std::string> diffs, fixes;
  for (size_t k = 0; k < n; ++k) {
    const int out_value = r.program->results[k];
    const Vary& in = vary[first + k];
    const Vary& out = r.program->info(out_value).varying;
    const Vary gained = minus(out, in, exempt), lost = minus(in, out, exempt);
    if (gained.empty() && lost.empty()) continue;
    const ir::Aval aval = r.program->aval(out_value);
    diffs.push_back(
        fmt::format("the input carry component {} has type {} but the corresponding output carry "
                    "component has type {}, so the varying manual axes do not match",
                    k, vary_type(aval, in), vary_type(aval, out)));
    if (!gained.empty()) {
      fixes.push_back(
          fmt::format("applying `jax.lax.pcast(..., {}, to='varying')` to the "
                      "initial carry value of the input carry component {}",
                      axes_tuple(gained), k));
    }
  }
  if (diffs.empty()) return;
  std::string fix;
  if (fixes.size() == 1) fix = "This might be fixed by " + fixes[0] + ".\n";
  if (fixes.size() > 1) fix = "This might be fixed by:\n" + bullets(fixes);
  fail(api,
       "{} body function carry input and carry output must have equal types, but they "
       "differ:\n\n{}\n{}Revise the function so that all output types match the "
       "corresponding input types.",
       api, diffs.size() == 1 ? diffs[0] + ".\n" : bullets(diffs), fix);
}

// The same rule for cond's branches: result k varies over the same axes in both (up to the
// predicate's axes, which partix adds to every result itself).
void check_branch_types(const Region& t, const Region& f, const Vary& exempt) {
  std::vector<std::string> diffs, fixes;
  for (size_t k = 0; k < t.program->results.size() && k < f.program->results.size(); ++k) {
    const Vary& vt = t.program->info(t.program->results[k]).varying;
    const Vary& vf = f.program->info(f.program->results[k]).varying;
    const Vary to_true = minus(vf, vt, exempt), to_false = minus(vt, vf, exempt);
    if (to_true.empty() && to_false.empty()) continue;
    const ir::Aval aval = t.program->aval(t.program->results[k]);
    diffs.push_back(fmt::format(
        "the output of true_fun at path [{}] has type {} but the corresponding output of "
        "false_fun has type {}, so the varying manual axes do not match",
        k, vary_type(aval, vt), vary_type(aval, vf)));
    for (const auto& [axes, who] : {std::pair{to_true, "true_fun"}, {to_false, "false_fun"}}) {
      if (axes.empty()) continue;
      fixes.push_back(
          fmt::format("applying `jax.lax.pcast(..., {}, to='varying')` to the "
                      "output of {} at path [{}]",
                      axes_tuple(axes), who, k));
    }
  }
  if (diffs.empty()) return;
  std::string fix = fixes.size() == 1 ? "This might be fixed by " + fixes[0] + ".\n"
                                      : "This might be fixed by:\n" + bullets(fixes);
  fail("cond",
       "cond branches must have equal output types but they differ:\n\n{}\n{}Revise "
       "true_fun and/or false_fun so that all output types match.",
       diffs.size() == 1 ? diffs[0] + ".\n" : bullets(diffs), fix);
}

// Two regions over one operand list: a's parameters become [user, a's captures, b's captures]
// and b's [user, a's captures, b's captures]; each ignores the other's.
std::vector<Array> merge_captures(Region& a, Region& b) {
  const size_t na = a.captures.size(), nb = b.captures.size();
  auto extend = [](ir::Program& p, size_t user, const std::vector<Array>& before,
                   const std::vector<Array>& after) {
    std::vector<int> params(p.params.begin(), p.params.begin() + static_cast<long>(user));
    for (const Array& c : before) params.push_back(p.add_value(ir::Aval{c.shape(), c.dtype()}));
    params.insert(params.end(), p.params.begin() + static_cast<long>(user), p.params.end());
    for (const Array& c : after) params.push_back(p.add_value(ir::Aval{c.shape(), c.dtype()}));
    p.params = std::move(params);
  };
  const size_t ua = a.program->params.size() - na, ub = b.program->params.size() - nb;
  extend(*a.program, ua + na, {}, b.captures);
  extend(*b.program, ub, a.captures, {});
  std::vector<Array> out = a.captures;
  out.insert(out.end(), b.captures.begin(), b.captures.end());
  return out;
}

void check_bool_scalar(const char* api, const char* what, const Array& x) {
  if (!(x.valid() && x.ndim() == 0 && x.dtype() == DType::Bool)) {
    fail(api, "{} must be a bool scalar, got {}{}", what,
         x.valid() ? dtype_name(x.dtype()) : "nothing",
         x.valid() ? shape_to_string(x.shape()) : "");
  }
}

std::string quoted(const std::vector<std::string>& axes) {
  std::vector<std::string> q;
  for (const auto& a : axes) q.push_back("'" + a + "'");
  return fmt::format("{}", fmt::join(q, ", "));
}

// Inside shard_map, devices whose predicate differs take different paths through a region: a
// collective in it (or in a region nested in it) over an axis the predicate varies over would
// pair devices that run different collectives, or none. Refused, as JAX refuses it.
void check_collectives_agree(const char* api, const Vary& pred, const char* path,
                             const ir::Program& p, const char* region) {
  if (pred.empty()) return;
  for (const ir::Instr& in : p.instrs) {
    for (const auto& r : in.regions) check_collectives_agree(api, pred, path, *r, region);
    if (!in.prim->is_collective() || !in.attrs.has("axes")) continue;
    const auto& axes = in.attrs.get<ir::Strings>("axes");
    std::vector<std::string> shared;
    for (const auto& a : axes) {
      if (pred.count(a)) shared.push_back(a);
    }
    if (shared.empty()) continue;
    const std::string op = in.prim->user_name(in.attrs);  // psum, not all_reduce{kind=sum}
    fail(api,
         "the predicate varies over {} ({}), but {} runs {} over {}: devices of one group would "
         "enter different collectives. Compute the predicate from values invariant over {} "
         "(reduce them with psum/pmax first), or move the {} out of the {}",
         quoted(shared), path, region, op, quoted(axes), quoted(shared), op, api);
  }
}

constexpr int kMaxWidening = 4;

}  // namespace

Vary vary_of(const Array& a) {
  TraceState* t = current_trace();
  if (!t || !t->manual_mesh || !a.is_tracer()) return {};
  // As this trace sees it: a value captured from an enclosing trace may vary over more axes
  // here than where it was made (a branch widens what it captures by its predicate's axes).
  return t->program().info(t->value_of(a)).varying;
}

std::pair<Vary, Vary> sum_types_of(const Array& a) {
  TraceState* t = current_trace();
  if (!t || !t->manual_mesh || !a.is_tracer()) return {};
  const ir::ValueInfo& info = t->program().info(t->value_of(a));
  return {info.unreduced, info.reduced};
}

Array with_sum_types(const Array& a, const Vary& unreduced, const Vary& reduced) {
  TraceState* t = current_trace();
  if (!t || !t->manual_mesh || !a.is_tracer()) return a;
  Array out = bind1("copy", {a}, {});
  ir::ValueInfo& info = t->program().info(t->value_of(out));
  info.unreduced = unreduced;
  info.reduced = reduced;
  return out;
}

ir::Program trace_probe(const std::vector<ir::Aval>& avals, const std::vector<Vary>& vary,
                        const ProbeFn& fn) {
  return record("probe", avals, vary, fn)->program();
}

std::vector<Array> scan_call(const std::vector<Array>& init_in, const std::vector<Array>& xs,
                             int64_t length, bool reverse, const RegionFn& body,
                             std::shared_ptr<void>& out_proto) {
  constexpr const char* kApi = "scan";
  for (size_t j = 0; j < xs.size(); ++j) {
    if (!(xs[j].valid() && xs[j].ndim() >= 1)) {
      fail(kApi, "scanned input {} is {}{}: it needs a leading axis to scan over", j,
           xs[j].valid() ? dtype_name(xs[j].dtype()) : "nothing",
           xs[j].valid() ? shape_to_string(xs[j].shape()) : "");
    }
    if (length < 0) length = xs[j].shape()[0];
    if (xs[j].shape()[0] != length) {
      fail(kApi, "scanned input {} is {}{} but scanned input 0 has length {}", j,
           dtype_name(xs[j].dtype()), shape_to_string(xs[j].shape()), length);
    }
  }
  check(length >= 0, kApi, "nothing to scan over: no scanned inputs and no length");
  std::vector<Array> init = init_in;
  std::vector<ir::Aval> avals = avals_of(init);
  for (const Array& x : xs) {
    avals.push_back(ir::Aval{Shape(x.shape().begin() + 1, x.shape().end()), x.dtype()});
  }
  std::vector<Vary> vary = varies(init);
  for (const Vary& v : varies(xs)) vary.push_back(v);
  // Each run's slice of a scanned input has its type without the leading dimension.
  Types types = types_of(init);
  for (const auto& t : types_of(xs)) {
    if (!t) {
      types.push_back(t);
      continue;
    }
    std::vector<PartitionSpec::Entry> rest;
    for (int d = 1; d < t->spec().size(); ++d) rest.push_back(t->spec()[d]);
    types.emplace_back(NamedSharding(t->mesh(), PartitionSpec(rest), t->unreduced()));
  }
  Region r;
  for (int attempt = 0;; ++attempt) {
    r = trace_region("scan_body", avals, vary, body, types);
    if (!loose_carries()) {
      check_carry_types(kApi, r, 0, init.size(), vary);
      break;
    }
    if (attempt == kMaxWidening || !widen_carries(r, 0, init, vary)) break;
  }
  out_proto = r.proto;
  std::vector<Array> operands = init;
  operands.insert(operands.end(), xs.begin(), xs.end());
  operands.insert(operands.end(), r.captures.begin(), r.captures.end());
  ir::Attrs attrs{{"length", length},
                  {"num_carry", static_cast<int64_t>(init.size())},
                  {"num_xs", static_cast<int64_t>(xs.size())}};
  if (reverse) attrs.set("reverse", true);
  return bind(prim::get_primitive("scan"), operands, std::move(attrs), {r.program});
}

std::vector<Array> fori_call(int64_t lower, int64_t upper, const std::vector<Array>& init_in,
                             const RegionFn& body, std::shared_ptr<void>& out_proto) {
  constexpr const char* kApi = "fori_loop";
  check(lower >= INT32_MIN && lower <= INT32_MAX && upper >= INT32_MIN && upper <= INT32_MAX, kApi,
        "bounds [{}, {}) do not fit the int32 index", lower, upper);
  upper = std::max(upper, lower);  // an empty range runs no iteration (as range(), and JAX)
  std::vector<Array> init = init_in;
  std::vector<ir::Aval> avals{ir::Aval{{}, DType::I32}};
  for (const ir::Aval& a : avals_of(init)) avals.push_back(a);
  std::vector<Vary> vary{Vary{}};
  for (const Vary& v : varies(init)) vary.push_back(v);
  Types types{std::nullopt};
  for (const auto& t : types_of(init)) types.push_back(t);
  Region r;
  for (int attempt = 0;; ++attempt) {
    r = trace_region("fori_body", avals, vary, body, types);
    if (!loose_carries()) {
      check_carry_types(kApi, r, 1, init.size(), vary);
      break;
    }
    if (attempt == kMaxWidening || !widen_carries(r, 1, init, vary)) break;
  }
  out_proto = r.proto;
  std::vector<Array> operands = init;
  operands.insert(operands.end(), r.captures.begin(), r.captures.end());
  ir::Attrs attrs{
      {"lower", lower}, {"upper", upper}, {"num_carry", static_cast<int64_t>(init.size())}};
  return bind(prim::get_primitive("fori_loop"), operands, std::move(attrs), {r.program});
}

std::vector<Array> while_call(const std::vector<Array>& init_in, const RegionFn& cond_fn,
                              const RegionFn& body_fn, std::shared_ptr<void>& out_proto) {
  constexpr const char* kApi = "while_loop";
  std::vector<Array> init = init_in;
  std::vector<ir::Aval> avals = avals_of(init);
  std::vector<Vary> vary = varies(init);
  Region body, cond;
  for (int attempt = 0;; ++attempt) {
    const Types types = types_of(init);
    body = trace_region("while_body", avals, vary, body_fn, types);
    cond = trace_region(
        "while_cond", avals, vary,
        [&](const std::vector<Array>& t, std::shared_ptr<void>& p) {
          std::vector<Array> r = cond_fn(t, p);
          check(r.size() == 1, kApi, "cond must return one Array");
          check_bool_scalar(kApi, "cond's result", r[0]);
          return r;
        },
        types);
    if (attempt == kMaxWidening) break;
    bool changed = loose_carries() && widen_carries(body, 0, init, vary);
    // A predicate varying over axes gives those devices their own trip counts, so every carry
    // enters varying over them too (as the while_loop's varying rule says it leaves).
    const Vary& pred = cond.program->info(cond.program->results[0]).varying;
    for (size_t k = 0; k < init.size(); ++k) {
      std::vector<std::string> missing;
      for (const auto& a : pred) {
        if (!vary[k].count(a)) missing.push_back(a);
      }
      if (missing.empty()) continue;
      init[k] = widened(init[k], missing);
      vary[k].insert(missing.begin(), missing.end());
      changed = true;
    }
    if (!changed) break;
  }
  const Vary& pred = cond.program->info(cond.program->results[0]).varying;
  if (!loose_carries()) check_carry_types(kApi, body, 0, init.size(), vary, pred);
  const char* path = "devices may run different numbers of iterations";
  check_collectives_agree(kApi, pred, path, *cond.program, "the condition");
  check_collectives_agree(kApi, pred, path, *body.program, "the body");
  out_proto = body.proto;
  std::vector<Array> captured = merge_captures(cond, body);
  std::vector<Array> operands = init;
  operands.insert(operands.end(), captured.begin(), captured.end());
  ir::Attrs attrs{{"num_carry", static_cast<int64_t>(init.size())}};
  return bind(prim::get_primitive("while_loop"), operands, std::move(attrs),
              {cond.program, body.program});
}

std::vector<Array> cond_call(const Array& pred, const std::vector<Array>& operands_in,
                             const RegionFn& true_fn, const RegionFn& false_fn,
                             std::shared_ptr<void>& true_proto,
                             std::shared_ptr<void>& false_proto) {
  constexpr const char* kApi = "cond";
  check_bool_scalar(kApi, "the predicate", pred);
  // Inside shard_map the operands, captures included, enter the branches varying over the
  // predicate's axes besides their own (widened here, outside): devices that may take different
  // branches then differentiate their own copies, and the pvary's transpose (a psum outside)
  // brings an invariant operand's gradient back. Collectives over other axes may stay inside a
  // branch, since every device of such a group takes the same one.
  const Vary pred_axes = vary_of(pred);
  auto widen = [&](const Array& x) {
    const Vary v = vary_of(x);
    std::vector<std::string> missing;
    for (const auto& a : pred_axes) {
      if (!v.count(a)) missing.push_back(a);
    }
    return missing.empty() ? x : widened(x, missing);
  };
  std::vector<Array> operands_in_joined;
  for (const Array& x : operands_in) operands_in_joined.push_back(widen(x));
  const std::vector<ir::Aval> avals = avals_of(operands_in_joined);
  const std::vector<Vary> vary = varies(operands_in_joined);
  const Types types = types_of(operands_in_joined);
  Region t = trace_region("cond_true", avals, vary, true_fn, types, pred_axes);
  Region f = trace_region("cond_false", avals, vary, false_fn, types, pred_axes);
  const char* path = "devices may take different branches";
  check_collectives_agree(kApi, vary_of(pred), path, *t.program, "the true branch");
  check_collectives_agree(kApi, vary_of(pred), path, *f.program, "the false branch");
  true_proto = t.proto;
  false_proto = f.proto;
  std::vector<ir::Aval> rt, rf;
  for (int v : t.program->results) rt.push_back(t.program->aval(v));
  for (int v : f.program->results) rf.push_back(f.program->aval(v));
  for (size_t k = 0; k < rt.size() && k < rf.size(); ++k) {
    if (rt[k] != rf[k]) {
      fail(kApi, "result {} of true_fn is {} but false_fn's is {}", k, rt[k].to_string(),
           rf[k].to_string());
    }
  }
  if (!loose_carries()) check_branch_types(t, f, pred_axes);
  std::vector<Array> captured = merge_captures(t, f);
  std::vector<Array> operands{pred};
  operands.insert(operands.end(), operands_in_joined.begin(), operands_in_joined.end());
  for (const Array& c : captured) operands.push_back(widen(c));
  return bind(prim::get_primitive("cond"), operands, {}, {t.program, f.program});
}

}  // namespace partix::detail
