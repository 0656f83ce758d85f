"""partix.stages: the ahead-of-time stages jit(f).trace / lower / compile return
(jax.stages)."""
from partix._src.api import ArgInfo, Compiled, Jitted as Wrapped, Lowered, Traced  # noqa: F401


def __getattr__(name):
  raise AttributeError(f"module 'partix.stages' has no attribute {name!r}: partix does not "
                       f"provide jax.stages.{name}")
