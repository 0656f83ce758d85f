"""jax.errors' exception classes, each also a partix.PartixError: code catching JAX's class
(`except jax.errors.ConcretizationTypeError`) and code catching partix's both see what partix
raises. A leaf module (only partix._src.errors below it), so core.py can raise them.

Each takes either a message, or (as JAX's constructors) the offending value and a context."""
from partix._src.errors import PartixError, PartixTypeError

__all__ = ["JAXTypeError", "JAXIndexError", "ConcretizationTypeError",
           "NonConcreteBooleanIndexError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError", "UnexpectedTracerError",
           "KeyReuseError", "JaxRuntimeError", "InconclusiveDimensionOperation",
           "JaxprTypeError", "TypePromotionError"]


def _describe(value, context):
  if isinstance(value, str):
    return value + (f"\n{context}" if context else "")
  aval = getattr(value, "_aval_str", None)
  what = f"traced array {aval()}" if callable(aval) else repr(value)
  return (f"a concrete value is needed here, but got an abstract {what}"
          + (f"\n{context}" if context else ""))


class _Message:
  """The constructor every class here shares: a message, or (value, context) as JAX's."""

  def __init__(self, value="", context=""):
    super().__init__(_describe(value, context))


class JAXTypeError(_Message, PartixTypeError):
  """A JAX-specific TypeError (and a partix.PartixError)."""
  __module__ = "partix.errors"


class JAXIndexError(_Message, PartixError, IndexError):
  """A JAX-specific IndexError (and a partix.PartixError)."""
  __module__ = "partix.errors"


class ConcretizationTypeError(JAXTypeError):
  """A traced value was used where a concrete one is needed: a Python int()/float() of it, a
  shape or a static argument computed from it. Pass the value as a static argument, or keep
  the computation in array operations (jnp.where, lax.cond)."""
  __module__ = "partix.errors"


class NonConcreteBooleanIndexError(JAXIndexError):
  """A traced boolean mask was used to index an array: the result's shape would depend on the
  values. Use jnp.where(mask, x, fill) or the size= argument of jnp.nonzero."""
  __module__ = "partix.errors"


class TracerArrayConversionError(JAXTypeError):
  """A traced value was converted to a numpy array (np.asarray, or a numpy function applied to
  it) inside a transformation. Use partix.numpy's function instead."""
  __module__ = "partix.errors"


class TracerBoolConversionError(ConcretizationTypeError):
  """A traced value was used as a Python bool (`if x:`, `while x:`, `and`/`or`) inside a
  transformation. Use lax.cond, lax.while_loop or jnp.where."""
  __module__ = "partix.errors"


class TracerIntegerConversionError(JAXTypeError):
  """A traced value was used as a Python index (operator.index: list indexing, range()) inside
  a transformation."""
  __module__ = "partix.errors"


class UnexpectedTracerError(JAXTypeError):
  """A traced value escaped the function that traced it (stored outside and used later).
  partix reports this case itself as a PartixError naming the operation ("escaped the function
  that traced it"); the class exists for programs that name it."""
  __module__ = "partix.errors"


class KeyReuseError(JAXTypeError):
  """A PRNG key was used twice where jax_debug_key_reuse checks it. partix does not track key
  use, so it never raises this; the class exists for programs that name it."""
  __module__ = "partix.errors"


class JaxRuntimeError(_Message, PartixError, RuntimeError):
  """An error while a program runs (JAX's XlaRuntimeError). partix's own run-time errors are
  PartixErrors raised by the core; this class exists for programs that name it."""
  __module__ = "partix.errors"


class InconclusiveDimensionOperation(_Message, PartixError):
  """JAX's error for symbolic dimensions whose comparison is not decidable. partix has no
  symbolic dimensions, so it never raises this."""
  __module__ = "partix.errors"


class JaxprTypeError(JAXTypeError):
  """JAX's error for an ill-typed jaxpr (enable_checks). partix checks its programs as it
  traces them and reports a PartixError naming the operation."""
  __module__ = "partix.errors"


class TypePromotionError(PartixError):
  """jax.dtypes.TypePromotionError: an implicit promotion that
  jax_numpy_dtype_promotion='strict' refuses (a PartixError, a ValueError, as JAX's)."""
  __module__ = "partix.dtypes"
