#include "sharding/axes.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/errors.h"

namespace partix::detail {

namespace {

// "name:(pre)size" -> (name, pre, size); nullopt if `s` does not have that form.
std::optional<std::tuple<std::string_view, int64_t, int64_t>> split_sub_axis(std::string_view s) {
  const size_t open = s.rfind(":(");
  if (open == std::string_view::npos || open == 0) return std::nullopt;
  const size_t close = s.find(')', open);
  if (close == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view t) -> int64_t {
    if (t.empty() || t.size() > 12) return -1;
    int64_t v = 0;
    for (char c : t) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
      v = v * 10 + (c - '0');
    }
    return v;
  };
  const int64_t pre = number(s.substr(open + 2, close - open - 2));
  const int64_t size = number(s.substr(close + 1));
  if (pre < 1 || size < 1) return std::nullopt;
  return std::make_tuple(s.substr(0, open), pre, size);
}

std::vector<AxisRef> refs_on(const Mesh& mesh, int axis, const std::vector<std::string>& names) {
  std::vector<AxisRef> out;
  for (const auto& n : names) {
    AxisRef r = axis_ref(mesh, n);
    if (r.axis == axis) out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const AxisRef& a, const AxisRef& b) { return a.pre < b.pre; });
  return out;
}

// The parts of axis `axis` that `covered` leaves, major first, as (pre, size).
std::vector<std::pair<int64_t, int64_t>> free_parts(const Mesh& mesh, int axis,
                                                    const std::vector<std::string>& covered) {
  const int64_t full = mesh.axis_sizes()[static_cast<size_t>(axis)];
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t p = 1;
  for (const AxisRef& c : refs_on(mesh, axis, covered)) {
    if (c.pre > p) out.emplace_back(p, c.pre / p);
    p = std::max(p, c.pre * c.size);
  }
  if (p < full) out.emplace_back(p, full / p);
  return out;
}

}  // namespace

std::optional<AxisRef> find_axis_ref(const Mesh& mesh, std::string_view name) {
  const int whole = mesh.axis_index(name);
  if (whole >= 0) {
    const int64_t n = mesh.axis_sizes()[static_cast<size_t>(whole)];
    return AxisRef{whole, 1, n, n};
  }
  auto parts = split_sub_axis(name);
  if (!parts) return std::nullopt;
  auto [base, pre, size] = *parts;
  const int a = mesh.axis_index(base);
  if (a < 0) return std::nullopt;
  const int64_t n = mesh.axis_sizes()[static_cast<size_t>(a)];
  if (pre > n || size > n || n % (pre * size) != 0) return std::nullopt;
  return AxisRef{a, pre, size, n};
}

AxisRef axis_ref(const Mesh& mesh, std::string_view name) {
  auto r = find_axis_ref(mesh, name);
  if (!r) fail("Mesh", "mesh axis '{}' is not in {}", name, mesh.to_string());
  return *r;
}

std::string axis_part_name(const Mesh& mesh, int axis, int64_t pre, int64_t size) {
  const std::string& base = mesh.axis_names()[static_cast<size_t>(axis)];
  if (pre == 1 && size == mesh.axis_sizes()[static_cast<size_t>(axis)]) return base;
  return fmt::format("{}:({}){}", base, pre, size);
}

bool axes_overlap(const Mesh& mesh, std::string_view a, std::string_view b) {
  if (a == b) return true;
  auto x = find_axis_ref(mesh, a), y = find_axis_ref(mesh, b);
  if (!x || !y || x->axis != y->axis) return false;
  return std::max(x->pre, y->pre) < std::min(x->pre * x->size, y->pre * y->size);
}

bool overlaps_any(const Mesh& mesh, std::string_view a, const std::vector<std::string>& others) {
  for (const auto& o : others) {
    if (axes_overlap(mesh, a, o)) return true;
  }
  return false;
}

PartitionSpec::Entry canonical_entry(const Mesh& mesh, const PartitionSpec::Entry& e) {
  bool any_part = false;
  for (const auto& n : e) any_part = any_part || mesh.axis_index(n) < 0;
  if (!any_part) return e;
  std::vector<AxisRef> refs;
  for (const auto& n : e) {
    AxisRef r = axis_ref(mesh, n);
    if (!refs.empty() && refs.back().axis == r.axis &&
        refs.back().pre * refs.back().size == r.pre) {
      refs.back().size *= r.size;  // the next more-minor part of the same axis
    } else {
      refs.push_back(r);
    }
  }
  PartitionSpec::Entry out;
  for (const AxisRef& r : refs) out.push_back(axis_part_name(mesh, r.axis, r.pre, r.size));
  return out;
}

std::vector<std::string> in_mesh_order(const Mesh& mesh, const std::vector<std::string>& names) {
  std::vector<std::string> out = names;
  std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    const AxisRef x = axis_ref(mesh, a), y = axis_ref(mesh, b);
    return x.axis != y.axis ? x.axis < y.axis : x.pre < y.pre;
  });
  return out;
}

int64_t residual_index(const Mesh& mesh, const std::vector<int64_t>& coords,
                       const std::vector<std::string>& covered) {
  int64_t id = 0;
  for (int a = 0; a < mesh.num_axes(); ++a) {
    const int64_t full = mesh.axis_sizes()[static_cast<size_t>(a)];
    for (auto [pre, size] : free_parts(mesh, a, covered)) {
      const int64_t digit = (coords[static_cast<size_t>(a)] / (full / (pre * size))) % size;
      id = id * size + digit;
    }
  }
  return id;
}

int64_t residual_count(const Mesh& mesh, const std::vector<std::string>& covered) {
  int64_t n = 1;
  for (int a = 0; a < mesh.num_axes(); ++a) {
    for (auto [pre, size] : free_parts(mesh, a, covered)) n *= size;
  }
  return n;
}

std::vector<std::string> refine_axes(const Mesh& mesh, const std::vector<std::string>& names,
                                     const std::vector<std::string>& all) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    const AxisRef r = axis_ref(mesh, n);
    std::set<int64_t> cuts;
    for (const auto& m : all) {
      auto o = find_axis_ref(mesh, m);
      if (!o || o->axis != r.axis) continue;
      cuts.insert(o->pre);
      cuts.insert(o->pre * o->size);
    }
    // Boundaries strictly inside this part that keep every piece a whole number of devices.
    int64_t at = r.pre;
    const int64_t end = r.pre * r.size;
    for (int64_t c : cuts) {
      if (c <= at || c >= end || c % at != 0 || end % c != 0) continue;
      out.push_back(axis_part_name(mesh, r.axis, at, c / at));
      at = c;
    }
    out.push_back(axis_part_name(mesh, r.axis, at, end / at));
  }
  return out;
}

bool has_axis_type(const Mesh& mesh, AxisType t) {
  for (AxisType a : mesh.axis_types()) {
    if (a == t) return true;
  }
  return false;
}

bool is_axis_type(const Mesh& mesh, std::string_view name, AxisType t) {
  const int i = mesh.axis_index(name.substr(0, name.find(':')));
  return i >= 0 && mesh.axis_types()[static_cast<size_t>(i)] == t;
}

}  // namespace partix::detail
