// Clean-ups of a partitioned per-device program.
#pragma once

#include "ir/program.h"

namespace partix::spmd {

// Removes collectives over groups of one device (mesh axes of size 1): all_reduce,
// all_gather, reduce_scatter, all_to_all, axis_slice and an identity ppermute become their
// operand, or a reshape where only unit axes differ. They move nothing, and users reading
// as_text() should not see communication that does not happen.
void drop_trivial_collectives(ir::Program& local);

}  // namespace partix::spmd
