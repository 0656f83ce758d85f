"""jax.experimental.shard_map.shard_map."""
from partix._src.shard_map import shard_map  # noqa: F401
