"""Dropout: zeroes each element with probability `rate` (scaling the rest by 1/(1-rate)),
drawing its keys from an Rngs stream ('dropout' by default)."""
from partix import numpy as jnp
from partix import random
from partix._src.core import Array, PartixError
from partix.nnx import rnglib
from partix.nnx.module import Module


def _first(*values, error):
  for v in values:
    if v is not None:
      return v
  raise ValueError(error)


class Dropout(Module):
  def __init__(self, rate, *, broadcast_dims=(), deterministic=False, rng_collection="dropout",
               rngs=None):
    if not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
      raise PartixError(f"[nnx.Dropout] rate must be a number in [0, 1], got {rate!r}")
    self.rate = float(rate)
    self.broadcast_dims = tuple(broadcast_dims)
    self.deterministic = deterministic
    self.rng_collection = rng_collection
    if isinstance(rngs, rnglib.Rngs):
      self.rngs = rngs[rng_collection].fork()
    elif isinstance(rngs, rnglib.RngStream):
      self.rngs = rngs.fork()
    elif rngs is None:
      self.rngs = None
    else:
      raise TypeError(f"rngs must be a Rngs, RngStream or None, but got {type(rngs)}.")

  def __call__(self, inputs, *, deterministic=None, rngs=None):
    deterministic = _first(deterministic, self.deterministic, error=(
        "No `deterministic` argument was provided to Dropout: pass it to the constructor or "
        "to the call"))
    if self.rate == 0.0 or deterministic:
      return inputs
    if self.rate == 1.0:
      return jnp.zeros_like(inputs)
    rngs = _first(rngs, self.rngs, error=(
        "`deterministic` is False, but no `rngs` argument was provided to Dropout as either "
        "a __call__ argument or class attribute."))
    if isinstance(rngs, rnglib.Rngs):
      key = rngs[self.rng_collection]()
    elif isinstance(rngs, rnglib.RngStream):
      key = rngs()
    elif isinstance(rngs, Array):
      key = rngs
    else:
      raise TypeError(f"rngs must be a Rngs, RngStream or jax.Array, but got {type(rngs)}.")
    keep = 1.0 - self.rate
    shape = list(inputs.shape)
    for d in self.broadcast_dims:
      shape[d] = 1
    mask = jnp.broadcast_to(random.bernoulli(key, p=keep, shape=tuple(shape)), inputs.shape)
    return jnp.where(mask, inputs / keep, jnp.zeros_like(inputs))
