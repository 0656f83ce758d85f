// Strided N-D block copies between row-major buffers (global <-> padded local blocks).
#pragma once

#include <cstdint>
#include <vector>

#include "partix/dtype.h"

namespace partix::detail {

// Row-major strides in elements.
std::vector<int64_t> strides_of(const Shape& shape);

// Copies the box `extent` starting at src_offset in src (shape src_shape) to dst_offset
// in dst (shape dst_shape). Elements are elem_size bytes.
void copy_box(const void* src, const Shape& src_shape, const Shape& src_offset, void* dst,
              const Shape& dst_shape, const Shape& dst_offset, const Shape& extent,
              int elem_size);

}  // namespace partix::detail
