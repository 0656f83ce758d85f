// The data behind an Array handle.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/buffer.h"
#include "partix/array.h"

namespace partix::detail {

struct TracerRef;  // defined by src/trace: the value an Array stands for inside a trace

struct ArrayImpl {
  Shape shape;
  DType dtype = DType::F32;
  std::optional<NamedSharding> sharding;
  // Concrete arrays: one padded block per mesh device, in mesh.devices() order;
  // an invalid Buffer for devices of other processes.
  std::vector<Buffer> shards;
  std::shared_ptr<TracerRef> tracer;
  // Committed arrays stay where device_put placed them; uncommitted ones (from_vector,
  // zeros, ...) move to wherever a computation with committed arrays runs (as in JAX).
  bool committed = false;
};

// A concrete array from per-device blocks. Preconditions: blocks.size() == mesh size,
// each block holds sharding.shard_shape(shape) elements.
Array make_array(Shape shape, DType dtype, NamedSharding sharding, std::vector<Buffer> shards);

// The global value as one row-major host buffer (nbytes = size * dtype_size).
std::vector<char> gather_to_host(const Array& x);
// Splits a row-major host buffer into padded blocks for `sharding` (padding zeroed).
Array scatter_from_host(const void* data, Shape shape, DType dtype, const NamedSharding& sharding);

}  // namespace partix::detail
