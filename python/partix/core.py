"""partix.core: the type names of jax.core that programs use (ShapedArray, ManualAxisType,
Tracer)."""
from partix._src.api import ManualAxisType, ShapedArray  # noqa: F401
from partix._src.tracing import ClosedJaxpr, Jaxpr, JaxprEqn, eval_jaxpr  # noqa: F401
from partix._src.core import Array as _Array


class _TracerMeta(type):
  def __instancecheck__(cls, x):
    return isinstance(x, _Array) and x._a.is_tracer()


class Tracer(metaclass=_TracerMeta):
  """isinstance(x, jax.core.Tracer): x is a value being traced (inside jit, grad, vmap, ...)."""

  def __init__(self, *a, **k):
    raise TypeError("jax.core.Tracer is not constructed by programs")


def __getattr__(name):
  raise AttributeError(f"module 'partix.core' has no attribute {name!r}: partix does not "
                       f"provide jax.core.{name}")
