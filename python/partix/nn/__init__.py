"""partix.nn: activations and helpers (as jax.nn)."""
import numpy as _np

from partix import _core
from partix._src import dtypes as _dtypes
from partix._src.core import Array, PartixError, asarray, core, wrap
from partix._src.numpy_ops import _norm_axis
from partix._src.numpy_ops import _norm_axes
import partix.numpy as _jnp


def _float(x, api):
  a = core(x, api=api)
  if a.dtype in _dtypes.INT_OR_BOOL_CORE:
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
  return _norm_axis(axis, ndim, api)


def softmax(x, axis=-1, where=None, initial=None):
  """jax.nn.softmax; where= leaves elements out (they get 0)."""
  a = _float(x, "softmax")
  if where is not None:
    m = _jnp.broadcast_to(_jnp.asarray(where), a.shape)
    shifted = _jnp.where(m, wrap(a), -_np.inf)
    e = _jnp.exp(shifted - _jnp.max(shifted, axis=axis, keepdims=True, initial=-_np.inf))
    return _jnp.where(m, e / _jnp.sum(e, axis=axis, keepdims=True), 0.0)
  return Array(_core.softmax(a, _axis(axis, a.ndim, "softmax")))


def log_softmax(x, axis=-1, where=None, initial=None):
  """jax.nn.log_softmax; where= leaves elements out (they get -inf)."""
  a = _float(x, "log_softmax")
  if where is not None:
    m = _jnp.broadcast_to(_jnp.asarray(where), a.shape)
    return _jnp.where(m, wrap(a) - logsumexp(wrap(a), axis=axis, keepdims=True, where=m),
                     -_np.inf)
  return Array(_core.log_softmax(a, _axis(axis, a.ndim, "log_softmax")))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
  """jax.nn.logsumexp: log(sum(b * exp(a))) over axis, stable; b= weights (the sign of the sum
  with return_sign=True, else nan where it is negative), where= the elements taken."""
  x = _float(a, "logsumexp")
  if b is None and not return_sign and where is None:
    return Array(_core.logsumexp(x, _norm_axes(axis, len(x.shape), "logsumexp"),
                                 bool(keepdims)))
  v = wrap(x)
  if b is not None:
    b = _jnp.asarray(b, dtype=v.dtype)
    v, b = _jnp.broadcast_arrays(v, b)
  m = None if where is None else _jnp.broadcast_to(_jnp.asarray(where), v.shape)
  if m is not None:
    v = _jnp.where(m, v, -_np.inf)
  top = _jnp.max(v, axis=axis, keepdims=True, initial=-_np.inf)
  top = _jnp.where(_jnp.isfinite(top), top, 0.0)
  e = _jnp.exp(v - top)
  if b is not None:
    e = e * b
  s = _jnp.sum(e, axis=axis, keepdims=True)
  sign = _jnp.sign(s)
  out = _jnp.log(_jnp.abs(s)) + top
  if not keepdims:
    out, sign = (_jnp.squeeze(t, axis=axis) if axis is not None else _jnp.reshape(t, ())
                 for t in (out, sign))
  if return_sign:
    return out, sign
  return _jnp.where(sign < 0, _np.nan, out)


def one_hot(x, num_classes, *, dtype=_np.float32, axis=-1):
  """One-hot over a new axis; labels outside [0, num_classes) give all-zero rows (as JAX)."""
  if not isinstance(num_classes, (int, _np.integer)) or num_classes < 0:
    raise PartixError(f"[one_hot] num_classes must be a non-negative int, got {num_classes!r}")
  dt = _dtypes.to_core(dtype, "one_hot")
  a = asarray(x, api="one_hot")
  if _dtypes.is_int(a.dtype):
    out = Array(_core.one_hot(a._a, int(num_classes), dt))
  else:  # float labels compare equal to their class, as in JAX
    classes = Array(_core.iota([int(num_classes)], 0, a._a.dtype))
    out = _jnp.astype(_jnp.equal(_jnp.expand_dims(a, -1), classes), dtype)
  ax = _axis(axis, out.ndim, "one_hot")
  return out if ax == out.ndim - 1 else _jnp.moveaxis(out, -1, ax)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
  x = Array(_float(x, "standardize"))
  m = _jnp.mean(x, axis, keepdims=True) if mean is None else mean
  v = _jnp.var(x, axis, keepdims=True) if variance is None else variance
  return (x - m) * Array(_core.rsqrt(core(v + epsilon)))


# ---- more of jax.nn, composed from the ops above ----

def softplus(x):
  x = Array(_float(x, "softplus"))
  return _jnp.logaddexp(x, 0.0)


def log_sigmoid(x):
  return -softplus(-Array(_float(x, "log_sigmoid")))


def leaky_relu(x, negative_slope=0.01):
  x = Array(_float(x, "leaky_relu"))
  return _jnp.where(x >= 0, x, negative_slope * x)


def elu(x, alpha=1.0):
  x = Array(_float(x, "elu"))
  return _jnp.where(x > 0, x, alpha * _jnp.expm1(_jnp.minimum(x, 0.0)))


def celu(x, alpha=1.0):
  x = Array(_float(x, "celu"))
  return _jnp.maximum(x, 0.0) + alpha * _jnp.expm1(_jnp.minimum(x, 0.0) / alpha)


def selu(x):
  return 1.0507009873554804934193349852946 * elu(x, 1.6732632423543772848170429916717)


def relu6(x):
  return _jnp.clip(Array(_float(x, "relu6")), 0.0, 6.0)


def hard_tanh(x):
  return _jnp.clip(Array(_float(x, "hard_tanh")), -1.0, 1.0)


def hard_sigmoid(x):
  return relu6(Array(_float(x, "hard_sigmoid")) + 3.0) / 6.0


def hard_silu(x):
  x = Array(_float(x, "hard_silu"))
  return x * hard_sigmoid(x)


hard_swish = hard_silu


def mish(x):
  x = Array(_float(x, "mish"))
  return x * _jnp.tanh(softplus(x))


def glu(x, axis=-1):
  x = Array(_float(x, "glu"))
  ax = _axis(axis, x.ndim, "glu")
  if x.shape[ax] % 2:
    raise PartixError(f"[glu] axis {ax} of size {x.shape[ax]} does not split in two halves")
  a, b = _jnp.split(x, 2, axis=ax)
  return a * sigmoid(b)


def tanh(x):
  return Array(_core.tanh(_float(x, "tanh")))


def sparse_plus(x):
  """jax.nn.sparse_plus: 0 below -1, (x + 1)^2 / 4 between, x above 1 (softplus's sparse
  counterpart)."""
  x = wrap(_float(x, "sparse_plus"))
  return _jnp.where(x <= -1, 0.0, _jnp.where(x >= 1, x, (x + 1) ** 2 / 4))


def sparse_sigmoid(x):
  """jax.nn.sparse_sigmoid: sparse_plus's derivative, 0 below -1, (x + 1) / 2 between, 1
  above 1."""
  x = wrap(_float(x, "sparse_sigmoid"))
  return _jnp.where(x <= -1, 0.0, _jnp.where(x >= 1, 1.0, (x + 1) / 2))


def identity(x):
  return asarray(x, api="identity")


def soft_sign(x):
  x = wrap(_float(x, "soft_sign"))
  return x / (_jnp.abs(x) + 1)


def squareplus(x, b=4):
  """jax.nn.squareplus: (x + sqrt(x^2 + b)) / 2."""
  x = wrap(_float(x, "squareplus"))
  return (x + _jnp.sqrt(x * x + b)) / 2


def log1mexp(x):
  """log(1 - exp(-x)) for x > 0, accurate for small and large x."""
  x = wrap(_float(x, "log1mexp"))
  small = x < _np.log(2.0)
  return _jnp.where(small, _jnp.log(-_jnp.expm1(-x)), _jnp.log1p(-_jnp.exp(-x)))


def logmeanexp(x, axis=None, where=None, keepdims=False):
  """log(mean(exp(x))) over axis, computed stably."""
  x = wrap(_float(x, "logmeanexp"))
  n = (_jnp.sum(_jnp.broadcast_to(_jnp.asarray(where), x.shape), axis=axis, keepdims=keepdims)
       if where is not None else _np.prod([x.shape[a] for a in (
           range(x.ndim) if axis is None else [axis] if isinstance(axis, int) else axis)]))
  return logsumexp(x, axis=axis, keepdims=keepdims, where=where) - _jnp.log(n)


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None,
                          is_causal=False, query_seq_lengths=None, key_value_seq_lengths=None,
                          local_window_size=None, implementation=None):
  """jax.nn.dot_product_attention: softmax(q k^T * scale + bias, masked) v over [B, T, N, H]
  queries and [B, S, K, H] keys and values (N a multiple of K: grouped heads); the softmax in
  float32. 3-D inputs are one batch."""
  api = "dot_product_attention"
  if implementation not in (None, "xla"):
    raise PartixError(f"[{api}] implementation={implementation!r}: partix has only 'xla' (its "
                      "own kernels)")
  if local_window_size is not None:
    raise PartixError(f"[{api}] local_window_size is not supported")
  q, k, v = (asarray(t, api=api) for t in (query, key, value))
  batched = q.ndim == 4
  if not batched:
    q, k, v = (_jnp.expand_dims(t, 0) for t in (q, k, v))
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or k.shape != v.shape:
    raise PartixError(f"[{api}] query {q.shape}, key {k.shape} and value {v.shape} must be "
                      "[B, T, N, H], [B, S, K, H] and [B, S, K, H]")
  B, T, N, H = q.shape
  S, K = k.shape[1], k.shape[2]
  if N % K:
    raise PartixError(f"[{api}] {N} query heads are not a multiple of {K} key heads")
  if N != K:
    k, v = _jnp.repeat(k, N // K, axis=2), _jnp.repeat(v, N // K, axis=2)
  s = (1.0 / _np.sqrt(H)) if scale is None else scale
  logits = _jnp.einsum("btnh,bsnh->bnts", q.astype(_np.float32), k.astype(_np.float32)) * s
  if bias is not None:
    logits = logits + asarray(bias, api=api).astype(_np.float32)
  keep = None
  if mask is not None:
    keep = _jnp.broadcast_to(asarray(mask, api=api), logits.shape)
  if is_causal:
    causal = _jnp.tril(_jnp.ones((T, S), bool))
    keep = causal if keep is None else keep & causal
  if key_value_seq_lengths is not None:
    kv = _jnp.arange(S)[None, :] < _jnp.reshape(asarray(key_value_seq_lengths), (B, 1))
    kv = _jnp.reshape(kv, (B, 1, 1, S))
    keep = kv if keep is None else keep & kv
  if query_seq_lengths is not None:
    qv = _jnp.arange(T)[None, :] < _jnp.reshape(asarray(query_seq_lengths), (B, 1))
    qv = _jnp.reshape(qv, (B, 1, T, 1))
    keep = qv if keep is None else keep & qv
  if keep is not None:
    logits = _jnp.where(keep, logits, -1e30)
  w = softmax(logits, axis=-1)
  out = _jnp.einsum("bnts,bsnh->btnh", w, v.astype(_np.float32)).astype(query.dtype if hasattr(
      query, "dtype") else _np.float32)
  return out if batched else out[0]


from partix.nn import initializers  # noqa: E402,F401 (jax.nn.initializers)

def __getattr__(name):
  raise AttributeError(f"module 'partix.nn' has no attribute {name!r}: partix does not "
                       f"provide jax.nn.{name}")
