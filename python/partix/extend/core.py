"""jax.extend.core (partix.extend.core): a traced program (make_jaxpr's ClosedJaxpr) as a
function, jaxpr_as_fun; Token; Primitive, a primitive of the user's own (its implementation
runs eagerly, and as a host callback under a trace)."""
from partix._src.tokens import Token
from partix._src.tracing import Jaxpr, JaxprEqn, eval_jaxpr
from partix._src.user_primitives import Primitive

ClosedJaxpr = Jaxpr

__all__ = ["ClosedJaxpr", "Jaxpr", "JaxprEqn", "Primitive", "Token", "jaxpr_as_fun"]


def jaxpr_as_fun(closed_jaxpr):
  """The program of make_jaxpr(f)(...) as a function of f's argument leaves, returning the
  list of its result leaves (evaluated op by op, or recorded into an enclosing trace)."""
  return lambda *args: eval_jaxpr(closed_jaxpr.jaxpr, closed_jaxpr.consts, *args)


def __getattr__(name):
  raise AttributeError(f"module 'partix.extend.core' has no attribute {name!r}: partix does "
                       f"not provide jax.extend.core.{name}")
