"""jax.scipy.stats (partix.scipy.stats): norm."""
from partix.scipy.stats import norm  # noqa: F401


def __getattr__(name):
  raise AttributeError(f"partix does not provide jax.scipy.stats.{name}")
