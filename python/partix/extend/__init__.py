"""jax.extend (partix.extend): the parts of JAX's extension API partix has. jax.extend.core
evaluates a traced program (jaxpr_as_fun); user-defined primitives are not provided."""
from partix.extend import core  # noqa: F401
