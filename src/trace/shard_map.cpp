// shard_map: traces the body once on local blocks and binds one shard_map instruction.
#include "core/errors.h"
#include "partix/transforms.h"
#include "trace/trace.h"

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
// The axes the body is manual over: the given subset (axis_names=), or every mesh axis.
std::set<std::string> manual_axes_of(const Mesh& mesh, const std::set<std::string>& given) {
  for (const auto& a : given) {
    check(mesh.has_axis(a), "shard_map", "axis_names names '{}', which is not an axis of {}", a,
          mesh.to_string());
  }
  if (!given.empty()) return given;
  return {mesh.axis_names().begin(), mesh.axis_names().end()};
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

}  // namespace

std::vector<Array> ShardMapState::call(const std::vector<Array>& leaves,
                                       const std::vector<size_t>& arg_leaf_counts,
                                       const TraceFn& trace,
                                       std::shared_ptr<void>& out_proto) const {
  constexpr const char* kApi = "shard_map";
  if (TraceState* outer = current_trace(); outer && outer->manual_mesh) {
    fail(kApi, "shard_map inside a shard_map body is not supported");
  }
  check(in_specs_.size() == arg_leaf_counts.size(), kApi,
        "{} in_specs for {} arguments (one spec per argument)", in_specs_.size(),
        arg_leaf_counts.size());
  std::vector<PartitionSpec> leaf_specs;
  for (size_t a = 0; a < arg_leaf_counts.size(); ++a) {
    for (size_t j = 0; j < arg_leaf_counts[a]; ++j) leaf_specs.push_back(in_specs_[a]);
  }
  const std::set<std::string> manual = manual_axes_of(mesh_, manual_axes_);
  for (const auto& spec : leaf_specs) check_manual_spec(spec, manual, "in_specs");
  for (size_t i = 0; i < leaves.size(); ++i) {
    const auto& impl = leaves[i].impl();
    // An argument committed to another mesh (JAX refuses it too).
    if (!impl->tracer && impl->committed && impl->sharding && !(impl->sharding->mesh() == mesh_)) {
      fail(kApi,
           "argument {} ({}{}) is committed to {}, but this shard_map runs on {}; device_put it "
           "onto {}",
           i, dtype_name(impl->dtype), shape_to_string(impl->shape),
           impl->sharding->mesh().to_string(), mesh_.to_string(), mesh_.to_string());
    }
    // Blocks must be even: a padded block would leak its padding into the body's results
    // and collectives (JAX refuses uneven blocks as well).
    const PartitionSpec& spec = leaf_specs[i];
    for (int d = 0; d < spec.size() && d < leaves[i].ndim(); ++d) {
      int64_t k = 1;
      for (const auto& a : spec[d]) k *= mesh_.axis_size(a);
      const int64_t n = leaves[i].shape()[static_cast<size_t>(d)];
      if (k > 1 && n % k != 0) {
        fail(kApi,
             "{}argument {} ({}{}): dimension {} of size {} is not evenly divisible into {} "
             "blocks over '{}' (in_specs {}); shard_map needs equal blocks (pad the array, or "
             "use jit, which handles uneven shardings)",
             applied_to(function_name_), i, dtype_name(impl->dtype), shape_to_string(impl->shape),
             d, n, k, fmt::join(spec[d], "', '"), spec.to_string());
      }
    }
  }
  // Trace the body on local blocks.
  auto body = std::make_shared<TraceState>("shard_map_body");
  body->manual_mesh = mesh_;
  body->manual_axes = manual;
  std::vector<Array> outs;
  {
    TraceScope scope(body);
    // Inside the body the manual axes are Manual (current_mesh says so, as JAX's abstract
    // mesh does): values are per-device blocks with no global type. Automatic axes
    // (axis_names=) keep their types.
    std::vector<AxisType> types = mesh_.axis_types();
    for (size_t k = 0; k < types.size(); ++k) {
      if (manual.count(mesh_.axis_names()[k])) types[k] = AxisType::Manual;
    }
    MeshContext manual_ctx(mesh_.with_axis_types(types));
    std::vector<Array> tracers;
    for (size_t i = 0; i < leaves.size(); ++i) {
      NamedSharding s(mesh_, leaf_specs[i]);
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
      tracers.push_back(
          body->add_param(ir::Aval{s.shard_shape(leaves[i].shape()), leaves[i].dtype()},
                          std::nullopt, std::set<std::string>(axes.begin(), axes.end())));
    }
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
  for (size_t k = 0; k < prog.results.size(); ++k) {
    const ir::ValueInfo& info = prog.info(prog.results[k]);
    auto spec_axes = out_specs[k].axes();
    std::set<std::string> named(spec_axes.begin(), spec_axes.end());
    std::set<std::string> missing;
    for (const auto& a : info.varying) {
      if (!named.count(a)) missing.insert(a);
    }
    if (check_vma_ && !missing.empty()) {
      fail(kApi,
           "out_specs[{}] = {} claims the result is replicated over {}, but it varies over {} "
           "(reduce it with psum/all_gather first, or pass check_vma = false)",
           k, out_specs[k].to_string(), axes_text(missing), axes_text(missing));
    }
    NamedSharding(mesh_, out_specs[k]).check_shape(info.aval.shape);
  }
  // Captured outer values enter whole (replicated) on every device.
  std::vector<Array> operands = leaves;
  ir::Specs specs(leaf_specs.begin(), leaf_specs.end());
  for (const Array& c : body->captures()) {
    operands.push_back(c);
    specs.push_back(P());
  }
  ir::Attrs attrs{{"mesh", mesh_},
                  {"in_specs", specs},
                  {"out_specs", ir::Specs(out_specs.begin(), out_specs.end())}};
  if (!check_vma_) attrs.set("check_vma", false);
  auto region = std::make_shared<const ir::Program>(body->program());
  return bind(prim::get_primitive("shard_map"), operands, std::move(attrs), {region});
}

}  // namespace partix::detail
