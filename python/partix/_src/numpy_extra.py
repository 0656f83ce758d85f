"""numpy names built over partix's ops, with JAX 0.10's semantics: choose, the functional
index updates (fill_diagonal, put, put_along_axis, place), mask_indices, packbits /
unpackbits, histogram2d / histogramdd, i0, polydiv / polyfit, angle, host I/O (frombuffer,
fromstring, load, save, savez, from_dlpack) and jnp.ufunc / frompyfunc."""
import builtins
import math
import operator

import numpy as np

from partix._src import bitwise as _bitwise
from partix._src import dtypes as _dtypes
from partix._src import lax_ops as _lax
from partix._src import linalg as _linalg
from partix._src import numpy_more as _more
from partix._src import numpy_ops as jnp
from partix._src import numpy_sized as _sized
from partix._src.api import device_put as _device_put
from partix._src.batching import vmap as _vmap
from partix._src.core import Array, PartixError, PartixTypeError

__all__ = ["choose", "fill_diagonal", "put", "put_along_axis", "place", "mask_indices",
           "packbits", "unpackbits", "histogram2d", "histogramdd", "i0", "polydiv", "polyfit",
           "angle", "frombuffer", "fromfile", "fromiter", "fromstring", "load", "save", "savez",
           "from_dlpack", "ufunc", "frompyfunc"]


class PartixNotImplementedError(PartixError, NotImplementedError):
  """A PartixError where JAX raises NotImplementedError (a case JAX leaves out on purpose)."""


# ---- shared checks ----

_SCALARS = (bool, int, float, complex, np.generic)


def _arraylike(api, *xs):
  """JAX's check_arraylike: arrays and scalars only (a list or tuple is a TypeError)."""
  for pos, x in enumerate(xs):
    if not isinstance(x, (Array, np.ndarray) + _SCALARS):
      raise PartixTypeError(f"[{api}] requires ndarray or scalar arguments, got "
                            f"{type(x).__name__} at position {pos}")


def _traced(*xs):
  return builtins.any(isinstance(x, Array) and x._a.is_tracer() for x in xs)


def _result_type(*xs):
  """The promoted dtype of xs as partix holds it (64-bit host types become 32-bit without
  x64, as JAX's)."""
  return _dtypes.canonicalize(jnp.result_type(*xs))


def _is_float(d):
  return _dtypes.is_float(d)


def _inexact(x):
  """x as an array of a floating dtype (JAX's promote_dtypes_inexact: ints and bools become
  float32)."""
  return x if _is_float(x.dtype) else jnp.astype(x, np.float32)


def _axis(axis, ndim, api):
  try:
    ax = operator.index(axis)
  except TypeError:
    raise PartixTypeError(f"[{api}] axis must be an int, got {axis!r}") from None
  if not -ndim <= ax < ndim:
    raise PartixError(f"[{api}] axis {ax} is out of bounds for array of dimension {ndim}")
  return ax % ndim


def _tile_to(v, n, api):
  """The flat values v repeated (or cut) to n entries, as JAX's put / place / fill_diagonal
  cycle their values."""
  if v.shape[0] == 0:
    raise PartixError(f"[{api}] cannot take values from an empty array (size 0)")
  if v.shape[0] < n:
    v = jnp.tile(v, -(-n // v.shape[0]))
  return v[:n]


def _no_inplace(api, inplace, kind=PartixError):
  if inplace:
    raise kind(f"[{api}] partix arrays are immutable, so inplace={inplace!r} cannot modify the "
               "array: pass inplace=False and use the returned array")


def _int_index(x, api, what="indices"):
  if not _dtypes.is_int(x.dtype):
    raise PartixTypeError(f"[{api}] {what} must be integers, got {x.dtype}")
  return x if x.dtype == np.dtype(np.int64) else jnp.astype(x, np.int32)


# ---- choose and the functional index updates ----

def choose(a, choices, out=None, mode="raise"):
  """numpy.choose: for each position, the element of choices[a] there (a and the choices
  broadcast together). mode='raise' checks the indices, so it needs a concrete `a` (under jit:
  mode='wrap' or mode='clip'), as JAX's."""
  api = "jnp.choose"
  if out is not None:
    raise PartixNotImplementedError(f"[{api}] the 'out' argument is not supported (partix "
                                    "arrays are immutable)")
  chs = [choices[i] for i in range(len(choices))]
  _arraylike(api, a, *chs)
  idx = jnp.asarray(a)
  if not _dtypes.is_int(idx.dtype):
    raise PartixError(f"[{api}] `a` array must be integer typed, got {idx.dtype}")
  n = len(chs)
  if n == 0:
    raise PartixError(f"[{api}] needs at least one choice, got {choices!r}")
  if mode == "raise":
    if _traced(idx):
      raise PartixError(f"[{api}] mode='raise' checks the indices, which needs a concrete `a`, "
                        f"but `a` is traced ({idx._aval_str()}) under jit: use mode='wrap' or "
                        "mode='clip' instead")
    host = np.asarray(idx)
    bad = host[(host < 0) | (host >= n)]
    if bad.size:
      raise PartixError(f"[{api}] invalid entry in choice array: {bad.flat[0]} is not in "
                        f"[0, {n}) for {n} choices")
  elif mode == "wrap":
    idx = idx % n
  elif mode == "clip":
    idx = jnp.clip(idx, 0, n - 1)
  else:
    raise PartixError(f"[{api}] mode={mode!r} not understood. Must be 'raise', 'wrap', or "
                      "'clip'")
  dt = _result_type(*chs)
  parts = jnp.broadcast_arrays(idx, *[jnp.asarray(c, dt) for c in chs])
  stacked = jnp.stack(parts[1:], axis=0)
  picked = jnp.take_along_axis(stacked, jnp.expand_dims(jnp.astype(parts[0], np.int32), 0),
                               axis=0)
  return picked[0]


def _positions_set(x, positions, values):
  """x (flat) with x[positions[k]] = values[k] for static, distinct positions: a gather of
  the values and a select (no scatter), so that it differentiates in both operands."""
  which = np.full(x.shape[0], -1, np.int32)
  which[positions] = np.arange(len(positions), dtype=np.int32)
  if values.ndim == 0:
    spread = values
  else:
    spread = jnp.take(values, np.maximum(which, 0), mode="clip")
  return jnp.where(which >= 0, spread, x)


def fill_diagonal(a, val, wrap=False, *, inplace=True):
  """numpy.fill_diagonal as JAX's functional form: a new array with a's main diagonal set to
  val (a scalar, or values cycled along the diagonal); inplace=False is required."""
  api = "jnp.fill_diagonal"
  _no_inplace(api, inplace, PartixNotImplementedError)
  if wrap:
    raise PartixNotImplementedError(f"[{api}] wrap=True is not implemented (as in JAX), must "
                                    "use wrap=False")
  _arraylike(api, a, val)
  x, v = jnp.asarray(a), jnp.asarray(val)
  if x.ndim < 2:
    raise PartixError(f"[{api}] array must be at least 2-d, got shape {x.shape}")
  if x.ndim > 2 and builtins.any(d != x.shape[0] for d in x.shape[1:]):
    raise PartixError(f"[{api}] all dimensions of input must be of equal length, got shape "
                      f"{x.shape}")
  n = builtins.min(x.shape)
  if n == 0:
    return x
  v = jnp.astype(v if v.ndim == 0 else _tile_to(jnp.ravel(v), n, api), x.dtype)
  step = builtins.sum(int(np.prod(x.shape[d + 1:], dtype=np.int64)) for d in range(x.ndim))
  out = _positions_set(jnp.ravel(x), np.arange(n, dtype=np.int64) * step, v)
  return jnp.reshape(out, x.shape)


def put(a, ind, v, mode=None, *, inplace=True):
  """numpy.put as JAX's functional form: a new array with its flat elements at `ind` set to v
  (cycled). mode None: negative indices count from the end and the rest are clamped (JAX's
  unravel_index); 'clip' clamps, 'wrap' wraps; 'raise' is not supported (as in JAX). Of
  repeated indices the last value wins."""
  api = "jnp.put"
  _no_inplace(api, inplace)
  _arraylike(api, a, ind, v)
  x = jnp.asarray(a)
  i, vals = jnp.ravel(jnp.asarray(ind)), jnp.ravel(jnp.asarray(v))
  if not x.size or not i.shape[0] or not vals.shape[0]:
    return x
  i = _int_index(i, api, "ind")
  vals = jnp.astype(_tile_to(vals, i.shape[0], api), x.dtype)
  size = x.size
  if mode is None:
    i = jnp.clip(jnp.where(i < 0, i + size, i), 0, size - 1)
  elif mode == "clip":
    i = jnp.clip(i, 0, size - 1)
  elif mode == "wrap":
    i = i % size
  elif mode == "raise":
    raise PartixNotImplementedError(f"[{api}] the 'raise' mode to jnp.put is not supported "
                                    "(as in JAX): use mode='clip' or mode='wrap'")
  else:
    raise PartixError(f"[{api}] mode should be one of 'wrap' or 'clip'; got mode={mode!r}")
  return jnp.reshape(jnp.ravel(x).at[i].set(vals), x.shape)


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
  """numpy.put_along_axis as JAX's functional form: a new array with arr's elements at
  `indices` along `axis` (None: of the flattened array) set to values. Indices out of range
  drop their update (mode None, 'drop' or 'fill'), or are clamped (mode 'clip')."""
  api = "jnp.put_along_axis"
  _no_inplace(api, inplace)
  _arraylike(api, arr, indices, values)
  x, idx, v = jnp.asarray(arr), jnp.asarray(indices), jnp.asarray(values)
  shape0 = x.shape
  if axis is None:
    x, axis = jnp.ravel(x), 0
  if x.ndim != idx.ndim:
    raise PartixError(f"[{api}] arguments 'arr' and 'indices' must have same ndim. Got "
                      f"arr.ndim={x.ndim} and indices.ndim={idx.ndim}.")
  ax = _axis(axis, x.ndim, api)
  idx = _int_index(idx, api)
  try:
    v = jnp.broadcast_to(v, idx.shape)
  except PartixError:
    raise PartixError(f"[{api}] argument 'values' must be broadcastable to 'indices'. Got "
                      f"values.shape={v.shape} and indices.shape={idx.shape}.") from None
  n = x.shape[ax]
  mode = getattr(mode, "name", mode)
  mode = mode.lower() if isinstance(mode, str) else mode
  idx = jnp.where(idx < 0, idx + n, idx)
  if mode in ("clip", "promise_in_bounds"):
    idx = jnp.clip(idx, 0, builtins.max(n - 1, 0))
  elif mode in (None, "drop", "fill", "fill_or_drop"):
    idx = jnp.where(idx < 0, n, idx)  # still negative: out of range, its update dropped
  else:
    raise PartixError(f"[{api}] mode {mode!r} is not supported (None, 'drop', 'fill', 'clip', "
                      "'promise_in_bounds')")
  items = []
  for d in range(x.ndim):
    if d == ax:
      items.append(idx)
    else:
      items.append(np.arange(x.shape[d], dtype=np.int32).reshape(
          [-1 if e == d else 1 for e in range(x.ndim)]))
  out = x.at[tuple(items) if x.ndim > 1 else items[0]].set(jnp.astype(v, x.dtype))
  return jnp.reshape(out, shape0)


def place(arr, mask, vals, *, inplace=True):
  """numpy.place as JAX's functional form: a new array with the elements where mask holds
  set, in order, to vals (cycled). Works under jit: the k-th masked element takes vals[k]."""
  api = "jnp.place"
  _arraylike(api, arr, mask, vals)
  data, m, v = jnp.asarray(arr), jnp.asarray(mask), jnp.ravel(jnp.asarray(vals))
  _no_inplace(api, inplace)
  if data.size != m.size:
    raise PartixError(f"[{api}] arr and mask must be the same size, got {data.size} and "
                      f"{m.size}")
  if not v.shape[0]:
    raise PartixError(f"[{api}] cannot place values from an empty array (vals of shape "
                      f"{jnp.asarray(vals).shape})")
  if not data.size:
    return data
  n = m.size
  hit = jnp.ravel(m) != 0
  rank = jnp.cumsum(jnp.astype(hit, np.int32)) - 1
  v = jnp.astype(_tile_to(v, n, api), data.dtype)
  picked = jnp.take(v, jnp.clip(rank, 0, n - 1), mode="clip")
  return jnp.reshape(jnp.where(hit, picked, jnp.ravel(data)), data.shape)


def mask_indices(n, mask_func, k=0, *, size=None):
  """The indices (rows, columns) where mask_func(ones((n, n)), k) is nonzero, e.g.
  mask_indices(n, jnp.triu); size= (and zeros as fill) as nonzero's, needed under jit."""
  try:
    n = operator.index(n)
  except TypeError:
    raise PartixTypeError(f"[jnp.mask_indices] n must be an integer, got {n!r}") from None
  if not callable(mask_func):
    raise PartixTypeError(f"[jnp.mask_indices] mask_func must be callable, got {mask_func!r}")
  i, j = _sized.nonzero(mask_func(jnp.ones((n, n)), k), size=size)
  return i, j


# ---- bits ----

def packbits(a, axis=None, bitorder="big"):
  """numpy.packbits: the truth of a's elements packed eight to a uint8 along axis (None: of
  the flattened array), the last byte padded with zeros; bitorder 'big' or 'little'."""
  api = "jnp.packbits"
  _arraylike(api, a)
  x = jnp.asarray(a)
  if not (_dtypes.is_int(x.dtype) or x.dtype == np.dtype(np.bool_)):
    raise PartixTypeError(f"[{api}] expected an input array of integer or boolean data type, "
                          f"got {x.dtype}")
  if bitorder not in ("little", "big"):
    raise PartixError(f"[{api}] 'order' must be either 'little' or 'big', got {bitorder!r}")
  bits = jnp.astype(x != 0, np.int32)
  if axis is None:
    bits, axis = jnp.ravel(bits), 0
  ax = _axis(axis, bits.ndim, api)
  bits = jnp.moveaxis(bits, ax, -1)
  rem = bits.shape[-1] % 8
  if rem:
    bits = jnp.pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, 8 - rem)])
  bits = jnp.reshape(bits, bits.shape[:-1] + (bits.shape[-1] // 8, 8))
  weights = 1 << np.arange(8, dtype=np.int32)
  if bitorder == "big":
    weights = weights[::-1].copy()
  packed = jnp.astype(jnp.sum(bits * weights, axis=-1), np.uint8)
  return jnp.moveaxis(packed, -1, ax)


def unpackbits(a, axis=None, count=None, bitorder="big"):
  """numpy.unpackbits: each uint8 of a as its eight bits (uint8 0 / 1) along axis (None: of the
  flattened array); count keeps that many (a negative count drops from the end, a larger one
  pads with zeros)."""
  api = "jnp.unpackbits"
  _arraylike(api, a)
  x = jnp.asarray(a)
  if x.dtype != np.dtype(np.uint8):
    raise PartixTypeError(f"[{api}] expected an input array of unsigned byte data type "
                          f"(uint8), got {x.dtype}")
  if bitorder not in ("little", "big"):
    raise PartixError(f"[{api}] 'order' must be either 'little' or 'big', got {bitorder!r}")
  if axis is None:
    x, axis = jnp.ravel(x), 0
  ax = _axis(axis, x.ndim, api)
  x = jnp.moveaxis(x, ax, -1)
  shifts = np.arange(8, dtype=np.uint8)
  if bitorder == "big":
    shifts = shifts[::-1].copy()
  bits = _bitwise.bitwise_and(_bitwise.right_shift(jnp.expand_dims(x, -1), jnp.asarray(shifts)),
                              jnp.asarray(np.uint8(1)))
  bits = jnp.reshape(bits, x.shape[:-1] + (x.shape[-1] * 8,))
  if count is not None:
    count = operator.index(count)
    if count > bits.shape[-1]:
      bits = jnp.pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, count - bits.shape[-1])])
    else:
      bits = bits[..., :count]
  return jnp.moveaxis(bits, -1, ax)


# ---- histograms ----

def _bin_edges(col, bins, rng, dt, api):
  """JAX's histogram_bin_edges for one dimension: bins given as edges (1-d), or a count over
  rng (None: the data's min and max; an empty range widened by 0.5 each side)."""
  if isinstance(bins, str):
    raise PartixNotImplementedError(f"[{api}] string values for `bins` are not implemented "
                                    f"(as in JAX), got {bins!r}")
  if np.ndim(bins) == 1:
    return jnp.asarray(bins, dt)
  try:
    count = operator.index(bins)
  except TypeError:
    raise PartixTypeError(f"[{api}] bins must be an int or a 1-d array of edges, got "
                          f"{bins!r}") from None
  r = jnp.stack([jnp.min(col), jnp.max(col)]) if rng is None else jnp.asarray(rng, dt)
  if r.shape != (2,):
    raise PartixError(f"[{api}] `range` must be either None or a sequence of scalars, got "
                      f"{rng!r}")
  r = jnp.astype(r, dt)
  empty = r[0] == r[1]
  lo, hi = jnp.where(empty, r[0] - 0.5, r[0]), jnp.where(empty, r[1] + 0.5, r[1])
  # JAX's linspace: start * (1 - t) + stop * t for t = k / count, the last edge stop itself.
  t = jnp.asarray((np.arange(count, dtype=np.float32) / np.float32(count)).astype(dt))
  return jnp.concatenate([lo * (1 - t) + hi * t, jnp.reshape(hi, (1,))])


def histogramdd(sample, bins=10, range=None, weights=None, density=None):
  """numpy.histogramdd over sample [N, D]: the counts (int32; weights' sums with weights) in
  each bin of the D-dimensional grid, and the D arrays of edges. A sample on a last edge
  counts in the last bin; others outside the edges are left out."""
  api = "jnp.histogramdd"
  if weights is None:
    _arraylike(api, sample)
    s, w = _inexact(jnp.asarray(sample)), None
  else:
    _arraylike(api, sample, weights)
    s, w = jnp.asarray(sample), jnp.asarray(weights)
    if w.shape != s.shape[:1]:
      raise PartixError(f"[{api}] should have one weight for each sample, got weights of shape "
                        f"{w.shape} for sample of shape {s.shape}")
    dt = _result_type(s, w)
    dt = dt if _is_float(dt) else np.dtype(np.float32)
    s, w = jnp.astype(s, dt), jnp.astype(w, dt)
  if s.ndim != 2:
    raise PartixError(f"[{api}] sample must be 2-d [N, D], got shape {s.shape}")
  n, d = s.shape
  if range is not None and (len(range) != d or builtins.any(
      r is not None and np.shape(r)[0] != 2 for r in range)):
    raise PartixError(f"[{api}] for sample.shape={(n, d)}, range must be a sequence of {d} "
                      f"pairs or Nones; got range={range!r}")
  if isinstance(bins, (int, np.integer, str)) or (
      isinstance(bins, (Array, np.ndarray)) and bins.ndim == 0):
    per_dim = [bins] * d
  else:
    per_dim = list(bins)
    if len(per_dim) != d:
      raise PartixError(f"[{api}] should be a bin for each dimension: {len(per_dim)} bins for "
                        f"{d} dimensions")
  edges, flat, strides = [], None, []
  for i in builtins.range(d):
    col = s[:, i]
    e = _bin_edges(col, per_dim[i], None if range is None else range[i], s.dtype, api)
    k = _more.searchsorted(e, col, side="right")
    k = jnp.where(col == e[-1], k - 1, k)
    edges.append(e)
    strides.append(e.shape[0] + 1)
    flat = k if flat is None else flat * strides[-1] + k
  total = int(np.prod(strides, dtype=np.int64))
  add = jnp.ones((n,), np.int32) if w is None else w
  hist = jnp.zeros((total,), add.dtype).at[flat].add(add)
  hist = jnp.reshape(hist, tuple(strides))[(slice(1, -1),) * d]
  if density:
    hist = jnp.astype(hist, s.dtype)
    hist = hist / jnp.sum(hist)
    for i, e in enumerate(edges):
      hist = hist / jnp.reshape(jnp.diff(e), [-1 if j == i else 1 for j in builtins.range(d)])
  return hist, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
  """numpy.histogram2d: histogramdd of the points (x, y); returns (hist, x_edges, y_edges).
  bins: an int, a pair (per axis), or one array of edges for both axes."""
  api = "jnp.histogram2d"
  _arraylike(api, x, y)
  xa, ya = jnp.asarray(x), jnp.asarray(y)
  if isinstance(bins, (Array, np.ndarray)) and bins.ndim == 0:
    nb = 1
  else:
    try:
      nb = len(bins)
    except TypeError:
      nb = 1
  if nb not in (1, 2):
    e = jnp.asarray(bins)
    bins = [e, e]
  if xa.shape != ya.shape:
    raise PartixError(f"[{api}] x and y must have the same shape, got {xa.shape} and "
                      f"{ya.shape}")
  hist, edges = histogramdd(jnp.transpose(jnp.stack([xa, ya])), bins, range, weights, density)
  return hist, edges[0], edges[1]


# ---- special functions, polynomials, angle ----

def _i0_values(x):
  """I0(x) in x's (floating) dtype: the power series sum_k (x^2/4)^k / k!^2 up to |x| = 15,
  past it the asymptotic series e^|x| / sqrt(2 pi |x|) * sum_k c_k / (8|x|)^k,
  c_k = prod_{j<=k} (2j-1)^2 / j. Both branches are masked so that neither gives the other's
  inputs (nor their gradients) a non-finite value."""
  ax = jnp.abs(x)
  small = ax <= 15.0
  xs = jnp.where(small, x, 0.0)
  q = xs * xs * 0.25
  term, series = jnp.ones_like(q), jnp.ones_like(q)
  for k in builtins.range(1, 31):
    term = term * q * (1.0 / (k * k))
    series = series + term
  xl = jnp.where(small, 16.0, ax)
  t = 1.0 / (8.0 * xl)
  c, tk, tail = 1.0, jnp.ones_like(t), jnp.ones_like(t)
  for k in builtins.range(1, 12):
    c *= (2 * k - 1) ** 2 / k
    tk = tk * t
    tail = tail + c * tk
  large = jnp.exp(xl) * (tail / jnp.sqrt((2.0 * math.pi) * xl))
  return jnp.where(small, series, large)


def i0(x):
  """The modified Bessel function of the first kind of order 0 (float32 accuracy; ints and
  bools become float32, float16 / bfloat16 are computed in float32 and returned in their own
  type). Differentiable; its derivative at 0 is 0."""
  api = "jnp.i0"
  _arraylike(api, x)
  v = _inexact(jnp.asarray(x))
  dt = v.dtype
  if dt in (np.dtype(np.float16), np.dtype(_dtypes.bfloat16)):
    return jnp.astype(_i0_values(jnp.astype(v, np.float32)), dt)
  return _i0_values(v)


def _promote_inexact(*xs):
  dt = _result_type(*xs)
  dt = dt if _is_float(dt) else np.dtype(np.float32)
  return [jnp.astype(jnp.asarray(x), dt) for x in xs]


def polydiv(u, v, *, trim_leading_zeros=False):
  """numpy.polydiv: quotient and remainder of the polynomial u by v (coefficients highest
  power first), in a floating dtype. The remainder keeps u's length (leading zeros) unless
  trim_leading_zeros (concrete values only), as JAX's."""
  api = "jnp.polydiv"
  _arraylike(api, u, v)
  ua, va = _promote_inexact(u, v)
  if ua.ndim != 1 or va.ndim != 1:
    raise PartixError(f"[{api}] u and v must be 1-d coefficient arrays, got shapes {ua.shape} "
                      f"and {va.shape}")
  m, n = ua.shape[0] - 1, va.shape[0] - 1
  scale = 1.0 / va[0]
  q = jnp.zeros((builtins.max(m - n + 1, 1),), ua.dtype)
  for k in builtins.range(m - n + 1):
    d = scale * ua[k]
    q = q.at[k].set(d)
    ua = ua.at[k:k + n + 1].add(-d * va)
  if trim_leading_zeros:
    if _traced(ua):
      raise PartixError(f"[{api}] trim_leading_zeros=True gives a shape that depends on the "
                        "values, which needs concrete u and v (call it outside jit)")
    tol = float(np.sqrt(float(_dtypes.finfo(ua.dtype).eps)))
    small = np.abs(np.asarray(ua)) < tol
    if small.all():
      return q, jnp.zeros((0,), ua.dtype)
    ua = ua[int(np.argmin(small)):]
  return q, ua


def _lstsq(a, b, rcond):
  """Least squares a x = b (a [m, n], b [m] or [m, k]) through the SVD, as JAX's
  jnp.linalg.lstsq: singular values below rcond * the largest are dropped; the residuals are
  the squared column norms of b - a x (always computed, shape [k] or [1])."""
  b2 = b[:, None] if b.ndim == 1 else b
  u, s, vt = _linalg.svd(a, full_matrices=False)
  eps = float(_dtypes.finfo(a.dtype).eps)
  rc = eps if rcond < 0 else rcond
  mask = (s > 0) & (s >= jnp.asarray(rc, s.dtype) * s[0])
  rank = jnp.sum(jnp.astype(mask, np.int32))
  s_inv = jnp.where(mask, 1.0 / jnp.where(mask, s, 1.0), 0.0)[:, None]
  x = jnp.matmul(jnp.transpose(vt), s_inv * jnp.matmul(jnp.transpose(u), b2))
  res = jnp.sqrt(jnp.sum(jnp.square(b2 - jnp.matmul(a, x)), axis=0)) ** 2
  return (jnp.ravel(x) if b.ndim == 1 else x), res, rank, s


def _polyfit_checks(x, y, w, deg, api):
  try:
    deg = operator.index(deg)
  except TypeError:
    raise PartixError(f"[{api}] deg must be a concrete int, got {deg!r}") from None
  if deg < 0:
    raise PartixError(f"[{api}] expected deg >= 0, got deg={deg}")
  if x.ndim != 1:
    raise PartixTypeError(f"[{api}] expected 1D vector for x, got shape {x.shape}")
  if x.shape[0] == 0:
    raise PartixTypeError(f"[{api}] expected non-empty vector for x")
  if y.ndim not in (1, 2):
    raise PartixTypeError(f"[{api}] expected 1D or 2D array for y, got shape {y.shape}")
  if x.shape[0] != y.shape[0]:
    raise PartixTypeError(f"[{api}] expected x and y to have same length, got {x.shape[0]} "
                          f"and {y.shape[0]}")
  if w is not None:
    if w.ndim != 1:
      raise PartixTypeError(f"[{api}] expected a 1-d array for weights, got shape {w.shape}")
    if w.shape[0] != y.shape[0]:
      raise PartixTypeError(f"[{api}] expected w and y to have the same length, got "
                            f"{w.shape[0]} and {y.shape[0]}")
  return deg


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
  """numpy.polyfit: the least-squares polynomial of degree deg through (x, y) (y [N] or
  [N, K]: one fit per column), coefficients highest power first; w weights the residuals.
  full=True also returns (residuals, rank, singular values, rcond); cov=True (or 'unscaled')
  the coefficients' covariance, as JAX's (least squares through the SVD of the scaled
  Vandermonde matrix)."""
  api = "jnp.polyfit"
  _arraylike(api, x, y, *(() if w is None else (w,)))
  xa, ya = jnp.asarray(x), jnp.asarray(y)
  wa = None if w is None else _inexact(jnp.asarray(w))
  deg = _polyfit_checks(xa, ya, wa, deg, api)
  order = deg + 1
  n = xa.shape[0]
  if rcond is None:
    if not _is_float(xa.dtype):
      raise PartixError(f"[{api}] rcond=None is len(x) * finfo(x.dtype).eps, which is not "
                        f"defined for x of dtype {xa.dtype} (JAX raises here too): pass a "
                        "floating x or rcond=")
    rcond = n * float(_dtypes.finfo(xa.dtype).eps)
  rcond = float(rcond)
  lhs = jnp.power(xa[:, None], jnp.asarray(np.arange(deg, -1, -1), xa.dtype))
  rhs = ya
  if wa is not None:
    lhs = lhs * wa[:, None]
    rhs = rhs * (wa[:, None] if rhs.ndim == 2 else wa)
  scale = jnp.sqrt(jnp.sum(lhs * lhs, axis=0))
  lhs = lhs / scale[None, :]
  lhs, rhs = _promote_inexact(lhs, rhs)
  c, resids, rank, s = _lstsq(lhs, rhs, rcond)
  c = jnp.transpose(jnp.transpose(c) / scale[None, :]) if c.ndim > 1 else c / scale
  if full:
    return c, resids, rank, s, jnp.asarray(np.float32(rcond))
  if not cov:
    return c
  vbase = _linalg.inv(jnp.matmul(jnp.transpose(lhs), lhs)) / jnp.outer(scale, scale)
  if isinstance(cov, str) and cov == "unscaled":
    fac = jnp.ones((1,), vbase.dtype)
  else:
    if n <= order:
      raise PartixError(f"[{api}] the number of data points ({n}) must exceed order "
                        f"({order}) to scale the covariance matrix")
    fac = resids / (n - order)
  if ya.ndim == 1:
    return c, vbase * jnp.reshape(fac, (1, -1))
  return c, vbase[:, :, None] * jnp.reshape(fac, (1, 1, -1))


def angle(z, deg=False):
  """The argument of z; partix holds no complex numbers, so for real z: 0 where z >= +0, pi
  where z < 0 or z is -0.0, NaN for NaN (180 in degrees with deg=True). Integers, bools and
  0-d floats give float32, as JAX's."""
  api = "jnp.angle"
  _arraylike(api, z)
  v = jnp.asarray(z)
  if not _is_float(v.dtype) or v.ndim == 0:
    v = jnp.astype(v, np.float32)
  r = jnp.where(jnp.signbit(v), jnp.asarray(np.pi, v.dtype), jnp.zeros((), v.dtype))
  r = jnp.where(jnp.isnan(v), v, r)
  return jnp.degrees(r) if deg else r


# ---- host I/O ----

def _read_host(name, source, read, **kwargs):
  """numpy's reader `read` of `source` on the host, then a partix array; numpy's errors as
  PartixErrors naming jnp.<name>."""
  try:
    host = read(source, **kwargs)
  except TypeError as e:
    raise PartixTypeError(f"[jnp.{name}] {e} (got {type(source).__name__})") from None
  except ValueError as e:
    raise PartixError(f"[jnp.{name}] {e}") from None
  return jnp.asarray_(host)


def frombuffer(buffer, dtype=float, count=-1, offset=0):
  """numpy.frombuffer read on the host, then a partix array (64-bit types become 32-bit
  without x64, as JAX's)."""
  return _read_host("frombuffer", buffer, np.frombuffer, dtype=dtype, count=count,
                    offset=offset)


def fromstring(string, dtype=float, count=-1, *, sep):
  """numpy.fromstring (text with separator sep) read on the host, then a partix array."""
  return _read_host("fromstring", string, np.fromstring, dtype=dtype, count=count, sep=sep)


def _impure(name, source):
  raise PartixNotImplementedError(
      f"[jnp.{name}] is not implemented (as in JAX): reading {source} is not pure, so it is "
      f"unsafe under jit and the other transformations. Use jnp.asarray(np.{name}(...)) "
      "outside them instead.")


def fromfile(*args, **kwargs):
  """Not implemented, as in JAX (it consumes a file object): jnp.asarray(np.fromfile(...))."""
  _impure("fromfile", "a file")


def fromiter(*args, **kwargs):
  """Not implemented, as in JAX (it consumes an iterable): jnp.asarray(np.fromiter(...))."""
  _impure("fromiter", "an iterable")


def load(file, *args, **kwargs):
  """numpy.load, a single array (np.save's .npy) then a partix array (bfloat16 recovered from
  numpy's 2-byte void); what partix does not hold (strings, objects, complex) and .npz
  archives come back as numpy gives them, as JAX's."""
  out = np.load(file, *args, **kwargs)
  if isinstance(out, np.ndarray):
    if out.dtype == np.dtype("V2"):
      out = out.view(_dtypes.bfloat16)
    try:
      out = jnp.asarray_(out)
    except (PartixError, TypeError, ValueError):
      pass
  return out


# numpy's writers take partix arrays (through __array__), as JAX's names are numpy's own.
save = np.save
savez = np.savez


def from_dlpack(x, /, *, device=None, copy=None):
  """An array of any DLPack producer (__dlpack__ and __dlpack_device__: numpy, torch, ...)
  read through numpy's from_dlpack, then a partix array (on `device`, a Device or a sharding
  of one device, when given). partix copies the data onto its devices, so copy=False (no copy)
  is refused."""
  api = "jnp.from_dlpack"
  if copy is False:
    raise PartixError(f"[{api}] copy=False asks to share the producer's memory, but partix "
                      "always copies data onto its devices: pass copy=None or copy=True")
  if device is not None and hasattr(device, "device_set") and len(device.device_set) > 1:
    raise PartixError(f"[{api}] can only unpack a dlpack tensor onto a singular device, but a "
                      f"sharding with {len(device.device_set)} devices was provided")
  if isinstance(x, Array):
    host = np.asarray(x)
  else:
    if not (hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__")):
      raise PartixTypeError(f"[{api}] the array passed to from_dlpack must have __dlpack__ and "
                            f"__dlpack_device__ methods, got {type(x).__name__}")
    host = np.from_dlpack(x)
  out = jnp.asarray_(host)
  if device is not None:
    out = _device_put(out, device)
  return out


# ---- ufunc ----

def _is_weak(x):
  return isinstance(x, (int, float)) and not isinstance(x, (bool, np.generic))


def _as_args(args):
  """The arguments as arrays; a Python int or float takes the type it would have against the
  array arguments (JAX's weak typing: int8 array and 1 stay int8)."""
  strong = [jnp.asarray(a) for a in args if not _is_weak(a)]
  joined = _result_type(*strong) if strong else None
  out = []
  for a in args:
    if not _is_weak(a) or joined is None:
      out.append(jnp.asarray(a))
    elif _is_float(joined) or (isinstance(a, int) and _dtypes.is_int(joined)):
      out.append(jnp.asarray(a, joined))  # the array's type absorbs the scalar
    else:
      out.append(jnp.asarray(a, np.float32 if isinstance(a, float) else np.int32))
  return out


def _as_result(out):
  if isinstance(out, (tuple, list)):
    return tuple(jnp.asarray(o) for o in out)
  return jnp.asarray(out)


def _leading(out, shape):
  """The result(s) cut to the leading shape (a zero-size call was made on ones instead)."""
  cut = tuple(slice(0, d) for d in shape)
  if isinstance(out, tuple):
    return tuple(o[cut] for o in out)
  return out[cut]


def _vectorized(func, args):
  """func (of scalars) applied elementwise over its broadcast arguments, with vmap over each
  axis (0-d arguments are not mapped)."""
  arrs = _as_args(args)
  shape = tuple(np.broadcast_shapes(*[a.shape for a in arrs]))
  if not shape:
    return _as_result(func(*arrs))
  if 0 in shape:  # no element: the types and trailing shapes from a call on ones
    ones = tuple(builtins.max(d, 1) for d in shape)
    out = _vectorized(func, [jnp.ones(ones, a.dtype) for a in arrs])
    return _leading(out, shape)
  mapped = tuple(0 if a.ndim else None for a in arrs)
  arrs = [jnp.broadcast_to(a, shape) if a.ndim else a for a in arrs]
  f = func
  for _ in shape:
    f = _vmap(f, in_axes=mapped)
  return _as_result(f(*arrs))


_AT_INPLACE = ("partix arrays are immutable, so ufunc.at() cannot operate in place as "
               "np.ufunc.at() does: pass inplace=False and use the result, e.g. "
               "arr = u.at(arr, ind, val, inplace=False)")


class ufunc:
  """jnp.ufunc: a universal function from a function of scalars, with numpy's methods:
  __call__ (elementwise over broadcast arguments), and for binary functions of one result
  outer, reduce, accumulate, at (inplace=False) and reduceat; `call`, `reduce`, ... replace
  the generic implementations (loops over the function), as JAX's."""

  def __init__(self, func, /, nin, nout, *, name=None, nargs=None, identity=None, call=None,
               reduce=None, accumulate=None, at=None, reduceat=None):
    if not callable(func):
      raise PartixTypeError(f"[jnp.ufunc] func must be callable, got {type(func).__name__}")
    try:
      nin, nout = operator.index(nin), operator.index(nout)
    except TypeError:
      raise PartixTypeError(f"[jnp.ufunc] nin and nout must be integers, got {nin!r}, "
                            f"{nout!r}") from None
    self.__doc__ = func.__doc__
    self.__name__ = name or func.__name__
    self._props = {"func": func, "nin": operator.index(nin), "nout": operator.index(nout),
                   "nargs": operator.index(nargs or nin), "identity": identity, "call": call,
                   "reduce": reduce, "accumulate": accumulate, "at": at, "reduceat": reduceat}

  _func = property(lambda self: self._props["func"])
  nin = property(lambda self: self._props["nin"])
  nout = property(lambda self: self._props["nout"])
  nargs = property(lambda self: self._props["nargs"])
  identity = property(lambda self: self._props["identity"])

  def _key(self):
    return (self._func, self.__name__, self.identity, self.nin, self.nout, self.nargs)

  def __hash__(self):
    return hash(self._key())

  def __eq__(self, other):
    return isinstance(other, ufunc) and self._key() == other._key()

  def __repr__(self):
    return f"<jnp.ufunc '{self.__name__}'>"

  def _binary_only(self, method):
    if self.nin != 2:
      raise PartixError(f"[{self.__name__}.{method}] {method} only supported for binary "
                        f"ufuncs (nin=2), got nin={self.nin}")
    if self.nout != 1:
      raise PartixError(f"[{self.__name__}.{method}] {method} only supported for functions "
                        f"returning a single value (nout=1), got nout={self.nout}")

  def _no_out(self, method, out):
    if out is not None:
      raise PartixNotImplementedError(f"[{self.__name__}.{method}] the out argument is not "
                                      "supported (partix arrays are immutable)")

  def _result_dtype(self, *xs):
    """The dtype func gives for arguments of xs' dtypes (JAX's eval_shape on ones)."""
    return jnp.asarray(self._func(*[jnp.ones((), x.dtype) for x in _as_args(xs)])).dtype

  def __call__(self, *args, out=None, where=None):
    _arraylike(self.__name__, *args)
    self._no_out("__call__", out)
    if where is not None:
      raise PartixNotImplementedError(f"[{self.__name__}] the where argument of {self!r} is "
                                      "not supported")
    call = self._props["call"] or self._call_vectorized
    return call(*args)

  def _call_vectorized(self, *args):
    return _vectorized(self._func, args)

  def outer(self, A, B, /):
    """func(a, b) for every a of A and b of B: shape A.shape + B.shape."""
    self._binary_only("outer")
    _arraylike(f"{self.__name__}.outer", A, B)
    ra, rb = jnp.ravel(jnp.asarray(A)), jnp.ravel(jnp.asarray(B))
    inner = _vmap(lambda p, q: self(p, q), in_axes=(None, 0))
    res = _vmap(inner, in_axes=(0, None))(ra, rb)
    return jnp.reshape(res, np.shape(A) + np.shape(B))

  def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """func folded along axis (None: over all elements), starting from initial (default the
    identity; without either, from the first element); where= masks elements out (needs an
    identity or initial)."""
    api = f"{self.__name__}.reduce"
    _arraylike(api, a)
    self._binary_only("reduce")
    self._no_out("reduce", out)
    if initial is not None:
      _arraylike(api, initial)
    if where is not None:
      _arraylike(api, where)
      if self.identity is None and initial is None:
        raise PartixError(f"[{api}] reduction operation {self.__name__!r} does not have an "
                          "identity, so to use a where mask one has to specify 'initial'")
      if jnp.asarray(where).dtype != np.dtype(np.bool_):
        raise PartixError(f"[{api}] where argument must have dtype=bool; got "
                          f"dtype={jnp.asarray(where).dtype}")
    red = self._props["reduce"] or self._reduce_via_loop
    return red(a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial, where=where)

  def _reduce_via_loop(self, arr, axis=0, dtype=None, keepdims=False, initial=None,
                       where=None):
    api = f"{self.__name__}.reduce"
    x = jnp.asarray(arr)
    if initial is None:
      initial = self.identity
    dt = self._result_dtype(x, x) if dtype is None else _dtypes.dtype(dtype)
    wh = None if where is None else jnp.broadcast_to(jnp.asarray(where), x.shape)
    if isinstance(axis, tuple):
      for ax in axis:
        _axis(ax, x.ndim, api)
      raise PartixNotImplementedError(f"[{api}] a tuple of axes is not supported (as in JAX), "
                                      f"got axis={axis!r}")
    if axis is None:
      final = (1,) * x.ndim if keepdims else ()
      x, wh, ax = jnp.ravel(x), (None if wh is None else jnp.ravel(wh)), 0
    else:
      ax = _axis(axis, x.ndim, api)
      final = x.shape[:ax] + ((1,) if keepdims else ()) + x.shape[ax + 1:]
      x = jnp.moveaxis(x, ax, 0)
      wh = None if wh is None else jnp.moveaxis(wh, ax, 0)
    if x.shape[0] == 0:
      if initial is None:
        raise PartixError(f"[{api}] zero-size array to reduction operation {self.__name__} "
                          "which has no identity")
      return jnp.full(final, initial, dt)
    start, first = (1, x[0]) if initial is None else (0, initial)
    first = jnp.broadcast_to(jnp.astype(jnp.asarray(first), dt), x.shape[1:])

    def body(i, val):
      nxt = jnp.astype(self(val, jnp.astype(x[i], dt)), dt)
      return nxt if wh is None else jnp.where(wh[i], nxt, val)
    res = _lax.fori_loop(start, x.shape[0], body, first) if start < x.shape[0] else first
    return jnp.reshape(res, final)

  def accumulate(self, a, axis=0, dtype=None, out=None):
    """The running func along axis: out[0] = a[0], out[i] = func(out[i-1], a[i])."""
    self._binary_only("accumulate")
    self._no_out("accumulate", out)
    acc = self._props["accumulate"] or self._accumulate_via_scan
    return acc(a, axis=axis, dtype=dtype)

  def _accumulate_via_scan(self, arr, axis=0, dtype=None):
    api = f"{self.__name__}.accumulate"
    _arraylike(api, arr)
    x = jnp.asarray(arr)
    dt = self._result_dtype(x, x) if dtype is None else _dtypes.dtype(dtype)
    if axis is None or isinstance(axis, tuple):
      raise PartixError(f"[{api}] accumulate does not allow multiple axes, got axis={axis!r}")
    ax = _axis(axis, x.ndim, api)
    if x.size == 0:
      return jnp.zeros(x.shape, dt)
    x = jnp.moveaxis(x, ax, 0)
    y0 = jnp.astype(x[0], dt)
    if x.shape[0] == 1:
      ys = y0[None]
    else:
      def step(carry, xi):
        y = jnp.astype(self(carry, jnp.astype(xi, dt)), dt)
        return y, y
      _, rest = _lax.scan(step, y0, x[1:])
      ys = jnp.concatenate([y0[None], rest])
    return jnp.moveaxis(ys, 0, ax)

  def at(self, a, indices, b=None, /, *, inplace=True):
    """a with a[indices] = func(a[indices], b), applied once per index in turn (a repeated
    index sees the earlier updates); out-of-range indices are left out. inplace=False is
    required."""
    if inplace:
      raise PartixNotImplementedError(f"[{self.__name__}.at] {_AT_INPLACE}")
    at = self._props["at"] or self._at_via_loop
    return at(a, indices) if b is None else at(a, indices, b)

  def _at_indices(self, indices, shape, api):
    """indices as a tuple of integer arrays (negative ones counted from the end), clamped in
    range, and whether each position was in range."""
    if isinstance(indices, list):
      raise PartixTypeError(f"[{api}] using a non-tuple sequence for multidimensional indexing "
                            "is not allowed; use arr[array(seq)] instead of arr[seq]")
    items = indices if isinstance(indices, tuple) else (indices,)
    if len(items) > len(shape):
      raise PartixError(f"[{api}] too many indices ({len(items)}) for an array of "
                        f"{len(shape)} dimensions")
    out, valid = [], jnp.asarray(True)
    for d, it in enumerate(items):
      if it is None or it is Ellipsis or isinstance(it, slice):
        raise PartixTypeError(f"[{api}] indices must be integers or integer arrays (as in "
                              f"JAX), got {it!r}")
      i = _int_index(jnp.asarray(it), api)
      n = shape[d]
      i = jnp.where(i < 0, i + n, i)
      valid = valid & (i >= 0) & (i < n)
      out.append(jnp.clip(i, 0, builtins.max(n - 1, 0)))
    return out, valid

  def _at_via_loop(self, a, indices, *args):
    api = f"{self.__name__}.at"
    _arraylike(api, a, *args)
    dt = self._result_dtype(a, *args)
    x = jnp.astype(jnp.asarray(a), dt)
    args = [jnp.astype(jnp.asarray(v), dt) for v in args]
    idx, valid = self._at_indices(indices, x.shape, api)
    if not idx:
      return x
    shape = tuple(np.broadcast_shapes(*[i.shape for i in idx]))
    if not shape:
      ids = tuple(idx)
      new = x.at[ids].set(jnp.astype(self(x[ids], *args), dt))
      return jnp.where(valid, new, x)
    count = int(np.prod(shape, dtype=np.int64))
    flat = [jnp.ravel(jnp.broadcast_to(i, shape)) for i in idx]
    ok = jnp.ravel(jnp.broadcast_to(valid, shape))
    vals = [jnp.reshape(jnp.broadcast_to(v, shape + v.shape[len(shape):]),
                        (count,) + v.shape[len(shape):]) for v in args]

    def body(k, cur):
      ids = tuple(f[k] for f in flat)
      new = cur.at[ids].set(jnp.astype(self(cur[ids], *[v[k] for v in vals]), dt))
      return jnp.where(ok[k], new, cur)
    return _lax.fori_loop(0, count, body, x)

  def reduceat(self, a, indices, axis=0, dtype=None, out=None):
    """func reduced over the slices [indices[i], indices[i+1]) along axis (a[indices[i]]
    alone where indices[i+1] <= indices[i]; the last slice runs to the end)."""
    self._binary_only("reduceat")
    self._no_out("reduceat", out)
    rat = self._props["reduceat"] or self._reduceat_via_loop
    return rat(a, indices, axis=axis, dtype=dtype)

  def _reduceat_via_loop(self, a, indices, axis=0, dtype=None):
    api = f"{self.__name__}.reduceat"
    _arraylike(api, a, indices)
    x, ind = jnp.asarray(a), jnp.asarray(indices)
    if x.ndim == 0:
      raise PartixError(f"[{api}] a must have 1 or more dimension, got a.shape={x.shape}")
    if ind.ndim != 1:
      raise PartixError(f"[{api}] indices must be one-dimensional, got "
                        f"indices.shape={ind.shape}")
    if axis is None or isinstance(axis, (tuple, list)):
      raise PartixError(f"[{api}] reduceat requires a single integer axis, got axis={axis!r}")
    ax = _axis(axis, x.ndim, api)
    ind = _int_index(ind, api)
    n = x.shape[ax]
    res = jnp.take(x, ind, axis=ax)
    ext = jnp.concatenate([ind, jnp.asarray(np.array([n], np.int32), ind.dtype)])
    bshape = [-1 if d == ax else 1 for d in builtins.range(x.ndim)]
    lo, hi = jnp.reshape(ext[:-1], bshape), jnp.reshape(ext[1:], bshape)

    def body(i, cur):
      piece = _lax.dynamic_index_in_dim(x, i, ax, keepdims=True)
      nxt = jnp.astype(self(cur, piece), cur.dtype)
      return jnp.where((i > lo) & (i < hi), nxt, cur)
    return _lax.fori_loop(0, n, body, res)


def frompyfunc(func, /, nin, nout, *, identity=None):
  """jnp.frompyfunc: a jnp.ufunc of func (nin arguments, nout results)."""
  return ufunc(func, nin, nout, identity=identity)
