#include "partix/mesh.h"

#include <mutex>
#include <optional>
#include <set>

#include "core/errors.h"
#include "sharding/axes.h"

namespace partix {

struct Mesh::Data {
  Shape sizes;
  std::vector<std::string> names;
  std::vector<Device> devices;
  std::vector<AxisType> types;
  // to_string(), made once: caches and keys format meshes on every call and every eager op.
  std::string text;
};

namespace {
std::string describe(const Mesh& m);
}  // namespace

std::string_view axis_type_name(AxisType t) {
  switch (t) {
    case AxisType::Auto:
      return "Auto";
    case AxisType::Explicit:
      return "Explicit";
    case AxisType::Manual:
      return "Manual";
  }
  return "?";
}

namespace {
std::string types_to_string(const std::vector<AxisType>& types) {
  std::vector<std::string_view> names;
  for (AxisType t : types) names.push_back(axis_type_name(t));
  // A 1-tuple keeps its comma, as Python prints it.
  return fmt::format("({}{})", fmt::join(names, ", "), names.size() == 1 ? "," : "");
}
}  // namespace

Mesh::Mesh(Shape axis_sizes, std::vector<std::string> axis_names, std::vector<Device> devs) {
  constexpr const char* kApi = "Mesh";
  if (axis_sizes.size() != axis_names.size()) {
    detail::fail(kApi, "{} axis sizes {} but {} axis names ['{}']", axis_sizes.size(),
                 shape_to_string(axis_sizes), axis_names.size(), fmt::join(axis_names, "', '"));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < axis_sizes.size(); ++i) {
    detail::check(axis_sizes[i] >= 1, kApi, "axis '{}' has size {}; sizes must be positive",
                  axis_names[i], axis_sizes[i]);
    detail::check(!axis_names[i].empty(), kApi, "axis {} has an empty name", i);
    detail::check(seen.insert(axis_names[i]).second, kApi, "axis name '{}' appears twice",
                  axis_names[i]);
  }
  const std::vector<Device>& all = partix::devices();
  int64_t n = 1;
  for (int64_t size : axis_sizes) {
    // Beyond the job's device count there is nothing to build; stop before overflowing.
    if (!(!__builtin_mul_overflow(n, size, &n) && n <= (int64_t{1} << 31))) {
      detail::fail(kApi, "axis sizes {} need more devices than the job has ({})",
                   shape_to_string(axis_sizes), all.size());
    }
  }
  if (devs.empty()) {
    if (!(n <= static_cast<int64_t>(all.size()))) {
      detail::fail(kApi,
                   "axis sizes {} need {} devices but the job has {} (set "
                   "PARTIX_NUM_CPU_DEVICES or call partix::init)",
                   shape_to_string(axis_sizes), n, all.size());
    }
    devs.assign(all.begin(), all.begin() + n);
  } else {
    if (!(static_cast<int64_t>(devs.size()) == n)) {
      detail::fail(kApi, "axis sizes {} need {} devices but {} were given",
                   shape_to_string(axis_sizes), n, devs.size());
    }
    const bool abstract = devs[0].platform == kAbstractPlatform;
    std::set<int> ids;
    for (Device& d : devs) {
      detail::check((d.platform == kAbstractPlatform) == abstract, kApi,
                    "device {} is {} but device {} is {}: a mesh is all abstract or all real",
                    devs[0].id, devs[0].platform, d.id, d.platform);
      if (abstract) {
        detail::check(d.id >= 0, kApi, "abstract device id {} is negative", d.id);
        detail::check(ids.insert(d.id).second, kApi, "device {} appears twice", d.id);
        continue;
      }
      detail::check(d.id >= 0 && d.id < static_cast<int>(all.size()), kApi,
                    "device {} does not exist (the job has {} devices)", d.id, all.size());
      detail::check(ids.insert(d.id).second, kApi, "device {} appears twice", d.id);
      d = all[static_cast<size_t>(d.id)];  // canonical process/platform fields
    }
  }
  std::vector<AxisType> types(axis_names.size(), AxisType::Auto);
  auto d = std::make_shared<Data>(
      Data{std::move(axis_sizes), std::move(axis_names), std::move(devs), std::move(types), {}});
  data_ = d;
  d->text = describe(*this);
}

Mesh::Mesh(Shape axis_sizes, std::vector<std::string> axis_names, std::vector<Device> devices,
           std::vector<AxisType> axis_types)
    : Mesh(std::move(axis_sizes), std::move(axis_names), std::move(devices)) {
  *this = with_axis_types(std::move(axis_types));
}

Mesh Mesh::with_axis_types(std::vector<AxisType> axis_types) const {
  if (axis_types.size() != data_->names.size()) {
    detail::fail("Mesh", "{} axis types {} for {} axis names ['{}']: give one type per axis",
                 axis_types.size(), types_to_string(axis_types), data_->names.size(),
                 fmt::join(data_->names, "', '"));
  }
  for (AxisType t : axis_types) {
    const int v = static_cast<int>(t);
    detail::check(v >= 0 && v <= static_cast<int>(AxisType::Manual), "Mesh",
                  "axis type {} is not Auto, Explicit or Manual", v);
  }
  Mesh m = *this;
  auto d = std::make_shared<Data>(*data_);
  d->types = std::move(axis_types);
  m.data_ = d;
  d->text = describe(m);
  return m;
}

const std::vector<AxisType>& Mesh::axis_types() const { return data_->types; }

AxisType Mesh::axis_type(std::string_view name) const {
  const int i = axis_index(name);
  if (i < 0) detail::fail("Mesh.axis_type", "'{}' is not an axis of {}", name, to_string());
  return data_->types[static_cast<size_t>(i)];
}

const Shape& Mesh::axis_sizes() const { return data_->sizes; }
const std::vector<std::string>& Mesh::axis_names() const { return data_->names; }
int Mesh::num_axes() const { return static_cast<int>(data_->names.size()); }

int Mesh::axis_index(std::string_view name) const {
  for (size_t i = 0; i < data_->names.size(); ++i) {
    if (data_->names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

bool Mesh::has_axis(std::string_view name) const {
  return detail::find_axis_ref(*this, name).has_value();
}

int64_t Mesh::axis_size(std::string_view name) const {
  auto r = detail::find_axis_ref(*this, name);
  if (!r) detail::fail("Mesh.axis_size", "mesh axis '{}' is not in {}", name, to_string());
  return r->size;
}

int64_t Mesh::axis_coord(const std::vector<int64_t>& coords, std::string_view name) const {
  const detail::AxisRef r = detail::axis_ref(*this, name);
  return (coords[static_cast<size_t>(r.axis)] / r.stride()) % r.size;
}

int64_t Mesh::size() const { return shape_size(data_->sizes); }
const std::vector<Device>& Mesh::devices() const { return data_->devices; }

std::vector<int> Mesh::device_ids() const {
  std::vector<int> ids;
  for (const Device& d : data_->devices) ids.push_back(d.id);
  return ids;
}

std::vector<int64_t> Mesh::coords(int64_t k) const {
  if (k < 0 || k >= size()) {
    detail::fail("Mesh.coords", "position {} is out of range for {} ({} devices)", k, to_string(),
                 size());
  }
  std::vector<int64_t> c(data_->sizes.size());
  for (size_t i = c.size(); i-- > 0;) {
    c[i] = k % data_->sizes[i];
    k /= data_->sizes[i];
  }
  return c;
}

int64_t Mesh::position_of(int device_id) const {
  for (size_t k = 0; k < data_->devices.size(); ++k) {
    if (data_->devices[k].id == device_id) return static_cast<int64_t>(k);
  }
  return -1;
}

std::string Mesh::to_string() const { return data_->text; }

namespace {
std::string describe(const Mesh& m) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < m.axis_names().size(); ++i) {
    parts.push_back(fmt::format("'{}': {}", m.axis_names()[i], m.axis_sizes()[i]));
  }
  // Device ids are shown unless they are 0..n-1 in order, so that two different meshes
  // never print the same.
  const std::vector<int> ids = m.device_ids();
  bool in_order = true;
  for (size_t k = 0; k < ids.size(); ++k) in_order = in_order && ids[k] == static_cast<int>(k);
  const char* kind = m.is_abstract() ? "AbstractMesh" : "Mesh";
  if (!in_order) parts.push_back(fmt::format("devices=[{}]", fmt::join(ids, ",")));
  bool all_auto = true;
  for (AxisType t : m.axis_types()) all_auto = all_auto && t == AxisType::Auto;
  if (!all_auto) parts.push_back("axis_types=" + types_to_string(m.axis_types()));
  return fmt::format("{}({})", kind, fmt::join(parts, ", "));
}
}  // namespace

bool operator==(const Mesh& a, const Mesh& b) {
  if (a.data_ == b.data_) return true;
  return a.data_->sizes == b.data_->sizes && a.data_->names == b.data_->names &&
         a.data_->types == b.data_->types && a.device_ids() == b.device_ids() &&
         a.is_abstract() == b.is_abstract();
}

bool Mesh::is_abstract() const {
  return !data_->devices.empty() && data_->devices[0].platform == kAbstractPlatform;
}

Mesh make_abstract_mesh(Shape axis_sizes, std::vector<std::string> axis_names) {
  int64_t n = 1;
  for (int64_t s : axis_sizes) {
    if (!(s >= 1 && !__builtin_mul_overflow(n, s, &n) && n <= (int64_t{1} << 20))) {
      detail::fail("make_abstract_mesh", "axis sizes {} must be positive and at most 2^20 devices",
                   shape_to_string(axis_sizes));
    }
  }
  std::vector<Device> devs(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    devs[static_cast<size_t>(k)] = Device{static_cast<int>(k), 0, std::string(kAbstractPlatform)};
  }
  return Mesh(std::move(axis_sizes), std::move(axis_names), std::move(devs));
}

Mesh make_mesh(Shape axis_sizes, std::vector<std::string> axis_names) {
  return Mesh(std::move(axis_sizes), std::move(axis_names));
}

Mesh make_mesh(Shape axis_sizes, std::vector<std::string> axis_names,
               std::vector<AxisType> axis_types) {
  // Checked here first so that the message names make_mesh.
  if (axis_types.size() != axis_names.size()) {
    detail::fail("make_mesh", "{} axis types {} for {} axis names ['{}']: give one type per axis",
                 axis_types.size(), types_to_string(axis_types), axis_names.size(),
                 fmt::join(axis_names, "', '"));
  }
  return Mesh(std::move(axis_sizes), std::move(axis_names), {}, std::move(axis_types));
}

namespace {
thread_local std::vector<Mesh> t_contexts;
thread_local std::optional<Mesh> t_default;
std::mutex g_default_mu;
std::optional<Mesh> g_default;  // guarded by g_default_mu
}  // namespace

MeshContext::MeshContext(Mesh mesh) { t_contexts.push_back(std::move(mesh)); }
MeshContext::~MeshContext() {
  if (!t_contexts.empty()) t_contexts.pop_back();
}

void set_mesh(Mesh mesh) {
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default = std::move(mesh);
}

void clear_mesh() {
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default.reset();
}

void set_thread_mesh(Mesh mesh) { t_default = std::move(mesh); }

void clear_thread_mesh() { t_default.reset(); }

bool has_current_mesh() {
  if (!t_contexts.empty() || t_default) return true;
  std::lock_guard<std::mutex> lock(g_default_mu);
  return g_default.has_value();
}

Mesh current_mesh(std::string_view api) {
  if (!t_contexts.empty()) return t_contexts.back();
  if (t_default) return *t_default;
  std::lock_guard<std::mutex> lock(g_default_mu);
  detail::check(g_default.has_value(), api,
                "a bare PartitionSpec needs a mesh: use NamedSharding(mesh, spec), or make a "
                "mesh current with set_mesh(mesh) or a mesh context (use_mesh(mesh) or `with "
                "mesh:` in Python, MeshContext in C++)");
  return *g_default;
}

}  // namespace partix
