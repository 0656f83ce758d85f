// Explicit sharding foundations: an array's type with its sharding along Explicit mesh axes
// (type_of, JAX's typeof) and reshard (JAX's jax.sharding.reshard).
#include <set>

#include "core/array_impl.h"
#include "core/errors.h"
#include "partix/array.h"
#include "partix/transforms.h"
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
    default:
      return dtype_name(dtype);
  }
}

ArrayType::ArrayType(Shape shape, DType dtype, std::optional<NamedSharding> sharding)
    : shape_(std::move(shape)), dtype_(dtype), sharding_(std::move(sharding)) {
  if (sharding_) sharding_->check_shape(shape_);
}

namespace {

// A (sub-)axis name belongs to the whole axis before any ':' (see Mesh::axis_size).
bool is_explicit(const Mesh& mesh, const std::string& name) {
  const std::string whole = name.substr(0, name.find(':'));
  const int i = mesh.axis_index(whole);
  return i >= 0 && mesh.axis_types()[static_cast<size_t>(i)] == AxisType::Explicit;
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

std::vector<std::string> ArrayType::unreduced() const {
  std::vector<std::string> out;
  if (!sharding_) return out;
  // In mesh order, as JAX orders the axes of its {U:...} annotation.
  for (const std::string& a : sharding_->mesh().axis_names()) {
    if (sharding_->unreduced().count(a) && is_explicit(sharding_->mesh(), a)) out.push_back(a);
  }
  return out;
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
  const std::vector<std::string> u = unreduced();
  if (!u.empty()) out += "{U:" + axes_text(u) + "}";
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
  detail::check(!(shape.empty() && s.spec().size() > 0), kApi,
                "a scalar {}[] cannot be sharded, got {}", dtype_name(x.dtype()),
                s.spec().to_string());
  detail::check(s.spec().size() <= static_cast<int>(shape.size()), kApi,
                "{} has {} entries but the array {}{} has rank {}", s.spec().to_string(),
                s.spec().size(), dtype_name(x.dtype()), shape_to_string(shape), shape.size());
  detail::check(s.unreduced().empty(), kApi, "an Array cannot be resharded to unreduced; got {}",
                s.to_string());
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
    std::string what = e.what();
    if (!what.empty() && what[0] == '[') what = what.substr(what.find("] ") + 2);
    detail::fail("reshard", "{}", what);
  }
  return reshard(x, *s);
}

}  // namespace partix
