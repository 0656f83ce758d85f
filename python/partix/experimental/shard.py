"""partix.experimental.shard: explicit-sharding helpers under JAX's names
(jax.experimental.shard): reshard, auto_axes, explicit_axes."""
from partix._src.api import auto_axes, explicit_axes, reshard  # noqa: F401
