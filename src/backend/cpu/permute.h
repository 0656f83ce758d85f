// Copies of dense row-major arrays into another dimension order, shared by the transpose
// kernel and the operand canonicalisation of dot_general.
#pragma once

#include <cstdint>
#include <vector>

#include "partix/dtype.h"

namespace partix::backend::cpu {

// dst = transpose(src, perm): dst dimension d is src dimension perm[d]. src is dense with
// `shape`; dst is dense in the permuted shape; they must not overlap. Elements are
// elem_size bytes (1, 2, 4 or 8). Cache-blocked; parallel for large arrays.
void permute_copy(const void* src, void* dst, const Shape& shape, const std::vector<int>& perm,
                  int elem_size);

}  // namespace partix::backend::cpu
