"""The package's errors, a leaf every module may import: PartixError (the core's, a
ValueError) and PartixTypeError, raised where JAX raises a TypeError."""
from partix import _core

PartixError = _core.PartixError


class PartixTypeError(PartixError, TypeError):
  """A PartixError where JAX raises a TypeError (a wrong kind of argument)."""


class PartixNotImplementedError(PartixError, NotImplementedError):
  """A PartixError where JAX raises NotImplementedError (a combination JAX does not support)."""
