"""BatchNorm, LayerNorm and RMSNorm with Flax NNX's parameters (scale, bias of [num_features]) and
defaults (epsilon 1e-6, Flax's fast variance E[x^2] - E[x]^2, clipped at 0)."""
from partix import lax
from partix import numpy as jnp
from partix._src.core import PartixError
from partix.nnx import variables as _vars
from partix.nnx.module import Module
from partix.nnx.nn import initializers


def _axes(axes, ndim):
  axes = (axes,) if isinstance(axes, int) else tuple(axes)
  return tuple(sorted(a % ndim for a in axes))


def _check(api, num_features, x, reduction_axes, feature_axes):
  if x.shape[-1] != num_features and _axes(feature_axes, x.ndim) == (x.ndim - 1,):
    raise PartixError(f"[nnx.{api}] input of shape {tuple(x.shape)} does not end in "
                      f"num_features={num_features}")


def _feature_shape(x, feature_axes):
  axes = _axes(feature_axes, x.ndim)
  return tuple(x.shape[i] if i in axes else 1 for i in range(x.ndim))


class LayerNorm(Module):
  """(x - mean) / sqrt(var + epsilon) * scale + bias over reduction_axes."""

  def __init__(self, num_features, *, epsilon=1e-6, dtype=None, param_dtype=jnp.float32,
               use_bias=True, use_scale=True, bias_init=initializers.zeros_init(),
               scale_init=initializers.ones_init(), reduction_axes=-1, feature_axes=-1,
               axis_name=None, axis_index_groups=None, use_fast_variance=True,
               promote_dtype=None, rngs, bias_metadata=None, scale_metadata=None):
    if axis_name is not None:
      raise PartixError("[nnx.LayerNorm] axis_name is not provided by partix.nnx")
    shape = (num_features,)
    self.scale = _vars.Param(scale_init(rngs.params(), shape, param_dtype),
                             **dict(scale_metadata or {})) if use_scale else None
    self.bias = _vars.Param(bias_init(rngs.params(), shape, param_dtype),
                            **dict(bias_metadata or {})) if use_bias else None
    self.num_features, self.epsilon = num_features, epsilon
    self.dtype, self.param_dtype = dtype, param_dtype
    self.use_bias, self.use_scale = use_bias, use_scale
    self.reduction_axes, self.feature_axes = reduction_axes, feature_axes
    self.use_fast_variance = use_fast_variance

  def __call__(self, x, *, mask=None):
    _check("LayerNorm", self.num_features, x, self.reduction_axes, self.feature_axes)
    axes = _axes(self.reduction_axes, x.ndim)
    x32 = jnp.asarray(x, jnp.float32)
    mean = jnp.mean(x32, axis=axes, keepdims=True)
    if self.use_fast_variance:
      var = jnp.maximum(0.0, jnp.mean(x32 * x32, axis=axes, keepdims=True) - mean * mean)
    else:
      var = jnp.mean(jnp.square(x32 - mean), axis=axes, keepdims=True)
    y = (x32 - mean) * lax.rsqrt(var + self.epsilon)
    fshape = _feature_shape(x, self.feature_axes)
    if self.scale is not None:
      y = y * jnp.reshape(self.scale[...], fshape)
    if self.bias is not None:
      y = y + jnp.reshape(self.bias[...], fshape)
    return jnp.asarray(y, self.dtype or x.dtype)


class RMSNorm(Module):
  """x / sqrt(mean(x^2) + epsilon) * scale over reduction_axes."""

  def __init__(self, num_features, *, epsilon=1e-6, dtype=None, param_dtype=jnp.float32,
               use_scale=True, scale_init=initializers.ones_init(), reduction_axes=-1,
               feature_axes=-1, axis_name=None, axis_index_groups=None, use_fast_variance=True,
               promote_dtype=None, rngs, scale_metadata=None):
    if axis_name is not None:
      raise PartixError("[nnx.RMSNorm] axis_name is not provided by partix.nnx")
    self.scale = _vars.Param(scale_init(rngs.params(), (num_features,), param_dtype),
                             **dict(scale_metadata or {})) if use_scale else None
    self.num_features, self.epsilon = num_features, epsilon
    self.dtype, self.param_dtype, self.use_scale = dtype, param_dtype, use_scale
    self.reduction_axes, self.feature_axes = reduction_axes, feature_axes

  def __call__(self, x, mask=None):
    _check("RMSNorm", self.num_features, x, self.reduction_axes, self.feature_axes)
    axes = _axes(self.reduction_axes, x.ndim)
    x32 = jnp.asarray(x, jnp.float32)
    ms = jnp.mean(x32 * x32, axis=axes, keepdims=True)
    y = x32 * lax.rsqrt(ms + self.epsilon)
    if self.scale is not None:
      y = y * jnp.reshape(self.scale[...], _feature_shape(x, self.feature_axes))
    return jnp.asarray(y, self.dtype or x.dtype)


class BatchNorm(Module):
  """Normalizes by the batch's mean and variance over every axis but `axis` (training) or by
  the running averages kept in BatchStat variables mean and var (use_running_average=True);
  in training the averages move by momentum toward the batch's statistics."""

  def __init__(self, num_features, *, use_running_average=False, axis=-1, momentum=0.99,
               epsilon=1e-5, dtype=None, param_dtype=jnp.float32, use_bias=True,
               use_scale=True, bias_init=initializers.zeros_init(),
               scale_init=initializers.ones_init(), axis_name=None, axis_index_groups=None,
               use_fast_variance=True, promote_dtype=None, rngs, bias_metadata=None,
               scale_metadata=None):
    if axis_name is not None:
      raise PartixError("[nnx.BatchNorm] axis_name is not provided by partix.nnx")
    shape = (num_features,)
    self.mean = _vars.BatchStat(jnp.zeros(shape, jnp.float32))
    self.var = _vars.BatchStat(jnp.ones(shape, jnp.float32))
    self.scale = _vars.Param(scale_init(rngs.params(), shape, param_dtype),
                             **dict(scale_metadata or {})) if use_scale else None
    self.bias = _vars.Param(bias_init(rngs.params(), shape, param_dtype),
                            **dict(bias_metadata or {})) if use_bias else None
    self.num_features, self.use_running_average = num_features, use_running_average
    self.axis, self.momentum, self.epsilon = axis, momentum, epsilon
    self.dtype, self.param_dtype = dtype, param_dtype
    self.use_bias, self.use_scale, self.use_fast_variance = use_bias, use_scale, use_fast_variance

  def __call__(self, x, use_running_average=None, *, mask=None):
    if mask is not None:
      raise PartixError("[nnx.BatchNorm] mask= is not provided by partix.nnx")
    use_ra = use_running_average if use_running_average is not None else \
        self.use_running_average
    if use_ra is None:
      raise ValueError("No `use_running_average` argument was provided to BatchNorm: pass it "
                       "to the constructor or to the call")
    features = _axes(self.axis, x.ndim)
    if tuple(x.shape[a] for a in features) != (self.num_features,):
      raise PartixError(f"[nnx.BatchNorm] input of shape {tuple(x.shape)} does not have "
                        f"num_features={self.num_features} at axis {self.axis}")
    reduction = tuple(i for i in range(x.ndim) if i not in features)
    x32 = jnp.asarray(x, jnp.float32)
    if use_ra:
      mean, var = self.mean[...], self.var[...]
    else:
      mean = jnp.mean(x32, axis=reduction)
      if self.use_fast_variance:
        var = jnp.maximum(0.0, jnp.mean(x32 * x32, axis=reduction) - mean * mean)
      else:
        var = jnp.var(x32, axis=reduction)
      m = self.momentum
      self.mean[...] = m * self.mean[...] + (1 - m) * mean
      self.var[...] = m * self.var[...] + (1 - m) * var
    fshape = _feature_shape(x, self.axis)
    y = (x32 - jnp.reshape(mean, fshape)) * lax.rsqrt(jnp.reshape(var, fshape) + self.epsilon)
    if self.scale is not None:
      y = y * jnp.reshape(self.scale[...], fshape)
    if self.bias is not None:
      y = y + jnp.reshape(self.bias[...], fshape)
    return jnp.asarray(y, self.dtype or x.dtype)
