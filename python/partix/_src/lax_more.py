"""More of jax.lax's names for partix.lax, each the jax.numpy function of the same meaning or a
composition of ops (no rule of its own)."""
import enum

import numpy as np

from partix._src import numpy_more as _more
from partix._src import numpy_ops as jnp
from partix._src.core import PartixError

__all__ = ["acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "cosh", "sinh",
           "tan", "exp2", "reciprocal", "is_finite", "conj", "real", "imag", "clamp", "full",
           "full_like", "rev", "reduce_and", "reduce_or", "reduce_prod", "select_n",
           "sort_key_val", "split", "optimization_barrier", "broadcast_to_rank", "collapse",
           "batch_matmul", "GatherScatterMode", "tile"]

acos, acosh, asin, asinh, atan, atan2, atanh = (_more.arccos, _more.arccosh, _more.arcsin,
                                                _more.arcsinh, _more.arctan, _more.arctan2,
                                                _more.arctanh)
cbrt, cosh, sinh, tan, exp2, reciprocal = (jnp.cbrt, jnp.cosh, jnp.sinh, jnp.tan, jnp.exp2,
                                           jnp.reciprocal)
is_finite = jnp.isfinite


def conj(x):
  return jnp.asarray(x)  # partix's arrays are real


def real(x):
  return jnp.asarray(x)


def imag(x):
  return jnp.zeros_like(jnp.asarray(x))


def clamp(min, x, max):  # noqa: A002 (lax's argument names)
  """lax.clamp: x limited to [min, max] (note the order of the arguments)."""
  return jnp.minimum(jnp.maximum(jnp.asarray(x), min), max)


def full(shape, fill_value, dtype=None, *, sharding=None):
  return jnp.full(shape, fill_value, dtype, out_sharding=sharding)


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
  return jnp.full_like(x, fill_value, dtype, shape, out_sharding=sharding)


def rev(operand, dimensions):
  """lax.rev: operand reversed along each of dimensions."""
  return jnp.flip(operand, tuple(dimensions))


def reduce_and(operand, axes):
  return jnp.all(operand, axis=tuple(axes))


def reduce_or(operand, axes):
  return jnp.any(operand, axis=tuple(axes))


def reduce_prod(operand, axes):
  return jnp.prod(operand, axis=tuple(axes))


def select_n(which, *cases):
  """lax.select_n: cases[which] element by element (which bool: cases[0] where false)."""
  if not cases:
    raise PartixError("[select_n] needs at least one case")
  w = jnp.asarray(which)
  if w.dtype == np.bool_:
    if len(cases) != 2:
      raise PartixError(f"[select_n] a bool selector picks between 2 cases, got {len(cases)}")
    return jnp.where(w, cases[1], cases[0])
  out = jnp.asarray(cases[-1])
  for i in range(len(cases) - 2, -1, -1):
    out = jnp.where(w == i, cases[i], out)
  return out


def sort_key_val(keys, values, dimension=-1, is_stable=True):
  """keys sorted along dimension, values permuted with them."""
  order = jnp.argsort(keys, axis=dimension)
  return (jnp.take_along_axis(jnp.asarray(keys), order, axis=dimension),
          jnp.take_along_axis(jnp.asarray(values), order, axis=dimension))


def split(operand, sizes, axis=0):
  """lax.split: pieces of the given sizes along axis."""
  bounds = np.cumsum(sizes)[:-1].tolist()
  x = jnp.asarray(operand)
  if sum(sizes) != x.shape[axis]:
    raise PartixError(f"[split] sizes {tuple(sizes)} do not add up to dimension {axis} of "
                      f"{tuple(x.shape)}")
  return jnp.split(x, bounds, axis=axis)


def optimization_barrier(operand):
  """An identity (partix's compiler does not move computation across calls)."""
  return operand


def broadcast_to_rank(x, rank):
  x = jnp.asarray(x)
  return jnp.reshape(x, (1,) * (rank - x.ndim) + tuple(x.shape)) if x.ndim < rank else x


def collapse(operand, start_dimension, stop_dimension=None):
  """Dimensions [start, stop) merged into one."""
  x = jnp.asarray(operand)
  stop = x.ndim if stop_dimension is None else stop_dimension
  shape = tuple(x.shape)
  merged = int(np.prod(shape[start_dimension:stop], dtype=np.int64))
  return jnp.reshape(x, shape[:start_dimension] + (merged,) + shape[stop:])


def batch_matmul(lhs, rhs, precision=None):
  return jnp.matmul(lhs, rhs)


def tile(operand, reps):
  return jnp.tile(operand, reps)


class GatherScatterMode(enum.Enum):
  """How gathers and scatters treat out-of-range indices (x.at[].get(mode=...))."""
  CLIP = "clip"
  FILL_OR_DROP = "fill"
  PROMISE_IN_BOUNDS = "promise_in_bounds"
  ONE_HOT = "one_hot"
