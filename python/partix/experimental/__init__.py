"""partix.experimental: shard_map and mesh_utils under their JAX names."""
from partix.experimental import mesh_utils, shard_map  # noqa: F401
