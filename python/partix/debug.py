"""partix.debug: visualize_array_sharding and print (as jax.debug)."""
import builtins

import numpy as _np

from partix import _core
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


def print(fmt, *args, **kwargs):  # noqa: A001
  vals = [a if not isinstance(a, Array) or not a._a.is_tracer() else a for a in args]
  builtins.print(fmt.format(*vals, **kwargs))
