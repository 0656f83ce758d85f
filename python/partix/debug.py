"""partix.debug: visualize_array_sharding, print and callback (as jax.debug)."""
import builtins

import numpy as _np

from partix import _core
from partix._src import callbacks as _callbacks
from partix._src.core import Array, PartixError
from partix._src.tracing import ShapeDtypeStruct as _ShapeDtypeStruct


def visualize_array_sharding(arr, *, use_color=False, scale=1.0, min_width=9, max_width=80):
  """Prints which devices hold which block of arr (as jax.debug.visualize_array_sharding)."""
  if not isinstance(arr, Array):
    raise PartixError(f"[visualize_array_sharding] {arr!r} is not a partix Array")
  builtins.print(_core.visualize_sharding(arr._a))


def visualize_sharding(shape, sharding, **kw):
  a = Array(_ShapeDtypeStruct(shape, _np.float32, sharding)._core())
  builtins.print(_core.visualize_sharding(a._a))


def print(fmt, *args, ordered=False, partitioned=False, **kwargs):  # noqa: A001
  """jax.debug.print: prints fmt.format(*args, **kwargs) with the values each time the program
  runs (inside shard_map, once per device with its blocks); outside any trace, at once."""
  _callbacks.debug_print(fmt, *args, ordered=ordered, partitioned=partitioned, **kwargs)


def callback(callback, *args, ordered=False, partitioned=False, **kwargs):
  """jax.debug.callback: calls callback with the values of args each time the program runs."""
  _callbacks.debug_callback(callback, *args, ordered=ordered, partitioned=partitioned, **kwargs)
