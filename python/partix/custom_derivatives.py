"""jax.custom_derivatives (partix.custom_derivatives): custom_jvp, custom_vjp, custom_gradient."""
from partix._src.custom_derivatives import (SymbolicZero, custom_gradient, custom_jvp,  # noqa: F401
                                            custom_vjp)
