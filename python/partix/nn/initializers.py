"""jax.nn.initializers (partix.nn.initializers): functions init(key, shape, dtype) -> array,
as JAX writes them."""
import math
from typing import Any, Callable

import numpy as _np

from partix._src.core import PartixError
from partix import numpy as _jnp
from partix import random as _random
from partix._src import linalg as _linalg

__all__ = ["Initializer", "constant", "delta_orthogonal", "glorot_normal", "glorot_uniform",
           "he_normal", "he_uniform", "kaiming_normal", "kaiming_uniform", "lecun_normal",
           "lecun_uniform", "normal", "ones", "orthogonal", "truncated_normal", "uniform",
           "variance_scaling", "xavier_normal", "xavier_uniform", "zeros"]

Initializer = Callable[..., Any]


def zeros(key, shape, dtype=_np.float32):
  return _jnp.zeros(shape, dtype)


def ones(key, shape, dtype=_np.float32):
  return _jnp.ones(shape, dtype)


def constant(value, dtype=_np.float32):
  def init(key, shape, dtype=dtype):
    return _jnp.full(shape, value, dtype)
  return init


def normal(stddev=1e-2, dtype=_np.float32):
  def init(key, shape, dtype=dtype):
    return _random.normal(key, shape, dtype) * stddev
  return init


def uniform(scale=1e-2, dtype=_np.float32):
  """Values in [0, scale)."""
  def init(key, shape, dtype=dtype):
    return _random.uniform(key, shape, dtype) * scale
  return init


def truncated_normal(stddev=1e-2, dtype=_np.float32, lower=-2.0, upper=2.0):
  def init(key, shape, dtype=dtype):
    return _random.truncated_normal(key, lower, upper, shape, dtype) * stddev
  return init


def _fans(shape, in_axis, out_axis, batch_axis):
  shape = tuple(shape)
  if len(shape) < 2:
    raise PartixError(f"[variance_scaling] needs a shape of at least 2 dimensions, got {shape}")
  n = len(shape)
  in_axes = [a % n for a in (in_axis if isinstance(in_axis, (tuple, list)) else (in_axis,))]
  out_axes = [a % n for a in (out_axis if isinstance(out_axis, (tuple, list)) else (out_axis,))]
  batch = [a % n for a in (batch_axis if isinstance(batch_axis, (tuple, list)) else (batch_axis,))]
  # As JAX computes it: the size over the in, out and batch sizes (an axis named as both in
  # and out, as Embed's out_axis=0 with in_axis=-2 on a 2-D table, divides twice).
  receptive = math.prod(shape) / math.prod(shape[a] for a in in_axes) / math.prod(
      shape[a] for a in out_axes) / math.prod(shape[a] for a in batch)
  fan_in = math.prod(shape[a] for a in in_axes) * receptive
  fan_out = math.prod(shape[a] for a in out_axes) * receptive
  return fan_in, fan_out


def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=(),
                     dtype=_np.float32):
  """Samples of variance scale / n, n the fan-in ('fan_in'), fan-out ('fan_out') or their mean
  ('fan_avg'), from a 'truncated_normal' (within two standard deviations, rescaled), 'normal',
  or 'uniform' distribution."""
  if mode not in ("fan_in", "fan_out", "fan_avg"):
    raise PartixError(f"[variance_scaling] mode {mode!r} is not fan_in, fan_out or fan_avg")
  if distribution not in ("truncated_normal", "normal", "uniform"):
    raise PartixError(f"[variance_scaling] distribution {distribution!r} is not "
                      "truncated_normal, normal or uniform")

  def init(key, shape, dtype=dtype):
    fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    variance = scale / max(1.0, n)
    r = _random
    if distribution == "truncated_normal":
      # The standard deviation of a unit normal truncated to [-2, 2].
      std = math.sqrt(variance) / 0.87962566103423978
      return r.truncated_normal(key, -2.0, 2.0, shape, dtype) * std
    if distribution == "normal":
      return r.normal(key, shape, dtype) * math.sqrt(variance)
    return r.uniform(key, shape, dtype, -1.0, 1.0) * math.sqrt(3 * variance)
  return init


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_np.float32):
  return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_np.float32):
  return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis,
                          dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_np.float32):
  return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_np.float32):
  return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_np.float32):
  return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_np.float32):
  return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def __getattr__(name):
  raise AttributeError(f"module 'partix.nn.initializers' has no attribute {name!r}: partix does "
                       f"not provide jax.nn.initializers.{name}")


def orthogonal(scale=1.0, column_axis=-1, dtype=_np.float32):
  """A (scaled) orthogonal matrix over column_axis and the other axes flattened, as JAX's:
  the Q of a Gaussian matrix's QR, its columns' signs taken from R's diagonal (so that Q is
  uniform over the orthogonal matrices)."""
  def init(key, shape, dtype=dtype):
    shape = tuple(shape)
    if len(shape) < 2:
      raise PartixError(f"[orthogonal] needs a shape of at least 2 dimensions, got {shape}")
    n_cols = shape[column_axis]
    n_rows = math.prod(shape) // n_cols if n_cols else 0
    tall = (n_rows, n_cols) if n_rows >= n_cols else (n_cols, n_rows)
    a = _random.normal(key, tall, _np.float32)
    q, r = _linalg.qr(a)
    q = q * _jnp.expand_dims(_jnp.where(_jnp.diagonal(r) < 0, -1.0, 1.0), 0)
    if n_rows < n_cols:
      q = q.T
    rest = tuple(d for i, d in enumerate(shape) if i != column_axis % len(shape))
    q = _jnp.moveaxis(_jnp.reshape(q, rest + (n_cols,)), -1, column_axis)
    return _jnp.astype(q * scale, dtype)
  return init


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=_np.float32):
  """A convolution kernel [*spatial, in, out] (1-3 spatial dimensions, in <= out): zeros but
  at the spatial centre, an orthogonal matrix (JAX's delta-orthogonal)."""
  def init(key, shape, dtype=dtype):
    shape = tuple(shape)
    if len(shape) not in (3, 4, 5):
      raise PartixError(f"[delta_orthogonal] needs a 3-, 4- or 5-dimensional kernel shape, got "
                        f"{shape}")
    if shape[-2] > shape[-1]:
      raise PartixError(f"[delta_orthogonal] needs in channels <= out channels, got {shape}")
    centre = tuple(d // 2 for d in shape[:-2])
    ortho = orthogonal(scale, column_axis, dtype)(key, shape[-2:])
    return _jnp.zeros(shape, dtype).at[centre].set(ortho)
  return init
