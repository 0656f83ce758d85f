"""jax.experimental.mesh_utils: device arrays for Mesh."""
import math

import numpy as np

from partix import _core
from partix._src.core import PartixError
from partix._src.sharding import Device


def create_device_mesh(mesh_shape, devices=None, *, contiguous_submeshes=False,
                       allow_split_physical_axes=False):
  devs = list([Device(d) for d in _core.devices()] if devices is None else devices)
  n = math.prod(mesh_shape)
  if n != len(devs):
    raise PartixError(f"[create_device_mesh] mesh shape {tuple(mesh_shape)} needs {n} devices; "
                      f"{len(devs)} given")
  arr = np.empty(n, dtype=object)
  arr[:] = devs
  return arr.reshape(tuple(mesh_shape))


def create_hybrid_device_mesh(mesh_shape, dcn_mesh_shape, devices=None, **kw):
  shape = tuple(a * b for a, b in zip(mesh_shape, dcn_mesh_shape))
  return create_device_mesh(shape, devices)
