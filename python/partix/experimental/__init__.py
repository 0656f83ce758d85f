"""partix.experimental: shard_map, mesh_utils and shard under their JAX names."""
from partix.experimental import mesh_utils, shard, shard_map  # noqa: F401
