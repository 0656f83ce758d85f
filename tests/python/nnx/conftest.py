"""Fixtures of the partix.nnx tests: meshes of the 8 virtual devices and optax (imported with
partix installed under JAX's module names, as partix.as_jax does)."""
import importlib.util
import os

import numpy as np
import pytest

import partix
from partix.sharding import AxisType

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "golden", "nnx")


def make_mesh(shape, names=("data", "model")):
  if partix.device_count() < int(np.prod(shape)):
    pytest.skip(f"needs {int(np.prod(shape))} devices (PARTIX_NUM_CPU_DEVICES=8)")
  devices = np.array(partix.devices()[:int(np.prod(shape))]).reshape(shape)
  return partix.sharding.Mesh(devices, names, axis_types=(AxisType.Auto,) * len(shape))


@pytest.fixture(scope="session")
def optax():
  if importlib.util.find_spec("optax") is None:
    pytest.skip("optax is not installed (scripts/setup.sh installs it)")
  import partix.as_jax  # noqa: F401  (optax imports jax: partix under JAX's names)
  import optax as _optax
  return _optax


@pytest.fixture(scope="session")
def golden():
  arrays = np.load(os.path.join(GOLDEN, "layers.npz"))
  import json
  with open(os.path.join(GOLDEN, "structure.json")) as f:
    return arrays, json.load(f)
