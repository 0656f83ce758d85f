"""Linear, LinearGeneral and Embed with Flax NNX's parameters: Linear's kernel [in, out] and
bias [out]; LinearGeneral's kernel [*in, *out] (initialized as the 2-D [prod(in), prod(out)]
kernel, reshaped); Embed's embedding [num_embeddings, features]."""
import math

import numpy as np

from partix import numpy as jnp
from partix._src.core import PartixError
from partix.nnx import variables as _vars
from partix.nnx.module import Module
from partix.nnx.nn import initializers

default_kernel_init = initializers.lecun_normal()
default_bias_init = initializers.zeros_init()
default_embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


def _check_features(api, **features):
  for name, v in features.items():
    vs = v if isinstance(v, tuple) else (v,)
    if not vs or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0
                         for d in vs):
      raise PartixError(f"[nnx.{api}] {name} must be a positive int (or a tuple of them), "
                        f"got {v!r}")


def _param(init, key, shape, dtype, metadata, api):
  if not callable(init):
    raise PartixError(f"[nnx.{api}] initializer {init!r} is not callable")
  return _vars.Param(init(key, shape, dtype), **dict(metadata))


def _promote(dtype, *xs):
  if dtype is None:
    return xs
  return tuple(None if x is None else jnp.asarray(x, dtype) for x in xs)


class Linear(Module):
  """y = x @ kernel + bias over the last axis of x."""

  def __init__(self, in_features, out_features, *, use_bias=True, dtype=None,
               param_dtype=jnp.float32, precision=None, kernel_init=default_kernel_init,
               bias_init=default_bias_init, dot_general=None, promote_dtype=None,
               preferred_element_type=None, rngs, kernel_metadata=None, bias_metadata=None):
    _check_features("Linear", in_features=in_features, out_features=out_features)
    self.kernel = _param(kernel_init, rngs.params(), (in_features, out_features), param_dtype,
                         kernel_metadata or {}, "Linear")
    self.bias = _param(bias_init, rngs.params(), (out_features,), param_dtype,
                       bias_metadata or {}, "Linear") if use_bias else None
    self.in_features, self.out_features, self.use_bias = in_features, out_features, use_bias
    self.dtype, self.param_dtype, self.precision = dtype, param_dtype, precision

  def __call__(self, inputs, out_sharding=None):
    if inputs.shape[-1:] != (self.in_features,):
      raise PartixError(f"[nnx.Linear] input of shape {tuple(inputs.shape)} does not end in "
                        f"in_features={self.in_features}")
    kernel = self.kernel[...]
    bias = self.bias[...] if self.bias is not None else None
    inputs, kernel, bias = _promote(self.dtype, inputs, kernel, bias)
    y = jnp.matmul(inputs, kernel)
    if bias is not None:
      y = y + bias
    return y


def _canon(axes):
  return (axes,) if isinstance(axes, int) else tuple(axes)


class LinearGeneral(Module):
  """A linear map contracting the `axis` axes of x (in_features) into out_features (ints or
  tuples); kernel [*in_features, *out_features], bias [*out_features]."""

  def __init__(self, in_features, out_features, *, axis=-1, batch_axis=None, use_bias=True,
               dtype=None, param_dtype=jnp.float32, kernel_init=default_kernel_init,
               bias_init=default_bias_init, precision=None, rngs, kernel_metadata=None,
               bias_metadata=None, **unused):
    if batch_axis:
      raise PartixError("[nnx.LinearGeneral] batch_axis is not provided by partix.nnx")
    self.in_features, self.out_features = _canon(in_features), _canon(out_features)
    self.axis = _canon(axis)
    if len(self.axis) != len(self.in_features):
      raise PartixError(f"[nnx.LinearGeneral] axis {axis} and in_features {in_features} "
                        "must have the same length")
    _check_features("LinearGeneral", in_features=self.in_features,
                    out_features=self.out_features)
    flat = (math.prod(self.in_features), math.prod(self.out_features))
    shape = self.in_features + self.out_features
    self.kernel = _vars.Param(_reshaped(kernel_init(rngs.params(), flat, param_dtype), shape),
                              **dict(kernel_metadata or {}))
    self.bias = _vars.Param(_reshaped(bias_init(rngs.params(), (flat[1],), param_dtype),
                                      self.out_features),
                            **dict(bias_metadata or {})) if use_bias else None
    self.use_bias, self.dtype, self.param_dtype = use_bias, dtype, param_dtype

  def __call__(self, inputs):
    nd = inputs.ndim
    axes = tuple(sorted(a % nd for a in self.axis))
    if tuple(inputs.shape[a] for a in axes) != self.in_features:
      raise PartixError(f"[nnx.LinearGeneral] input of shape {tuple(inputs.shape)} has "
                        f"{tuple(inputs.shape[a] for a in axes)} at axes {self.axis}, not "
                        f"in_features={self.in_features}")
    kernel = self.kernel[...]
    bias = self.bias[...] if self.bias is not None else None
    inputs, kernel, bias = _promote(self.dtype, inputs, kernel, bias)
    letters = "abcdefghijklmnopqrstuvwxyz"
    x_sub = [letters[i] for i in range(nd)]
    k_in = [x_sub[a] for a in axes]
    k_out = [letters[nd + i] for i in range(len(self.out_features))]
    y_sub = [s for i, s in enumerate(x_sub) if i not in axes] + k_out
    y = jnp.einsum(f"{''.join(x_sub)},{''.join(k_in + k_out)}->{''.join(y_sub)}", inputs,
                   kernel)
    if bias is not None:
      y = y + bias
    return y


def _reshaped(value, shape):
  if isinstance(value, _vars.VariableMetadata):
    return _vars.VariableMetadata(_reshaped(value.raw_value, shape), value.metadata)
  return value.reshape(shape)


class Embed(Module):
  """A table of num_embeddings vectors of size features: embed(ids) looks them up,
  embed.attend(q) scores q against every one."""

  def __init__(self, num_embeddings, features, *, dtype=None, param_dtype=jnp.float32,
               embedding_init=default_embed_init, promote_dtype=None, rngs,
               embedding_metadata=None):
    _check_features("Embed", num_embeddings=num_embeddings, features=features)
    self.embedding = _param(embedding_init, rngs.params(), (num_embeddings, features),
                            param_dtype, embedding_metadata or {}, "Embed")
    self.num_embeddings, self.features = num_embeddings, features
    self.dtype, self.param_dtype = dtype, param_dtype

  def __call__(self, inputs):
    if not np.issubdtype(np.dtype(inputs.dtype), np.integer):
      raise ValueError(f"[nnx.Embed] Input type must be an integer or unsigned integer, got "
                       f"{inputs.dtype}")
    table = self.embedding[...]
    if self.dtype is not None:
      table = jnp.asarray(table, self.dtype)
    return jnp.take(table, inputs, axis=0)

  def attend(self, query):
    table = self.embedding[...]
    query, table = _promote(self.dtype, query, table)
    return jnp.matmul(query, table.T)
