"""More of numpy's names for partix.numpy, each composed from the ops numpy_ops provides (no
rule of its own): joining and splitting, index helpers, nan-reductions, quantiles, windows and
polynomials, small linear algebra. Index helpers whose result depends only on shapes are
computed on the host (they are constants)."""
import builtins
import math

import numpy as np

from partix._src import dtypes as _dtypes
from partix._src import numpy_ops as jnp
from partix._src.core import Array, PartixError

__all__ = ["append", "rot90", "rollaxis", "ravel_multi_index", "unravel_index", "tril_indices",
           "triu_indices", "tril_indices_from", "triu_indices_from", "diag_indices",
           "diag_indices_from", "indices", "ix_", "s_", "index_exp", "select", "cross", "kron",
           "sinc", "ldexp", "fabs", "divmod", "modf", "logaddexp2", "isin", "searchsorted",
           "digitize", "nanprod", "nanvar", "nanstd", "nancumsum", "nanargmax",
           "nanargmin", "quantile", "percentile", "nanquantile", "nanpercentile", "nanmedian",
           "array_equiv", "iscomplex", "isreal", "hsplit", "vsplit", "dsplit", "resize",
           "trapezoid", "cov", "corrcoef", "convolve", "correlate", "polyval", "polyadd",
           "polysub", "polymul", "polyder", "vander", "geomspace", "hamming", "hanning",
           "blackman", "bartlett", "interp", "arctan", "arctan2", "arcsin", "arccos", "arcsinh",
           "arccosh", "arctanh", "atan", "atan2", "asin", "acos", "asinh", "acosh", "atanh",
           "gcd", "lcm", "matvec", "vecmat"]

s_ = np.s_
index_exp = np.index_exp


def append(arr, values, axis=None):
  if axis is None:
    return jnp.concatenate([jnp.ravel(jnp.asarray(arr)), jnp.ravel(jnp.asarray(values))])
  return jnp.concatenate([jnp.asarray(arr), jnp.asarray(values)], axis=axis)


def rot90(m, k=1, axes=(0, 1)):
  m = jnp.asarray(m)
  k %= 4
  a0, a1 = axes
  if k == 0:
    return m
  if k == 2:
    return jnp.flip(jnp.flip(m, a0), a1)
  perm = list(range(m.ndim))
  perm[a0], perm[a1] = perm[a1], perm[a0]
  if k == 1:
    return jnp.transpose(jnp.flip(m, a1), perm)
  return jnp.flip(jnp.transpose(m, perm), a1)


def rollaxis(a, axis, start=0):
  a = jnp.asarray(a)
  n = a.ndim
  axis, start = axis % n, start % (n + 1)
  if axis < start:
    start -= 1
  return jnp.moveaxis(a, axis, start)


def _static_int(v, api, what):
  """v as a Python int (a shape or count), or a PartixError naming api."""
  if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
    raise PartixError(f"[{api}] {what} must be an int, got {v!r:.40}")
  return int(v)


def _sequence(v, api, what):
  if not isinstance(v, (list, tuple)):
    raise PartixError(f"[{api}] {what} must be a list or tuple, got {type(v).__name__}")
  return v


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
  """The flat index of each tuple of indices into an array of shape dims (C order; JAX's
  default mode clips)."""
  _sequence(multi_index, "ravel_multi_index", "multi_index")
  dims = [_static_int(d, "ravel_multi_index", "each of dims") for d in _sequence(
      dims, "ravel_multi_index", "dims")]
  if order != "C":
    raise PartixError("[ravel_multi_index] only order='C' is supported")
  flat = None
  for i, n in zip(multi_index, dims):
    i = jnp.clip(jnp.asarray(i), 0, n - 1)
    flat = i if flat is None else flat * n + i
  return flat


def unravel_index(indices, shape):
  idx = jnp.asarray(indices)
  out = []
  for n in reversed(shape):
    out.append(jnp.remainder(idx, n))
    idx = jnp.floor_divide(idx, n)
  return tuple(reversed(out))


def _host_indices(arrays):
  return tuple(jnp.asarray(np.asarray(a, np.int32)) for a in arrays)


def tril_indices(n, k=0, m=None):
  n = _static_int(n, "tril_indices", "n")
  return _host_indices(np.tril_indices(n, k, m))


def triu_indices(n, k=0, m=None):
  n = _static_int(n, "triu_indices", "n")
  return _host_indices(np.triu_indices(n, k, m))


def tril_indices_from(arr, k=0):
  arr = jnp.asarray(arr, api="tril_indices_from")
  return tril_indices(arr.shape[-2], k, arr.shape[-1])


def triu_indices_from(arr, k=0):
  arr = jnp.asarray(arr, api="triu_indices_from")
  return triu_indices(arr.shape[-2], k, arr.shape[-1])


def diag_indices(n, ndim=2):
  return _host_indices(np.diag_indices(_static_int(n, "diag_indices", "n"), ndim))


def diag_indices_from(arr):
  arr = jnp.asarray(arr, api="diag_indices_from")
  return diag_indices(arr.shape[0], arr.ndim)


def indices(dimensions, dtype=np.int32, sparse=False):
  dimensions = [_static_int(d, "indices", "each dimension") for d in _sequence(
      dimensions, "indices", "dimensions")]
  got = np.indices(dimensions, dtype=np.int32, sparse=sparse)
  if sparse:
    return tuple(jnp.asarray(g).astype(dtype) for g in got)
  return jnp.asarray(got).astype(dtype)


def ix_(*args):
  n = len(args)
  return tuple(jnp.reshape(jnp.asarray(a), (1,) * i + (-1,) + (1,) * (n - i - 1))
               for i, a in enumerate(args))


def select(condlist, choicelist, default=0):
  """The choice of the first condition that holds, element by element."""
  _sequence(condlist, "select", "condlist"), _sequence(choicelist, "select", "choicelist")
  if len(condlist) != len(choicelist):
    raise PartixError(f"[select] {len(condlist)} conditions for {len(choicelist)} choices")
  out = jnp.asarray(default)
  for c, v in reversed(list(zip(condlist, choicelist))):
    out = jnp.where(c, v, out)
  return out


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
  if axis is not None:
    axisa = axisb = axisc = axis
  a, b = jnp.moveaxis(jnp.asarray(a), axisa, -1), jnp.moveaxis(jnp.asarray(b), axisb, -1)
  if a.shape[-1] != 3 or b.shape[-1] != 3:
    raise PartixError(f"[cross] needs vectors of 3 components, got {a.shape[-1]} and "
                      f"{b.shape[-1]}")
  a0, a1, a2 = (a[..., i] for i in range(3))
  b0, b1, b2 = (b[..., i] for i in range(3))
  c = jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
  return jnp.moveaxis(c, -1, axisc)


def kron(a, b):
  a, b = jnp.asarray(a), jnp.asarray(b)
  nd = builtins.max(a.ndim, b.ndim)
  a = jnp.reshape(a, (1,) * (nd - a.ndim) + tuple(a.shape))
  b = jnp.reshape(b, (1,) * (nd - b.ndim) + tuple(b.shape))
  inter_a = tuple(x for d in a.shape for x in (d, 1))
  inter_b = tuple(x for d in b.shape for x in (1, d))
  out = jnp.reshape(a, inter_a) * jnp.reshape(b, inter_b)
  return jnp.reshape(out, tuple(x * y for x, y in zip(a.shape, b.shape)))


def sinc(x):
  x = jnp.asarray(x)
  x = x if _dtypes.issubdtype(x.dtype, np.floating) else x.astype(np.float32)
  px = np.pi * jnp.where(x == 0, 1.0, x)
  return jnp.where(x == 0, 1.0, jnp.sin(px) / px)


def ldexp(x1, x2):
  return jnp.asarray(x1) * jnp.power(2.0, jnp.asarray(x2))


def fabs(x):
  x = jnp.asarray(x)
  return jnp.abs(x if _dtypes.issubdtype(x.dtype, np.floating) else x.astype(np.float32))


def divmod(x1, x2):  # noqa: A001 (numpy's name)
  return jnp.floor_divide(x1, x2), jnp.remainder(x1, x2)


def modf(x):
  x = jnp.asarray(x)
  whole = jnp.trunc(x)
  return x - whole, whole


def logaddexp2(x1, x2):
  ln2 = math.log(2.0)
  return jnp.logaddexp(jnp.asarray(x1) * ln2, jnp.asarray(x2) * ln2) / ln2


def isin(element, test_elements, invert=False):
  e = jnp.asarray(element)
  t = jnp.ravel(jnp.asarray(test_elements))
  hit = jnp.any(jnp.expand_dims(e, -1) == t, axis=-1)
  return jnp.logical_not(hit) if invert else hit


def searchsorted(a, v, side="left", sorter=None, method=None):
  """Where each v goes in the sorted 1-D a: the count of a's elements below v ('left') or at
  most v ('right')."""
  a = jnp.asarray(a)
  if sorter is not None:
    a = jnp.take(a, jnp.asarray(sorter))
  if a.ndim != 1:
    raise PartixError(f"[searchsorted] a must be 1-D, got shape {tuple(a.shape)}")
  if side not in ("left", "right"):
    raise PartixError(f"[searchsorted] side must be 'left' or 'right', got {side!r}")
  v = jnp.asarray(v)
  cmp = jnp.less if side == "left" else jnp.less_equal
  return jnp.sum(cmp(a, jnp.expand_dims(v, -1)).astype(np.int32), axis=-1)


def digitize(x, bins, right=False):
  bins = jnp.asarray(bins)
  side = "left" if right else "right"
  if bins.shape[0] > 1:
    increasing = bool(np.asarray(bins[-1] >= bins[0]))
    if not increasing:  # bins[i-1] > x >= bins[i] (right: bins[i-1] >= x > bins[i])
      return bins.shape[0] - searchsorted(jnp.flip(bins, 0), x, side="left" if right else "right")
  return searchsorted(bins, x, side=side)


def _nan_to(a, value):
  a = jnp.asarray(a)
  return jnp.where(jnp.isnan(a), value, a) if _dtypes.issubdtype(a.dtype, np.floating) else a


def nanprod(a, axis=None, keepdims=False):
  return jnp.prod(_nan_to(a, 1), axis=axis, keepdims=keepdims)


def nanvar(a, axis=None, ddof=0, keepdims=False):
  a = jnp.asarray(a)
  ok = jnp.logical_not(jnp.isnan(a))
  n = jnp.sum(ok.astype(a.dtype), axis=axis, keepdims=True)
  mean = jnp.sum(_nan_to(a, 0), axis=axis, keepdims=True) / n
  sq = jnp.where(ok, (a - mean) ** 2, 0)
  out = jnp.sum(sq, axis=axis, keepdims=True) / (n - ddof)
  return out if keepdims else jnp.squeeze(out, axis=axis)


def nanstd(a, axis=None, ddof=0, keepdims=False):
  return jnp.sqrt(nanvar(a, axis=axis, ddof=ddof, keepdims=keepdims))


def nancumsum(a, axis=None):
  return jnp.cumsum(_nan_to(a, 0), axis=axis)


def nanargmax(a, axis=None, keepdims=False):
  return jnp.argmax(_nan_to(a, -np.inf), axis=axis, keepdims=keepdims)


def nanargmin(a, axis=None, keepdims=False):
  return jnp.argmin(_nan_to(a, np.inf), axis=axis, keepdims=keepdims)


def quantile(a, q, axis=None, method="linear", keepdims=False):
  """numpy.quantile with linear interpolation between the sorted values."""
  if method != "linear":
    raise PartixError(f"[quantile] method {method!r} is not supported (linear)")
  a = jnp.asarray(a)
  if not _dtypes.issubdtype(a.dtype, np.floating):
    a = a.astype(np.float32)
  if axis is None:
    a, axis = jnp.ravel(a), 0
  axis %= a.ndim
  s = jnp.sort(a, axis=axis)
  n = s.shape[axis]
  qs = np.atleast_1d(np.asarray(q, np.float64))
  pos = qs * (n - 1)
  lo, hi = np.floor(pos).astype(np.int32), np.ceil(pos).astype(np.int32)
  w = (pos - lo).astype(np.float32)
  vlo, vhi = jnp.take(s, lo, axis=axis), jnp.take(s, hi, axis=axis)
  shape = [1] * s.ndim
  shape[axis] = len(qs)
  out = vlo + (vhi - vlo) * jnp.reshape(jnp.asarray(w), shape)
  out = jnp.moveaxis(out, axis, 0)
  if keepdims:
    out = jnp.expand_dims(out, axis + 1)
  return out[0] if np.ndim(q) == 0 else out


def percentile(a, q, axis=None, method="linear", keepdims=False):
  return quantile(a, np.asarray(q) / 100.0, axis=axis, method=method, keepdims=keepdims)


def nanquantile(a, q, axis=None, method="linear", keepdims=False):
  a = jnp.asarray(a)
  if bool(np.asarray(jnp.any(jnp.isnan(a)))):
    raise PartixError("[nanquantile] arrays holding NaN are not supported yet (the number of "
                      "values taken would depend on the data)")
  return quantile(a, q, axis=axis, method=method, keepdims=keepdims)


def nanpercentile(a, q, axis=None, method="linear", keepdims=False):
  return nanquantile(a, np.asarray(q) / 100.0, axis=axis, method=method, keepdims=keepdims)


def nanmedian(a, axis=None, keepdims=False):
  return nanquantile(a, 0.5, axis=axis, keepdims=keepdims)


def array_equiv(a1, a2):
  """Whether a1 and a2 broadcast together and are equal everywhere."""
  a1, a2 = jnp.asarray(a1, api="array_equiv"), jnp.asarray(a2, api="array_equiv")
  try:
    np.broadcast_shapes(tuple(a1.shape), tuple(a2.shape))
  except ValueError:
    return False
  return bool(np.asarray(jnp.all(a1 == a2)))


def iscomplex(x):
  return jnp.zeros(jnp.asarray(x, api="iscomplex").shape, bool)


def isreal(x):
  return jnp.ones(jnp.asarray(x, api="isreal").shape, bool)


def hsplit(ary, indices_or_sections):
  return jnp.split(ary, indices_or_sections, axis=1 if jnp.asarray(ary).ndim > 1 else 0)


def vsplit(ary, indices_or_sections):
  return jnp.split(ary, indices_or_sections, axis=0)


def dsplit(ary, indices_or_sections):
  return jnp.split(ary, indices_or_sections, axis=2)


def resize(a, new_shape):
  a = jnp.ravel(jnp.asarray(a))
  new_shape = (new_shape,) if isinstance(new_shape, int) else tuple(new_shape)
  total = math.prod(new_shape)
  reps = -(-total // builtins.max(a.shape[0], 1))
  return jnp.reshape(jnp.tile(a, reps)[:total], new_shape)


def trapezoid(y, x=None, dx=1.0, axis=-1):
  y = jnp.moveaxis(jnp.asarray(y), axis, -1)
  if x is None:
    d = dx
  else:
    x = jnp.asarray(x)
    d = jnp.diff(x) if x.ndim == 1 else jnp.diff(jnp.moveaxis(x, axis, -1), axis=-1)
  return jnp.sum(d * (y[..., 1:] + y[..., :-1]) / 2.0, axis=-1)


def cov(m, y=None, rowvar=True, bias=False, ddof=None):
  x = jnp.asarray(m)
  x = x if _dtypes.issubdtype(x.dtype, np.floating) else x.astype(np.float32)
  if x.ndim == 1:
    x = jnp.reshape(x, (1, -1))
  if not rowvar:
    x = x.T
  if y is not None:
    yy = jnp.asarray(y).astype(x.dtype)
    yy = jnp.reshape(yy, (1, -1)) if yy.ndim == 1 else (yy if rowvar else yy.T)
    x = jnp.concatenate([x, yy], axis=0)
  n = x.shape[1]
  ddof = (0 if bias else 1) if ddof is None else ddof
  xc = x - jnp.mean(x, axis=1, keepdims=True)
  c = (xc @ xc.T) / (n - ddof)
  return jnp.squeeze(c) if c.shape == (1, 1) else c


def corrcoef(x, y=None, rowvar=True):
  c = cov(x, y, rowvar)
  if c.ndim == 0:
    return c / c
  d = jnp.sqrt(jnp.diagonal(c))
  return c / d[:, None] / d[None, :]


def _valid_conv(a, v):
  """The 'valid' correlation sum_j a[i + j] * v[j] for i in [0, len(a) - len(v)]."""
  n, m = a.shape[0], v.shape[0]
  cols = [a[j:j + n - m + 1] * v[j] for j in range(m)]
  return jnp.sum(jnp.stack(cols), axis=0)


def correlate(a, v, mode="valid"):
  a, v = jnp.asarray(a), jnp.asarray(v)
  if a.ndim != 1 or v.ndim != 1:
    raise PartixError("[correlate] takes 1-D arrays")
  if a.shape[0] < v.shape[0]:
    return jnp.flip(correlate(v, a, mode), 0)
  m = v.shape[0]
  pad = {"valid": (0, 0), "same": (m // 2, m - 1 - m // 2), "full": (m - 1, m - 1)}
  if mode not in pad:
    raise PartixError(f"[correlate] mode {mode!r} is not one of 'valid', 'same', 'full'")
  return _valid_conv(jnp.pad(a, pad[mode]), v)


def convolve(a, v, mode="full"):
  a, v = jnp.asarray(a), jnp.asarray(v)
  if a.shape[0] < v.shape[0]:
    a, v = v, a
  return correlate(a, jnp.flip(v, 0), mode)


def polyval(p, x):
  p, x = jnp.asarray(p), jnp.asarray(x)
  out = jnp.zeros_like(x * p[0])
  for i in range(p.shape[0]):
    out = out * x + p[i]
  return out


def _trim_lead(p, q):
  p, q = jnp.asarray(p), jnp.asarray(q)
  n = builtins.max(p.shape[0], q.shape[0])
  return jnp.pad(p, (n - p.shape[0], 0)), jnp.pad(q, (n - q.shape[0], 0))


def polyadd(a1, a2):
  a, b = _trim_lead(a1, a2)
  return a + b


def polysub(a1, a2):
  a, b = _trim_lead(a1, a2)
  return a - b


def polymul(a1, a2):
  return convolve(jnp.asarray(a1), jnp.asarray(a2), "full")


def polyder(p, m=1):
  p = jnp.asarray(p)
  for _ in range(m):
    n = p.shape[0] - 1
    p = p[:-1] * jnp.arange(n, 0, -1).astype(p.dtype)
  return p


def vander(x, N=None, increasing=False):
  x = jnp.asarray(x)
  N = x.shape[0] if N is None else N
  powers = jnp.arange(N) if increasing else jnp.arange(N - 1, -1, -1)
  return jnp.power(jnp.expand_dims(x, -1), powers.astype(x.dtype))


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
  for v in (start, stop):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
      raise PartixError(f"[geomspace] start and stop must be numbers, got {v!r:.40}")
  out = jnp.asarray(np.geomspace(start, stop, num, endpoint=endpoint).astype(np.float32))
  return out if dtype is None else out.astype(dtype)


def _window(name):
  def w(M):
    return jnp.asarray(getattr(np, name)(_static_int(M, name, "M")).astype(np.float32))
  w.__name__ = name
  w.__doc__ = f"numpy.{name}: the window of M points (a constant)."
  return w


hamming, hanning, blackman, bartlett = (_window(n) for n in ("hamming", "hanning", "blackman",
                                                               "bartlett"))


def interp(x, xp, fp, left=None, right=None, period=None):
  """numpy.interp: piecewise-linear interpolation of (xp, fp) at x (xp increasing)."""
  if period is not None:
    raise PartixError("[interp] period= is not supported")
  x, xp, fp = jnp.asarray(x), jnp.asarray(xp), jnp.asarray(fp)
  x = x if _dtypes.issubdtype(x.dtype, np.floating) else x.astype(np.float32)
  i = jnp.clip(searchsorted(xp, x, side="right") - 1, 0, xp.shape[0] - 2)
  x0, x1 = jnp.take(xp, i), jnp.take(xp, i + 1)
  y0, y1 = jnp.take(fp, i), jnp.take(fp, i + 1)
  t = (x - x0) / jnp.where(x1 == x0, 1.0, x1 - x0)
  out = y0 + t * (y1 - y0)
  out = jnp.where(x < xp[0], fp[0] if left is None else left, out)
  return jnp.where(x > xp[-1], fp[-1] if right is None else right, out)


def arctan2(x1, x2):
  """The angle of (x2, x1), in (-pi, pi]: atan of the ratio, with the quadrant fixed."""
  y, x = jnp.asarray(x1), jnp.asarray(x2)
  y = y if _dtypes.issubdtype(y.dtype, np.floating) else y.astype(np.float32)
  x = x if _dtypes.issubdtype(x.dtype, np.floating) else x.astype(np.float32)
  # The half-angle form: the angle is 2 atan(y / (r + x)) wherever r + x > 0; on the negative
  # x axis (r + x == 0) it is pi (0 at the origin).
  r = jnp.sqrt(x * x + y * y)
  base = 2.0 * _atan_unit(y / jnp.where(r + x == 0, 1.0, r + x))
  return jnp.where(r + x == 0, jnp.where(y == 0, jnp.where(x < 0, np.pi, 0.0), np.pi), base)


def _float(x):
  x = jnp.asarray(x)
  return x if _dtypes.issubdtype(x.dtype, np.floating) else x.astype(np.float32)


def arctan(x):
  return _atan_unit(_float(x))


def arcsin(x):
  x = _float(x)
  return arctan2(x, jnp.sqrt(1 - x * x))


def arccos(x):
  x = _float(x)
  return arctan2(jnp.sqrt(1 - x * x), x)


def arcsinh(x):
  x = _float(x)
  a = jnp.abs(x)
  return jnp.sign(x) * jnp.log(a + jnp.sqrt(a * a + 1))


def arccosh(x):
  x = _float(x)
  return jnp.log(x + jnp.sqrt(x * x - 1))


def arctanh(x):
  x = _float(x)
  return 0.5 * jnp.log1p(2 * x / (1 - x))


atan, atan2, asin, acos, asinh, acosh, atanh = (arctan, arctan2, arcsin, arccos, arcsinh,
                                                arccosh, arctanh)


def _atan_series(a):
  """atan(a) for |a| <= tan(pi/12), by its odd series (error below 1e-9)."""
  s = a * a
  return a * (1 - s * (1 / 3 - s * (1 / 5 - s * (1 / 7 - s * (1 / 9 - s / 11)))))


def _atan_unit(t):
  """atan(t) for any t: the series near 0 (on t itself, so the gradient at 0 is 1), elsewhere
  by range reduction of |t| (1/t above 1, then the pi/6 shift) with t's sign."""
  k = 2 - math.sqrt(3)  # tan(pi/12)
  a = jnp.abs(t)
  inv = a > 1.0
  b = jnp.where(inv, 1.0 / jnp.where(a == 0, 1.0, a), a)
  shift = b > k
  c = jnp.where(shift, (b * math.sqrt(3) - 1) / (b + math.sqrt(3)), b)
  r = jnp.where(shift, _atan_series(c) + math.pi / 6, _atan_series(c))
  r = jnp.where(inv, math.pi / 2 - r, r)
  return jnp.where(a <= k, _atan_series(jnp.where(a <= k, t, 0.0)),
                   jnp.where(t < 0, -r, r))


def gcd(x1, x2):
  a, b = jnp.abs(jnp.asarray(x1)), jnp.abs(jnp.asarray(x2))
  a, b = jnp.broadcast_arrays(a, b)
  for _ in range(64):  # Euclid's steps: enough for 32-bit values
    nz = b != 0
    a, b = jnp.where(nz, b, a), jnp.where(nz, jnp.remainder(a, jnp.where(nz, b, 1)), 0)
  return a


def lcm(x1, x2):
  a, b = jnp.abs(jnp.asarray(x1)), jnp.abs(jnp.asarray(x2))
  g = gcd(a, b)
  return jnp.where(g == 0, 0, a // jnp.where(g == 0, 1, g) * b)


def matvec(x1, x2):
  """Matrix times vector over the last axes, the leading ones broadcast."""
  return (jnp.asarray(x1) @ jnp.expand_dims(jnp.asarray(x2), -1))[..., 0]


def vecmat(x1, x2):
  """Vector times matrix over the last axes, the leading ones broadcast."""
  return (jnp.expand_dims(jnp.asarray(x1), -2) @ jnp.asarray(x2))[..., 0, :]


del Array
