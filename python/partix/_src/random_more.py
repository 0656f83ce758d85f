"""More of jax.random: multivariate_normal, orthogonal, f, poisson, binomial and multinomial.

Each sampler is a function of the key (and the element's position) only, so it is
deterministic per key; independent draws use keys split from it or folded with a round number.
The discrete samplers are exact in distribution (not JAX's bits): poisson counts uniforms
(Knuth) for small rates and uses Hormann's transformed rejection (PTRS) for rates of 10 and
more; binomial counts geometric waiting times for n*q <= 10 and uses Hormann's BTRS otherwise.
Their rejection loops run every element until all have accepted (while_loop), in float64 so
that very large rates and counts keep their precision. This module sits below partix.random
(which re-exports it), so it builds its few key helpers on partix._core directly."""
import operator

import numpy as np

from partix import _core
from partix._src import dtypes as _dt
from partix._src import linalg as _linalg
from partix._src import numpy_ops as jnp
from partix._src.core import Array, PartixError, asarray
from partix._src.lax_ops import lib_scan as _scan
from partix._src.lax_ops import lib_while_loop as _while_loop
from partix._src.numpy_ops import _shape
from partix._src import prng as _prng
from partix._src.special_fns import lgamma as _lgamma

__all__ = ["binomial", "f", "multinomial", "multivariate_normal", "orthogonal", "poisson"]


# ---- keys and the basic draws ----

def _key(key, api):
  """The key as partix's int32[2] core array (JAX's uint32 keys keep their bits)."""
  key = _prng.key_data(key)
  if isinstance(key, (np.ndarray, np.generic)) and key.dtype == np.uint32:
    key = np.ascontiguousarray(key).view(np.int32)
  k = asarray(key)
  if k.shape[-1:] != (2,) or k._a.dtype not in ("i32", "u32"):
    raise PartixError(f"[random.{api}] {k._aval_str()} is not a key (int32[2]); make one with "
                      "random.key(seed)")
  return k._a if k._a.dtype == "i32" else _core.astype(k._a, "i32")


def _split(k, num):
  """num keys from the core key k, as a list of core keys."""
  ks = Array(_core.random_split(k, num))
  return [ks[i]._a for i in range(num)]


def _fold(k, i):
  return _core.random_fold_in(k, asarray(i, np.int32)._a)


def _normal(k, shape, d):
  return Array(_core.random_normal(k, list(shape), d, None))


def _open_uniform(k, shape, d):
  """Uniform on (0, 1): never 0, so its logarithm is finite."""
  tiny = float(np.finfo(np.float64 if d == "f64" else np.float32).tiny)
  return Array(_core.random_uniform(k, list(shape), d, tiny, 1.0, None))


def _uniform(k, shape, d):
  return Array(_core.random_uniform(k, list(shape), d, 0.0, 1.0, None))


# ---- argument checks ----

def _float_dtype(dtype, api, default=np.float32):
  """The core name of a float dtype (default float32), or an error naming the API."""
  d = _dt.to_core(default if dtype is None else dtype, f"random.{api}")
  if d not in ("f16", "bf16", "f32", "f64"):
    raise PartixError(f"[random.{api}] dtype must be a float type, got {_dt.dtype(dtype)}")
  return d


def _work(d):
  """The dtype the arithmetic runs in: float64 for float64 results, else float32."""
  return "f64" if d == "f64" else "f32"


def _np_dtype(d):
  return _dt.from_core(d)


def _result_shape(api, shape, *shapes):
  """shape (checked: the parameters' shapes broadcast to it), or the parameters' broadcast."""
  try:
    joint = np.broadcast_shapes(*shapes)
  except ValueError:
    raise PartixError(f"[random.{api}] parameter shapes {', '.join(map(str, shapes))} do not "
                      "broadcast together") from None
  if shape is None:
    return tuple(joint)
  shape = tuple(_shape(shape, f"random.{api}"))
  try:
    ok = np.broadcast_shapes(shape, joint) == shape
  except ValueError:
    ok = False
  if not ok:
    raise PartixError(f"[random.{api}] parameter shapes {', '.join(map(str, shapes))} do not "
                      f"broadcast to shape {shape}")
  return shape


def _no_sharding(out_sharding, api):
  """out_sharding= is taken for JAX's signature; these samplers make replicated results."""
  if out_sharding is not None:
    raise PartixError(f"[random.{api}] out_sharding={out_sharding!r} is not supported (the "
                      "result is made without a sharding; reshard it with device_put)")


def _param(x, api, name):
  try:
    return asarray(x)
  except Exception as e:  # noqa: BLE001 (any conversion failure is a bad argument)
    raise PartixError(f"[random.{api}] {name} {x!r} is not an array or number: {e}") from None


def _size(n, api, name):
  """A static non-negative int (a matrix dimension)."""
  if isinstance(n, Array):
    n = int(n)
  try:
    v = operator.index(n)
  except TypeError:
    raise PartixError(f"[random.{api}] {name} {n!r} is not an int") from None
  if v < 0:
    raise PartixError(f"[random.{api}] {name} {v} is negative")
  return v


# ---- multivariate_normal ----

def _factor(cov, method):
  """F with F F^T = cov for each matrix of cov [..., n, n]."""
  if method == "cholesky":
    return _linalg.cholesky(cov)
  if method == "eigh":
    w, v = _linalg.eigh(cov)
    return v * jnp.expand_dims(jnp.sqrt(jnp.maximum(w, 0.0)), -2)
  u, s, _ = _linalg.svd(cov)
  return u * jnp.expand_dims(jnp.sqrt(s), -2)


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky", *,
                        out_sharding=None):
  """Normal vectors with the given mean [..., n] and covariance [..., n, n]: mean + F z, F a
  factor of cov (cholesky, eigh or svd) and z standard normal of shape shape + (n,)."""
  api = "multivariate_normal"
  k = _key(key, api)
  _no_sharding(out_sharding, api)
  if method not in ("svd", "eigh", "cholesky"):
    raise PartixError(f"[random.{api}] method={method!r}: expected 'svd', 'eigh' or 'cholesky'")
  mean, cov = _param(mean, api, "mean"), _param(cov, api, "cov")
  rt = _dt.to_core(jnp.result_type(mean, cov))
  if rt not in ("f16", "bf16", "f32", "f64"):
    rt = "f32"
  d = rt if dtype is None else _float_dtype(dtype, api)
  if mean.ndim < 1:
    raise PartixError(f"[random.{api}] mean must have at least one axis (..., n), got shape "
                      f"{mean.shape}")
  n = mean.shape[-1]
  if cov.ndim < 2 or tuple(cov.shape[-2:]) != (n, n):
    raise PartixError(f"[random.{api}] cov of shape {tuple(cov.shape)} must be (..., {n}, {n}) "
                      f"for mean of shape {tuple(mean.shape)}")
  batch = _result_shape(api, shape, tuple(mean.shape[:-1]), tuple(cov.shape[:-2]))
  w = _work(rt)
  factor = _factor(jnp.astype(cov, _np_dtype(w)), method)
  z = jnp.astype(_normal(k, batch + (n,), _work(d)), _np_dtype(w))
  x = jnp.astype(mean, _np_dtype(w)) + jnp.sum(factor * jnp.expand_dims(z, -2), axis=-1)
  return jnp.astype(x, jnp.result_type(_np_dtype(rt), _np_dtype(d)))


# ---- orthogonal ----

def orthogonal(key, n, shape=(), dtype=None, m=None, *, out_sharding=None):
  """Haar-random orthogonal n x n matrices (semi-orthogonal n x m when m is given), of shape
  shape + (n, m): Q of the QR of a standard normal matrix, its columns' signs set so that R's
  diagonal is positive (Mezzadri's correction, which makes Q uniform)."""
  api = "orthogonal"
  k = _key(key, api)
  _no_sharding(out_sharding, api)
  n = _size(n, api, "n")
  m = n if m is None else _size(m, api, "m")
  shape = tuple(_shape(shape, f"random.{api}"))
  d = _float_dtype(dtype, api)
  w = _work(d)
  tall, narrow = max(n, m), min(n, m)
  if narrow == 0:
    return jnp.zeros(shape + (n, m), _np_dtype(d))
  z = _normal(k, shape + (tall, narrow), w)
  q, r = _linalg.qr(z)
  sign = jnp.where(jnp.diagonal(r, axis1=-2, axis2=-1) < 0, -1.0, 1.0)
  q = q * jnp.expand_dims(jnp.astype(sign, _np_dtype(w)), -2)
  if n < m:
    q = jnp.swapaxes(q, -1, -2)
  return jnp.astype(q, _np_dtype(d))


# ---- gamma (for f) ----

def _gamma(k, a, shape, w):
  """Gamma(a, 1) draws of shape shape (a broadcast to it, work dtype w): Marsaglia and Tsang's
  squeeze, every element redrawn with keys folded with the round until accepted; a < 1 as
  Gamma(a + 1) * U^(1/a)."""
  a = jnp.broadcast_to(a, shape)
  boost = a < 1
  a1 = jnp.where(boost, a + 1.0, a)
  dd = a1 - 1.0 / 3.0
  c = 1.0 / jnp.sqrt(9.0 * dd)
  k_loop, k_boost = _split(k, 2)

  def body(state):
    r, done, out = state
    kn, ku = _split(_fold(k_loop, r), 2)
    x = _normal(kn, shape, w)
    v = (1.0 + c * x) ** 3
    u = _open_uniform(ku, shape, w)
    pos = v > 0
    ok = pos & (jnp.log(u) < 0.5 * x * x + dd - dd * v + dd * jnp.log(jnp.where(pos, v, 1.0)))
    return r + 1, done | ok, jnp.where(ok & ~done, dd * v, out)

  init = (asarray(0, np.int32), jnp.zeros(shape, bool), jnp.zeros(shape, _np_dtype(w)))
  _, _, g = _while_loop(lambda st: ~jnp.all(st[1]), body, init)
  u = _open_uniform(k_boost, shape, w)
  return jnp.where(boost, g * u ** (1.0 / jnp.where(boost, a, 1.0)), g)


def f(key, dfnum, dfden, shape=None, dtype=None, *, out_sharding=None):
  """F(dfnum, dfden) draws: (X / dfnum) / (Y / dfden) with X, Y chi-squared of those degrees
  of freedom (2 Gamma(df / 2)), from two keys split from key."""
  api = "f"
  k = _key(key, api)
  _no_sharding(out_sharding, api)
  d = _float_dtype(dtype, api)
  dfnum, dfden = _param(dfnum, api, "dfnum"), _param(dfden, api, "dfden")
  shape = _result_shape(api, shape, tuple(dfnum.shape), tuple(dfden.shape))
  w = _work(d)
  dn = jnp.astype(dfnum, _np_dtype(w))
  dm = jnp.astype(dfden, _np_dtype(w))
  k_den, k_num = _split(k, 2)
  num = 2.0 * _gamma(k_num, dn / 2.0, shape, w) / dn
  den = 2.0 * _gamma(k_den, dm / 2.0, shape, w) / dm
  return jnp.astype(num / den, _np_dtype(d))


# ---- poisson ----

def _ptrs_accept(lam, u, v):
  """Hormann's PTRS for lam >= 10: the candidate count and whether it is accepted, from a
  uniform u on [0, 1) and v on (0, 1)."""
  slam, loglam = jnp.sqrt(lam), jnp.log(lam)
  b = 0.931 + 2.53 * slam
  a = -0.059 + 0.02483 * b
  inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
  v_r = 0.9277 - 3.6224 / (b - 2.0)
  us_ = u - 0.5
  us = 0.5 - jnp.abs(us_)
  safe_us = jnp.where(us > 0, us, 1.0)
  cand = jnp.floor((2.0 * a / safe_us + b) * us_ + lam + 0.43)
  quick = (us >= 0.07) & (v <= v_r)
  reject = (us <= 0) | (cand < 0) | ((us < 0.013) & (v > us))
  safe_k = jnp.where(cand < 0, 0.0, cand)
  lhs = jnp.log(v) + jnp.log(inv_alpha) - jnp.log(a / (safe_us * safe_us) + b)
  full = lhs <= -lam + safe_k * loglam - _lgamma(safe_k + 1.0)
  return cand, quick | (~reject & full)


def _count_or_reject(k, shape, small, done, count_step, reject_step):
  """The rounds of a two-regime count sampler (float64 counts of shape `shape`). Round r draws
  three keys from k: where `small`, count_step(state, key) advances a running state and says
  whether the count stops at this round (the count is then r); elsewhere
  reject_step(k_u, k_v) proposes a candidate and says whether it is accepted. Each element
  keeps its first result (`done` ones start decided at 0); the loop ends when all have one."""
  def body(st):
    r, done, out, state = st
    k_count, k_u, k_v = _split(_fold(k, r), 3)
    state, stop = count_step(state, k_count)
    cand, ok = reject_step(k_u, k_v)
    take_small = small & stop & ~done
    take_big = ~small & ok & ~done
    out = jnp.where(take_small, jnp.astype(r, np.float64), jnp.where(take_big, cand, out))
    return r + 1, done | take_small | take_big, out, state

  init = (asarray(0, np.int32), done, jnp.zeros(shape, np.float64),
          jnp.zeros(shape, np.float64))
  return _while_loop(lambda st: ~jnp.all(st[1]), body, init)[2]


def _poisson_loop(k, lam, shape):
  """Poisson(lam) counts (float64) for finite lam >= 0 (lam of shape shape, float64): rates
  below 10 count uniforms whose running product stays above exp(-lam) (Knuth: one uniform per
  round, the count is the round it stops), larger ones run PTRS."""
  small = lam < 10.0
  lam_big = jnp.where(small, 10.0, lam)

  def knuth(acc, key):  # one more uniform in the running product (as a sum of logs)
    acc = acc + jnp.log(_open_uniform(key, shape, "f64"))
    return acc, acc <= -lam

  return _count_or_reject(k, shape, small, lam == 0, knuth, lambda k_u, k_v: _ptrs_accept(
      lam_big, _uniform(k_u, shape, "f64"), _open_uniform(k_v, shape, "f64")))


def poisson(key, lam, shape=None, dtype=None, *, out_sharding=None):
  """Poisson(lam) counts of an integer dtype (int32 by default), exact in distribution; lam
  broadcasts to shape. As JAX's: lam < 0 or NaN gives -1, an infinite (or too large) lam the
  dtype's largest value."""
  api = "poisson"
  k = _key(key, api)
  _no_sharding(out_sharding, api)
  d = _dt.to_core(np.int32 if dtype is None else dtype, f"random.{api}")
  if d not in _dt.INT_CORE:
    raise PartixError(f"[random.{api}] dtype must be an integer type, got {_dt.dtype(dtype)}")
  lam = _param(lam, api, "lam")
  shape = _result_shape(api, shape, tuple(lam.shape))
  with _dt.wide():  # the rejection loop counts in float64
    lam = jnp.broadcast_to(jnp.astype(lam, np.float64), shape)
    bad = jnp.isnan(lam) | (lam < 0)
    top = float(np.iinfo(_np_dtype(d)).max)
    huge = ~bad & (lam > 4.0 * top)  # no count of such a rate fits the dtype
    counts = _poisson_loop(k, jnp.where(bad | huge, 0.0, lam), shape)
    counts = jnp.where(bad, -1.0, jnp.where(huge, top, jnp.minimum(counts, top)))
    return jnp.astype(counts, _np_dtype(d))


# ---- binomial ----

def _btrs_accept(n, q, u, v):
  """Hormann's BTRS for n * q > 10 (q <= 0.5): the candidate count and whether it is accepted,
  from a uniform u on [0, 1) and v on (0, 1)."""
  spq = jnp.sqrt(n * q * (1.0 - q))
  b = 1.15 + 2.53 * spq
  a = -0.0873 + 0.0248 * b + 0.01 * q
  c = n * q + 0.5
  v_r = 0.92 - 4.2 / b
  alpha = (2.83 + 5.1 / b) * spq
  lpq = jnp.log(q / (1.0 - q))
  mode = jnp.floor((n + 1.0) * q)
  h = _lgamma(mode + 1.0) + _lgamma(n - mode + 1.0)
  us_ = u - 0.5
  us = 0.5 - jnp.abs(us_)
  safe_us = jnp.where(us > 0, us, 1.0)
  cand = jnp.floor((2.0 * a / safe_us + b) * us_ + c)
  inside = (us > 0) & (cand >= 0) & (cand <= n)
  quick = (us >= 0.07) & (v <= v_r)
  kk = jnp.clip(cand, 0.0, n)
  lhs = jnp.log(v * alpha / (a / (safe_us * safe_us) + b))
  full = lhs <= h - _lgamma(kk + 1.0) - _lgamma(n - kk + 1.0) + (kk - mode) * lpq
  return cand, inside & (quick | full)


def _binomial_loop(k, n, q, shape):
  """Binomial(n, q) counts (float64) for whole n >= 0 and 0 <= q <= 0.5 (of shape shape): for
  n q <= 10 the successes are counted by geometric waiting times (one per round, stopping
  when the next success falls past trial n), otherwise BTRS."""
  trivial = (n == 0) | (q == 0)
  small = n * q <= 10.0
  q_small = jnp.where(trivial, 0.5, q)
  n_big = jnp.where(small, 100.0, n)
  q_big = jnp.where(small, 0.5, q)
  log_fail = jnp.log1p(-q_small)

  def waiting_time(pos, key):  # the trial of the next success
    pos = pos + jnp.floor(jnp.log(_open_uniform(key, shape, "f64")) / log_fail) + 1.0
    return pos, pos > n

  return _count_or_reject(k, shape, small, trivial, waiting_time, lambda k_u, k_v: _btrs_accept(
      n_big, q_big, _uniform(k_u, shape, "f64"), _open_uniform(k_v, shape, "f64")))


def _binomial(k, n, p, shape, d):
  """binomial's draws from the core key k: n, p Arrays broadcasting to shape, d a core float
  dtype."""
  with _dt.wide():  # the rejection loop counts in float64
    return _binomial_wide(k, n, p, shape, d)


def _binomial_wide(k, n, p, shape, d):
  n = jnp.broadcast_to(jnp.astype(n, np.float64), shape)
  p = jnp.broadcast_to(jnp.astype(p, np.float64), shape)
  low = p < 0.5
  q = jnp.where(low, p, 1.0 - p)
  bad = jnp.isnan(n) | (n < 0) | jnp.isnan(q) | (q < 0)
  inf = jnp.isinf(n) & ~bad
  whole = jnp.where(bad | inf, 0.0, jnp.floor(n))
  counts = _binomial_loop(k, whole, jnp.where(bad, 0.0, q), shape)
  counts = jnp.where(low, counts, whole - counts)
  counts = jnp.where(bad, np.nan, jnp.where(inf, np.inf, counts))
  return jnp.astype(counts, _np_dtype(d))


def binomial(key, n, p, shape=None, dtype=None):
  """Binomial(n, p) counts as floats (float32 by default), exact in distribution; n and p
  broadcast to shape. As JAX's: n is floored; n < 0 or NaN, or p outside [0, 1] or NaN, gives
  NaN; an infinite n gives inf."""
  api = "binomial"
  k = _key(key, api)
  d = _float_dtype(dtype, api)
  n, p = _param(n, api, "n"), _param(p, api, "p")
  shape = _result_shape(api, shape, tuple(n.shape), tuple(p.shape))
  return _binomial(k, n, p, shape, d)


# ---- multinomial ----

def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
  """Counts of n trials over the outcomes on p's last axis (p need not sum to 1: it is
  normalized): outcome i takes Binomial(remaining trials, p_i / (p_i + ... + p_last)), each
  from its own key split from key, in a scan over the outcomes. shape is the result's shape
  (the outcomes' axis last), p.shape by default."""
  api = "multinomial"
  k = _key(key, api)
  n, p = _param(n, api, "n"), _param(p, api, "p")
  if p.ndim < 1:
    raise PartixError(f"[random.{api}] p must have an outcomes axis, got shape {tuple(p.shape)}")
  rt = _dt.to_core(jnp.result_type(n, p))
  if rt not in ("f16", "bf16", "f32", "f64"):
    rt = "f32"
  # JAX casts the counts to dtype, None meaning the default float type (float32 here)
  d = "f32" if dtype is None else _dt.to_core(dtype, f"random.{api}")
  if shape is None:
    shape = tuple(p.shape)
  shape = tuple(_shape(shape, f"random.{api}"))
  if not shape:
    raise PartixError(f"[random.{api}] shape () has no outcomes axis (the last)")
  _result_shape(api, shape, tuple(p.shape))
  _result_shape(api, shape[:-1], tuple(n.shape))
  if not isinstance(unroll, (bool, int, np.integer)) or (not isinstance(unroll, bool)
                                                          and unroll < 1):
    raise PartixError(f"[random.{api}] unroll {unroll!r} must be a positive int or a bool")
  w = np.float64 if rt == "f64" else np.float32
  pm = jnp.moveaxis(jnp.broadcast_to(jnp.astype(p, w), shape), -1, 0)
  rest = jnp.flip(jnp.cumsum(jnp.flip(pm, 0), axis=0), 0)  # p_i + ... + p_last
  ratios = jnp.clip(pm / jnp.where(rest == 0, 1.0, rest), 0.0, 1.0)
  keys = Array(_core.random_split(k, shape[-1]))
  remaining = jnp.broadcast_to(jnp.astype(n, w), shape[:-1])

  def step(left, x):
    ratio, kx = x
    count = _binomial(kx._a, left, ratio, shape[:-1], _dt.to_core(w))
    return left - count, count

  _, counts = _scan(step, remaining, (ratios, keys))
  return jnp.astype(jnp.moveaxis(counts, 0, -1), _np_dtype(d))
