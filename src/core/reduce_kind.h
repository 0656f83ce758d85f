// How a reduction combines values: used by primitives' factor rules, kernels and collectives.
#pragma once

namespace partix::detail {

enum class ReduceKind { kSum, kMax, kMin };

}  // namespace partix::detail
