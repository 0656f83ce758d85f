// JAX's jax_remove_size_one_mesh_axis_from_type (off by default, as in JAX 0.10): when on,
// values inside shard_map do not vary over mesh axes of one device (nothing differs over them),
// so a split over such an axis leaves it out of the varying set and no psum over it is needed.
#pragma once

namespace partix::detail {

bool drop_one_device_axes();
// Sets the option for the process and returns its previous value. A jit keys its traces on it
// (the Python package adds it to the call signature).
bool set_drop_one_device_axes(bool on);

}  // namespace partix::detail
