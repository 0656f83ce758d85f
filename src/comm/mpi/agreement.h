// What the processes of a job must agree on, checked cheaply across them: every
// process passes its own host data for an array on a mesh that spans processes, and where
// two of them place the same block their data must be the same. Only a hash of the data
// travels.
#pragma once

#include <cstddef>
#include <string>

#include "partix/sharding.h"

namespace partix::detail {

// Every process of `sharding`'s mesh calls it for the same array: `block` names the part of
// the global `dtype` `global_shape` array this process fills from its `bytes` bytes of host
// data ("" when it fills every part from the whole value, as device_put does). Raises naming
// both processes when two processes of the same block passed different data, or the
// processes build arrays of different shapes. No-op when the mesh is this process's alone.
void check_host_data_agrees(const char* api, const NamedSharding& sharding, DType dtype,
                            const Shape& global_shape, const std::string& block, const void* data,
                            size_t bytes);

}  // namespace partix::detail
