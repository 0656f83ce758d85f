"""Meshes of the virtual devices for the partix.nnx tests."""
import numpy as np
import pytest

import partix
from partix.sharding import AxisType


def make_mesh(shape, names=("data", "model")):
  if partix.device_count() < int(np.prod(shape)):
    pytest.skip(f"needs {int(np.prod(shape))} devices (PARTIX_NUM_CPU_DEVICES=8)")
  devices = np.array(partix.devices()[:int(np.prod(shape))]).reshape(shape)
  return partix.sharding.Mesh(devices, names, axis_types=(AxisType.Auto,) * len(shape))
