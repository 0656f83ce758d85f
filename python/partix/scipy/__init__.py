"""jax.scipy (partix.scipy): special and stats.norm."""
from partix.scipy import special, stats  # noqa: F401
