"""numpy's functions whose result shape depends on the values (nonzero, unique, the set
operations, ...), as JAX has them: a concrete input gives numpy's result; a traced one needs
size= (the result is cut or padded to it with fill_value). Also cumprod (lax's associative
scan of products) and the sorting helpers built on argsort. Composed from numpy_ops' ops."""
import numpy as np

from partix._src import dtypes as _dtypes
from partix._src import lax_more as _lax_more
from partix._src import numpy_more as _more
from partix._src import numpy_ops as jnp
from partix._src.core import Array, PartixError

__all__ = ["nonzero", "flatnonzero", "argwhere", "unique", "unique_values", "unique_counts",
           "unique_inverse", "unique_all", "intersect1d", "union1d", "setdiff1d", "setxor1d",
           "extract", "compress", "cumprod", "cumulative_prod", "nancumprod", "bincount",
           "lexsort", "partition", "argpartition", "histogram_bin_edges", "histogram",
           "trim_zeros", "delete", "insert"]


def _traced(*xs):
  return any(isinstance(x, Array) and x._a.is_tracer() for x in xs)


def _need_size(api, size):
  if size is None:
    raise PartixError(f"[{api}] of a traced value has a shape that depends on its values: "
                      "pass size= (and fill_value=), as in JAX, or call it outside jit")


def nonzero(a, *, size=None, fill_value=None):
  """The indices of a's nonzero elements, one array per dimension."""
  x = jnp.asarray(a, api="nonzero")
  if x.ndim == 0:
    raise PartixError("[nonzero] of a 0-d array: use atleast_1d(a) first (as numpy and JAX)")
  if not _traced(x):
    idx = np.nonzero(np.asarray(x))
    if size is None:
      return tuple(jnp.asarray(i.astype(np.int32)) for i in idx)
    return tuple(jnp.asarray(_fit(i.astype(np.int32), size, fill_value, k))
                 for k, i in enumerate(idx))
  _need_size("nonzero", size)
  flat = jnp.ravel(x != 0)
  n = flat.shape[0]
  pos = jnp.cumsum(flat) - 1  # each nonzero element's place in the result
  where = jnp.where(flat, pos, size)  # past the end: dropped
  lin = jnp.zeros((size,), np.int32).at[where].set(jnp.arange(n, dtype=np.int32))
  count = jnp.sum(flat)
  keep = jnp.arange(size) < count
  out = []
  for k, i in enumerate(_more.unravel_index(lin, x.shape)):
    fill = _fill_for(fill_value, k)
    out.append(jnp.where(keep, i, fill).astype(np.int32))
  return tuple(out)


def _fill_for(fill_value, k):
  if fill_value is None:
    return 0
  if isinstance(fill_value, (tuple, list)):
    return fill_value[k]
  return fill_value


def _fit(v, size, fill_value, k=0):
  if len(v) >= size:
    return v[:size]
  return np.concatenate([v, np.full(size - len(v), _fill_for(fill_value, k), v.dtype)])


def flatnonzero(a, *, size=None, fill_value=None):
  return nonzero(jnp.ravel(jnp.asarray(a)), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
  x = jnp.asarray(a, api="argwhere")
  if x.ndim == 0:
    x = jnp.reshape(x, (1,))
    return jnp.zeros((0, 0), np.int32) if not _traced(x) and not bool(np.asarray(x)[0]) else \
        jnp.stack(nonzero(x, size=size, fill_value=fill_value), axis=-1)[:, :0]
  return jnp.stack(nonzero(x, size=size, fill_value=fill_value), axis=-1)


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, size=None, fill_value=None, sorted=True):
  """The sorted unique elements (of the flattened array; axis= for concrete input only), with
  the first index, the inverse and the counts as asked."""
  x = jnp.asarray(ar, api="unique")
  if not _traced(x):
    res = np.unique(np.asarray(x), return_index=return_index, return_inverse=return_inverse,
                    return_counts=return_counts, axis=axis, equal_nan=equal_nan)
    res = res if isinstance(res, tuple) else (res,)
    vals = res[0]
    out = [vals if size is None else _fit(vals, size, fill_value if fill_value is not None
                                          else (vals.min() if vals.size else 0))]
    for r in res[1:]:
      r = r.astype(np.int32)
      if size is not None and r.ndim == 1 and len(r) == len(vals):
        r = _fit(r, size, 0)
      out.append(r)
    out = [jnp.asarray(o) for o in out]
    return out[0] if len(out) == 1 else tuple(out)
  if axis is not None:
    raise PartixError("[unique] axis= of a traced value is not supported")
  _need_size("unique", size)
  flat = jnp.ravel(x)
  n = flat.shape[0]
  order = jnp.argsort(flat)
  s = flat[order]
  first = jnp.concatenate([jnp.ones((1,), bool), s[1:] != s[:-1]]) if n else jnp.zeros((0,),
                                                                                       bool)
  pos = jnp.cumsum(first) - 1  # each sorted element's unique value
  slot = jnp.where(first, pos, size)
  fill = jnp.min(flat) if fill_value is None else fill_value
  vals = jnp.full((size,), fill, x.dtype).at[slot].set(s)
  out = [vals]
  if return_index:
    out.append(jnp.zeros((size,), np.int32).at[slot].set(order.astype(np.int32)))
  if return_inverse:
    inv = jnp.zeros((n,), np.int32).at[order].set(pos.astype(np.int32))
    out.append(jnp.reshape(inv, x.shape))
  if return_counts:
    out.append(jnp.zeros((size,), np.int32).at[pos].add(1))
  return out[0] if len(out) == 1 else tuple(out)


def unique_values(x, *, size=None, fill_value=None):
  return unique(x, size=size, fill_value=fill_value)


def unique_counts(x, *, size=None, fill_value=None):
  v, c = unique(x, return_counts=True, size=size, fill_value=fill_value)
  return _Result(values=v, counts=c)


def unique_inverse(x, *, size=None, fill_value=None):
  v, i = unique(x, return_inverse=True, size=size, fill_value=fill_value)
  return _Result(values=v, inverse_indices=i)


def unique_all(x, *, size=None, fill_value=None):
  v, idx, inv, c = unique(x, return_index=True, return_inverse=True, return_counts=True,
                          size=size, fill_value=fill_value)
  return _Result(values=v, indices=idx, inverse_indices=inv, counts=c)


class _Result(tuple):
  """A named tuple of arrays (numpy's UniqueAllResult and kin)."""

  def __new__(cls, **fields):
    self = super().__new__(cls, fields.values())
    self.__dict__.update(fields)
    return self


def _set_op(api, op, a, b, size, fill_value, assume_unique=False):
  x, y = jnp.asarray(a, api=api), jnp.asarray(b, api=api)
  if not _traced(x, y):
    r = op(np.asarray(x), np.asarray(y))
    if size is not None:
      r = _fit(r, size, fill_value if fill_value is not None else (r.min() if r.size else 0))
    return jnp.asarray(r)
  raise PartixError(f"[{api}] of traced values is not supported (call it outside jit)")


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None,
                fill_value=None):
  if return_indices:
    x, y = np.asarray(jnp.asarray(ar1)), np.asarray(jnp.asarray(ar2))
    r = np.intersect1d(x, y, assume_unique=assume_unique, return_indices=True)
    return tuple(jnp.asarray(v if k == 0 else v.astype(np.int32)) for k, v in enumerate(r))
  return _set_op("intersect1d", np.intersect1d, ar1, ar2, size, fill_value)


def union1d(ar1, ar2, *, size=None, fill_value=None):
  return _set_op("union1d", np.union1d, ar1, ar2, size, fill_value)


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
  return _set_op("setdiff1d", np.setdiff1d, ar1, ar2, size, fill_value)


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
  return _set_op("setxor1d", np.setxor1d, ar1, ar2, size, fill_value)


def extract(condition, arr, *, size=None, fill_value=0):
  c = jnp.ravel(jnp.asarray(condition, api="extract"))
  a = jnp.ravel(jnp.asarray(arr, api="extract"))
  idx = nonzero(c, size=size, fill_value=-1 if size is not None else None)[0]
  if size is None:
    return a[idx]
  return jnp.where(idx >= 0, a[jnp.maximum(idx, 0)], fill_value)


def compress(condition, a, axis=None, *, size=None, fill_value=0):
  x = jnp.asarray(a, api="compress")
  if axis is None:
    x, axis = jnp.ravel(x), 0
  c = jnp.asarray(condition, api="compress")
  if _traced(c) and size is None:
    _need_size("compress", size)
  idx = nonzero(c, size=size, fill_value=-1 if size is not None else None)[0]
  if size is None:
    return jnp.take(x, idx, axis=axis)
  got = jnp.take(x, jnp.maximum(idx, 0), axis=axis)
  shape = [1] * x.ndim
  shape[axis % x.ndim] = size
  return jnp.where(jnp.reshape(idx >= 0, shape), got, fill_value)


def cumprod(a, axis=None, dtype=None):
  x = jnp.asarray(a, dtype, "cumprod")
  if axis is None:
    x, axis = jnp.ravel(x), 0
  if x.dtype == np.bool_:
    x = x.astype(np.int32)
  return _lax_more.associative_scan(jnp.multiply, x, axis=axis % max(x.ndim, 1))


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
  x = jnp.asarray(x, dtype, "cumulative_prod")
  if axis is None:
    if x.ndim > 1:
      raise PartixError("[cumulative_prod] axis must be given for arrays of more than one "
                        "dimension")
    axis = 0
  out = cumprod(x, axis=axis)
  if include_initial:
    shape = list(out.shape)
    shape[axis % out.ndim] = 1
    out = jnp.concatenate([jnp.ones(shape, out.dtype), out], axis=axis)
  return out


def nancumprod(a, axis=None, dtype=None):
  x = jnp.asarray(a, dtype, "nancumprod")
  return cumprod(jnp.where(jnp.isnan(x), jnp.ones_like(x), x), axis=axis)


def bincount(x, weights=None, minlength=0, *, length=None):
  v = jnp.asarray(x, api="bincount")
  if not _dtypes.is_int(v.dtype):
    raise PartixError(f"[bincount] x must be integers, got {v.dtype}")
  if length is None:
    if _traced(v):
      raise PartixError("[bincount] of a traced value needs length= (its size depends on the "
                        "values), as in JAX")
      # (unreached)
    host = np.asarray(v)
    length = max(int(minlength), int(host.max()) + 1 if host.size else 0)
  w = jnp.ones(v.shape, np.int32) if weights is None else jnp.asarray(weights)
  return jnp.zeros((length,), w.dtype).at[jnp.ravel(jnp.clip(v, 0, None))].add(jnp.ravel(w))


def lexsort(keys, axis=-1):
  """Indices sorting by the last key, then the one before, ... (stable sorts, first key last)."""
  if isinstance(keys, (list, tuple)):
    ks = [jnp.asarray(k, api="lexsort") for k in keys]
  else:  # an array: its rows are the keys
    x = jnp.asarray(keys, api="lexsort")
    ks = [x[i] for i in range(x.shape[0])] if x.ndim else [x]
  if not ks:
    raise PartixError("[lexsort] needs at least one key")
  order = jnp.argsort(ks[0], axis=axis, stable=True)
  for k in ks[1:]:
    nxt = jnp.argsort(jnp.take_along_axis(k, order, axis=axis), axis=axis, stable=True)
    order = jnp.take_along_axis(order, nxt, axis=axis)
  return order


def partition(a, kth, axis=-1):
  """A sorted copy: the kth element is in place, smaller ones before it, larger after (sorting
  satisfies numpy's contract)."""
  return jnp.sort(a, axis=axis)


def argpartition(a, kth, axis=-1):
  return jnp.argsort(a, axis=axis, stable=True)


def histogram_bin_edges(a, bins=10, range=None, weights=None):
  x = jnp.asarray(a, api="histogram_bin_edges")
  if not isinstance(bins, (int, np.integer)):
    return jnp.asarray(bins, np.float32)
  if range is None:
    lo, hi = jnp.min(x), jnp.max(x)
  else:
    lo, hi = jnp.asarray(range[0], np.float32), jnp.asarray(range[1], np.float32)
  same = lo == hi
  lo, hi = jnp.where(same, lo - 0.5, lo), jnp.where(same, hi + 0.5, hi)
  return jnp.linspace(lo.astype(np.float32), hi.astype(np.float32), int(bins) + 1)


def histogram(a, bins=10, range=None, weights=None, density=None):
  x = jnp.ravel(jnp.asarray(a, api="histogram"))
  edges = histogram_bin_edges(x, bins, range)
  n = edges.shape[0] - 1
  idx = _more.searchsorted(edges, x, side="right") - 1
  idx = jnp.where(x == edges[-1], n - 1, idx)  # the last bin is closed on the right
  inside = (idx >= 0) & (idx < n)
  w = jnp.ones(x.shape, np.float32) if weights is None else jnp.ravel(jnp.asarray(weights))
  counts = jnp.zeros((n,), w.dtype).at[jnp.where(inside, idx, n)].add(w)
  if density:
    counts = counts / (jnp.sum(counts) * jnp.diff(edges))
  return counts, edges


def trim_zeros(filt, trim="fb"):
  f = jnp.asarray(filt, api="trim_zeros")
  if _traced(f):
    raise PartixError("[trim_zeros] of a traced value has a data-dependent shape (call it "
                      "outside jit)")
  return jnp.asarray(np.trim_zeros(np.asarray(f), trim))


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
  x = jnp.asarray(arr, api="delete")
  if axis is None:
    x, axis = jnp.ravel(x), 0
  if _traced(obj) if isinstance(obj, Array) else False:
    raise PartixError("[delete] needs static indices (ints, slices or a concrete array)")
  n = x.shape[axis]
  keep = np.delete(np.arange(n), obj if not isinstance(obj, Array) else np.asarray(obj))
  return jnp.take(x, jnp.asarray(keep.astype(np.int32)), axis=axis)


def insert(arr, obj, values, axis=None):
  """numpy.insert with static positions: the result gathers from arr and the (broadcast)
  values by a map numpy computes on indices."""
  x = jnp.asarray(arr, api="insert")
  if axis is None:
    x, axis = jnp.ravel(x), 0
  axis %= max(x.ndim, 1)
  if isinstance(obj, Array):
    if obj._a.is_tracer():
      raise PartixError("[insert] needs static positions (ints, slices or a concrete array)")
    obj = np.asarray(obj)
  n = x.shape[axis]
  v = jnp.asarray(values, x.dtype)
  v = jnp.reshape(v, (1,) * (x.ndim - v.ndim) + tuple(v.shape))  # numpy's ndmin=arr.ndim
  if isinstance(obj, (int, np.integer)):  # one position: the values' first axis is inserted
    v = jnp.moveaxis(v, 0, axis)
    m = v.shape[axis]
    pos = np.insert(np.arange(n), obj, [-1] * m)
  else:
    pos = np.insert(np.arange(n), obj, -1)
    m = int((pos < 0).sum())
  vshape = list(x.shape)
  vshape[axis] = m
  v = jnp.broadcast_to(v, vshape)
  both = jnp.concatenate([x, v], axis=axis)
  src = np.where(pos >= 0, pos, n + np.cumsum(pos < 0) - 1).astype(np.int32)
  return jnp.take(both, jnp.asarray(src), axis=axis)
