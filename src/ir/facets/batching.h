// The batching facet of a primitive (ir/primitive.h): how it computes under vmap. Asked by the
// batching engine (autodiff/batch.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/facets/base.h"
#include "partix/transforms.h"

namespace partix::prim {

// A value under vmap: the array and its batch dimension (partix/transforms.h).
using Batched = detail::Batched;

struct BatchArgs {
  const std::vector<Batched>& operands;  // at least one batched
  const Attrs& attrs;
  const Regions& regions;
  int64_t size;                   // the batch size (axis.size)
  const detail::BatchAxis& axis;  // the examples' count, vmap's axis_name and spmd_axis_name
};

// The batching facet of a primitive: how its instruction computes on operands that carry a
// batch dimension, with ops (the results say where their batch dimensions are). The engine
// (autodiff/batch.cpp) asks for it only when some operand is batched; a primitive without one
// is refused by name, never unrolled.
class Batching {
 public:
  virtual ~Batching() = default;
  virtual std::vector<Batched> batch(const BatchArgs& args) const = 0;
};

}  // namespace partix::prim
