"""jax.extend (partix.extend): the parts of JAX's extension API partix has. jax.extend.core
evaluates a traced program (jaxpr_as_fun) and defines user primitives (Primitive: an
implementation and an abstract evaluation rule; no lowering, batching or differentiation
rules)."""
from partix.extend import core  # noqa: F401
