"""partix.orbax: Orbax's names over partix (`import partix.orbax.checkpoint as ocp`)."""

from partix.orbax import checkpoint


def __getattr__(name):
  if name.startswith("__"):
    raise AttributeError(name)
  raise AttributeError(f"module 'orbax' has no attribute {name!r}: partix provides "
                       "orbax.checkpoint only")
