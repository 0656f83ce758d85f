// Explicit sharding foundations: an array's type with its sharding along Explicit mesh axes
// (type_of, JAX's typeof) and reshard (JAX's jax.sharding.reshard).
#include <set>

#include "core/array_impl.h"
#include "core/errors.h"
#include "dispatch/hooks.h"
#include "partix/array.h"
#include "partix/transforms.h"
#include "sharding/axes.h"
#include "trace/trace.h"

namespace partix {

std::string_view jax_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "bool";
    case DType::I32:
      return "int32";
    case DType::I64:
      return "int64";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
    case DType::F32:
      return "float32";
    case DType::F64:
      return "float64";
    case DType::I8:
      return "int8";
    case DType::I16:
      return "int16";
    case DType::U8:
      return "uint8";
    case DType::U16:
      return "uint16";
    case DType::U32:
      return "uint32";
    default:
      return dtype_name(dtype);
  }
}

ArrayType::ArrayType(Shape shape, DType dtype, std::optional<NamedSharding> sharding)
    : shape_(std::move(shape)), dtype_(dtype), sharding_(std::move(sharding)) {
  if (sharding_) sharding_->check_shape(shape_);
}

namespace {

bool is_explicit(const Mesh& mesh, const std::string& name) {
  return detail::is_axis_type(mesh, name, AxisType::Explicit);
}

// Names joined by ',' and, when there are several, parenthesised: JAX's notation in types.
std::string axes_text(const std::vector<std::string>& names) {
  std::string s = fmt::format("{}", fmt::join(names, ","));
  return names.size() == 1 ? s : "(" + s + ")";
}

}  // namespace

PartitionSpec ArrayType::spec() const {
  std::vector<PartitionSpec::Entry> entries(shape_.size());
  if (!sharding_) return PartitionSpec(entries);
  for (size_t d = 0; d < shape_.size(); ++d) {
    for (const std::string& a : sharding_->spec()[static_cast<int>(d)]) {
      if (is_explicit(sharding_->mesh(), a)) entries[d].push_back(a);
    }
  }
  return PartitionSpec(entries);
}

namespace {
// The Explicit axes of `set`, in mesh order (as JAX orders its {U:...} / {R:...} annotations).
std::vector<std::string> explicit_in_mesh_order(const Mesh& mesh,
                                                const std::set<std::string>& set) {
  std::vector<std::string> out;
  for (const std::string& a : mesh.axis_names()) {
    if (set.count(a) && is_explicit(mesh, a)) out.push_back(a);
  }
  return out;
}
}  // namespace

std::vector<std::string> ArrayType::unreduced() const {
  if (!sharding_) return {};
  return explicit_in_mesh_order(sharding_->mesh(), sharding_->unreduced());
}

std::string ArrayType::to_string() const {
  const PartitionSpec s = spec();
  std::vector<std::string> dims;
  for (size_t d = 0; d < shape_.size(); ++d) {
    const PartitionSpec::Entry& e = s[static_cast<int>(d)];
    dims.push_back(e.empty() ? std::to_string(shape_[d])
                             : fmt::format("{}@{}", shape_[d], axes_text(e)));
  }
  std::string out = fmt::format("{}[{}]", jax_dtype_name(dtype_), fmt::join(dims, ","));
  // JAX's annotation: {U:x}, {R:y} or {U:x, R:y}.
  std::vector<std::string> parts;
  if (const std::vector<std::string> u = unreduced(); !u.empty())
    parts.push_back("U:" + axes_text(u));
  if (sharding_) {
    const auto r = explicit_in_mesh_order(sharding_->mesh(), sharding_->reduced());
    if (!r.empty()) parts.push_back("R:" + axes_text(r));
  }
  if (!parts.empty()) out += fmt::format("{{{}}}", fmt::join(parts, ", "));
  return out;
}

ArrayType type_of(const Array& x) {
  // aval() holds whatever sharding is known: a concrete array's own, a traced value's when
  // the trace has fixed it (jit arguments with a fixed sharding, constrained values).
  ShapeDtypeStruct a = x.aval();
  return ArrayType(std::move(a.shape), a.dtype, std::move(a.sharding));
}

namespace {

// The checks of device_put and with_sharding_constraint, here so that errors name reshard.
void check_reshard(const Array& x, const NamedSharding& s) {
  constexpr const char* kApi = "reshard";
  const Shape& shape = x.shape();
  if (!(!(shape.empty() && s.spec().size() > 0))) {
    detail::fail(kApi, "a scalar {}[] cannot be sharded, got {}", dtype_name(x.dtype()),
                 s.spec().to_string());
  }
  if (!(s.spec().size() <= static_cast<int>(shape.size()))) {
    detail::fail(kApi, "{} has {} entries but the array {}{} has rank {}", s.spec().to_string(),
                 s.spec().size(), dtype_name(x.dtype()), shape_to_string(shape), shape.size());
  }
  // Partial sums are typed values: only over Explicit axes (as JAX's NamedSharding requires).
  for (const auto& a : s.unreduced()) {
    if (!detail::is_axis_type(s.mesh(), a, AxisType::Explicit)) {
      detail::fail(kApi, "unreduced axis '{}' of {} is not Explicit; unreduced axes must be", a,
                   s.to_string());
    }
  }
  detail::check_block_sharding(kApi, x.dtype(), shape, s);
}

}  // namespace

Array reshard(const Array& x, const NamedSharding& s) {
  check_reshard(x, s);
  // Inside a trace: a constraint (the partitioner always inserts the collectives to meet it);
  // eagerly: device_put, whose result is committed.
  if (x.is_tracer() && detail::is_tracing()) {
    Array out = with_sharding_constraint(x, s);
    // The constraint fixes this value's sharding, so the rest of the trace (type_of) may
    // know it; the handle is the constraint's own fresh tracer. Along Explicit axes it is the
    // value's type, which propagation keeps.
    out.impl()->sharding = s;
    if (out.is_tracer()) {
      detail::TraceState* t = detail::trace_of(out, "reshard");
      ir::ValueInfo& info = t->program().info(out.impl()->tracer->value);
      info.sharding = s;
      info.typed = detail::explicit_type(s).has_value();
    }
    return out;
  }
  return device_put(x, s);
}

Array reshard(const Array& x, const PartitionSpec& spec) {
  const Mesh mesh = current_mesh("reshard");
  std::optional<NamedSharding> s;
  try {
    s.emplace(mesh, spec);
  } catch (const Error& e) {
    // The NamedSharding's message (a bad axis, an axis used twice) under reshard's name.
    detail::fail("reshard", "{}", detail::message_without_api(e));
  }
  return reshard(x, *s);
}

namespace detail {

namespace {
bool fresh_result(const Array& r);
}  // namespace

Array dispatch_with_out_sharding(const char* api, const std::vector<Array>& operands,
                                 const OutSharding& out, const std::function<Array()>& make) {
  // The mesh: the typed operands' (explicit sharding), else the current one.
  std::optional<Mesh> mesh;
  for (const Array& a : operands) {
    if (!a.valid()) continue;
    if (auto t = explicit_type(a.impl()->sharding)) {
      mesh = t->mesh();
      break;
    }
  }
  if (!mesh) mesh = current_mesh(api);
  std::optional<NamedSharding> s;
  try {
    s.emplace(*mesh, out.spec, out.unreduced);
  } catch (const Error& e) {
    fail(api, "out_sharding: {}", message_without_api(e));
  }
  Array r;
  {
    ExplicitLenientScope lenient;
    r = make();
  }
  if (s->spec().size() > r.ndim()) {
    fail(api, "out_sharding {} has {} entries but the result {}{} has rank {}",
         s->spec().to_string(), s->spec().size(), dtype_name(r.dtype()), shape_to_string(r.shape()),
         r.ndim());
  }
  check_block_sharding(api, r.dtype(), r.shape(), *s);
  // Eagerly the op's result is made partial sums on its devices (one device of each group
  // holds the value); traced, the op itself leaves its sums unreduced.
  if (!s->unreduced().empty() && r.is_tracer() && is_tracing()) {
    if (!(fresh_result(r) && explicit_type(*s))) {
      fail(api,
           "out_sharding asks for unreduced {}, which only an op's own result on a mesh with "
           "Explicit axes can be",
           fmt::join(s->unreduced(), ","));
    }
  }
  return give_type(r, *s);
}

namespace {
bool fresh_result(const Array& r) {
  if (!r.is_tracer() || !is_tracing()) return false;
  TraceState* t = trace_of(r, "out_sharding");
  if (t != current_trace()) return false;
  const ir::Program& prog = t->program();
  const int v = r.impl()->tracer->value;
  if (prog.instrs.empty()) return false;
  for (int o : prog.instrs.back().outputs) {
    if (o == v) return true;
  }
  return false;
}

}  // namespace

Array dispatch_give_type(const Array& x, const NamedSharding& type) {
  const auto& have = x.impl()->sharding;
  if (have && *have == type) return x;
  if (x.is_tracer() && is_tracing()) {
    // The op's own result takes the type: the partitioner then computes it in that sharding
    // (a reduce-scatter or all-reduce of partial sums, or nothing). A value that is not fresh
    // (an op that returned its operand) is constrained instead.
    if (fresh_result(x) && explicit_type(type)) {
      TraceState* t = current_trace();
      const int v = x.impl()->tracer->value;
      t->program().info(v).sharding = type;
      t->program().info(v).typed = true;
      return t->tracer(v);
    }
    return reshard(x, NamedSharding(type.mesh(), type.spec()));
  }
  return device_put(x, type);
}

}  // namespace detail

namespace {

// The same mesh up to axis types.
bool same_but_types(const Mesh& a, const Mesh& b) { return a.with_axis_types(b.axis_types()) == b; }

// `a` seen on `mesh`, a mesh that differs from its own only in axis types: the same buffers, or
// for a tracer the same traced value, with the types `mesh` gives. Arrays on other meshes, and
// tracers with no sharding yet, are returned as they are.
Array on_mesh(const Array& a, const Mesh& mesh) {
  const auto& impl = a.impl();
  if (!a.valid() || !impl->sharding || impl->sharding->mesh() == mesh ||
      !same_but_types(impl->sharding->mesh(), mesh)) {
    return a;
  }
  auto out = std::make_shared<detail::ArrayImpl>();
  out->shape = impl->shape;
  out->dtype = impl->dtype;
  out->sharding = NamedSharding(mesh, impl->sharding->spec(), impl->sharding->unreduced());
  out->shards = impl->shards;
  out->tracer = impl->tracer;
  out->committed = impl->committed;
  out->abstract = impl->abstract;
  return Array(std::move(out));
}

// The mesh a region switches the types of: the typed arguments', else any argument's that spans
// devices, else the current mesh.
Mesh region_mesh(const char* api, const std::vector<Array>& args) {
  for (const Array& a : args) {
    if (a.valid()) {
      if (auto t = detail::explicit_type(a.impl()->sharding)) return t->mesh();
    }
  }
  for (const Array& a : args) {
    if (a.valid() && a.impl()->sharding && a.impl()->sharding->mesh().size() > 1) {
      return a.impl()->sharding->mesh();
    }
  }
  if (has_current_mesh()) return current_mesh(api);
  // Under jit: the mesh the traced function's arguments live on.
  if (detail::TraceState* t = detail::current_trace()) {
    for (int v : t->program().params) {
      const auto& s = t->program().info(v).sharding;
      if (s && s->mesh().size() > 1) return s->mesh();
    }
  }
  return current_mesh(api);
}

// `mesh` with `axes` (empty: every axis of type `from`) of type `to`.
Mesh retyped(const char* api, const Mesh& mesh, const std::vector<std::string>& axes, AxisType from,
             AxisType to) {
  std::vector<AxisType> types = mesh.axis_types();
  if (axes.empty()) {
    for (AxisType& t : types) {
      if (t == from) t = to;
    }
  }
  for (const std::string& a : axes) {
    const int i = mesh.axis_index(a);
    if (i < 0) {
      detail::fail(api, "axis '{}' is not an axis of {}", a, mesh.to_string());
    }
    detail::check(types[static_cast<size_t>(i)] != AxisType::Manual, api,
                  "axis '{}' is Manual here (inside shard_map); only Auto and Explicit axes switch",
                  a);
    types[static_cast<size_t>(i)] = to;
  }
  return mesh.with_axis_types(std::move(types));
}

std::vector<PartitionSpec> one_each(const char* api, const char* what,
                                    std::vector<PartitionSpec> specs, size_t n) {
  if (specs.size() == 1 && n != 1) specs.assign(n, PartitionSpec(specs[0]));
  detail::check(specs.size() == n, api,
                "{} has {} entries for {} arrays (give one for all, or one each)", what,
                specs.size(), n);
  return specs;
}

}  // namespace

std::vector<Array> auto_axes(const ArraysFn& fn, const std::vector<Array>& args,
                             std::vector<PartitionSpec> out_shardings,
                             std::vector<std::string> axes) {
  constexpr const char* kApi = "auto_axes";
  const Mesh mesh = region_mesh(kApi, args);
  const Mesh inner = retyped(kApi, mesh, axes, AxisType::Explicit, AxisType::Auto);
  std::vector<Array> in;
  for (const Array& a : args) in.push_back(on_mesh(a, inner));
  std::vector<Array> outs;
  {
    MeshContext context(inner);
    outs = fn(in);
  }
  const std::vector<PartitionSpec> specs =
      one_each(kApi, "out_shardings", std::move(out_shardings), outs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    outs[k] = reshard(on_mesh(outs[k], mesh), NamedSharding(mesh, specs[k]));
  }
  return outs;
}

Array auto_axes(const std::function<Array(const Array&)>& fn, const Array& x,
                PartitionSpec out_sharding, std::vector<std::string> axes) {
  return auto_axes([&](const std::vector<Array>& a) { return std::vector<Array>{fn(a[0])}; }, {x},
                   {std::move(out_sharding)}, std::move(axes))[0];
}

std::vector<Array> explicit_axes(const ArraysFn& fn, const std::vector<Array>& args,
                                 std::vector<PartitionSpec> in_shardings,
                                 std::vector<std::string> axes) {
  constexpr const char* kApi = "explicit_axes";
  const Mesh mesh = region_mesh(kApi, args);
  const Mesh inner = retyped(kApi, mesh, axes, AxisType::Auto, AxisType::Explicit);
  const std::vector<PartitionSpec> specs =
      one_each(kApi, "in_shardings", std::move(in_shardings), args.size());
  std::vector<Array> in;
  for (size_t i = 0; i < args.size(); ++i) {
    in.push_back(reshard(on_mesh(args[i], inner), NamedSharding(inner, specs[i])));
  }
  std::vector<Array> outs;
  {
    MeshContext context(inner);
    outs = fn(in);
  }
  for (Array& o : outs) o = on_mesh(o, mesh);
  return outs;
}

Array explicit_axes(const std::function<Array(const Array&)>& fn, const Array& x,
                    PartitionSpec in_sharding, std::vector<std::string> axes) {
  return explicit_axes([&](const std::vector<Array>& a) { return std::vector<Array>{fn(a[0])}; },
                       {x}, {std::move(in_sharding)}, std::move(axes))[0];
}

Array with_out_sharding(std::string_view api, const std::vector<Array>& operands,
                        const OutSharding& out, const std::function<Array()>& make) {
  const std::string name(api);
  return detail::with_out_sharding(name.c_str(), operands, out, make);
}

}  // namespace partix
