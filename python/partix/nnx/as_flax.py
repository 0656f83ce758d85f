"""The module partix.as_jax installs as `flax`: `from flax import nnx` then gives partix.nnx.
Only nnx is provided (not flax.linen); other names raise AttributeError saying so."""
from partix import nnx  # noqa: F401

__version__ = "0.12.8"  # the Flax release whose NNX names and behaviour partix.nnx follows


def __getattr__(name):
  raise AttributeError(f"partix provides flax.nnx only, not flax.{name}")
