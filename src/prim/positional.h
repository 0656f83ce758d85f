// Kernels whose values depend on the global position (iota, random numbers) find their
// block's place from attributes the partitioner sets: "offset_spec" (the result's spec) and
// "global_shape".
#pragma once

#include "ir/primitive.h"

namespace partix::prim {

// The attributes of a device's block of a positional op: its shape, and where it lies in the
// global result (the result's spec and the global shape) when it is not the whole result.
Attrs localize_positional(const Attrs& attrs, const Partitioning::LocalizeArgs& a);
// Offset of this device's block in each dimension (zeros when unpartitioned).
Shape block_offset(const KernelCall& c, const Shape& local);
// The shape positions are counted in: "global_shape" if set, else the local shape.
Shape global_shape(const KernelCall& c, const Shape& local);

}  // namespace partix::prim
