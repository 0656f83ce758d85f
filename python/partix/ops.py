"""jax.ops: segment reductions (segment_sum, segment_prod, segment_max, segment_min)."""
from partix._src.segment_ops import (segment_max, segment_min, segment_prod,  # noqa: F401
                                     segment_sum)

__all__ = ["segment_sum", "segment_prod", "segment_max", "segment_min"]


def __getattr__(name):
  raise AttributeError(f"module 'partix.ops' has no attribute {name!r}: partix does not "
                       f"provide jax.ops.{name}")
