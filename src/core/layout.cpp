#include "core/layout.h"

#include <cstring>
#include <vector>

#include "core/scratch.h"

namespace partix::detail {

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

void copy_box(const void* src, const Shape& src_shape, const Shape& src_offset, void* dst,
              const Shape& dst_shape, const Shape& dst_offset, const Shape& extent,
              int elem_size) {
  const size_t rank = extent.size();
  for (int64_t e : extent) {
    if (e <= 0) return;
  }
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  if (rank == 0) {
    std::memcpy(d, s, static_cast<size_t>(elem_size));
    return;
  }
  // Strides and the index (zeros) on the stack up to rank 8 (a KV cache's update runs this on every
  // layer of every decode step).
  Scratch<int64_t, 24> strides(3 * rank);
  int64_t* ss = strides.data();
  int64_t* ds = ss + rank;
  int64_t* idx = ds + rank;
  ss[rank - 1] = ds[rank - 1] = 1;
  for (size_t i = rank - 1; i-- > 0;) {
    ss[i] = ss[i + 1] * src_shape[i + 1];
    ds[i] = ds[i + 1] * dst_shape[i + 1];
  }
  // Trailing dimensions the box covers whole in both arrays (so at offset 0) are contiguous in
  // both: they join the next dimension in one memcpy, and a whole block is a single copy.
  size_t inner = rank - 1;
  int64_t run = extent[inner];
  while (inner > 0 && extent[inner] == src_shape[inner] && extent[inner] == dst_shape[inner]) {
    --inner;
    run *= extent[inner];
  }
  const size_t row_bytes = static_cast<size_t>(run * elem_size);
  while (true) {
    int64_t so = 0, doff = 0;
    for (size_t i = 0; i <= inner; ++i) {
      so += (src_offset[i] + idx[i]) * ss[i];
      doff += (dst_offset[i] + idx[i]) * ds[i];
    }
    std::memcpy(d + doff * elem_size, s + so * elem_size, row_bytes);
    // Advance over the dimensions outside the contiguous run.
    size_t i = inner;
    while (i-- > 0) {
      if (++idx[i] < extent[i]) break;
      idx[i] = 0;
    }
    if (i == static_cast<size_t>(-1)) return;
  }
}

}  // namespace partix::detail
