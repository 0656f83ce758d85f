"""partix.experimental: shard_map, mesh_utils, multihost_utils, shard, pjit and io_callback
under their JAX names."""
from partix.experimental import mesh_utils, multihost_utils, pjit, shard, shard_map  # noqa: F401
from partix._src.callbacks import io_callback  # noqa: F401
