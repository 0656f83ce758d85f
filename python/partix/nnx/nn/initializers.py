"""nnx.initializers: partix.nn.initializers (jax.nn.initializers' names) and Flax's
zeros_init() / ones_init()."""
from partix.nn.initializers import *  # noqa: F401,F403
from partix.nn.initializers import (Initializer, constant, glorot_normal,  # noqa: F401
                                    glorot_uniform, he_normal, he_uniform, kaiming_normal,
                                    kaiming_uniform, lecun_normal, lecun_uniform, normal, ones,
                                    truncated_normal, uniform, variance_scaling, xavier_normal,
                                    xavier_uniform, zeros)


def zeros_init():
  """An initializer of zeros (Flax's name for jax.nn.initializers.zeros)."""
  return zeros


def ones_init():
  """An initializer of ones (Flax's name for jax.nn.initializers.ones)."""
  return ones
