#include "partix/sharding.h"

#include <algorithm>
#include <set>

#include "core/errors.h"
#include "sharding/axes.h"

namespace partix {

namespace {
std::string quoted(const std::string& s) { return "'" + s + "'"; }

std::string entry_to_string(const PartitionSpec::Entry& e) {
  if (e.empty()) return "None";
  if (e.size() == 1) return quoted(e[0]);
  std::vector<std::string> q;
  for (const auto& n : e) q.push_back(quoted(n));
  return fmt::format("({})", fmt::join(q, ", "));
}

// Strips trailing None entries: P('x', None) == P('x').
std::vector<PartitionSpec::Entry> normalized(const std::vector<PartitionSpec::Entry>& es) {
  std::vector<PartitionSpec::Entry> out = es;
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}
}  // namespace

Axes::Axes(const char* name) : names_{std::string(name ? name : "")} {}
Axes::Axes(std::string name) : names_{std::move(name)} {}
Axes::Axes(std::initializer_list<std::string> names) : names_(names) {}
Axes::Axes(std::vector<std::string> names) : names_(std::move(names)) {}

std::string Axes::to_string() const { return entry_to_string(names_); }

PartitionSpec::PartitionSpec(std::vector<Entry> entries) : entries_(std::move(entries)) {
  for (const Entry& e : entries_) {
    for (const std::string& n : e) {
      if (n.empty()) detail::fail("PartitionSpec", "empty axis name in {}", to_string());
    }
  }
}

PartitionSpec::Entry PartitionSpec::operator[](int d) const {
  if (d < 0 || d >= size()) return {};
  return entries_[static_cast<size_t>(d)];
}

std::vector<std::string> PartitionSpec::axes() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.insert(out.end(), e.begin(), e.end());
  return out;
}

std::string PartitionSpec::to_string() const {
  std::vector<std::string> parts;
  for (const Entry& e : entries_) parts.push_back(entry_to_string(e));
  return fmt::format("P({})", fmt::join(parts, ", "));
}

bool operator==(const PartitionSpec& a, const PartitionSpec& b) {
  return normalized(a.entries_) == normalized(b.entries_);
}

NamedSharding::NamedSharding(Mesh mesh, PartitionSpec spec)
    : NamedSharding(std::move(mesh), std::move(spec), {}) {}

NamedSharding::NamedSharding(PartitionSpec spec)
    : NamedSharding(current_mesh("NamedSharding"), std::move(spec), {}) {}

NamedSharding::NamedSharding(Mesh mesh, PartitionSpec spec, std::set<std::string> unreduced,
                             std::set<std::string> reduced)
    : NamedSharding(std::move(mesh), std::move(spec), std::move(unreduced)) {
  constexpr const char* kApi = "NamedSharding";
  reduced_ = std::move(reduced);
  std::vector<std::string> used = spec_.axes();
  used.insert(used.end(), unreduced_.begin(), unreduced_.end());
  for (const std::string& a : reduced_) {
    if (!mesh_.has_axis(a))
      detail::fail(kApi, "reduced axis '{}' is not in {}", a, mesh_.to_string());
    if (detail::overlaps_any(mesh_, a, used)) {
      detail::fail(kApi, "axis '{}' is both reduced and used (split or unreduced) in {}", a,
                   to_string());
    }
  }
}

NamedSharding::NamedSharding(Mesh mesh, PartitionSpec spec, std::set<std::string> unreduced)
    : mesh_(std::move(mesh)), spec_(std::move(spec)), unreduced_(std::move(unreduced)) {
  constexpr const char* kApi = "NamedSharding";
  std::vector<std::string> used;
  // The messages are formatted only on failure: shardings are built in the partitioner's
  // inner loops.
  for (const std::string& a : spec_.axes()) {
    if (!mesh_.has_axis(a)) {
      detail::fail(kApi, "mesh axis '{}' in {} is not in {}", a, spec_.to_string(),
                   mesh_.to_string());
    }
    if (detail::overlaps_any(mesh_, a, used)) {
      detail::fail(kApi, "mesh axis '{}' is used twice in {}", a, spec_.to_string());
    }
    used.push_back(a);
  }
  for (const std::string& a : unreduced_) {
    if (!mesh_.has_axis(a))
      detail::fail(kApi, "unreduced axis '{}' is not in {}", a, mesh_.to_string());
    if (detail::overlaps_any(mesh_, a, used)) {
      detail::fail(kApi, "axis '{}' is both unreduced and used in {}", a, spec_.to_string());
    }
  }
  // One spelling per layout: adjacent parts of one axis are that axis.
  std::vector<PartitionSpec::Entry> entries;
  bool changed = false;
  for (const auto& e : spec_.entries()) {
    entries.push_back(detail::canonical_entry(mesh_, e));
    changed = changed || entries.back() != e;
  }
  if (changed) spec_ = PartitionSpec(std::move(entries));
}

void NamedSharding::check_shape(const Shape& global) const {
  if (global.empty() && spec_.size() > 0) {
    detail::fail("NamedSharding", "a scalar cannot be sharded, got {}", spec_.to_string());
  }
  if (!(spec_.size() <= static_cast<int>(global.size()))) {
    detail::fail("NamedSharding", "{} has {} entries but the array has rank {} (shape {})",
                 spec_.to_string(), spec_.size(), global.size(), shape_to_string(global));
  }
  for (int64_t d : global) {
    if (d < 0) {
      detail::fail("NamedSharding", "negative dimension in shape {}", shape_to_string(global));
    }
  }
}

namespace {
void check_device_position(const Mesh& mesh, int64_t k) {
  if (!(k >= 0 && k < mesh.size())) {
    detail::fail("NamedSharding", "device {} is out of range: {} has {} devices", k,
                 mesh.to_string(), mesh.size());
  }
}
}  // namespace

int64_t NamedSharding::num_blocks(int d) const {
  int64_t k = 1;
  for (const std::string& a : spec_[d]) k *= mesh_.axis_size(a);
  return k;
}

Shape NamedSharding::shard_shape(const Shape& global) const {
  check_shape(global);
  Shape out(global.size());
  for (size_t d = 0; d < global.size(); ++d) {
    int64_t k = num_blocks(static_cast<int>(d));
    // Ceiling division that cannot overflow for any size (found by fuzzing: a GGUF tensor of
    // dimension 2^63 - 1).
    out[d] = global[d] / k + (global[d] % k != 0 ? 1 : 0);
  }
  return out;
}

std::vector<Slice> NamedSharding::device_index(const Shape& global, int64_t k) const {
  check_shape(global);
  check_device_position(mesh_, k);
  std::vector<int64_t> coords = mesh_.coords(k);
  std::vector<Slice> out(global.size());
  for (size_t d = 0; d < global.size(); ++d) {
    int64_t blocks = 1, b = 0;
    for (const std::string& a : spec_[static_cast<int>(d)]) {
      const int64_t size = mesh_.axis_size(a);
      b = b * size + mesh_.axis_coord(coords, a);
      blocks *= size;
    }
    // Block b of ceil(n / blocks) elements, clipped to n; in 128 bits, so that no size
    // overflows (found by fuzzing: a GGUF tensor of dimension 2^63 - 1).
    const int64_t n = global[d];
    const __int128 c = n / blocks + (n % blocks != 0 ? 1 : 0);
    auto clip = [n](__int128 v) { return static_cast<int64_t>(v < n ? v : n); };
    out[d] = Slice{clip(b * c), clip((b + 1) * c)};
  }
  return out;
}

std::vector<std::vector<Slice>> NamedSharding::devices_indices_map(const Shape& global) const {
  check_shape(global);
  std::vector<std::vector<Slice>> out;
  for (int64_t k = 0; k < mesh_.size(); ++k) out.push_back(device_index(global, k));
  return out;
}

int NamedSharding::replica_id(int64_t k) const {
  check_device_position(mesh_, k);
  std::vector<std::string> covered = spec_.axes();
  covered.insert(covered.end(), unreduced_.begin(), unreduced_.end());
  return static_cast<int>(detail::residual_index(mesh_, mesh_.coords(k), covered));
}

int64_t NamedSharding::num_replicas() const {
  int64_t r = mesh_.size();
  for (const std::string& a : spec_.axes()) r /= mesh_.axis_size(a);
  for (const std::string& a : unreduced_) r /= mesh_.axis_size(a);
  return r;
}

bool NamedSharding::is_fully_replicated() const {
  return unreduced_.empty() && num_replicas() == mesh_.size();
}

std::string NamedSharding::to_string() const {
  std::string s = fmt::format("NamedSharding({}, {}", mesh_.to_string(), spec_.to_string());
  for (const auto& [name, axes] : {std::pair{"unreduced", &unreduced_}, {"reduced", &reduced_}}) {
    if (axes->empty()) continue;
    std::vector<std::string> q;
    for (const auto& a : *axes) q.push_back(quoted(a));
    s += fmt::format(", {}={{{}}}", name, fmt::join(q, ", "));
  }
  return s + ")";
}

bool operator==(const NamedSharding& a, const NamedSharding& b) {
  return a.mesh_ == b.mesh_ && a.spec_ == b.spec_ && a.unreduced_ == b.unreduced_ &&
         a.reduced_ == b.reduced_;
}

NamedSharding single_device_sharding(const Device& device) {
  return NamedSharding(Mesh({}, {}, {device}), P());
}

}  // namespace partix
