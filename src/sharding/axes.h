// Mesh axes and sub-axes as one vocabulary (see Mesh): a reference names a whole axis or the
// part 'name:(pre)size' of one. These helpers let the compiler treat both alike: overlap,
// canonical spec entries (adjacent parts of one axis merged), device groups and replica ids
// over any set of them, and the common refinement two shardings need to be compared.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "partix/mesh.h"
#include "partix/sharding.h"

namespace partix::detail {

struct AxisRef {
  int axis = -1;     // index of the whole mesh axis
  int64_t pre = 1;   // devices in the more-major parts of that axis
  int64_t size = 1;  // devices in this part
  int64_t full = 1;  // devices in the whole axis
  int64_t stride() const { return full / (pre * size); }  // coordinate step of one unit
};

// The reference `name` denotes, or nullopt if it is neither an axis nor a valid sub-axis.
std::optional<AxisRef> find_axis_ref(const Mesh& mesh, std::string_view name);
AxisRef axis_ref(const Mesh& mesh, std::string_view name);  // throws naming the axis
// The name of part (pre, size) of mesh axis `axis`: the plain name when it is the whole axis.
std::string axis_part_name(const Mesh& mesh, int axis, int64_t pre, int64_t size);

// Axis types: whether any axis of `mesh` has type `t`, and whether the whole axis a reference
// (an axis or a sub-axis 'name:(pre)size') belongs to has type `t` (false for unknown names).
bool has_axis_type(const Mesh& mesh, AxisType t);
bool is_axis_type(const Mesh& mesh, std::string_view name, AxisType t);

// Whether two references share devices' coordinates (the same axis, overlapping parts).
bool axes_overlap(const Mesh& mesh, std::string_view a, std::string_view b);
bool overlaps_any(const Mesh& mesh, std::string_view a, const std::vector<std::string>& others);

// A spec entry with adjacent parts of one axis merged (['data:(1)4', 'data:(4)2'] -> ['data']).
PartitionSpec::Entry canonical_entry(const Mesh& mesh, const PartitionSpec::Entry& e);

// The references of `names` in mesh order (by axis, then major part first).
std::vector<std::string> in_mesh_order(const Mesh& mesh, const std::vector<std::string>& names);

// Row-major index of `coords` over the mesh coordinates not covered by `covered` (the replica
// id when `covered` are the axes a sharding uses), and the number of such indices.
int64_t residual_index(const Mesh& mesh, const std::vector<int64_t>& coords,
                       const std::vector<std::string>& covered);
int64_t residual_count(const Mesh& mesh, const std::vector<std::string>& covered);

// Every reference of `names` split at the part boundaries any of `all` uses on its axis, so that
// references of two shardings are equal or disjoint (the common refinement).
std::vector<std::string> refine_axes(const Mesh& mesh, const std::vector<std::string>& names,
                                     const std::vector<std::string>& all);

}  // namespace partix::detail
