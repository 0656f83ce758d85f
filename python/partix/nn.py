"""partix.nn: activations and helpers (as jax.nn)."""
import numpy as _np

from partix import _core
from partix._src import dtypes as _dtypes
from partix._src.core import Array, PartixError, asarray, core


def _float(x, api):
  a = core(x, api=api)
  if a.dtype in ("bool", "i32", "i64"):
    a = _core.astype(a, "f32")
  return a


def _f(name, fn):
  def op(x):
    return Array(fn(_float(x, name)))
  op.__name__ = name
  op.__doc__ = f"jax.nn.{name}, elementwise."
  return op


relu = _f("relu", _core.relu)
silu = _f("silu", _core.silu)
swish = silu
sigmoid = _f("sigmoid", _core.logistic)


def gelu(x, approximate=True):
  return Array(_core.gelu(_float(x, "gelu"), bool(approximate)))


def _axis(axis, ndim, api):
  from partix._src.numpy_ops import _norm_axis
  return _norm_axis(axis, ndim, api)


def softmax(x, axis=-1, where=None, initial=None):
  if where is not None:
    raise PartixError("[softmax] where= is not supported")
  a = _float(x, "softmax")
  return Array(_core.softmax(a, _axis(axis, a.ndim, "softmax")))


def log_softmax(x, axis=-1, where=None, initial=None):
  if where is not None:
    raise PartixError("[log_softmax] where= is not supported")
  a = _float(x, "log_softmax")
  return Array(_core.log_softmax(a, _axis(axis, a.ndim, "log_softmax")))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
  if b is not None or return_sign or where is not None:
    raise PartixError("[logsumexp] b=, return_sign= and where= are not supported")
  from partix._src.numpy_ops import _norm_axes
  x = _float(a, "logsumexp")
  return Array(_core.logsumexp(x, _norm_axes(axis, len(x.shape), "logsumexp"), bool(keepdims)))


def one_hot(x, num_classes, *, dtype=_np.float32, axis=-1):
  """One-hot over a new axis; labels outside [0, num_classes) give all-zero rows (as JAX)."""
  import partix.numpy as jnp
  if not isinstance(num_classes, (int, _np.integer)) or num_classes < 0:
    raise PartixError(f"[one_hot] num_classes must be a non-negative int, got {num_classes!r}")
  dt = _dtypes.to_core(dtype, "one_hot")
  a = asarray(x, api="one_hot")
  if _dtypes.is_int(a.dtype):
    out = Array(_core.one_hot(a._a, int(num_classes), dt))
  else:  # float labels compare equal to their class, as in JAX
    classes = Array(_core.iota([int(num_classes)], 0, a._a.dtype))
    out = jnp.astype(jnp.equal(jnp.expand_dims(a, -1), classes), dtype)
  ax = _axis(axis, out.ndim, "one_hot")
  return out if ax == out.ndim - 1 else jnp.moveaxis(out, -1, ax)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
  import partix.numpy as jnp
  x = Array(_float(x, "standardize"))
  m = jnp.mean(x, axis, keepdims=True) if mean is None else mean
  v = jnp.var(x, axis, keepdims=True) if variance is None else variance
  return (x - m) * Array(_core.rsqrt(core(v + epsilon)))
