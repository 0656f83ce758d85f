"""MultiHeadAttention with Flax NNX's parameters: query/key/value LinearGenerals with kernels
[in_features, num_heads, head_dim] and biases [num_heads, head_dim], and `out` with kernel
[num_heads, head_dim, out_features]; dot_product_attention, make_causal_mask and friends.
The autoregressive cache (decode=True) is not provided."""
import functools

import numpy as np

from partix import numpy as jnp
from partix import random
from partix import nn as _pnn
from partix._src.core import PartixError
from partix.nnx import rnglib
from partix.nnx.module import Module
from partix.nnx.variables import Intermediate
from partix.nnx.nn.linear import LinearGeneral, default_bias_init
from partix.nnx.nn import initializers


def _first(*values, error):
  for v in values:
    if v is not None:
      return v
  raise ValueError(error)


def _einsum(spec, *operands):
  """einsum with '...' spelled out (partix's einsum names every dimension)."""
  first = spec.split(",")[0]
  n = operands[0].ndim - (len(first) - 3)
  return jnp.einsum(spec.replace("...", "abcdefg"[:n]), *operands)


def combine_masks(*masks, dtype=jnp.float32):
  """The elementwise AND of the masks that are not None (None if all are)."""
  masks = [m for m in masks if m is not None]
  if not masks:
    return None
  if any(m.ndim != masks[0].ndim for m in masks):
    raise ValueError(f"masks must have same rank: {tuple(m.ndim for m in masks)}")
  out = masks[0]
  for m in masks[1:]:
    out = jnp.logical_and(out, m)
  return jnp.asarray(out, dtype)


def make_attention_mask(query_input, key_input, pairwise_fn=jnp.multiply, extra_batch_dims=0,
                        dtype=jnp.float32):
  """[batch..., 1, len_q, len_kv] mask from pairwise_fn of the query and key entries."""
  mask = pairwise_fn(jnp.expand_dims(query_input, -1), jnp.expand_dims(key_input, -2))
  mask = jnp.expand_dims(mask, -3)
  for _ in range(extra_batch_dims):
    mask = jnp.expand_dims(mask, 0)
  return jnp.asarray(mask, dtype)


def make_causal_mask(x, extra_batch_dims=0, dtype=jnp.float32):
  """The mask of positions i >= j for x's last axis: [batch..., 1, len, len]."""
  idxs = jnp.broadcast_to(jnp.arange(x.shape[-1], dtype=jnp.int32), x.shape)
  return make_attention_mask(idxs, idxs, jnp.greater_equal, extra_batch_dims, dtype)


def dot_product_attention_weights(query, key, bias=None, mask=None, broadcast_dropout=True,
                                  dropout_rng=None, dropout_rate=0.0, deterministic=False,
                                  dtype=None, precision=None, module=None):
  dtype = dtype or query.dtype
  query = query / np.sqrt(query.shape[-1]).astype(np.float32)
  weights = _einsum("...qhd,...khd->...hqk", query, key)
  if bias is not None:
    weights = weights + bias
  if mask is not None:
    weights = jnp.where(mask, weights, np.finfo(np.dtype(dtype)).min)
  weights = jnp.asarray(_pnn.softmax(weights), dtype)
  if module is not None:
    module.sow(Intermediate, "attention_weights", weights)
  if not deterministic and dropout_rate > 0.0:
    keep_prob = 1.0 - dropout_rate
    shape = (tuple([1] * (key.ndim - 2)) + weights.shape[-2:] if broadcast_dropout
             else weights.shape)
    keep = random.bernoulli(dropout_rng, keep_prob, shape)
    weights = weights * (jnp.asarray(keep, dtype) / keep_prob)
  return weights


def dot_product_attention(query, key, value, bias=None, mask=None, broadcast_dropout=True,
                          dropout_rng=None, dropout_rate=0.0, deterministic=False, dtype=None,
                          precision=None, module=None, is_causal=False):
  """softmax(q k^T / sqrt(d) masked) v over [batch..., len, heads, head_dim] operands."""
  if is_causal:
    t, s = query.shape[-3], key.shape[-3]
    causal = jnp.tril(jnp.ones((t, s), jnp.float32))
    mask = causal if mask is None else combine_masks(
        mask, jnp.broadcast_to(causal, mask.shape))
  weights = dot_product_attention_weights(query, key, bias, mask, broadcast_dropout,
                                          dropout_rng, dropout_rate, deterministic, dtype,
                                          precision, module)
  return _einsum("...hqk,...khd->...qhd", weights, value)


class MultiHeadAttention(Module):
  def __init__(self, num_heads, in_features, qkv_features=None, out_features=None,
               num_kv_heads=None, in_kv_features=None, *, dtype=None, param_dtype=jnp.float32,
               broadcast_dropout=True, dropout_rate=0.0, deterministic=None, precision=None,
               kernel_init=initializers.lecun_normal(), out_kernel_init=None,
               bias_init=default_bias_init, out_bias_init=None, use_bias=True,
               attention_fn=dot_product_attention, decode=None, normalize_qk=False, rngs,
               keep_rngs=True, kernel_metadata=None, out_kernel_metadata=None,
               bias_metadata=None, out_bias_metadata=None, **unsupported):
    if unsupported:
      raise TypeError(f"MultiHeadAttention.__init__() got unexpected keyword argument(s) "
                      f"{sorted(unsupported)}")
    if decode:
      raise PartixError("[nnx.MultiHeadAttention] decode=True (the autoregressive cache) is "
                        "not provided by partix.nnx")
    if normalize_qk:
      raise PartixError("[nnx.MultiHeadAttention] normalize_qk=True is not provided by "
                        "partix.nnx")
    self.num_heads, self.in_features = num_heads, in_features
    self.qkv_features = qkv_features if qkv_features is not None else in_features
    self.out_features = out_features if out_features is not None else in_features
    self.in_kv_features = in_kv_features if in_kv_features is not None else in_features
    self.num_kv_heads = num_kv_heads if num_kv_heads is not None else num_heads
    if self.num_kv_heads != num_heads:
      raise PartixError("[nnx.MultiHeadAttention] num_kv_heads different from num_heads "
                        "(grouped-query attention) is not provided by partix.nnx")
    if self.qkv_features % num_heads:
      raise ValueError(f"Memory dimension ({self.qkv_features}) must be divisible by "
                       f"'num_heads' heads ({num_heads}).")
    self.head_dim = self.qkv_features // num_heads
    self.dtype, self.param_dtype = dtype, param_dtype
    self.broadcast_dropout, self.dropout_rate = broadcast_dropout, dropout_rate
    self.deterministic, self.precision, self.use_bias = deterministic, precision, use_bias
    self.attention_fn, self.decode, self.normalize_qk = attention_fn, decode, normalize_qk
    proj = functools.partial(LinearGeneral, dtype=dtype, param_dtype=param_dtype,
                             kernel_init=kernel_init, bias_init=bias_init, use_bias=use_bias,
                             kernel_metadata=kernel_metadata, bias_metadata=bias_metadata,
                             rngs=rngs)
    heads = (num_heads, self.head_dim)
    self.query = proj(self.in_features, heads)
    self.key = proj(self.in_kv_features, heads)
    self.value = proj(self.in_kv_features, heads)
    self.query_ln = self.key_ln = None
    self.out = LinearGeneral(heads, self.out_features, axis=(-2, -1),
                             kernel_init=out_kernel_init or kernel_init,
                             bias_init=out_bias_init or bias_init, use_bias=use_bias,
                             dtype=dtype, param_dtype=param_dtype, rngs=rngs,
                             kernel_metadata=out_kernel_metadata or kernel_metadata,
                             bias_metadata=out_bias_metadata or bias_metadata)
    self.rngs = rngs.dropout.fork() if keep_rngs and dropout_rate > 0 else None

  def __call__(self, inputs_q, inputs_k=None, inputs_v=None, *, mask=None, deterministic=None,
               rngs=None, sow_weights=False, decode=None, is_causal=False, out_sharding=None,
               qkv_sharding=None):
    rngs = self.rngs if rngs is None else (rngs.dropout if isinstance(rngs, rnglib.Rngs)
                                           else rngs)
    if inputs_k is None:
      if inputs_v is not None:
        raise ValueError("`inputs_k` cannot be None if `inputs_v` is not None.")
      inputs_k = inputs_q
    if inputs_v is None:
      inputs_v = inputs_k
    if inputs_q.shape[-1] != self.in_features:
      raise ValueError(f"Incompatible input dimension, got {inputs_q.shape[-1]} but module "
                       f"expects {self.in_features}.")
    query, key, value = self.query(inputs_q), self.key(inputs_k), self.value(inputs_v)
    decode = _first(decode, self.decode, error=(
        "No `decode` argument was provided to MultiHeadAttention as either a __call__ "
        "argument or class attribute."))
    if decode:
      raise PartixError("[nnx.MultiHeadAttention] decode=True (the autoregressive cache) is "
                        "not provided by partix.nnx")
    dropout_rng = None
    if self.dropout_rate > 0.0:
      deterministic = _first(deterministic, self.deterministic, error=(
          "No `deterministic` argument was provided to MultiHeadAttention as either a "
          "__call__ argument or class attribute."))
      if not deterministic:
        if rngs is None:
          raise ValueError("'rngs' must be provided to __call__ method if "
                           "MultiHeadAttention instance is defined with keep_rngs=False.")
        dropout_rng = rngs()
    else:
      deterministic = True
    x = self.attention_fn(query, key, value, mask=mask, dropout_rng=dropout_rng,
                          dropout_rate=self.dropout_rate,
                          broadcast_dropout=self.broadcast_dropout,
                          deterministic=deterministic, dtype=self.dtype,
                          precision=self.precision, module=self if sow_weights else None,
                          is_causal=is_causal)
    return self.out(x)
