"""jax.custom_derivatives (partix.custom_derivatives): custom_jvp, custom_vjp, custom_gradient."""
from partix._src.custom_derivatives import custom_gradient, custom_jvp, custom_vjp  # noqa: F401
