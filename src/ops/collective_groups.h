// Collectives over axis_index_groups (JAX's `axis_index_groups`): the ranks along the
// collective's axes are split into groups of equal size that together hold every rank once,
// and the collective runs within each group (all_gather, psum_scatter and all_to_all sizes are
// the group size). The results vary over the axes: different groups hold different values.
// An empty `groups` is the whole axis, as the plain overloads in partix/transforms.h.
#pragma once

#include <vector>

#include "partix/transforms.h"

namespace partix {

using IndexGroups = std::vector<std::vector<int64_t>>;

Array psum(const Array& x, Axes axes, const IndexGroups& groups);
Array pmean(const Array& x, Axes axes, const IndexGroups& groups);
Array pmax(const Array& x, Axes axes, const IndexGroups& groups);
Array pmin(const Array& x, Axes axes, const IndexGroups& groups);
Array all_gather(const Array& x, Axes axes, int axis, bool tiled, const IndexGroups& groups);
Array psum_scatter(const Array& x, Axes axes, int scatter_dimension, bool tiled,
                   const IndexGroups& groups);
Array all_to_all(const Array& x, Axes axes, int split_axis, int concat_axis, bool tiled,
                 const IndexGroups& groups);

// The size a collective over axes (and groups) runs over, checked as `api` checks it: the
// group size with groups, else the product of the axis sizes.
int64_t collective_size(const char* api, Axes axes, const IndexGroups& groups);

}  // namespace partix
