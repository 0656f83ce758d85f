"""partix.random: counter-based (threefry2x32) random numbers; a key is an int32[2] array, and
the value at each global index depends only on the key and the index, so an array created
directly in its sharding is the same on every mesh."""
import math as _math

import numpy as _np

from partix import _core
from partix._src import dtypes as _dt
from partix._src.core import Array, PartixError, asarray
from partix._src.numpy_ops import _creation_sharding, _shape
from partix._src import prng as _prng
import partix.numpy as _jnp
from partix._src.lax_ops import lib_while_loop as _while_loop
from partix._src.random_more import (binomial, f, multinomial, multivariate_normal,  # noqa: F401
                                     orthogonal, poisson)


def _key_bits(data):
  """Host key data as JAX gives it (uint32) becomes partix's int32 key of the same bits."""
  if isinstance(data, (_np.ndarray, _np.generic)) and data.dtype == _np.uint32:
    return _np.ascontiguousarray(data).view(_np.int32)
  return data


def _key(key, api):
  k = asarray(_key_bits(_prng.key_data(key)))
  if k.shape[-1:] != (2,) or k._a.dtype not in ("i32", "u32"):
    raise PartixError(f"[random.{api}] {k._aval_str()} is not a key (int32[2]); make one with "
                      "random.key(seed)")
  # JAX's raw keys are uint32[2]: the integer convert keeps their bits.
  return k._a if k._a.dtype == "i32" else _core.astype(k._a, "i32")


def _raw_key(seed, api):
  """A seed's key data, int32[2]: as JAX's threefry seeding, the high word is the seed's upper
  32 bits and the low word its lower 32; without x64 a seed is a 32-bit integer (JAX converts
  it so), whose upper word is 0. A traced or array seed is seeded in the program."""
  if isinstance(seed, (Array, _np.ndarray)) or (isinstance(seed, _np.generic) and
                                                not isinstance(seed, _np.integer)):
    return _prng.from_seed(seed)._data
  if isinstance(seed, bool) or not isinstance(seed, (int, _np.integer)):
    raise PartixError(f"[random.{api}] seed {seed!r} is not an int")
  seed = int(seed)
  if not -2**63 <= seed < 2**63:  # as JAX: any int64
    raise PartixError(f"[random.{api}] seed {seed} is out of the int64 range [-2**63, 2**63)")
  return Array(_core.random_key(seed & (0xFFFFFFFFFFFFFFFF if _dt._X64[0] else 0xFFFFFFFF)))


def key(seed, *, impl=None):
  """A typed key (dtype key<fry>, shape ()) from an integer seed; under vmap or jit the seed
  may be traced."""
  return _prng.KeyArray(_raw_key(seed, "key"))


# jax_enable_custom_prng (jax.enable_custom_prng()): PRNGKey gives typed keys too.
_custom_prng = [False]


def PRNGKey(seed, *, impl=None):  # noqa: N802 (JAX's name)
  """A raw key: the int32[2] key data (JAX's are uint32[2], of the same bits); a typed key
  under jax.enable_custom_prng()."""
  data = _raw_key(seed, "PRNGKey")
  return _prng.KeyArray(data) if _custom_prng[0] else data


def key_data(keys):
  """The key data of typed keys, int32[..., 2] (a raw key is its own data)."""
  return _prng.key_data(keys)


def wrap_key_data(key_bits_array, *, impl=None):
  """Typed keys over key data of shape [..., 2] (uint32 or int32 words)."""
  data = asarray(_key_bits(key_bits_array))
  if data.shape[-1:] != (2,) or data._a.dtype not in ("i32", "u32"):
    raise PartixError(f"[random.wrap_key_data] {data._aval_str()} is not key data "
                      "(uint32[..., 2])")
  return _prng.KeyArray(data if data._a.dtype == "i32" else Array(_core.astype(data._a, "i32")))


def _like_key(key, data):
  """New keys of the same kind as `key`: typed for typed keys, raw for raw ones."""
  return _prng.KeyArray(data) if _prng.is_typed(key) else data


def split(key, num=2):
  """num new keys, stacked (shape (num, 2)); num may be a shape tuple, as in JAX."""
  k = _key(key, "split")
  shape = tuple(num) if isinstance(num, (tuple, list)) else (num,)
  if not all(isinstance(d, (int, _np.integer)) and 0 <= d < 2**63 for d in shape):
    raise PartixError(f"[random.split] num {num!r} must be a non-negative int or a tuple of them")
  n = 1
  for d in shape:
    n *= int(d)
  if n >= 2**63:
    raise PartixError(f"[random.split] num {num!r} makes more keys than int64 counts")
  out = Array(_core.random_split(k, n))
  return _like_key(key, out if len(shape) == 1 else out.reshape(shape + (2,)))


def fold_in(key, data):
  return _like_key(key, Array(_core.random_fold_in(_key(key, "fold_in"),
                                                   asarray(data, _np.int32)._a)))


def _fdt(dtype, api):
  d = _dt.to_core(dtype if dtype is not None else _np.float32, api)
  if d not in ("f16", "bf16", "f32", "f64"):
    raise PartixError(f"[random.{api}] dtype must be a float type, got {_dt.dtype(dtype)}")
  return d


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0, *, out_sharding=None):
  return Array(_core.random_uniform(_key(key, "uniform"), _shape(shape, "random.uniform"),
                                    _fdt(dtype, "uniform"), float(minval), float(maxval),
                                    _creation_sharding(out_sharding, None, "random.uniform")))


def normal(key, shape=(), dtype=None, *, out_sharding=None):
  return Array(_core.random_normal(_key(key, "normal"), _shape(shape, "random.normal"),
                                   _fdt(dtype, "normal"),
                                   _creation_sharding(out_sharding, None, "random.normal")))


def truncated_normal(key, lower, upper, shape=(), dtype=None):
  return Array(_core.random_truncated_normal(_key(key, "truncated_normal"), float(lower),
                                             float(upper), _shape(shape, "truncated_normal"),
                                             _fdt(dtype, "truncated_normal")))


def bernoulli(key, p=0.5, shape=None):
  """True with probability p (a number, or an array broadcast to shape): uniform(key) < p."""
  if not isinstance(p, (int, float, _np.floating, _np.integer)):
    pa = asarray(p)
    shape = pa.shape if shape is None else tuple(shape)
    try:
      _np.broadcast_shapes(pa.shape, shape)
    except ValueError:
      raise PartixError(f"[random.bernoulli] p of shape {pa.shape} does not broadcast to shape "
                        f"{shape}") from None
    return uniform(key, shape) < pa
  shape = () if shape is None else shape
  return Array(_core.random_bernoulli(_key(key, "bernoulli"), float(p),
                                      _shape(shape, "random.bernoulli")))


def randint(key, shape, minval, maxval, dtype=None, *, out_sharding=None):
  d = _dt.to_core(dtype if dtype is not None else _np.int32, "randint")
  if d not in _dt.INT_CORE:
    raise PartixError(f"[random.randint] dtype must be an integer type, got {_dt.dtype(dtype)}")
  for v in (minval, maxval):
    if isinstance(v, (int, _np.integer)) and not -2**63 <= int(v) < 2**63:
      raise PartixError(f"[random.randint] minval and maxval must be ints of int64, got {v!r}")
  return Array(_core.random_randint(_key(key, "randint"), _shape(shape, "random.randint"),
                                    int(minval), int(maxval), d,
                                    _creation_sharding(out_sharding, None, "random.randint")))


def categorical(key, logits, axis=-1, shape=None):
  if shape is not None:
    raise PartixError("[random.categorical] shape= is not supported")
  return Array(_core.random_categorical(_key(key, "categorical"), asarray(logits)._a, int(axis)))


def permutation(key, x, axis=0, independent=False):
  n = x if isinstance(x, int) else asarray(x).shape[axis]
  order = _jnp.argsort(uniform(key, (n,)))
  return order if isinstance(x, int) else _jnp.take(asarray(x), order, axis=axis)


# ---- distributions by transformation of uniform and normal draws ----
# Each is a function of the key and the element's position only (as uniform and normal are),
# so it can be created in any sharding; values are not JAX's bit for bit (JAX derives some by
# other transformations), their distributions are.

def _open_uniform(key, shape, dtype, api):
  """Uniform on (0, 1): never 0, so its logarithm is finite."""
  d = _fdt(dtype, api)
  tiny = float(_np.finfo(_dt.from_core(d) if d != "bf16" else _np.float32).tiny)
  return uniform(key, shape, dtype, tiny, 1.0)


def exponential(key, shape=(), dtype=None):
  return -_jnp.log(_open_uniform(key, shape, dtype, "exponential"))


def gumbel(key, shape=(), dtype=None, mode="low"):
  return -_jnp.log(-_jnp.log(_open_uniform(key, shape, dtype, "gumbel")))


def laplace(key, shape=(), dtype=None):
  u = uniform(key, shape, dtype, -1.0, 1.0)
  return -_jnp.sign(u) * _jnp.log1p(-_jnp.abs(u))


def logistic(key, shape=(), dtype=None):
  u = _open_uniform(key, shape, dtype, "logistic")
  return _jnp.log(u) - _jnp.log1p(-u)


def cauchy(key, shape=(), dtype=None):
  u = _open_uniform(key, shape, dtype, "cauchy")
  return _jnp.tan(_np.pi * (u - 0.5))


def lognormal(key, sigma=1.0, shape=None, dtype=None):
  shape = () if shape is None else shape
  return _jnp.exp(normal(key, shape, dtype) * sigma)


def rademacher(key, shape=(), dtype=_np.int32):
  return _jnp.where(bernoulli(key, 0.5, shape), 1, -1).astype(dtype)


def maxwell(key, shape=(), dtype=None):
  """The norm of three independent standard normals."""
  shape = tuple(shape)
  return _jnp.sqrt(_jnp.sum(normal(key, shape + (3,), dtype) ** 2, axis=-1))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
  k1, k2 = split(key)
  return maxwell(k1, shape, dtype) * scale * rademacher(k2, shape, _np.float32) + loc


def pareto(key, b, shape=None, dtype=None):
  shape = () if shape is None else shape
  return _jnp.exp(exponential(key, shape, dtype) / b)


def weibull_min(key, scale, concentration, shape=(), dtype=None):
  return scale * _jnp.power(exponential(key, shape, dtype), 1.0 / concentration)


def gamma(key, a, shape=None, dtype=None):
  """Gamma(a, 1) samples: Marsaglia and Tsang's method, every element redrawn (from keys folded
  with the round) until it is accepted; a < 1 as Gamma(a + 1) * U^(1/a)."""
  d_ = _fdt(dtype, "gamma")
  a = _jnp.asarray(a, _dt.from_core(d_) if d_ != "bf16" else _np.float32)
  shape = tuple(a.shape) if shape is None else tuple(_shape(shape, "random.gamma"))
  a = _jnp.broadcast_to(a, shape)
  boost = a < 1
  a1 = _jnp.where(boost, a + 1, a)
  d = a1 - 1.0 / 3.0
  c = 1.0 / _jnp.sqrt(9.0 * d)
  k1, k2 = split(key)

  def body(state):
    r, done, out = state
    kr = fold_in(k1, r)
    kn, ku = split(kr)
    x = normal(kn, shape, dtype)
    v = (1.0 + c * x) ** 3
    u = _open_uniform(ku, shape, dtype, "gamma")
    ok = (v > 0) & (_jnp.log(u) < 0.5 * x * x + d - d * v + d * _jnp.log(_jnp.where(v > 0, v, 1.0)))
    take = ok & ~done
    return r + 1, done | ok, _jnp.where(take, d * v, out)
  _, _, g = _while_loop(lambda st: ~_jnp.all(st[1]), body,
                       (_jnp.asarray(0), _jnp.zeros(shape, bool), _jnp.zeros(shape, a.dtype)))
  u = _open_uniform(k2, shape, dtype, "gamma")
  return _jnp.where(boost, g * u ** (1.0 / a), g).astype(a.dtype)


def loggamma(key, a, shape=None, dtype=None):
  return _jnp.log(gamma(key, a, shape, dtype))


def beta(key, a, b, shape=None, dtype=None):
  """Beta(a, b) samples: X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b)."""
  if shape is None:
    shape = _jnp.broadcast_shapes(_np.shape(a), _np.shape(b))
  ka, kb = split(key)
  x, y = gamma(ka, a, shape, dtype), gamma(kb, b, shape, dtype)
  return x / (x + y)


def dirichlet(key, alpha, shape=None, dtype=None):
  """Dirichlet(alpha) samples over alpha's last axis: normalized Gamma(alpha_i) draws."""
  alpha = _jnp.asarray(alpha)
  shape = tuple(alpha.shape[:-1]) if shape is None else tuple(_shape(shape, "random.dirichlet"))
  g = gamma(key, alpha, shape + tuple(alpha.shape[-1:]), dtype)
  return g / _jnp.sum(g, axis=-1, keepdims=True)


def chisquare(key, df, shape=None, dtype=None):
  """Chi-squared(df) samples: 2 * Gamma(df / 2)."""
  return 2.0 * gamma(key, _jnp.asarray(df) / 2.0, shape, dtype)


def t(key, df, shape=(), dtype=None):
  """Student's t(df) samples: N / sqrt(Chi2(df) / df)."""
  kn, kc = split(key)
  df = _jnp.asarray(df)
  shape = tuple(_shape(shape, "random.t")) if shape else tuple(df.shape)
  return normal(kn, shape, dtype) / _jnp.sqrt(chisquare(kc, df, shape, dtype) / df)


def rayleigh(key, scale=1.0, shape=None, dtype=None):
  """Rayleigh(scale) samples: scale * sqrt(-2 log U)."""
  shape = () if shape is None else shape
  return scale * _jnp.sqrt(-2.0 * _jnp.log(_open_uniform(key, shape, dtype, "rayleigh")))


def triangular(key, left, mode, right, shape=None, dtype=None):
  """Triangular(left, mode, right) samples by inverting its CDF."""
  if shape is None:
    shape = _jnp.broadcast_shapes(_np.shape(left), _np.shape(mode), _np.shape(right))
  u = _open_uniform(key, shape, dtype, "triangular")
  left, mode, right = (_jnp.asarray(v, u.dtype) for v in (left, mode, right))
  c = (mode - left) / (right - left)
  lo = left + _jnp.sqrt(u * (right - left) * (mode - left))
  hi = right - _jnp.sqrt((1 - u) * (right - left) * (right - mode))
  return _jnp.where(u < c, lo, hi)


def wald(key, mean, shape=None, dtype=None):
  """Wald (inverse Gaussian, scale 1) samples: Michael, Schucany and Haas's transformation."""
  if shape is None:
    shape = _np.shape(mean)
  kn, ku = split(key)
  m = _jnp.asarray(mean, _dt.from_core(_fdt(dtype, "wald")) if _fdt(dtype, "wald") != "bf16"
                  else _np.float32)
  y = normal(kn, shape, dtype) ** 2
  x = m + m * m * y / 2 - m / 2 * _jnp.sqrt(4 * m * y + (m * y) ** 2)
  u = uniform(ku, shape, dtype)
  return _jnp.where(u <= m / (m + x), x, m * m / x)


def geometric(key, p, shape=None, dtype=_np.int32):
  """Geometric(p) samples: the number of trials up to the first success (>= 1)."""
  if shape is None:
    shape = _np.shape(p)
  u = _open_uniform(key, shape, None, "geometric")
  return (_jnp.floor(_jnp.log(u) / _jnp.log1p(-_jnp.asarray(p, _np.float32))) + 1).astype(dtype)


def generalized_normal(key, p, shape=(), dtype=None):
  """Generalized normal samples of shape p: sign * Gamma(1/p)^(1/p)."""
  kg, ks = split(key)
  g = gamma(kg, 1.0 / p, shape, dtype)
  sign = _jnp.where(bernoulli(ks, 0.5, tuple(_shape(shape, "generalized_normal"))), 1.0, -1.0)
  return (sign * g ** (1.0 / p)).astype(g.dtype)


def ball(key, d, p=2, shape=(), dtype=None):
  """Points uniform in the d-dimensional unit p-ball (last axis d)."""
  shape = tuple(_shape(shape, "ball"))
  kg, ke = split(key)
  g = generalized_normal(kg, p, shape + (d,), dtype)
  e = exponential(ke, shape, dtype)
  norm = _jnp.sum(_jnp.abs(g) ** p, axis=-1, keepdims=True) + _jnp.expand_dims(e, -1)
  return g / norm ** (1.0 / p)


def clone(key):
  """A copy of the key (partix's keys are values: the same key again)."""
  return key if _prng.is_typed(key) else asarray(key)


def bits(key, shape=(), dtype=None):
  """Random bits: each element of an unsigned (or signed) integer dtype of at most 32 bits
  drawn uniformly over all its values; uint32 by default, as JAX."""
  d = _dt.to_core(dtype if dtype is not None else _np.uint32, "random.bits")
  if d not in _dt.INT_CORE or d == "i64":
    raise PartixError(f"[random.bits] dtype must be an integer type of at most 32 bits, got "
                      f"{_dt.dtype(dtype)}")
  return Array(_core.random_bits(_key(key, "bits"), _shape(shape, "random.bits"), d))


def choice(key, a, shape=(), replace=True, p=None, axis=0):
  """Elements of a (or of arange(a)) along axis: uniformly, or with probabilities p; without
  replacement, distinct positions."""
  arr = None if isinstance(a, (int, _np.integer)) else asarray(a)
  n = int(a) if arr is None else arr.shape[axis]
  shape = (shape,) if isinstance(shape, int) else tuple(shape)
  count = _math.prod(shape)
  if not replace and count > n:
    raise PartixError(f"[random.choice] cannot take {count} samples without replacement from "
                      f"{n}")
  if p is None:
    idx = randint(key, shape, 0, n) if replace else permutation(key, n)[:count].reshape(shape)
  elif replace:
    logits = _jnp.log(asarray(p))
    idx = categorical(key, _jnp.broadcast_to(logits, shape + (n,)), axis=-1)
  else:  # Gumbel top-k: distinct positions, drawn with the weights p
    g = gumbel(key, (n,)) + _jnp.log(asarray(p))
    idx = _jnp.argsort(-g)[:count].reshape(shape)
  return idx if arr is None else _jnp.take(arr, idx, axis=axis)


def __getattr__(name):
  raise AttributeError(f"module 'partix.random' has no attribute {name!r}: partix does not "
                       f"provide jax.random.{name}")
