"""partix.random: counter-based (threefry2x32) random numbers; a key is an int32[2] array, and
the value at each global index depends only on the key and the index, so an array created
directly in its sharding is the same on every mesh."""
import numpy as _np

from partix import _core
from partix._src import dtypes as _dt
from partix._src.core import Array, PartixError, asarray
from partix._src.numpy_ops import _creation_sharding, _shape


def _key_bits(data):
  """Host key data as JAX gives it (uint32) becomes partix's int32 key of the same bits."""
  if isinstance(data, (_np.ndarray, _np.generic)) and data.dtype == _np.uint32:
    return _np.ascontiguousarray(data).view(_np.int32)
  return data


def _key(key, api):
  k = asarray(_key_bits(key))
  if k.shape[-1:] != (2,) or not _dt.is_int(k.dtype):
    raise PartixError(f"[random.{api}] {k._aval_str()} is not a key (int32[2]); make one with "
                      "random.key(seed)")
  return k._a


def key(seed, *, impl=None):
  """A key from an integer seed."""
  if isinstance(seed, Array):
    seed = int(seed)
  if not isinstance(seed, (int, _np.integer)):
    raise PartixError(f"[random.key] seed {seed!r} is not an int")
  seed = int(seed)
  if not -2**63 <= seed < 2**63:  # as JAX: any int64; its 64 bits make the key
    raise PartixError(f"[random.key] seed {seed} is out of the int64 range [-2**63, 2**63)")
  return Array(_core.random_key(seed & 0xFFFFFFFFFFFFFFFF))


PRNGKey = key


def key_data(keys):
  return keys


def wrap_key_data(key_bits_array, *, impl=None):
  return asarray(_key_bits(key_bits_array))


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
  return out if len(shape) == 1 else out.reshape(shape + (2,))


def fold_in(key, data):
  return Array(_core.random_fold_in(_key(key, "fold_in"), asarray(data, _np.int32)._a))


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
  if d not in ("i32", "i64"):
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
  import partix.numpy as jnp
  n = x if isinstance(x, int) else asarray(x).shape[axis]
  order = jnp.argsort(uniform(key, (n,)))
  return order if isinstance(x, int) else jnp.take(asarray(x), order, axis=axis)


def __getattr__(name):
  raise AttributeError(f"module 'partix.random' has no attribute {name!r}: partix does not "
                       f"provide jax.random.{name}")
