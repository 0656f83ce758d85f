"""jax.errors: JAX's exception classes. Each is also a partix.PartixError, and partix raises
them where JAX does (a traced value used as a Python bool, index, scalar or numpy array; a
traced boolean mask as an index), so `except jax.errors.ConcretizationTypeError:` catches
what partix raises there."""
from partix._src.jax_errors import (ConcretizationTypeError,  # noqa: F401
                                    InconclusiveDimensionOperation, JAXIndexError,
                                    JaxprTypeError, JaxRuntimeError, JAXTypeError, KeyReuseError,
                                    NonConcreteBooleanIndexError, TracerArrayConversionError,
                                    TracerBoolConversionError, TracerIntegerConversionError,
                                    UnexpectedTracerError)

__all__ = ["ConcretizationTypeError", "InconclusiveDimensionOperation", "JAXIndexError",
           "JaxprTypeError", "JaxRuntimeError", "JAXTypeError", "KeyReuseError",
           "NonConcreteBooleanIndexError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError", "UnexpectedTracerError"]


def __getattr__(name):
  raise AttributeError(f"module 'partix.errors' has no attribute {name!r}: partix does not "
                       f"provide jax.errors.{name}")
