// The data behind an Array handle.
#pragma once

#include <functional>
#include <string_view>
#include <memory>
#include <mutex>
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
  // Given to a program (jit donate_argnums): the buffers are the program's now; any later use
  // is an error (check_alive).
  bool donated = false;
  // Made by the library for one call (host data placed for a jit argument): nobody else holds
  // it, so the program may reuse its buffers as it may a donated argument's.
  bool temporary = false;
  // A ShapeDtypeStruct's array: shape, dtype and sharding without values (no shards). Lowering
  // and eval_shape take it; anything that needs values raises (check_alive).
  bool abstract = false;
  // dtype, shape and sharding as jit's cache keys them: formatted once (a call with hundreds
  // of parameters would otherwise format every sharding on every call). Set only through
  // jit_key(), after which none of the three changes.
  std::once_flag key_once;
  std::string key;
};

// Gives up `a`'s buffers to a program that reuses them: every later use raises.
void mark_donated(ArrayImpl& a);
// Raises partix::Error "[api] the array (f32[8]) was donated to an earlier call and is gone"
// for a donated array, and a like error for an abstract one (it has no values).
void check_alive(const Array& a, std::string_view api);

// A concrete array from per-device blocks. Preconditions: blocks.size() == mesh size,
// each block holds sharding.shard_shape(shape) elements.
Array make_array(Shape shape, DType dtype, NamedSharding sharding, std::vector<Buffer> shards);

// Copies the box `ext` at src_off of a row-major src_shape array to dst_off of a dst_shape
// one, in elements (quantized dtypes: whole blocks along the last dimension).
void copy_elems(DType dt, const void* src, Shape src_shape, Shape src_off, void* dst,
                Shape dst_shape, Shape dst_off, Shape ext);

// The global value as one row-major host buffer (nbytes = size * dtype_size).
std::vector<char> gather_to_host(const Array& x);
// Throws partix::Error from `api` if `sharding` would split a quantization block of a
// quantized array across devices; no-op for other dtypes.
void check_block_sharding(std::string_view api, DType dtype, const Shape& shape,
                          const NamedSharding& sharding);
// Splits a row-major host buffer into padded blocks for `sharding` (padding zeroed).
// Builds a sharded Array: for each device of this process, allocates its padded block
// (zeroed where padding exists) and lets fill(block_ptr, device_slice, local_shape) write
// it. Devices of other processes get no buffer. `committed` as for device_put (loads from
// files are; host constructors are not).
Array build_sharded(const Shape& shape, DType dtype, const NamedSharding& sharding, bool committed,
                    const std::function<void(void* block, const std::vector<Slice>& idx,
                                             const Shape& local)>& fill);

Array scatter_from_host(const void* data, Shape shape, DType dtype, const NamedSharding& sharding);

}  // namespace partix::detail
