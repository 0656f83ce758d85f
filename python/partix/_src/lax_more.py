"""More of jax.lax's names for partix.lax, each the jax.numpy function of the same meaning or a
composition of ops (no rule of its own)."""
import enum

import numpy as np

from partix import _core

from partix._src import numpy_more as _more
from partix._src import lax_ops as _lax_ops
from partix._src import numpy_ops as jnp
from partix._src import tree_util as _tu
from partix._src.core import PartixError

__all__ = ["acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "cosh", "sinh",
           "tan", "exp2", "reciprocal", "is_finite", "conj", "real", "imag", "clamp", "full",
           "full_like", "rev", "reduce_and", "reduce_or", "reduce_prod", "select_n",
           "sort_key_val", "split", "optimization_barrier", "broadcast_to_rank", "collapse",
           "batch_matmul", "GatherScatterMode", "tile", "associative_scan", "cumprod", "cummax",
           "cummin", "cumlogsumexp", "approx_max_k", "approx_min_k"]

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
  """lax.full_like; inside shard_map the result varies over the manual axes x does (x an array
  or a ShapeDtypeStruct with vma), as JAX's."""
  out = jnp.full_like(x, fill_value, dtype, shape, out_sharding=sharding)
  vma = sorted(_vma_of(x))
  return _lax_ops.pvary(out, tuple(vma)) if vma else out


def _vma_of(x):
  """The manual axes x varies over inside shard_map (none outside, or for host data)."""
  if hasattr(x, "vma") and not hasattr(x, "_a"):
    return frozenset(x.vma)
  if hasattr(x, "_a") and x._a.is_tracer():
    return frozenset(_core.varying_axes(x._a))
  return frozenset()


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


def associative_scan(fn, elems, reverse=False, axis=0):
  """lax.associative_scan: the inclusive scan of elems (a pytree of arrays of one length
  along axis) by the associative fn, in log2(n) rounds (each combines every element with
  the one 2^k before it)."""
  leaves, tree = _tu.tree_flatten(elems)
  if not leaves:
    raise PartixError("[associative_scan] elems has no arrays")
  xs = [jnp.asarray(x, api="associative_scan") for x in leaves]
  ax = axis % xs[0].ndim
  n = xs[0].shape[ax]
  if any(x.shape[ax] != n for x in xs):
    raise PartixError(f"[associative_scan] every array needs the same length along axis {axis}")
  if reverse:
    xs = [jnp.flip(x, ax) for x in xs]

  def part(x, a, b):
    idx = [slice(None)] * x.ndim
    idx[ax] = slice(a, b)
    return x[tuple(idx)]
  k = 1
  while k < n:
    prev = _tu.tree_unflatten(tree, [part(x, 0, n - k) for x in xs])
    cur = _tu.tree_unflatten(tree, [part(x, k, n) for x in xs])
    comb = _tu.tree_leaves(fn(prev, cur)) if reverse is False else _tu.tree_leaves(
        fn(cur, prev))
    xs = [jnp.concatenate([part(x, 0, k), jnp.asarray(c).astype(x.dtype)], axis=ax)
          for x, c in zip(xs, comb)]
    k *= 2
  if reverse:
    xs = [jnp.flip(x, ax) for x in xs]
  return _tu.tree_unflatten(tree, xs)


def _cum(fn, api):
  def op(operand, axis=0, reverse=False):
    x = jnp.asarray(operand, api=api)
    if x.ndim == 0:
      raise PartixError(f"[{api}] needs an array of at least one dimension")
    return associative_scan(fn, x, reverse=reverse, axis=axis)
  op.__name__ = api
  op.__doc__ = f"lax.{api}: the inclusive scan along axis (reverse: from the end)."
  return op


cumprod = _cum(jnp.multiply, "cumprod")
cummax = _cum(jnp.maximum, "cummax")
cummin = _cum(jnp.minimum, "cummin")
cumlogsumexp = _cum(jnp.logaddexp, "cumlogsumexp")


def _approx_k(largest, api):
  def op(operand, k, reduction_dimension=-1, recall_target=0.95,
         reduction_input_size_override=-1, aggregate_to_topk=True):
    """The k largest (smallest) values along reduction_dimension and their indices. partix
    computes them exactly (recall 1, which meets any recall_target), as JAX on CPU does."""
    x = jnp.asarray(operand, api=api)
    ax = reduction_dimension % x.ndim if x.ndim else 0
    if not 0 < recall_target <= 1:
      raise PartixError(f"[{api}] recall_target must be in (0, 1], got {recall_target!r}")
    moved = jnp.moveaxis(x, ax, -1)
    from_top = moved if largest else jnp.negative(moved)
    v, i = _lax_ops.top_k(from_top, k)
    v = v if largest else jnp.negative(v)
    return jnp.moveaxis(v, -1, ax), jnp.moveaxis(i, -1, ax)
  op.__name__ = api
  return op


approx_max_k = _approx_k(True, "approx_max_k")
approx_min_k = _approx_k(False, "approx_min_k")
