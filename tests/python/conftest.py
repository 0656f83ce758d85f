"""Shared fixtures of the Python tests. ctest runs each file with PYTHONPATH at the build's
package and PARTIX_NUM_CPU_DEVICES=8 (or the file's "# devices: N" line)."""
import os

import numpy as np
import pytest

import partix


@pytest.fixture(scope="session")
def mesh8():
  """The (4, 2) mesh ('x', 'y') of the 8 virtual devices, both axes Auto (propagation
  decides; make_mesh's own default is Explicit, as JAX 0.10's)."""
  if partix.device_count() < 8:
    pytest.skip("needs 8 devices (PARTIX_NUM_CPU_DEVICES=8)")
  return partix.make_mesh((4, 2), ("x", "y"), axis_types=(partix.sharding.AxisType.Auto,) * 2)


@pytest.fixture(scope="session")
def mesh1():
  """A mesh of one device: the unsharded reference."""
  return partix.make_mesh((1,), ("x",), axis_types=(partix.sharding.AxisType.Auto,))


@pytest.fixture
def rng():
  return np.random.default_rng(0)


def build_dir():
  return os.environ.get("PARTIX_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..",
                                                          "build"))
