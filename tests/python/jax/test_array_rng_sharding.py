"""Mirrors JAX 0.10.2's tests/array_test.py, class RngShardingTest: threefry random bits over
a sharded array are computed fully partitioned, with no communication, and equal the
single-device values; and an empty Mesh."""
import math
import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec as P

from conftest import create_mesh

JAX_CLASS = "tests/array_test.py::RngShardingTest"

LEFT_OUT = {}


def create_array(shape, sharding, global_data):
  """The array of `sharding` whose blocks a callback cuts from global_data."""
  return jax.make_array_from_callback(shape, sharding, lambda idx: global_data[idx]), global_data


@jax.jit
def _bits_plus(x):
  # JAX calls the private threefry2x32.threefry_random_bits(key [0, 0] as uint32, 32,
  # x.shape): what the public random.bits gives for that raw key.
  key = jnp.array([0, 0], dtype="uint32")
  return jax.random.bits(key, x.shape, jnp.uint32) + x


def _check_pure_map(x, global_shape):
  """The computation is fully partitioned and communicates nothing, and its values are the
  single-device ones."""
  # A value of the global shape, as the text types it: u32[9] (in HLO and in partix);
  # JAX looks for '[9]' anywhere in HLO text, where only types write it.
  global_typed = re.compile(r"\b[a-z]+\d*\[" + ",".join(str(d) for d in global_shape) + r"\]")
  with jax.threefry_partitionable(True):
    unopt_txt = _bits_plus.lower(x).as_text(dialect="hlo")
    opt_txt = _bits_plus.lower(x).compile().as_text()
    assert global_typed.search(unopt_txt)  # the traced program holds the global shape ...
    assert not global_typed.search(opt_txt)  # ... the per-device one only blocks of it
    for collective in ("all-reduce", "all_reduce", "collective-permute",
                       "collective_permute"):
      assert collective not in opt_txt
    y = _bits_plus(x)
    y_ref1 = _bits_plus(jax.device_put(x, jax.devices()[0]))
    np.testing.assert_array_equal(np.asarray(y), np.asarray(y_ref1))
    assert y.dtype == y_ref1.dtype == np.uint32


@pytest.mark.parametrize("num_devices", [3, 4, 5], ids=["3", "4", "5"])
def test_random_bits_is_pure_map_1d(num_devices):
  mesh = create_mesh((num_devices,), ("x",), iota_order=True)
  s = NamedSharding(mesh, P("x"))
  n = num_devices ** 2
  global_x = jnp.arange(n).astype("uint32")
  x, _ = create_array(global_x.shape, s, global_x)
  _check_pure_map(x, (n,))


PURE_MAP_2D = [(m, p) for m in [(3, 2), (4, 2), (2, 3)]
               for p in [P("x", None), P(None, "y"), P("x", "y")]]


@pytest.mark.parametrize("mesh_shape,pspec",
                         [pytest.param(m, p, id=f"_{m}_{p}") for m, p in PURE_MAP_2D])
def test_random_bits_is_pure_map_2d(mesh_shape, pspec):
  global_shape = tuple(int(d) for d in np.square(mesh_shape))
  mesh = create_mesh(mesh_shape, ("x", "y"), iota_order=True)
  s = NamedSharding(mesh, pspec)
  global_x = np.arange(math.prod(global_shape)).astype("uint32").reshape(global_shape)
  x, _ = create_array(global_x.shape, s, global_x)
  _check_pure_map(x, global_shape)


def test_empty_mesh_creation():
  mesh = Mesh(devices=np.empty((), dtype=object), axis_names=[])
  assert mesh.empty
  assert mesh.size == 0

  abstract_mesh = mesh.abstract_mesh
  assert abstract_mesh.empty
  assert abstract_mesh.size == 0

  abstract_mesh2 = AbstractMesh((), ())
  assert abstract_mesh2.empty
  assert abstract_mesh2.size == 0
