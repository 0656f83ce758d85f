"""Mirrors JAX 0.10.2's tests/array_test.py, class ShardingTest: NamedSharding's indices and
shard shapes, PartitionSpec, Mesh and AbstractMesh, pmap's shardings, and the errors of the
make_array_from_* constructors."""
import math

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec as P
from jax.sharding import SingleDeviceSharding

from conftest import create_mesh

JAX_CLASS = "tests/array_test.py::ShardingTest"

LEFT_OUT = {
    "test_util_clear_cache": "checks the cache_info() size of the private "
                             "common_devices_indices_map cache after jax.clear_caches",
    "test_op_sharding_indices": "builds the private GSPMDSharding from an HLO sharding (no "
                                "public API makes one) to compare its devices_indices_map "
                                "with NamedSharding's, which test_shard_shape and "
                                "test_mesh_pspec_sharding_interface cover publicly",
    "test_gspmd_sharding_repr": "builds the private GSPMDSharding from an xla_client "
                                "OpSharding and checks its repr's HLO sharding text",
    "test_gspmd_sharding_hash_eq": "hash and equality of the private GSPMDSharding, built "
                                   "from an HLO sharding",
    "test_hlo_sharding_get_axis_sizes": "builds the private GSPMDSharding from an xla_client "
                                        "OpSharding (iota tile assignment) and checks the HLO "
                                        "sharding's get_axis_sizes",
    "test_gspmd_sharding_shardy_lowering": "checks the private GSPMDSharding's _to_sdy_sharding "
                                           "(Shardy) lowering",
    "test_modify_spec_auto_unreduced": "checks the private "
                                       "jax._src.core.modify_spec_for_auto_manual helper",
}


def test_mesh_pspec_sharding_interface():
  mesh = create_mesh((4, 2), ("x", "y"))
  s = NamedSharding(mesh, P("y", "x"))
  shape = (8, 4)
  di_map = s.devices_indices_map(shape)
  assert di_map[mesh.devices.flat[0]] == (slice(0, 4), slice(0, 1))
  # JAX's device assignment is the mesh's devices in order.
  assert list(s.mesh.devices.flat) == list(mesh.devices.flat)
  # JAX's HLO sharding: tiled, a [2, 4] grid of blocks holding devices [0, 2, 4, 6, 1, 3, 5,
  # 7] in row-major order; the same layout read from devices_indices_map.
  assert not s.is_fully_replicated
  block = s.shard_shape(shape)
  grid = tuple(n // b for n, b in zip(shape, block))
  assert grid == (2, 4)
  tiles = {tuple(sl.indices(n)[0] // b for sl, n, b in zip(idx, shape, block)): d.id
           for d, idx in di_map.items()}
  assert [tiles[(i, j)] for i in range(2) for j in range(4)] == [0, 2, 4, 6, 1, 3, 5, 7]


SHARD_SHAPES = [("mesh_x_y", P("x", "y"), (2, 2)), ("mesh_x", P("x"), (2, 4)),
                ("mesh_y", P("y"), (4, 4)), ("mesh_none_y", P(None, "y"), (8, 2)),
                ("mesh_none_x", P(None, "x"), (8, 1)), ("mesh_xy", P(("x", "y")), (1, 4)),
                ("mesh_fully_replicated", P(), (8, 4))]


@pytest.mark.parametrize("pspec,expected_shard_shape",
                         [pytest.param(p, e, id=n) for n, p, e in SHARD_SHAPES])
def test_shard_shape(pspec, expected_shard_shape):
  mps = NamedSharding(create_mesh((4, 2), ("x", "y")), pspec)
  assert mps.shard_shape((8, 4)) == expected_shard_shape


def test_uneven_shard_error():
  mps = NamedSharding(create_mesh((4, 2), ("x", "y")), P("x", "y"))
  # JAX: IndivisibleError (a ValueError): "... should evenly divide the shape".
  with pytest.raises(Exception, match="divide"):
    mps.shard_shape((8, 3))


def test_is_compatible_error():
  mesh = create_mesh((1, 1, 2), ("replica", "data", "mdl"))
  mps = NamedSharding(mesh, P(None, ("mdl",), None, None))
  with pytest.raises(Exception, match=(
      r"Sharding NamedSharding.*P\(None, 'mdl', None, None\).*\) is only valid for values of "
      r"rank at least 4, but was applied to a value of rank 2")):
    mps.check_compatible_aval((8, 2))


def test_is_subclass():
  impl = type(jnp.arange(3))  # JAX's array.ArrayImpl
  assert issubclass(impl, jax.Array)
  assert not issubclass(impl, np.ndarray)


FULLY_REPLICATED = [
    ("2d_mesh_x", (1, 1), P("x", "y"), True),
    ("2d_mesh_x_y", (4, 2), P("x", "y"), False),
    ("2d_mesh_empty", (2, 1), P(), True),
    ("2d_mesh_p_none", (2, 1), P(None), True),
    ("2d_mesh_none_none", (2, 1), P(None, None), True),
    ("2d_mesh_tuple_empty", (2, 1), P((),), True),
    ("2d_mesh_x_none", (2, 1), P(("x",), None), False),
    ("2d_mesh_xy_none", (2, 1), P(("x", "y"), None), False),
    ("2d_mesh_x_tuple_empty", (2, 1), P("x", (), (), ()), False),
    ("2d_mesh_3_tuple_empty", (2, 1), P((), (), ()), True),
    ("3d_mesh2_x_none_none", (1, 2, 4), P("x", None, None), True),
    ("3d_mesh2_x_y_none", (1, 1, 4), P("x", "y", None), True),
    ("3d_mesh2_xy_none", (1, 1, 4), P(("x", "y"), None), True),
]


@pytest.mark.parametrize("mesh_shape,pspec,replicated",
                         [pytest.param(m, p, r, id=n) for n, m, p, r in FULLY_REPLICATED])
def test_is_fully_replicated_named_sharding(mesh_shape, pspec, replicated):
  names = ("x", "y") if len(mesh_shape) == 2 else ("x", "y", "z")
  mps = NamedSharding(create_mesh(mesh_shape, names), pspec)
  # JAX compares with whether the HLO sharding of a rank-3 value is replicated; `replicated`
  # is what that gives for each case.
  assert mps.is_fully_replicated == replicated


def test_pmap_sharding_repr():
  if jax.device_count() < 2:
    pytest.skip("Test needs >= 2 devices.")
  out = jax.pmap(lambda x: x)(jnp.arange(2.))
  assert isinstance(str(out.sharding), str)  # doesn't crash
  assert isinstance(repr(out.sharding), str)  # doesn't crash


def test_pspec_tuple():
  pspec = P("x", "y", "z")
  assert pspec.index("z") == 2
  out1 = P(None, "x", "y", "z")
  out2 = P((), "x", "y", "z")
  assert hash(out1) == hash(out2)
  assert out1 is out2  # PartitionSpecs are interned


DEFAULT_PMAP = [("sharded_dim_0", (4, 2), 0), ("sharded_dim_1_0", (4, 2), 1),
                ("sharded_dim_2", (4, 2, 4), 2), ("sharded_dim_1_1", (2, 4), 1)]


@pytest.mark.parametrize("shape,sharded_dim", [pytest.param(s, d, id=n) for n, s, d in DEFAULT_PMAP])
def test_default_pmap_sharding(shape, sharded_dim):
  if jax.device_count() < 4:
    pytest.skip("Test needs >= 4 devices.")
  inp = jnp.arange(math.prod(shape)).reshape(shape)
  out = jax.pmap(lambda x: x, in_axes=sharded_dim, axis_name="x")(inp)
  n = shape[sharded_dim]
  expected = NamedSharding(Mesh(jax.devices()[:n], "x"), jax.P("x"))
  assert out.sharding.spec == expected.spec
  # JAX's _device_assignment: the mesh's devices in order.
  assert list(out.sharding.mesh.devices.flat) == list(expected.mesh.devices.flat)


def test_default_pmap_sharding_replicated():
  x = np.zeros((len(jax.local_devices()), 8), dtype=np.float32)
  x = jax.pmap(lambda x: x, in_axes=0, out_axes=None, axis_name="x")(x)
  expected = NamedSharding(mesh=Mesh(jax.local_devices(), "x"), spec=jax.P())
  assert x.sharding == expected


def test_mesh_repr():
  mesh_repr = repr(create_mesh((1, 1), ("x", "y")))
  assert "axis_sizes" in mesh_repr
  assert "axis_names" in mesh_repr


def test_are_shardings_equivalent():
  mesh = create_mesh((1,), ("x"))
  mesh2 = create_mesh((2, 1), ("x", "y"))
  devs = jax.devices()
  s1 = NamedSharding(mesh, P("x"))
  s2 = SingleDeviceSharding(devs[0])
  assert s1.is_equivalent_to(s2, 2)

  s3 = jax.pmap(lambda x: x)(jnp.arange(jax.device_count())).sharding
  s4 = jax.pmap(lambda x: x)(jnp.arange(jax.device_count())).sharding
  assert s3.is_equivalent_to(s4, 2)
  assert not s1.is_equivalent_to(s3, 2)
  assert not s2.is_equivalent_to(s3, 2)

  s5 = NamedSharding(mesh2, P("x", "y"))
  # JAX builds s6, s7, s8 and s10 as GSPMDShardings from OpShardings; each is here the
  # NamedSharding placing an array the same way, on a mesh of its own axis name.
  s6 = NamedSharding(Mesh(np.array(devs[:1]), ("a",)), P())  # replicated on device 0
  s7 = NamedSharding(Mesh(np.array(devs), ("a",)), P())  # replicated on all devices
  assert not s6.is_equivalent_to(s7, 2)  # both replicated, on different devices
  s8 = NamedSharding(Mesh(np.array(devs[:2]), ("a",)), P("a", None))  # tiles [2, 1] on 0, 1
  assert s1.is_equivalent_to(s6, 2)
  assert s5.is_equivalent_to(s8, 2)
  assert not s5.is_equivalent_to(s2, 2)

  s9 = NamedSharding(mesh2, P("y"))
  # tiles [1, 1, 2] with the last dimension replicated, on devices 0, 1
  s10 = NamedSharding(Mesh(np.array(devs[:2]), ("a",)), P())
  assert s9.is_equivalent_to(s10, 2)


def test_devices_indices_map_good_error_message():
  s = NamedSharding(create_mesh((2, 2), ("x", "y")), P("x", "y"))
  # JAX: IndivisibleError (a ValueError): "... should evenly divide the shape".
  with pytest.raises(ValueError, match="divide"):
    s.devices_indices_map((1, 2))


def test_scalar_input_wrong_pspec():
  s = NamedSharding(create_mesh((1,), ("x")), P("x"))
  with pytest.raises(Exception, match=r"For scalars the PartitionSpec should be P\(\)"):
    s.check_compatible_aval(())


def test_mesh_caching_during_construction():
  if jax.device_count() < 2:
    pytest.skip("Requires >=2 devices")
  mesh1 = Mesh(jax.devices(), "x")
  mesh2 = Mesh(jax.devices(), "x")
  assert mesh1 is mesh2


def test_mesh_str():
  mesh = create_mesh((2, 2, 2), ("x", "y", "z"))
  assert str(mesh) == "Mesh('x': 2, 'y': 2, 'z': 2, axis_types=(Auto, Auto, Auto))"


def test_make_array_from_callback_error():
  mesh_shape = (2, 3)
  global_shape = tuple(np.square(mesh_shape))
  mesh = create_mesh(mesh_shape, ("x", "y"), iota_order=True)
  sharding = NamedSharding(mesh, P("x", "y"))
  global_x = jnp.arange(math.prod(global_shape)).astype("uint32").reshape(global_shape)

  def f(arr):
    return jax.make_array_from_callback(arr.shape, sharding, lambda i: arr[i])

  assert f(global_x).shape == global_shape
  # JAX: jax.errors.UnexpectedTracerError.
  with pytest.raises(Exception, match="jax.make_array_from_callback cannot be called within a "
                                      "traced context"):
    jax.jit(f)(global_x)


def test_make_array_from_single_device_arrays_error():
  x = jnp.arange(10)
  sharding = x.sharding

  def f(x):
    return jax.make_array_from_single_device_arrays(x.shape, sharding, [x])

  with pytest.raises(Exception, match="jax.make_array_from_single_device_arrays requires a "
                                      "list of concrete arrays"):
    jax.jit(f)(x)


def test_make_array_from_single_device_arrays_nonlist_error():
  x = jnp.arange(10)
  sharding = x.sharding

  def f(x):
    return jax.make_array_from_single_device_arrays(x.shape, sharding, x)

  with pytest.raises(TypeError, match="jax.make_array_from_single_device_arrays `arrays` "
                                      "argument"):
    jax.jit(f)(x)


def test_make_array_from_single_device_arrays_tuple():
  mesh = create_mesh((2, 2), ("x", "y"))
  shape = (8, 8)
  s = NamedSharding(mesh, P("x", "y"))
  data = np.arange(math.prod(shape)).reshape(shape)
  arrays = tuple(jax.device_put(data[index], d)
                 for d, index in s.addressable_devices_indices_map(shape).items())
  out = jax.make_array_from_single_device_arrays(shape, s, arrays)  # doesn't crash
  assert out.shape == shape


def test_make_array_from_single_device_arrays_bad_inputs():
  mesh = create_mesh((2,), ("x",))
  s = NamedSharding(mesh, P("x"))
  x = jax.device_put(jnp.arange(10), s)
  with pytest.raises(Exception, match=(
      r"When making an array from single-device arrays the input arrays must have one shard "
      r"each. An argument array had 2 shard\(s\).")):
    jax.make_array_from_single_device_arrays(x.shape, s, [x, x])


def test_device_attr():
  # A single-device array's .device is its device.
  x = jnp.ones((2, 10))
  assert x.device == list(x.devices())[0]
  # A sharded array's .device is its sharding.
  sharding = NamedSharding(create_mesh((2,), ("x",)), P("x"))
  x = jax.device_put(x, sharding)
  assert x.device == sharding


def test_to_device():
  device = jax.devices()[-1]
  sharding = NamedSharding(create_mesh((2,), ("x",)), P("x"))
  x = jnp.ones((2, 10))
  assert x.to_device(device).device == device
  assert x.to_device(sharding).device == sharding


def test_mesh_with_axis_name_none():
  # JAX: ValueError 'Mesh axis names cannot be None.'
  with pytest.raises(Exception, match="None"):
    Mesh(jax.devices(), (None, "x"))


def test_mesh_axis_types_mismatch():
  msg = "Number of axis names should match the number of axis_types"
  with pytest.raises(Exception, match=msg):
    create_mesh((2, 1), ("x", "y"), axis_types=AxisType.Auto)
  with pytest.raises(Exception, match=msg):
    AbstractMesh((2, 1), ("x", "y"), axis_types=AxisType.Auto)
  with pytest.raises(TypeError, match="axis_types.*must be of type"):
    AbstractMesh((2,), ("x",), axis_types=("explicit",))
  with pytest.raises(TypeError, match="axis_types.*must be of type"):
    AbstractMesh((2,), ("x",), axis_types="explicit")
  with pytest.raises(TypeError, match="axis_types.*must be of type"):
    AbstractMesh((2, 2), ("x", "y"), axis_types=("explicit", AxisType.Explicit))


def test_make_mesh_axis_types():
  Auto, Explicit, Manual = AxisType.Auto, AxisType.Explicit, AxisType.Manual
  assert AbstractMesh((2,), "x", axis_types=Auto) == AbstractMesh((2,), "x", axis_types=Auto)

  mesh = jax.make_mesh((1, 1), ("x", "y"))
  assert mesh.axis_types == (AxisType.Explicit,) * 2  # make_mesh's default

  mesh = jax.make_mesh((1, 1, 1), ("x", "y", "z"), axis_types=(Explicit, Auto, Manual))
  assert mesh.explicit_axes == ("x",)
  assert mesh.auto_axes == ("y",)
  assert mesh.manual_axes == ("z",)

  with pytest.raises(Exception, match="Number of axis names should match the number of "
                                      "axis_types"):
    jax.make_mesh((1, 1), ("data", "model"), axis_types=Explicit)

  names = ("a", "b", "c", "d", "e")
  mesh1 = jax.make_mesh((1,) * 5, names, axis_types=(Explicit, Auto, Auto, Explicit, Explicit))
  mesh2 = jax.make_mesh((1,) * 5, names, axis_types=(Explicit, Auto, Auto, Explicit, Auto))
  assert mesh1 != mesh2
  assert hash(mesh1) != hash(mesh2)


def test_memory_kind_with_abstract_mesh():
  abstract_mesh = AbstractMesh((2,), ("x",))
  ns = NamedSharding(abstract_mesh, P(), memory_kind="pinned_host")
  assert ns.memory_kind == "pinned_host"
  ns = NamedSharding(abstract_mesh, P())
  assert ns.memory_kind is None
  with pytest.raises(ValueError, match="Got invalid memory kind"):
    NamedSharding(abstract_mesh, P(), memory_kind="weird_device")


def test_pspec_mix_axis_types():
  import jax.core
  mesh = AbstractMesh((2, 2, 2, 2), ("a", "b", "c", "d"),
                      axis_types=(AxisType.Explicit, AxisType.Explicit, AxisType.Auto,
                                  AxisType.Manual))
  aval = jax.core.ShapedArray((16, 8, 4, 2), np.float32)
  # Only Explicit axes stay in the type's spec.
  cases = [(P(("a", "b", "c"), "d"), P(("a", "b"), None, None, None)),
           (P(("a", "c"), "b", "d"), P("a", "b", None, None)),
           (P(("a", "b"), "c", "d"), P(("a", "b"), None, None, None)),
           (P(("a", "d"), "b", "c"), P("a", "b", None, None))]
  for spec, want in cases:
    out = aval.update(sharding=NamedSharding(mesh, spec))
    assert out.sharding.spec == want


def test_aval_str_short():
  # JAX's case also gives the avals varying axes through the private
  # jax._src.core.ManualAxisType ({V:c}); the public part is mirrored.
  import jax.core
  mesh = AbstractMesh((2, 2, 2), ("a", "b", "c"),
                      axis_types=(AxisType.Explicit, AxisType.Explicit, AxisType.Manual))
  s = NamedSharding(mesh, P(unreduced={"a"}))
  aval = jax.core.ShapedArray((1, 1, 1, 1), np.float32, sharding=s)
  assert aval.str_short(True) == "f32[1,1,1,1]{U:a}"
  aval = jax.core.ShapedArray((1, 1, 1, 1), np.float32)
  assert aval.str_short(True) == "f32[1,1,1,1]"


def test_pspec_unreduced():
  pspec = P("a", "b", None, unreduced={"c"}, reduced={"d"})
  assert repr(pspec) == "P('a', 'b', None, unreduced={'c'}, reduced={'d'})"
  pspec1 = P("a", "b", None, unreduced={"c"})
  assert repr(pspec1) == "P('a', 'b', None, unreduced={'c'})"
  assert pspec1 == P("a", "b", None, unreduced={"c"})
  assert pspec1 != P("a", "b", None, unreduced={"d"})
  assert P("x", unreduced={"z"}) + P("a", unreduced={"b"}) == P("x", "a",
                                                                   unreduced={"z", "b"})
  assert repr(P("x", unreduced={"y"})) == "P('x', unreduced={'y'})"
  assert repr(P(None, None, unreduced={"x"})) == "P(None, None, unreduced={'x'})"
  assert repr(P(None, unreduced={"x"})) == "P(None, unreduced={'x'})"
  assert repr(P(unreduced={"x"})) == "P(unreduced={'x'})"
  with pytest.raises(TypeError, match="unreduced in `__add__` of PartitionSpec"):
    P("x", unreduced={"z"}) + (None,) * 2
  with pytest.raises(TypeError, match="unreduced in `__radd__` of PartitionSpec"):
    (None,) * 2 + P("x", unreduced={"y"})
  with pytest.raises(Exception, match="partitions cannot overlap with unreduced"):
    P("x", "y", unreduced={"x"})
  with pytest.raises(Exception, match="partitions cannot overlap with unreduced"):
    P("x", None, "y", unreduced={"z", "y"})


def test_named_sharding_unreduced_error():
  mesh = create_mesh((1, 1, 1), ("x", "y", "z"))
  with pytest.raises(ValueError, match="Unreduced axes.*not found in mesh.*"):
    NamedSharding(mesh, P("x", unreduced={"a"}))
  with pytest.raises(ValueError, match="Unreduced axes can only refer to mesh axes.*Explicit"):
    NamedSharding(mesh, P("x", unreduced={"y", "z"}))
  with pytest.raises(ValueError, match="unreduced cannot contain None.*"):
    NamedSharding(mesh, P("x", unreduced={"y", None}))


def test_nested_tuple_pspec_error():
  # JAX: ValueError "A tuple inside PartitionSpec cannot contain a nested tuple".
  with pytest.raises(Exception, match="tuple"):
    jax.P("x", "y", ("z", ("a",)))
  with pytest.raises(Exception, match="tuple"):
    jax.P((("a", "b"), "c"))


def test_pspec_subclass_error():
  with pytest.raises(TypeError, match="Subclassing `jax.P` is prohibited"):
    class MyP(jax.P):
      pass


def test_abstract_mesh_is_equivalent_to():
  mesh = create_mesh((2,), "x")
  s1 = NamedSharding(mesh.abstract_mesh, P("x"))
  s2 = NamedSharding(mesh.abstract_mesh, P("x"))
  assert s1 == s2
  assert s1.is_equivalent_to(s2, 2)


def test_manual_axis_type_frozen():
  # JAX reaches it through the private jax._src.core; partix's public jax.core has it.
  import jax.core
  mt = jax.core.ManualAxisType(varying={"x"})
  with pytest.raises(AttributeError):
    mt.varying = {"y"}
  assert mt.varying == {"x"}
