"""jax.custom_batching: custom_vmap and sequential_vmap (see partix._src.custom_batching for
where partix applies a custom rule)."""
from partix._src.custom_batching import custom_vmap, sequential_vmap  # noqa: F401

__all__ = ["custom_vmap", "sequential_vmap"]


def __getattr__(name):
  raise AttributeError(f"module 'partix.custom_batching' has no attribute {name!r}: partix does not "
                       f"provide jax.custom_batching.{name}")
