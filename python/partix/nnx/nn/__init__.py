"""nnx's layers, initializers and activations."""
from partix.nnx.nn import activations, initializers  # noqa: F401
