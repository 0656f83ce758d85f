"""orbax.checkpoint.utils: the helpers programs use with restores."""

import partix
from partix import ckpt
from partix._src import tree_util as tu
from partix._src.core import Array
from partix.orbax.checkpoint._impl import _path_tuple


def to_shape_dtype_struct(x, dtype=None, scalar_dtype=None):
  """The ShapeDtypeStruct of an array (keeping its sharding), as Orbax's: use it with
  partix.tree.map to make a restore target from a state."""
  if isinstance(x, partix.ShapeDtypeStruct):
    return x if dtype is None else partix.ShapeDtypeStruct(x.shape, dtype, sharding=x.sharding)
  if isinstance(x, Array):
    return partix.ShapeDtypeStruct(x.shape, dtype or x.dtype, sharding=x.sharding)
  if isinstance(x, (int, float)) and not isinstance(x, bool):
    return scalar_dtype(x) if scalar_dtype is not None else x
  if hasattr(x, "shape") and hasattr(x, "dtype"):
    return partix.ShapeDtypeStruct(x.shape, dtype or x.dtype)
  raise ValueError(f"[orbax.checkpoint.utils.to_shape_dtype_struct] unexpected type "
                   f"{type(x).__name__}: give an array, a ShapeDtypeStruct or a number")


def checkpoint_steps(checkpoint_dir):
  """The committed steps under a CheckpointManager's folder."""
  return list(ckpt.all_steps(str(checkpoint_dir)))


def is_primary_host(primary_host=0):
  return partix.process_index() == primary_host


def tuple_path_from_keypath(keypath):
  return _path_tuple(keypath)
