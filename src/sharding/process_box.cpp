// The part of a global array one process's devices hold (partix::process_local_box): the
// smallest box covering their blocks, from the sharding alone.
#include <algorithm>

#include "core/errors.h"
#include "partix/device.h"
#include "partix/distributed.h"
#include "partix/sharding.h"

namespace partix {

std::vector<Slice> process_local_box(const NamedSharding& sharding, const Shape& global_shape) {
  const size_t rank = global_shape.size();
  std::vector<Slice> box;
  const int me = process_index();
  for (int64_t k = 0; k < sharding.mesh().size(); ++k) {
    if (sharding.mesh().devices()[static_cast<size_t>(k)].process_index != me) continue;
    std::vector<Slice> idx = sharding.device_index(global_shape, k);
    if (box.empty()) {
      box = idx;
      continue;
    }
    for (size_t d = 0; d < rank; ++d) {
      box[d].start = std::min(box[d].start, idx[d].start);
      box[d].stop = std::max(box[d].stop, idx[d].stop);
    }
  }
  if (!(!box.empty() || rank == 0)) {
    detail::fail("process_local_box", "no device of {} belongs to process {}",
                 sharding.mesh().to_string(), me);
  }
  return box;
}

}  // namespace partix
