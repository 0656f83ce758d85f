"""partix.nn: activations and helpers (as jax.nn)."""
import numpy as _np

from partix import _core
from partix._src.core import Array, asarray, core


def _f(name, fn):
  def op(x):
    a = core(x)
    if a.dtype in ("bool", "i32", "i64"):
      a = _core.astype(a, "f32")
    return Array(fn(a))
  op.__name__ = name
  return op


relu = _f("relu", _core.relu)
silu = _f("silu", _core.silu)
swish = silu
sigmoid = _f("sigmoid", _core.logistic)


def gelu(x, approximate=True):
  return Array(_core.gelu(core(x), bool(approximate)))


def softmax(x, axis=-1, where=None, initial=None):
  return Array(_core.softmax(core(x), int(axis)))


def log_softmax(x, axis=-1, where=None, initial=None):
  return Array(_core.log_softmax(core(x), int(axis)))


def logsumexp(x, axis=None, keepdims=False):
  a = asarray(x)
  axes = list(range(a.ndim)) if axis is None else [axis] if isinstance(axis, int) else list(axis)
  return Array(_core.logsumexp(a._a, [ax % a.ndim for ax in axes], bool(keepdims)))


def one_hot(x, num_classes, *, dtype=_np.float32, axis=-1):
  from partix._src import dtypes
  return Array(_core.one_hot(core(x), int(num_classes), dtypes.to_core(dtype)))


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5):
  import partix.numpy as jnp
  x = asarray(x)
  m = jnp.mean(x, axis, keepdims=True) if mean is None else mean
  v = jnp.var(x, axis, keepdims=True) if variance is None else variance
  return (x - m) * Array(_core.rsqrt(core(v + epsilon)))
