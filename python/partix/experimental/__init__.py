"""partix.experimental: shard_map, mesh_utils, multihost_utils, shard and pjit under their JAX
names."""
from partix.experimental import mesh_utils, multihost_utils, pjit, shard, shard_map  # noqa: F401
