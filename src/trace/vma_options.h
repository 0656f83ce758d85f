// JAX's jax_remove_size_one_mesh_axis_from_type (off by default, as in JAX 0.10): when on,
// values inside shard_map do not vary over mesh axes of one device (nothing differs over them),
// so a split over such an axis leaves it out of the varying set and no psum over it is needed.
#pragma once

namespace partix::detail {

bool drop_one_device_axes();
// Sets the option for the process and returns its previous value. A jit keys its traces on it
// (the Python package adds it to the call signature).
bool set_drop_one_device_axes(bool on);

// JAX's jax_auto_pcast (on by default): an op whose operands vary over different manual axes
// marks the others varying (an implicit pvary). Off, a user's such op is an error naming the
// sets (partix's own programs, check_vma=false bodies and autodiff's still join).
bool auto_pcast();
bool set_auto_pcast(bool on);

// JAX's jax_disable_vmap_shmap_error (off by default): on, vmap's spmd_axis_name may also
// appear in the specs of a shard_map it batches (the batched operands' specs lead with it).
bool vmap_shmap_error_disabled();
bool set_vmap_shmap_error_disabled(bool on);

}  // namespace partix::detail
