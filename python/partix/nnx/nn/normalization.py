"""LayerNorm and RMSNorm with Flax NNX's parameters (scale, bias of [num_features]) and
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
