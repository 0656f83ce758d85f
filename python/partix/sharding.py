"""partix.sharding: Mesh, PartitionSpec, NamedSharding, AxisType (as jax.sharding)."""
from partix._src.sharding import (AbstractMesh, AxisType, Device, Mesh, NamedSharding,  # noqa
                                  PartitionSpec, Sharding, SingleDeviceSharding,
                                  get_abstract_mesh, get_mesh, set_mesh, use_abstract_mesh,
                                  use_mesh)
from partix._src.sharding import PartitionSpec as P  # noqa: F401
from partix._src.api import auto_axes, explicit_axes, reshard  # noqa: F401,E402
from partix._src.shard_map import Infer  # noqa: F401,E402
from partix._src.api import ManualAxisType  # noqa: F401,E402


def __getattr__(name):
  raise AttributeError(f"module 'partix.sharding' has no attribute {name!r}: partix does not "
                       f"provide jax.sharding.{name}")
