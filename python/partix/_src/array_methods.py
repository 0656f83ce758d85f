"""Array's operators, indexing (x[0], x[:, 1:3], x[..., None], x[idx_array]), .at[...] updates
and numpy-style methods, all mapped to partix.numpy."""
import numbers

import numpy as np

from partix import _core
from partix._src import bitwise as _bitwise
from partix._src import dtypes
from partix._src import jax_errors
from partix._src import numpy_ops as jnp
from partix._src.core import Array, PartixError, asarray, core
from partix._src import lax_ops
from partix._src.api import device_put


def _binop(f, reverse=False):
  if reverse:
    def op(self, other):
      if not _operand_ok(other, f.__name__):
        return NotImplemented
      return f(other, self)
  else:
    def op(self, other):
      if not _operand_ok(other, f.__name__):
        return NotImplemented
      return f(self, other)
  return op


def _operand_ok(x, api):
  """Whether x is an operand of partix's operators; other objects that cannot be arrays are
  refused here (instead of Python's TypeError), the rest left to their own reflected operator."""
  # == and != with such objects fall back to Python's identity comparison (False / True).
  if isinstance(x, (str, bytes, dict, set, type(None))) and api not in ("equal", "not_equal"):
    raise PartixError(f"[{api}] {type(x).__name__} {x!r:.40} is not an array operand")
  return isinstance(x, (Array, numbers.Number, np.ndarray, np.generic, list, tuple))


def _to_device(self, device, *, stream=None):
  return device_put(self, device)


Array.to_device = _to_device
Array.__add__ = _binop(jnp.add)
Array.__radd__ = _binop(jnp.add, True)
Array.__sub__ = _binop(jnp.subtract)
Array.__rsub__ = _binop(jnp.subtract, True)
Array.__mul__ = _binop(jnp.multiply)
Array.__rmul__ = _binop(jnp.multiply, True)
Array.__truediv__ = _binop(jnp.true_divide)
Array.__rtruediv__ = _binop(jnp.true_divide, True)
Array.__floordiv__ = _binop(jnp.floor_divide)
Array.__rfloordiv__ = _binop(jnp.floor_divide, True)
Array.__mod__ = _binop(jnp.remainder)
Array.__rmod__ = _binop(jnp.remainder, True)
Array.__pow__ = _binop(jnp.power)
Array.__rpow__ = _binop(jnp.power, True)
Array.__matmul__ = _binop(jnp.matmul)
Array.__rmatmul__ = _binop(jnp.matmul, True)
Array.__lt__ = _binop(jnp.less)
Array.__le__ = _binop(jnp.less_equal)
Array.__gt__ = _binop(jnp.greater)
Array.__ge__ = _binop(jnp.greater_equal)
Array.__eq__ = _binop(jnp.equal)
Array.__ne__ = _binop(jnp.not_equal)
Array.__hash__ = None


def _bitop(name, f, reflected=False):
  def op(self, other):
    if not _operand_ok(other, f"Array.{name}"):
      return NotImplemented
    return f(other, self) if reflected else f(self, other)
  return op


Array.__and__, Array.__rand__ = (_bitop("__and__", _bitwise.bitwise_and),
                                 _bitop("__rand__", _bitwise.bitwise_and, True))
Array.__or__, Array.__ror__ = (_bitop("__or__", _bitwise.bitwise_or),
                               _bitop("__ror__", _bitwise.bitwise_or, True))
Array.__xor__, Array.__rxor__ = (_bitop("__xor__", _bitwise.bitwise_xor),
                                 _bitop("__rxor__", _bitwise.bitwise_xor, True))
Array.__lshift__, Array.__rlshift__ = (_bitop("__lshift__", _bitwise.left_shift),
                                       _bitop("__rlshift__", _bitwise.left_shift, True))
Array.__rshift__, Array.__rrshift__ = (_bitop("__rshift__", _bitwise.right_shift),
                                       _bitop("__rrshift__", _bitwise.right_shift, True))
Array.__neg__ = lambda self: jnp.negative(self)
Array.__pos__ = lambda self: self
Array.__abs__ = lambda self: jnp.abs(self)
Array.__invert__ = lambda self: _bitwise.bitwise_not(self)

# ---- methods ----
Array.astype = lambda self, dtype, copy=False, device=None: jnp.astype(self, dtype)
Array.reshape = lambda self, *shape, order="C", out_sharding=None: jnp.reshape(
    self, shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape,
    order=order, out_sharding=out_sharding)
Array.ravel = lambda self, order="C": jnp.ravel(self, order)
Array.flatten = lambda self, order="C": jnp.ravel(self, order)
Array.ptp = lambda self, axis=None, keepdims=False: jnp.ptp(self, axis, keepdims)
Array.diagonal = lambda self, offset=0, axis1=0, axis2=1: jnp.diagonal(self, offset, axis1,
                                                                       axis2)
Array.trace = lambda self, offset=0, axis1=0, axis2=1: jnp.trace(self, offset, axis1, axis2)
Array.nonzero = lambda self, **k: jnp.nonzero(self, **k)
Array.transpose = lambda self, *axes: jnp.transpose(
    self, None if not axes else axes[0] if len(axes) == 1 and not isinstance(axes[0], int)
    else axes)
Array.T = property(lambda self: jnp.transpose(self))
Array.mT = property(lambda self: jnp.matrix_transpose(self))
Array.swapaxes = lambda self, a, b: jnp.swapaxes(self, a, b)
Array.squeeze = lambda self, axis=None: jnp.squeeze(self, axis)
Array.sum = lambda self, axis=None, dtype=None, out=None, keepdims=False, **k: jnp.sum(
    self, axis, dtype, out, keepdims, **k)
Array.mean = lambda self, axis=None, dtype=None, out=None, keepdims=False, **k: jnp.mean(
    self, axis, dtype, out, keepdims, **k)
Array.max = lambda self, axis=None, out=None, keepdims=False, **k: jnp.max(
    self, axis, None, out, keepdims, **k)
Array.min = lambda self, axis=None, out=None, keepdims=False, **k: jnp.min(
    self, axis, None, out, keepdims, **k)
Array.prod = lambda self, axis=None, dtype=None, keepdims=False: jnp.prod(self, axis, dtype,
                                                                          keepdims)
Array.var = lambda self, axis=None, dtype=None, out=None, ddof=0, keepdims=False: jnp.var(
    self, axis, dtype, out, ddof, keepdims)
Array.std = lambda self, axis=None, dtype=None, out=None, ddof=0, keepdims=False: jnp.std(
    self, axis, dtype, out, ddof, keepdims)
Array.argmax = lambda self, axis=None, keepdims=False: jnp.argmax(self, axis, keepdims)
Array.argmin = lambda self, axis=None, keepdims=False: jnp.argmin(self, axis, keepdims)
Array.cumsum = lambda self, axis=None, dtype=None: jnp.cumsum(self, axis, dtype)
Array.any = lambda self, axis=None, keepdims=False: jnp.any(self, axis, keepdims)
Array.all = lambda self, axis=None, keepdims=False: jnp.all(self, axis, keepdims)
Array.clip = lambda self, min=None, max=None: jnp.clip(self, min, max)
Array.round = lambda self, decimals=0: jnp.round(self, decimals)
Array.dot = lambda self, b: jnp.dot(self, b)
Array.take = lambda self, indices, axis=None, mode=None, **k: jnp.take(self, indices, axis,
                                                                        mode, **k)
Array.repeat = lambda self, repeats, axis=None: jnp.repeat(self, repeats, axis)
Array.sort = lambda self, axis=-1: jnp.sort(self, axis)
Array.argsort = lambda self, axis=-1: jnp.argsort(self, axis)
Array.conj = Array.conjugate = lambda self: self


def _copy(self):
  """A copy in new buffers, with the same sharding: donating or deleting self leaves it."""
  return Array(_core.copy(core(self, api="Array.copy")))


Array.copy = _copy
Array.real = property(lambda self: self)
Array.imag = property(lambda self: jnp.zeros_like(self))  # partix holds no complex dtype


# ---- indexing ----

def _is_int(x):
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _index_tuple(idx, ndim):
  if not isinstance(idx, tuple):
    idx = (idx,)
  n_ell = sum(1 for i in idx if i is Ellipsis)
  if n_ell > 1:
    raise PartixError("[Array.__getitem__] an index can have only one Ellipsis (...)")
  used = sum(1 for i in idx if i is not None and i is not Ellipsis)
  if used > ndim:
    raise PartixError(f"[Array.__getitem__] too many indices ({used}) for an array of "
                      f"{ndim} dimensions")
  out = []
  for i in idx:
    if i is Ellipsis:
      out.extend([slice(None)] * (ndim - used))
    else:
      out.append(i)
  if not n_ell:
    out.extend([slice(None)] * (ndim - used))
  return out


def _concrete_masks(idx):
  """idx with each boolean mask whose value is known (a numpy array, or an Array outside any
  trace) replaced by its np.nonzero() index arrays, as numpy and JAX index concrete masks; a
  traced mask stays (and is refused: its result's shape would depend on its values)."""
  items = idx if isinstance(idx, tuple) else (idx,)
  out = []
  for it in items:
    is_mask = (isinstance(it, np.ndarray) and it.dtype == np.bool_) or (
        isinstance(it, list) and it and all(isinstance(v, (bool, np.bool_)) for v in it)) or (
        isinstance(it, Array) and it.dtype == np.bool_ and it.ndim > 0 and not it._a.is_tracer())
    if is_mask:
      out.extend(np.nonzero(np.asarray(it)))
    else:
      out.append(it)
  return tuple(out) if isinstance(idx, tuple) or len(out) != 1 else out[0]


def _getitem(self, idx):
  x = self
  idx = _concrete_masks(idx)
  items = _index_tuple(idx, x.ndim)
  starts, stops, strides, flips = [], [], [], []
  out_shape = []  # after the static slicing: (kind, ...) per output dim
  dim = 0
  plan = []
  for it in items:
    if it is None:
      plan.append(("new",))
      continue
    size = x.shape[dim]
    if _is_int(it):
      i = int(it)
      if size == 0:
        raise PartixError(f"[Array.__getitem__] index {i} is out of bounds for axis {dim} of "
                          f"size 0")
      # As JAX: a retrieval clamps an out-of-bounds index into the axis (JAX's "Out-of-bounds
      # indexing" gotcha); numpy would raise.
      i = min(max(i + size if i < 0 else i, 0), size - 1)
      starts.append(i), stops.append(i + 1), strides.append(1), flips.append(False)
      plan.append(("int", dim))
    elif isinstance(it, slice):
      for v in (it.start, it.stop, it.step):
        if v is not None and not _is_int(v):
          if isinstance(v, Array):
            raise PartixError("[Array.__getitem__] slice bounds must be static Python ints; "
                              "use lax.dynamic_slice for traced starts")
          raise PartixError(f"[Array.__getitem__] slice bound {v!r} is not an int")
      a, b, s = it.indices(size)
      if s > 0:
        n = max(0, (b - a + s - 1) // s)
        starts.append(a), stops.append(a + max(0, (n - 1) * s + 1) if n else a)
        strides.append(s), flips.append(False)
      else:
        n = max(0, (a - b + (-s) - 1) // (-s))
        lo = a - (n - 1) * (-s) if n else 0
        starts.append(lo), stops.append(a + 1 if n else 0), strides.append(-s)
        flips.append(True)
      plan.append(("slice", dim))
    elif isinstance(it, (Array, np.ndarray, list)) or (
        isinstance(it, np.generic) and not _is_int(it)):
      arr = asarray(it)
      if arr.dtype == np.bool_:
        raise jax_errors.NonConcreteBooleanIndexError(
            "[Array.__getitem__] indexing with a traced boolean mask has a data-dependent "
            "shape; use jnp.where(mask, x, 0)")
      if not dtypes.is_int(arr.dtype):
        raise PartixError(f"[Array.__getitem__] index arrays must be integers, got {arr.dtype}")
      starts.append(0), stops.append(size), strides.append(1), flips.append(False)
      plan.append(("array", dim, arr))
    elif isinstance(it, bool):
      raise PartixError("[Array.__getitem__] a bool index is not supported")
    else:
      raise PartixError(f"[Array.__getitem__] index {it!r} of type {type(it).__name__} is not "
                        "supported (ints, slices, None, ..., integer arrays)")
    dim += 1
  y = x
  if any(a != 0 or b != n or s != 1 for a, b, s, n in zip(starts, stops, strides, x.shape)):
    y = Array(_core.slice(x._a, starts, stops, strides))
  fl = [d for d, f in enumerate(flips) if f]
  if fl:
    y = jnp.flip(y, fl)
  # Integer array indices (one or more, gathered one after another along their axes).
  arrays = [p for p in plan if p[0] == "array"]
  extra = 0
  if arrays:
    # numpy puts the indexed dims in place only when the advanced indices (arrays and ints)
    # are adjacent (a None between them separates them); other layouts move them first.
    adv = [k for k, p in enumerate(plan) if p[0] in ("array", "int")]
    if adv != list(range(adv[0], adv[0] + len(adv))):
      shape, lin, _ = _general_index(x.shape, items, "Array.__getitem__")
      return jnp.reshape(jnp.take(jnp.reshape(x, (-1,)), jnp.ravel(lin), axis=0, mode="clip"),
                         shape)
    dims = [p[1] for p in arrays]
    try:
      bshape = np.broadcast_shapes(*[p[2].shape for p in arrays])
    except ValueError:
      raise PartixError("[Array.__getitem__] integer-array indices of shapes "
                        f"{[p[2].shape for p in arrays]} do not broadcast") from None
    d0, lin = dims[0], None
    for _, d, arr in arrays:  # one linear index over the merged indexed axes
      i = jnp.broadcast_to(jnp.where(arr < 0, arr + y.shape[d], arr), bshape)
      lin = i if lin is None else lin * y.shape[d] + i
    if len(dims) > 1:
      merged = list(y.shape[:d0]) + [int(np.prod(y.shape[d0:dims[-1] + 1]))] + \
          list(y.shape[dims[-1] + 1:])
      y = jnp.reshape(y, merged)
    y = jnp.take(y, lin, axis=d0, mode="clip")  # retrieval clamps, as in JAX
    extra = len(bshape)
  # Drop integer-indexed dims, insert new axes.
  shape = []
  src = 0
  first_array = True
  for p in plan:
    if p[0] == "new":
      shape.append(1)
    elif p[0] == "int":
      src += 1
    elif p[0] == "array":
      if first_array:
        shape.extend(y.shape[src:src + extra])
        src += extra
        first_array = False
    else:
      shape.append(y.shape[src])
      src += 1
  if list(shape) != list(y.shape):
    y = jnp.reshape(y, shape)
  return y


Array.__getitem__ = _getitem


def _dynamic_index(self, idx):
  """x[i] with a traced integer i: a dynamic slice of one row."""
  i = asarray(idx)
  i = jnp.where(i < 0, i + self.shape[0], i)
  row = lax_ops.dynamic_slice_in_dim(self, i, 1, 0)
  return jnp.squeeze(row, 0)


def _getitem_entry(self, idx):
  if type(self) is not Array:  # a deleted array: core() raises
    core(self, api="Array.__getitem__")
  if isinstance(idx, Array) and idx.ndim == 0 and dtypes.is_int(idx.dtype):
    return _dynamic_index(self, idx)
  return _getitem(self, idx)


Array.__getitem__ = _getitem_entry


def _setitem(self, idx, value):
  raise PartixError("[Array.__setitem__] partix arrays are immutable; use x.at[idx].set(value)")


Array.__setitem__ = _setitem


class _OutOfBounds(Exception):
  """A static index out of its axis in an update (the update is skipped, as in JAX)."""


class _IndexUpdateHelper:
  __slots__ = ("x",)

  def __init__(self, x):
    self.x = x

  def __getitem__(self, idx):
    return _IndexUpdateRef(self.x, idx)


class _IndexUpdateRef:
  """x.at[idx]: .get(), .set(v), .add(v), .multiply(v), .min(v), .max(v) (JAX's names)."""
  __slots__ = ("x", "idx")

  def __init__(self, x, idx):
    self.x, self.idx = x, idx

  def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None, fill_value=None,
          out_sharding=None):
    """x[idx]; with mode='fill' (or 'drop') out-of-bound indices give fill_value (NaN for
    floats, the type's minimum for integers, True for bools), as JAX's."""
    mode = getattr(mode, "name", mode)  # a GatherScatterMode-like enum member, or a string
    mode = mode.lower() if isinstance(mode, str) else mode
    if mode in ("fill", "drop", "fill_or_drop"):
      return _get_fill(self.x, self.idx, fill_value)
    if mode not in (None, "clip", "promise_in_bounds"):
      raise PartixError(f"[Array.at[].get] mode {mode!r} is not supported ('fill', 'drop', "
                        "'clip', 'promise_in_bounds')")
    return self.x[self.idx]

  def _region(self):
    """(starts, sizes, view) for an index of ints and unit-step slices, or None: the block
    updated, and view its shape as x[idx] has it (without the int-indexed axes)."""
    x = self.x
    items = _index_tuple(self.idx, x.ndim)
    starts, sizes, view = [], [], []
    dim = 0
    for it in items:
      if it is None:
        return None
      size = x.shape[dim]
      if _is_int(it):
        i = int(it)
        if i < -size or i >= size:
          raise _OutOfBounds()
        starts.append(i % size), sizes.append(1)
      elif isinstance(it, slice) and (it.step in (None, 1)):
        for v in (it.start, it.stop):
          if v is not None and not _is_int(v):
            raise PartixError(f"[Array.at] slice bound {v!r} is not a static int")
        a, b, _ = it.indices(size)
        starts.append(a), sizes.append(max(0, b - a)), view.append(max(0, b - a))
      elif isinstance(it, Array) and it.ndim == 0 and dtypes.is_int(it.dtype):
        starts.append(jnp.where(it < 0, it + size, it)), sizes.append(1)
      else:
        return None
      dim += 1
    return starts, sizes, view

  def _scatter(self, value, combine, api):
    x = self.x
    if type(x) is not Array:  # a deleted array: core() raises
      core(x, api=f"Array.at[].{api}")
    try:
      region = self._region()
    except _OutOfBounds:  # as JAX: an update at an out-of-bounds index is skipped
      return x + jnp.zeros((), x.dtype)
    if region is None:
      items = self.idx if isinstance(self.idx, tuple) else (self.idx,)
      if len(items) == 1 and isinstance(items[0], slice) and x.ndim:
        # A strided slice of the first axis: the rows it names.
        items = (np.arange(x.shape[0], dtype=np.int32)[items[0]],)
      if len(items) == 1 and isinstance(items[0], (Array, np.ndarray, list)) and x.ndim:
        return _scatter_rows(x, items[0], value, combine, api)
      if _leading_index_arrays(items, x.ndim):
        return _scatter_leading(x, items, value, combine, api)
      return _scatter_general(x, self.idx, value, combine, api)
    starts, sizes, view = region
    cur = lax_ops.dynamic_slice(x, starts, sizes)
    v = asarray(value, x.dtype, f"Array.at[].{api}")
    # The values broadcast to x[idx]'s shape (numpy drops their leading 1s); a block of the
    # updated region's own shape (int-indexed axes kept as 1) is taken as well.
    vshape = list(v.shape)
    while len(vshape) > len(view) and vshape[0] == 1:
      vshape.pop(0)
    if _broadcasts(vshape, view):
      v = jnp.reshape(jnp.broadcast_to(jnp.reshape(v, vshape), view), sizes)
    elif _broadcasts(list(v.shape), sizes):
      v = jnp.broadcast_to(v, sizes)
    else:
      raise PartixError(f"[Array.at[].{api}] values of shape {v.shape} do not broadcast to the "
                        f"indexed shape {tuple(view)} of index {self.idx!r}")
    new = combine(cur, v)
    return lax_ops.dynamic_update_slice(x, jnp.astype(new, x.dtype), starts)

  def set(self, values, **kw):
    return self._scatter(values, lambda cur, v: v, "set")

  def add(self, values, **kw):
    return self._scatter(values, lambda cur, v: cur + v, "add")

  def subtract(self, values, **kw):
    return self._scatter(values, lambda cur, v: cur - v, "subtract")

  def multiply(self, values, **kw):
    return self._scatter(values, lambda cur, v: cur * v, "multiply")

  mul = multiply

  def divide(self, values, **kw):
    return self._scatter(values, lambda cur, v: cur / v, "divide")

  def min(self, values, **kw):
    return self._scatter(values, jnp.minimum, "min")

  def max(self, values, **kw):
    return self._scatter(values, jnp.maximum, "max")


def _general_index(shape, items, api):
  """numpy's rule for an index of ints, slices, None and integer arrays: the
  shape of x[idx], the row-major position in x of each of its elements (an index out of
  bounds clamped, as JAX's retrieval does) and whether all its indices were in bounds (JAX's
  scatters drop an update that is not). `items` is _index_tuple's output."""
  dims, dim = [], 0  # the axis of x each item indexes (None: none)
  for it in items:
    dims.append(None if it is None else dim)
    dim += it is not None
  adv = [k for k, it in enumerate(items) if it is not None and not isinstance(it, slice)]
  arrays = {}
  for k in adv:
    a = asarray(items[k])
    if not dtypes.is_int(a.dtype):
      raise PartixError(f"[{api}] index arrays must be integers, got {a.dtype}")
    arrays[k] = a
  try:
    bshape = tuple(np.broadcast_shapes(*[tuple(a.shape) for a in arrays.values()]))
  except ValueError:
    raise PartixError(f"[{api}] integer-array indices of shapes "
                      f"{[tuple(a.shape) for a in arrays.values()]} do not broadcast") from None
  adjacent = not adv or adv == list(range(adv[0], adv[-1] + 1))
  out_shape, axis_of, bpos = [], {}, 0
  if not adjacent:
    out_shape.extend(bshape)
  for k, it in enumerate(items):
    if k in arrays:
      if adjacent and k == adv[0]:
        bpos = len(out_shape)
        out_shape.extend(bshape)
      continue
    axis_of[k] = len(out_shape)
    out_shape.append(1 if it is None else len(range(*it.indices(shape[dims[k]]))))
  rank = len(out_shape)
  strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
  lin, valid = None, None
  for k, it in enumerate(items):
    if it is None:
      continue
    d, n = dims[k], shape[dims[k]]
    if k in arrays:
      a = arrays[k]
      a = jnp.where(a < 0, a + n, a)
      ok = jnp.logical_and(a >= 0, a < n)
      place = (1,) * bpos + bshape + (1,) * (rank - bpos - len(bshape))
      term = jnp.reshape(jnp.broadcast_to(jnp.clip(a, 0, max(n - 1, 0)), bshape), place)
      ok = jnp.reshape(jnp.broadcast_to(ok, bshape), place)
      valid = ok if valid is None else jnp.logical_and(valid, ok)
    else:
      r = axis_of[k]
      vals = np.arange(*it.indices(n), dtype=np.int32)
      term = asarray(vals.reshape((1,) * r + (len(vals),) + (1,) * (rank - r - 1)))
    term = term * strides[d]
    lin = term if lin is None else lin + term
  if lin is None:  # x is a scalar
    lin = asarray(np.zeros((), np.int32))
  if valid is None:
    valid = asarray(np.ones((), np.bool_))
  return tuple(out_shape), jnp.broadcast_to(lin, out_shape), jnp.broadcast_to(valid, out_shape)


def _scatter_general(x, idx, value, combine, api):
  """x.at[idx].<api>(value) for any index of ints, slices, None and integer arrays: the
  elements of x, viewed flat, at the positions numpy's indexing names (_general_index)."""
  items = _index_tuple(_concrete_masks(idx), x.ndim)
  shape, lin, valid = _general_index(x.shape, items, f"Array.at[].{api}")
  total = int(np.prod(x.shape, dtype=np.int64))
  v = asarray(value, x.dtype, f"Array.at[].{api}")
  if not _broadcasts(list(v.shape), list(shape)):
    raise PartixError(f"[Array.at[].{api}] values of shape {tuple(v.shape)} do not broadcast "
                      f"to the indexed shape {shape} of index {idx!r}")
  flat = jnp.where(valid, lin, total)  # past the end: the update is dropped
  out = _scatter_rows(jnp.reshape(x, (total,)), flat, jnp.broadcast_to(v, shape), combine, api)
  return jnp.reshape(out, x.shape)


def _leading_index_arrays(items, ndim):
  """Whether the index is integer arrays on the first k >= 2 axes, then whole axes (':')."""
  k = 0
  while k < len(items) and isinstance(items[k], (Array, np.ndarray, list)):
    k += 1
  rest = items[k:]
  return 2 <= k <= ndim and all(isinstance(r, slice) and r == slice(None) for r in rest)


def _scatter_leading(x, items, value, combine, api):
  """x.at[i0, i1, ..., :].<api>(value) for integer arrays on the first k axes (broadcast
  together, as numpy's): the rows of x viewed as [prod(shape[:k]), ...] at the flat indices."""
  k = 0
  while k < len(items) and not isinstance(items[k], slice):
    k += 1
  idx = [asarray(i) for i in items[:k]]
  for i in idx:
    if not dtypes.is_int(i.dtype):
      raise PartixError(f"[Array.at[].{api}] index arrays must be integers, got {i.dtype}")
  shape = np.broadcast_shapes(*[tuple(i.shape) for i in idx])
  flat, valid = None, None
  for d, i in enumerate(idx):
    n = x.shape[d]
    i = jnp.broadcast_to(jnp.where(i < 0, i + n, i), shape)
    ok = (i >= 0) & (i < n)
    valid = ok if valid is None else valid & ok
    flat = i if flat is None else flat * n + i
  lead = int(np.prod(x.shape[:k], dtype=np.int64))
  # As JAX's scatters: an index out of range on any axis drops its update (a row past the end).
  flat = jnp.where(valid, flat, lead)
  rows = jnp.reshape(x, (lead,) + tuple(x.shape[k:]))
  return jnp.reshape(_scatter_rows(rows, flat, value, combine, api), x.shape)


def _scatter_rows(x, idx, value, combine, api):
  """x.at[idx].<api>(value) for an integer array idx of rows of x."""
  n = x.shape[0]
  idx = asarray(idx)
  if not dtypes.is_int(idx.dtype):
    raise PartixError(f"[Array.at[].{api}] index arrays must be integers, got {idx.dtype}")
  try:
    upd = jnp.broadcast_to(asarray(value, x.dtype), idx.shape + x.shape[1:])
  except PartixError:
    raise PartixError(f"[Array.at[].{api}] values of shape {np.shape(value)} do not broadcast "
                      f"to the indexed shape {idx.shape + x.shape[1:]}") from None
  flat = jnp.ravel(jnp.where(idx < 0, idx + n, idx))
  k = flat.shape[0]
  if k == 0:
    return x
  upd = jnp.reshape(upd, (k,) + x.shape[1:])
  if api in ("add", "subtract"):
    # Out-of-range rows are dropped, as JAX's scatters do (scatter_add would clamp them).
    inside = jnp.reshape(jnp.logical_and(flat >= 0, flat < n), (k,) + (1,) * (x.ndim - 1))
    upd = jnp.where(inside, upd, jnp.zeros_like(upd))
    flat = jnp.clip(flat, 0, n - 1)
  if api == "add":
    return Array(_core.scatter_add(x._a, flat._a, upd._a, 0))
  if api == "subtract":
    return Array(_core.scatter_add(x._a, flat._a, (-upd)._a, 0))
  if api != "set":
    # Applying every update of a repeated row in turn is not expressible with these ops;
    # unique concrete indices reduce to a gather, the combine and a set.
    if idx._a.is_tracer():
      raise PartixError(f"[Array.at[].{api}] with a traced index array is not supported (only "
                        "set and add)")
    host = np.asarray(flat)
    if len(np.unique(host)) != host.size:
      raise PartixError(f"[Array.at[].{api}] repeated indices are not supported (only for set "
                        "and add)")
    upd = jnp.astype(combine(jnp.take(x, flat, axis=0, mode="clip"), upd), x.dtype)
  # set: for each row, the last update naming it (one_hot marks, max picks the last).
  order = jnp.reshape(Array(_core.iota([k], 0, "i32")) + 1, (k, 1))
  marks = Array(_core.one_hot(flat._a, n, "i32")) * order
  winner = jnp.max(marks, axis=0) - 1
  rows = jnp.take(upd, jnp.maximum(winner, 0), axis=0, mode="clip")
  has = jnp.reshape(winner >= 0, (n,) + (1,) * (x.ndim - 1))
  return jnp.where(has, rows, x)


def _broadcasts(shape, target):
  """Whether an array of shape broadcasts to target (numpy's broadcast_to rule)."""
  return len(shape) <= len(target) and all(
      d in (1, t) for d, t in zip(shape[::-1], list(target)[::-1]))


def _get_fill(x, idx, fill_value):
  """x.at[idx].get(mode='fill'): x[idx] with out-of-bound integer indices (negative ones
  count from the end first) giving fill_value."""
  if type(x) is not Array:
    x = asarray(x, api="Array.at[].get")
  if fill_value is None:
    fill_value = np.nan if dtypes.is_float(x.dtype) else True if x.dtype == np.bool_ else \
        int(dtypes.iinfo(x.dtype).min)
  fill = asarray(fill_value, x.dtype, "Array.at[].get")
  items = _index_tuple(idx, x.ndim)
  # An indexed axis of size 0 has no element in bounds: index a fill block of size 1 there.
  dim, empty = 0, []
  for it in items:
    if it is None:
      continue
    if not isinstance(it, slice) and x.shape[dim] == 0:
      empty.append(dim)
    dim += 1
  if empty:
    x = jnp.broadcast_to(fill, [1 if d in empty else n for d, n in enumerate(x.shape)])
  new_items, masks, all_out = [], [], bool(empty)
  dim, lead, seen_array = 0, 0, False  # lead: x[idx]'s axes before the gathered ones
  for it in items:
    if it is None or isinstance(it, slice):
      new_items.append(it)
      lead += not seen_array
      dim += it is not None
      continue
    size = x.shape[dim]
    if _is_int(it):
      i = int(it) + (size if int(it) < 0 else 0)
      all_out |= not 0 <= i < size
      new_items.append(min(max(i, 0), size - 1))
    elif isinstance(it, (Array, np.ndarray, list, np.generic)):
      arr = asarray(it, api="Array.at[].get")
      if not dtypes.is_int(arr.dtype):
        raise PartixError(f"[Array.at[].get] index arrays must be integers, got {arr.dtype}")
      arr = jnp.where(arr < 0, arr + size, arr)
      masks.append(jnp.logical_and(arr >= 0, arr < size))
      new_items.append(jnp.clip(arr, 0, size - 1))
      seen_array = True
    else:
      new_items.append(it)  # x[...] names what is wrong with it
    dim += 1
  out = x[tuple(new_items)]
  if all_out:
    return jnp.broadcast_to(fill, out.shape)
  if masks:
    ok = masks[0]
    for m in masks[1:]:
      ok = jnp.logical_and(ok, m)
    ok = jnp.reshape(ok, (1,) * lead + ok.shape + (1,) * (out.ndim - lead - ok.ndim))
    out = jnp.where(ok, out, fill)
  return out


Array.at = property(lambda self: _IndexUpdateHelper(self))
