// shard_map: traces the body once on local blocks and binds one shard_map instruction.
#include <algorithm>
#include <optional>

#include "core/errors.h"
#include "partix/transforms.h"
#include "sharding/axes.h"
#include "trace/dispatch_hooks.h"
#include "trace/loop_carries.h"
#include "trace/trace.h"
#include "trace/vma_options.h"

namespace partix::detail {

ShardMapState::ShardMapState(Mesh mesh, std::vector<PartitionSpec> in_specs,
                             std::vector<PartitionSpec> out_specs, bool check_vma)
    : mesh_(std::move(mesh)),
      in_specs_(std::move(in_specs)),
      out_specs_(std::move(out_specs)),
      check_vma_(check_vma) {
  for (const auto& s : in_specs_) NamedSharding(mesh_, s);  // validates axis names
  for (const auto& s : out_specs_) NamedSharding(mesh_, s);
}

namespace {
// "shard_map applied to the function 'f' was given ", JAX's opening of errors about the
// arguments, when the binding knows the function's name.
std::string applied_to(const std::string& function) {
  return function.empty()
             ? std::string()
             : fmt::format("shard_map applied to the function '{}' was given ", function);
}

std::string axes_text(const std::set<std::string>& axes) {
  std::vector<std::string> q;
  for (const auto& a : axes) q.push_back("'" + a + "'");
  return fmt::format("{}", fmt::join(q, ", "));
}
// The axes the body is manual over: the given subset (axis_names=), or every mesh axis that an
// enclosing shard_map (manual over `outer`) leaves automatic.
std::set<std::string> manual_axes_of(const Mesh& mesh, const std::set<std::string>& given,
                                     const std::set<std::string>& outer) {
  for (const auto& a : given) {
    check(mesh.has_axis(a), "shard_map", "axis_names names '{}', which is not an axis of {}", a,
          mesh.to_string());
    check(!outer.count(a), "shard_map",
          "axis_names names '{}', which the enclosing shard_map is already manual over (manual "
          "axes {}): a nested shard_map maps the axes it leaves automatic",
          a, axes_text(outer));
  }
  if (!given.empty()) return given;
  std::set<std::string> rest;
  for (const auto& a : mesh.axis_names()) {
    if (!outer.count(a)) rest.insert(a);
  }
  check(!rest.empty(), "shard_map",
        "the enclosing shard_map is manual over every axis of {}: a nested shard_map has no "
        "axis left to map",
        mesh.to_string());
  return rest;
}

// `mesh` with the given axes typed Manual: the mesh in context inside a shard_map body.
Mesh manual_typed(const Mesh& mesh, const std::set<std::string>& manual) {
  std::vector<AxisType> types = mesh.axis_types();
  for (size_t k = 0; k < types.size(); ++k) {
    if (manual.count(mesh.axis_names()[k])) types[k] = AxisType::Manual;
  }
  return mesh.with_axis_types(types);
}

// A shard_map nested in another's body runs on the enclosing map's mesh, which it must name as
// the body sees it (its manual axes typed Manual: the context mesh), as JAX requires.
Mesh nested_mesh(const TraceState& outer, const Mesh& given) {
  const Mesh context = manual_context(outer);
  if (!(given == context)) {
    fail("shard_map",
         "the context mesh {} should match the mesh passed to shard_map {}: inside a shard_map "
         "body, a nested shard_map runs on the mesh in context (omit mesh=, or pass "
         "jax.sharding.get_abstract_mesh())",
         context.to_string(), given.to_string());
  }
  return *outer.manual_mesh;
}

void check_manual_spec(const PartitionSpec& spec, const std::set<std::string>& manual,
                       const char* what) {
  for (const auto& a : spec.axes()) {
    check(manual.count(a) > 0, "shard_map",
          "{} refers to '{}' ({}), a mesh axis this shard_map is not manual over (axis_names "
          "= {}): the specs name manual axes only",
          what, a, spec.to_string(), axes_text(manual));
  }
}

// A spec as Python prints it: P('x',), P('x', None), P(('x', 'y'),).
std::string python_spec_text(const PartitionSpec& spec) {
  std::vector<std::string> items;
  for (int d = 0; d < spec.size(); ++d) {
    const auto e = spec[d];
    std::vector<std::string> q;
    for (const auto& a : e) q.push_back("'" + a + "'");
    items.push_back(e.empty()       ? "None"
                    : e.size() == 1 ? q[0]
                                    : fmt::format("({})", fmt::join(q, ", ")));
  }
  return fmt::format("P({}{})", fmt::join(items, ", "), items.size() == 1 ? "," : "");
}

// JAX's sentence for an out_spec that claims replication the value's varying axes deny.
std::string jax_vma_text(const Mesh& mesh, const std::set<std::string>& manual,
                         const PartitionSpec& spec, const std::set<std::string>& varying,
                         const std::string& key) {
  auto spec_axes = spec.axes();
  const std::set<std::string> named(spec_axes.begin(), spec_axes.end());
  std::vector<std::string> unmentioned, need, got, diff;
  for (const auto& a : mesh.axis_names()) {
    if (!manual.count(a)) continue;
    if (named.count(a))
      need.push_back(a);
    else
      unmentioned.push_back(a);
    if (varying.count(a)) got.push_back(a);
    if (!named.count(a) && varying.count(a)) diff.push_back(a);
  }
  const std::string head = fmt::format(
      "out_specs{} is {} which implies that the corresponding "
      "output value is ",
      key, python_spec_text(spec));
  if (unmentioned.size() == 1) {
    return head + fmt::format(
                      "replicated across mesh axis '{}', but could not infer "
                      "replication over any axes",
                      unmentioned[0]);
  }
  return head + fmt::format(
                    "only varying across mesh axes {{{}}} and not {{{}}}, but it was "
                    "inferred to be possibly varying over {{{}}}",
                    fmt::join(need, ","), fmt::join(diff, ","), fmt::join(got, ","));
}

}  // namespace

Mesh manual_context(const TraceState& t) { return manual_typed(*t.manual_mesh, t.manual_axes); }

bool has_free_explicit_axes(const TraceState& t) {
  if (!t.manual_mesh) return false;
  for (const auto& a : t.manual_mesh->axis_names()) {
    if (!t.manual_axes.count(a) && is_axis_type(*t.manual_mesh, a, AxisType::Explicit)) return true;
  }
  return false;
}

namespace {
// A body parameter's type: its argument's type along the Explicit axes the map leaves
// automatic, on the mesh in context inside the body.
std::optional<NamedSharding> body_param_type(const TraceState& body, const Array& arg) {
  if (!has_free_explicit_axes(body)) return std::nullopt;
  const auto t = explicit_type(arg.impl()->sharding);
  if (!t) return std::nullopt;
  const auto inner = explicit_type(NamedSharding(manual_context(body), t->spec()));
  std::vector<PartitionSpec::Entry> entries(static_cast<size_t>(arg.ndim()));  // full rank
  for (int d = 0; d < inner->spec().size() && d < arg.ndim(); ++d)
    entries[static_cast<size_t>(d)] = inner->spec()[d];
  return NamedSharding(inner->mesh(), PartitionSpec(entries));
}

// A result's type after the map: out_specs' split along the manual axes, then (minor) the
// body result's type along the automatic Explicit ones; nullopt when the body gives none.
std::optional<NamedSharding> merged_result_type(const Mesh& mesh, const PartitionSpec& out_spec,
                                                const std::set<std::string>& unreduced,
                                                const std::set<std::string>& reduced,
                                                const std::optional<NamedSharding>& body_type,
                                                int rank) {
  if (!body_type || body_type->spec().axes().empty()) return std::nullopt;
  std::vector<PartitionSpec::Entry> entries;
  for (int d = 0; d < rank; ++d) {
    PartitionSpec::Entry e = d < out_spec.size() ? out_spec[d] : PartitionSpec::Entry{};
    for (const auto& a : body_type->spec()[d]) e.push_back(a);
    entries.push_back(e);
  }
  return NamedSharding(mesh, PartitionSpec(entries), unreduced, reduced);
}

// The unreduced (or reduced: `kind`) axes of operands (the arguments' leaves, then the
// captures: none) and results, as attributes in_<kind> / out_<kind> when there are any.
void set_axis_set_attrs(ir::Attrs& attrs, const std::string& kind, ShardMapState::AxisSets in,
                        const ShardMapState::AxisSets& out, size_t num_operands) {
  auto any = [](const ShardMapState::AxisSets& u) {
    return std::any_of(u.begin(), u.end(), [](const auto& s) { return !s.empty(); });
  };
  in.resize(num_operands);
  if (any(in)) attrs.set("in_" + kind, ir::axis_sets_attr(in));
  if (any(out)) attrs.set("out_" + kind, ir::axis_sets_attr(out));
}
// Each argument is on this mesh (or uncommitted) and splits into equal blocks.
void check_arguments(const std::vector<Array>& leaves, const std::vector<PartitionSpec>& leaf_specs,
                     const Mesh& mesh, const std::string& function_name) {
  constexpr const char* kApi = "shard_map";
  for (size_t i = 0; i < leaves.size(); ++i) {
    const auto& impl = leaves[i].impl();
    // An argument committed to another mesh (JAX refuses it too).
    if (!impl->tracer && impl->committed && impl->sharding && !(impl->sharding->mesh() == mesh)) {
      fail(kApi,
           "argument {} ({}{}) is committed to {}, but this shard_map runs on {}; device_put it "
           "onto {}",
           i, dtype_name(impl->dtype), shape_to_string(impl->shape),
           impl->sharding->mesh().to_string(), mesh.to_string(), mesh.to_string());
    }
    // Blocks must be even: a padded block would leak its padding into the body's results
    // and collectives (JAX refuses uneven blocks as well).
    const PartitionSpec& spec = leaf_specs[i];
    for (int d = 0; d < spec.size() && d < leaves[i].ndim(); ++d) {
      int64_t k = 1;
      for (const auto& a : spec[d]) k *= mesh.axis_size(a);
      const int64_t n = leaves[i].shape()[static_cast<size_t>(d)];
      if (k > 1 && n % k != 0) {
        fail(kApi,
             "{}argument {} ({}{}): dimension {} of size {} is not evenly divisible into {} "
             "blocks over '{}' (in_specs {}); shard_map needs equal blocks (pad the array, or "
             "use jit, which handles uneven shardings)",
             applied_to(function_name), i, dtype_name(impl->dtype), shape_to_string(impl->shape), d,
             n, k, fmt::join(spec[d], "', '"), spec.to_string());
      }
    }
  }
}

// Per-argument axis sets as one per leaf (none given: all empty).
ShardMapState::AxisSets per_leaf(const ShardMapState::AxisSets& per_arg,
                                 const std::vector<size_t>& arg_leaf_counts) {
  ShardMapState::AxisSets out;
  for (size_t a = 0; a < arg_leaf_counts.size(); ++a) {
    for (size_t j = 0; j < arg_leaf_counts[a]; ++j) {
      out.push_back(a < per_arg.size() ? per_arg[a] : std::set<std::string>{});
    }
  }
  return out;
}

// Unreduced (or reduced: `kind`) axes of the specs: manual axes the spec does not split, on a
// map that is not nested in another (partial sums do not cross an enclosing map's body).
void check_unreduced(const ShardMapState::AxisSets& sets, const std::vector<PartitionSpec>& specs,
                     const std::set<std::string>& manual, bool nested, const char* what,
                     const char* kind = "unreduced") {
  for (size_t i = 0; i < sets.size() && i < specs.size(); ++i) {
    if (sets[i].empty()) continue;
    check(!nested, "shard_map",
          "{}[{}] is {} over {}: a shard_map nested in another's body takes and returns no "
          "partial sums or reduced values",
          what, i, kind, axes_text(sets[i]));
    auto named = specs[i].axes();
    for (const auto& a : sets[i]) {
      check(manual.count(a) > 0, "shard_map",
            "{} in {}[{}] names '{}', a mesh axis this shard_map is not manual over "
            "(axis_names = {})",
            kind, what, i, a, axes_text(manual));
      check(std::find(named.begin(), named.end(), a) == named.end(), "shard_map",
            "{}[{}] = {} both splits and is {} over '{}'", what, i, specs[i].to_string(), kind, a);
    }
  }
}

// The per-result axis sets: from the function (after tracing) or as given, one for all results
// or one each.
ShardMapState::AxisSets per_result(const ShardMapState::AxisSetsFn& fn,
                                   const ShardMapState::AxisSets& given,
                                   const std::shared_ptr<void>& proto, size_t n) {
  ShardMapState::AxisSets out = fn ? fn(proto, n) : given;
  if (out.size() == 1) out.assign(n, out[0]);
  out.resize(n);
  return out;
}

// The results against their out_specs: a result varying over a manual axis its spec neither
// splits nor leaves unreduced claims a replication that cannot be inferred; one unreduced over
// an axis must vary over it (its blocks are the partial sums).
void check_results_vary(const ir::Program& prog, const Mesh& mesh,
                        const std::set<std::string>& manual,
                        const std::vector<PartitionSpec>& out_specs,
                        const ShardMapState::AxisSets& out_unreduced, bool check_vma,
                        const std::string& function_name) {
  constexpr const char* kApi = "shard_map";
  for (size_t k = 0; k < prog.results.size(); ++k) {
    const ir::ValueInfo& info = prog.info(prog.results[k]);
    auto spec_axes = out_specs[k].axes();
    std::set<std::string> named(spec_axes.begin(), spec_axes.end());
    named.insert(out_unreduced[k].begin(), out_unreduced[k].end());
    std::set<std::string> missing, not_varying;
    for (const auto& a : info.varying) {
      if (manual.count(a) && !named.count(a)) missing.insert(a);  // the enclosing map's stay
    }
    for (const auto& a : out_unreduced[k]) {
      if (!info.varying.count(a)) not_varying.insert(a);
    }
    if (check_vma && !missing.empty()) {
      fail(kApi,
           "{}out_specs which require replication which can't be statically inferred given the "
           "mesh: {}. (out_specs[{}] = {} claims the result is replicated over {}, but it varies "
           "over {}: reduce it with psum/all_gather first, or pass check_vma = false)",
           applied_to(function_name),
           jax_vma_text(mesh, manual, out_specs[k], info.varying,
                        out_specs.size() == 1 ? "" : fmt::format("[{}]", k)),
           k, out_specs[k].to_string(), axes_text(missing), axes_text(missing));
    }
    if (check_vma && !not_varying.empty()) {
      fail(kApi,
           "{}out_specs[{}] is unreduced over {}, but the result does not vary over {} (it "
           "varies over {{{}}}): only per-device partial sums can leave a shard_map unreduced",
           applied_to(function_name), k, axes_text(not_varying), axes_text(not_varying),
           axes_text(info.varying));
    }
    NamedSharding(mesh, out_specs[k]).check_shape(info.aval.shape);
  }
}
}  // namespace

std::vector<Array> ShardMapState::call(const std::vector<Array>& leaves,
                                       const std::vector<size_t>& arg_leaf_counts,
                                       const TraceFn& trace,
                                       std::shared_ptr<void>& out_proto) const {
  constexpr const char* kApi = "shard_map";
  // Nested inside another shard_map's body: manual over axes that one leaves automatic.
  TraceState* outer = current_trace();
  const std::set<std::string> outer_manual =
      outer && outer->manual_mesh ? outer->manual_axes : std::set<std::string>{};
  const Mesh mesh = outer_manual.empty() ? mesh_ : nested_mesh(*outer, mesh_);
  check(in_specs_.size() == arg_leaf_counts.size(), kApi,
        "{} in_specs for {} arguments (one spec per argument)", in_specs_.size(),
        arg_leaf_counts.size());
  std::vector<PartitionSpec> leaf_specs;
  for (size_t a = 0; a < arg_leaf_counts.size(); ++a) {
    for (size_t j = 0; j < arg_leaf_counts[a]; ++j) leaf_specs.push_back(in_specs_[a]);
  }
  const std::set<std::string> manual = manual_axes_of(mesh, manual_axes_, outer_manual);
  for (const auto& spec : leaf_specs) check_manual_spec(spec, manual, "in_specs");
  const AxisSets leaf_unreduced = per_leaf(in_unreduced_, arg_leaf_counts);
  check_unreduced(leaf_unreduced, leaf_specs, manual, !outer_manual.empty(), "in_specs");
  const AxisSets leaf_reduced = per_leaf(in_reduced_, arg_leaf_counts);
  check_unreduced(leaf_reduced, leaf_specs, manual, !outer_manual.empty(), "in_specs", "reduced");
  check_arguments(leaves, leaf_specs, mesh, function_name_);
  // Trace the body on local blocks.
  auto body = std::make_shared<TraceState>("shard_map_body");
  body->manual_mesh = mesh;
  body->manual_axes = manual;  // and, nested, the enclosing map's (its collectives stay bound)
  body->manual_axes.insert(outer_manual.begin(), outer_manual.end());
  std::vector<Array> outs;
  {
    TraceScope scope(body);
    // Inside the body the manual axes are Manual (current_mesh says so, as JAX's abstract
    // mesh does): values are per-device blocks with no global type. Automatic axes
    // (axis_names=) keep their types.
    MeshContext manual_ctx(manual_typed(mesh, body->manual_axes));
    std::vector<Array> tracers;
    for (size_t i = 0; i < leaves.size(); ++i) {
      NamedSharding s(mesh, leaf_specs[i]);
      try {
        s.check_shape(leaves[i].shape());
      } catch (const Error&) {
        // JAX's words: the function, the spec's length against the argument's rank.
        fail(kApi,
             "{}an in_specs entry {} for argument {}, which has length {}, too long for its "
             "shape {}, which has rank {}{}",
             applied_to(function_name_), leaf_specs[i].to_string(), i, leaf_specs[i].size(),
             shape_to_string(leaves[i].shape()), leaves[i].ndim(),
             leaves[i].ndim() == 0 ? "; consider using an in_specs entry of `P()`" : "");
      }
      auto axes = leaf_specs[i].axes();
      axes.insert(axes.end(), leaf_unreduced[i].begin(), leaf_unreduced[i].end());
      std::set<std::string> vary;
      for (const auto& a : axes) {
        // With the option on, nothing varies over an axis of one device (vma_options.h).
        if (!drop_one_device_axes() || mesh.axis_size(a) > 1) vary.insert(a);
      }
      if (!outer_manual.empty()) {  // nested: what varies over the enclosing map's axes still does
        const auto& v = outer->program().info(outer->value_of(leaves[i])).varying;
        vary.insert(v.begin(), v.end());
      }
      tracers.push_back(
          body->add_param(ir::Aval{s.shard_shape(leaves[i].shape()), leaves[i].dtype()},
                          body_param_type(*body, leaves[i]), vary));
      // With check_vma, partial sums and reduced values are typed so in the body (as JAX's).
      if (check_vma_) {
        ir::ValueInfo& info = body->program().info(body->value_of(tracers.back()));
        info.unreduced = leaf_unreduced[i];
        info.reduced = leaf_reduced[i];
      }
    }
    // check_vma=false checks no varying axes: the body's loops widen their carries.
    std::optional<LooseCarriesScope> loose;
    if (!check_vma_) loose.emplace();
    outs = trace(tracers, out_proto);
    body->set_results(outs);
  }
  const ir::Program& prog = body->program();
  std::vector<PartitionSpec> out_specs =
      out_specs_fn_ ? out_specs_fn_(out_proto, prog.results.size()) : out_specs_;
  if (out_specs.size() == 1 && prog.results.size() > 1)
    out_specs.assign(prog.results.size(), PartitionSpec(out_specs[0]));
  check(out_specs.size() == prog.results.size(), kApi, "{} out_specs for {} results",
        out_specs.size(), prog.results.size());
  for (const auto& spec : out_specs) check_manual_spec(spec, manual, "out_specs");
  const size_t n_out = prog.results.size();
  const AxisSets out_unreduced = per_result(out_unreduced_fn_, out_unreduced_, out_proto, n_out);
  check_unreduced(out_unreduced, out_specs, manual, !outer_manual.empty(), "out_specs");
  const AxisSets out_reduced = per_result(out_reduced_fn_, out_reduced_, out_proto, n_out);
  check_unreduced(out_reduced, out_specs, manual, !outer_manual.empty(), "out_specs", "reduced");
  check_results_vary(prog, mesh, manual, out_specs, out_unreduced, check_vma_, function_name_);
  // Captured outer values enter whole (replicated) on every device. One typed on Explicit
  // axes would have to be resharded into the body, which JAX does not do either: it must be
  // an argument.
  for (const Array& c : body->captures()) {
    const auto& s = c.impl()->sharding;
    if (s && has_axis_type(s->mesh(), AxisType::Explicit) && s->mesh().size() > 1) {
      fail(kApi,
           "{}Closing over inputs to shard_map where the input is sharded on `Explicit` axes is "
           "not implemented. As a workaround, please pass those inputs as an argument to "
           "shard_map. Got input {}{} on {}",
           applied_to(function_name_), dtype_name(c.dtype()), shape_to_string(c.shape()),
           s->mesh().to_string());
    }
  }
  std::vector<Array> operands = leaves;
  ir::Specs specs(leaf_specs.begin(), leaf_specs.end());
  for (const Array& c : body->captures()) {
    operands.push_back(c);
    specs.push_back(P());
  }
  ir::Attrs attrs{{"mesh", mesh},
                  {"in_specs", specs},
                  {"out_specs", ir::Specs(out_specs.begin(), out_specs.end())}};
  set_axis_set_attrs(attrs, "unreduced", leaf_unreduced, out_unreduced, specs.size());
  set_axis_set_attrs(attrs, "reduced", leaf_reduced, out_reduced, specs.size());
  if (!check_vma_) attrs.set("check_vma", false);
  // Partial (axis_names=) or nested: which axes are manual (the VJP's map is manual over them).
  if (!outer_manual.empty() || manual.size() < mesh.axis_names().size()) {
    attrs.set("manual_axes", ir::Strings(manual.begin(), manual.end()));
  }
  auto region = std::make_shared<const ir::Program>(body->program());
  std::vector<Array> results =
      bind(prim::get_primitive("shard_map"), operands, std::move(attrs), {region});
  // Typed along automatic Explicit axes inside, the results take those splits after the map
  // (the map itself runs its body whole along them).
  for (size_t k = 0; k < results.size(); ++k) {
    const auto t = merged_result_type(mesh, out_specs[k], out_unreduced[k], out_reduced[k],
                                      prog.info(prog.results[k]).sharding, results[k].ndim());
    if (t) results[k] = reshard_to(results[k], *t);
  }
  return results;
}

}  // namespace partix::detail
