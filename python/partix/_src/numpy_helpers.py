"""numpy's building and functional helpers for partix.numpy, composed from numpy_ops' ops:
block, fromfunction, apply_along_axis / apply_over_axes (vmap), piecewise, gradient, unwrap,
the index tricks mgrid / ogrid / r_ / c_, poly / polyint, kaiser, frexp, dtype queries and
numpy's printing options and scalar type names."""
import builtins

import numpy as np

from partix._src import dtypes as _dtypes
from partix._src import numpy_more as _more
from partix._src import numpy_ops as jnp
from partix._src.batching import vmap
from partix._src.core import Array, PartixError

__all__ = ["block", "fromfunction", "apply_along_axis", "apply_over_axes", "piecewise",
           "gradient", "unwrap", "mgrid", "ogrid", "r_", "c_", "poly", "polyint", "kaiser",
           "frexp", "can_cast", "isdtype", "iterable", "get_printoptions", "set_printoptions",
           "printoptions", "array_repr", "array_str", "double", "single", "float_", "int_",
           "generic", "character", "flexible", "object_", "uint", "uint16", "uint64",
           "cdouble", "csingle", "complex128", "complex_", "ComplexWarning"]

double, single, float_, int_ = np.float64, np.float32, np.float64, np.int64
generic, character, flexible, object_ = np.generic, np.character, np.flexible, np.object_
uint, uint16, uint64 = np.uint64, np.uint16, np.uint64
cdouble, csingle, complex128, complex_ = np.complex128, np.complex64, np.complex128, np.complex128
ComplexWarning = getattr(np, "ComplexWarning", None) or np.exceptions.ComplexWarning
get_printoptions, set_printoptions, printoptions = (np.get_printoptions, np.set_printoptions,
                                                    np.printoptions)
iterable = np.iterable


def block(arrays):
  """numpy.block: nested lists joined, the innermost along the last axis."""
  def depth(a):
    return 1 + depth(a[0]) if isinstance(a, list) and a else 0
  d = depth(arrays)

  def join(a, level):
    if not isinstance(a, list):
      x = jnp.asarray(a, api="block")
      return jnp.reshape(x, (1,) * builtins.max(0, d - x.ndim) + tuple(x.shape))
    parts = [join(p, level + 1) for p in a]
    nd = builtins.max(p.ndim for p in parts)
    parts = [jnp.reshape(p, (1,) * (nd - p.ndim) + tuple(p.shape)) for p in parts]
    return jnp.concatenate(parts, axis=level - d)
  return join(arrays, 0)


def fromfunction(function, shape, *, dtype=float, **kwargs):
  _callable(function, "fromfunction")
  grids = _more.indices(tuple(shape), dtype=dtype)
  return function(*[grids[i] for i in range(len(shape))], **kwargs)


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
  """func1d applied to every 1-D slice along axis (vmapped over the other axes)."""
  _callable(func1d, "apply_along_axis")
  x = jnp.asarray(arr, api="apply_along_axis")
  axis %= x.ndim
  f = lambda v: func1d(v, *args, **kwargs)  # noqa: E731
  moved = jnp.moveaxis(x, axis, -1)
  for _ in range(x.ndim - 1):
    f = vmap(f)
  out = jnp.asarray(f(moved))
  # The function's own result axes take the place of the axis it consumed.
  lead = x.ndim - 1
  for k in range(out.ndim - lead):
    out = jnp.moveaxis(out, lead + k, axis + k)
  return out


def apply_over_axes(func, a, axes):
  _callable(func, "apply_over_axes")
  x = jnp.asarray(a, api="apply_over_axes")
  for ax in ([axes] if isinstance(axes, int) else axes):
    y = func(x, ax)
    if y.ndim == x.ndim - 1:
      y = jnp.expand_dims(y, ax)
    elif y.ndim != x.ndim:
      raise PartixError("[apply_over_axes] func must keep the number of dimensions or drop one")
    x = y
  return x


def piecewise(x, condlist, funclist, *args, **kw):
  """numpy.piecewise: funclist[i] where condlist[i] holds (the last, extra function or value
  where none does)."""
  x = jnp.asarray(x, api="piecewise")
  conds = [jnp.asarray(c) for c in (condlist if isinstance(condlist, (list, tuple)) else
                                     [condlist])]
  if len(funclist) not in (len(conds), len(conds) + 1):
    raise PartixError(f"[piecewise] {len(funclist)} functions for {len(conds)} conditions "
                      "(give one per condition, and optionally one more for the rest)")
  if len(funclist) == len(conds) + 1:
    conds.append(jnp.logical_not(jnp.any(jnp.stack([jnp.broadcast_to(c, x.shape)
                                                      for c in conds]), axis=0)))
  out = jnp.zeros_like(x)
  for c, f in zip(conds, funclist):
    v = f(x, *args, **kw) if callable(f) else jnp.full_like(x, f)
    out = jnp.where(c, v, out)
  return out


def gradient(f, *varargs, axis=None, edge_order=1):
  """numpy.gradient with unit or scalar spacing: central differences inside, one-sided ones
  at the edges."""
  y = jnp.asarray(f, api="gradient")
  if not _dtypes.is_float(y.dtype):
    y = y.astype(np.float32)
  axes = list(range(y.ndim)) if axis is None else ([axis] if isinstance(axis, int) else
                                                    list(axis))
  if edge_order != 1:
    raise PartixError("[gradient] edge_order=1 only")
  sp = list(varargs) if varargs else [1.0] * len(axes)
  if len(sp) == 1 and len(axes) > 1:
    sp = sp * len(axes)
  if len(sp) != len(axes) or not all(np.ndim(s) == 0 for s in sp):
    raise PartixError("[gradient] spacing must be one scalar per axis")
  outs = []
  for ax, h in zip(axes, sp):
    n = y.shape[ax]
    if n < 2:
      raise PartixError(f"[gradient] axis {ax} needs at least 2 elements")
    take = lambda a, b: jnp.take(y, jnp.arange(a, b), axis=ax)  # noqa: E731
    inner = (take(2, n) - take(0, n - 2)) / (2.0 * h)
    first = (take(1, 2) - take(0, 1)) / h
    last = (take(n - 1, n) - take(n - 2, n - 1)) / h
    outs.append(jnp.concatenate([first, inner, last], axis=ax))
  return outs[0] if len(outs) == 1 else outs


def unwrap(p, discont=None, axis=-1, period=2 * np.pi):
  x = jnp.asarray(p, api="unwrap")
  if not _dtypes.is_float(x.dtype):
    x = x.astype(np.float32)
  d = jnp.diff(x, axis=axis)
  half = period / 2
  discont = half if discont is None else builtins.max(discont, half)
  dm = jnp.mod(d + half, period) - half
  dm = jnp.where((dm == -half) & (d > 0), half, dm)
  corr = jnp.where(jnp.abs(d) < discont, 0.0, dm - d)
  first = jnp.take(x, jnp.arange(1), axis=axis)
  return jnp.concatenate([first, jnp.take(x, jnp.arange(1, x.shape[axis]), axis=axis) +
                          jnp.cumsum(corr, axis=axis)], axis=axis)


class _Grid:
  """numpy's mgrid / ogrid, evaluated with numpy (the result depends only on the slices)."""

  def __init__(self, src):
    self._src = src

  def __getitem__(self, key):
    r = self._src[key]
    if isinstance(r, (list, tuple)):
      return [jnp.asarray(_narrow(v)) for v in r]
    return jnp.asarray(_narrow(r))


class _Concat:
  """numpy's r_ / c_: slices and arrays joined; arrays may be partix arrays."""

  def __init__(self, src, api):
    self._src, self._api = src, api

  def __getitem__(self, key):
    items = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, Array) and k._a.is_tracer() for k in items):
      raise PartixError(f"[{self._api}] takes concrete values (call it outside jit)")
    host = tuple(np.asarray(k) if isinstance(k, Array) else k for k in items)
    return jnp.asarray(_narrow(self._src[host if isinstance(key, tuple) else host[0]]))


def _narrow(v):
  v = np.asarray(v)
  return v.astype(_dtypes.canonicalize(v.dtype, "index trick")) if v.dtype.kind in "iuf" else v


mgrid, ogrid = _Grid(np.mgrid), _Grid(np.ogrid)
r_, c_ = _Concat(np.r_, "r_"), _Concat(np.c_, "c_")


def poly(seq_of_zeros):
  """The coefficients of the polynomial with these roots (a 1-D array of roots)."""
  z = jnp.ravel(jnp.asarray(seq_of_zeros, api="poly"))
  c = jnp.ones((1,), z.dtype if _dtypes.is_float(z.dtype) else np.float32)
  for i in range(z.shape[0]):
    c = jnp.concatenate([c, jnp.zeros((1,), c.dtype)]) - jnp.concatenate(
        [jnp.zeros((1,), c.dtype), c * z[i]])
  return c


def polyint(p, m=1, k=None):
  c = jnp.asarray(p, api="polyint")
  if not _dtypes.is_float(c.dtype):
    c = c.astype(np.float32)
  ks = [0.0] * m if k is None else (list(np.atleast_1d(k)) * (m if np.ndim(k) == 0 else 1))
  for i in range(m):
    n = c.shape[0]
    c = jnp.concatenate([c / jnp.arange(n, 0, -1).astype(c.dtype),
                         jnp.full((1,), ks[i], c.dtype)])
  return c


def kaiser(M, beta):
  """numpy.kaiser: the window from the modified Bessel function I0 (its series, to float32)."""
  if isinstance(M, bool) or not isinstance(M, (int, np.integer)):
    raise PartixError(f"[kaiser] M must be an int, got {M!r}")
  if M < 1:
    return jnp.zeros((0,), np.float32)
  if M == 1:
    return jnp.ones((1,), np.float32)
  n = jnp.arange(M, dtype=np.float32)
  alpha = (M - 1) / 2.0
  arg = beta * jnp.sqrt(1 - ((n - alpha) / alpha) ** 2)
  return _i0(arg) / float(np.i0(beta))


def _i0(x):
  x = jnp.asarray(x, np.float32)
  term, total = jnp.ones_like(x), jnp.ones_like(x)
  for k in range(1, 40):
    term = term * (x / (2.0 * k)) ** 2
    total = total + term
  return total


def frexp(x):
  """Mantissa in [0.5, 1) and integer exponent with x = m * 2**e (0 gives (0, 0))."""
  v = jnp.asarray(x, api="frexp")
  if not _dtypes.is_float(v.dtype):
    v = v.astype(np.float32)
  a = jnp.abs(v)
  e = jnp.where(a > 0, jnp.floor(jnp.log2(jnp.where(a > 0, a, 1.0))) + 1, 0.0)
  m = v / jnp.exp2(e)
  # log2's rounding can leave the mantissa just outside [0.5, 1): one step fixes it.
  fix = jnp.abs(m) >= 1.0
  m, e = jnp.where(fix, m / 2, m), jnp.where(fix, e + 1, e)
  fix = (jnp.abs(m) < 0.5) & (a > 0)
  m, e = jnp.where(fix, m * 2, m), jnp.where(fix, e - 1, e)
  return m, e.astype(np.int32)


def can_cast(from_, to, casting="safe"):
  return np.can_cast(from_.dtype if isinstance(from_, Array) else from_, to, casting)


def isdtype(dtype, kind):
  return np.isdtype(np.dtype(dtype), kind)


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None):
  return repr(jnp.asarray(arr))


def array_str(a, max_line_width=None, precision=None, suppress_small=None):
  return np.array_str(np.asarray(jnp.asarray(a, api="array_str")), max_line_width, precision,
                      suppress_small)


def _callable(f, api):
  if not callable(f):
    raise PartixError(f"[{api}] {f!r} is not callable")
