"""Sharding and array metadata as JAX 0.10.2 gives them (values and messages read off JAX
itself): the empty mesh, NamedSharding's memory kinds and unreduced-axis errors,
devices_indices_map's even split, ShapeDtypeStruct.like and np.dtype of an Array."""
import warnings

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec as P
from partix.sharding import SingleDeviceSharding
from partix._src.errors import PartixTypeError

E, A = AxisType.Explicit, AxisType.Auto


def _empty_mesh():
  return Mesh(np.empty((), dtype=object), ())


# ---- the empty mesh ----

def test_empty_mesh_is_interned_and_prints_as_jax():
  m = _empty_mesh()
  assert m is Mesh(devices=np.empty((), dtype=object), axis_names=[])
  assert (m.empty, m.size, m.axis_names, m.axis_sizes, m.shape) == (True, 0, (), (), {})
  assert repr(m) == "Mesh(axis_sizes=(), axis_names=())" and str(m) == "Mesh()"
  assert m.devices.shape == () and m.devices_flat == []
  with pytest.raises(jax.PartixError, match=r"\[Mesh.device_ids\] .* empty mesh"):
    m.device_ids
  assert m.abstract_mesh == AbstractMesh((), ()) and m != AbstractMesh((), ())


def test_mesh_without_axes_but_a_device_is_not_empty():
  # JAX's scalar mesh: one device, no axes, size 1.
  m = Mesh(np.array(jax.devices()[0], dtype=object), ())
  assert not m.empty and m.size == 1 and m != _empty_mesh()
  assert not AbstractMesh((2,), ("x",)).empty and AbstractMesh((2,), ("x",)).size == 2


def test_empty_mesh_refuses_other_shapes():
  with pytest.raises(jax.PartixError, match=r"\[Mesh\] devices of shape \(\) for 1 axis"):
    Mesh(np.empty((), dtype=object), ("x",))
  with pytest.raises(jax.PartixError, match=r"\[Mesh\] None is not a partix Device"):
    Mesh(np.array([None], dtype=object), ("x",))


def test_named_sharding_on_the_empty_mesh():
  s = NamedSharding(_empty_mesh(), P())
  assert s.memory_kind is None and s.num_devices == 0
  assert repr(s) == "NamedSharding(mesh=Mesh(), spec=P())"
  with pytest.raises(jax.PartixError, match="'x'"):
    NamedSharding(_empty_mesh(), P("x"))


def test_empty_mesh_in_context_is_no_mesh():
  mesh = jax.make_mesh((2,), ("x",))
  with jax.set_mesh(mesh):
    with jax.set_mesh(_empty_mesh()):
      assert jax.sharding.get_mesh() is None
      assert jax.sharding.get_abstract_mesh().empty
    assert jax.sharding.get_mesh() is mesh


def test_shard_map_refuses_empty_meshes():
  f = jax.shard_map(lambda x: x, mesh=_empty_mesh(), in_specs=P(), out_specs=P())
  with pytest.raises(ValueError, match=r"\[shard_map\] shard_map requires a non-empty mesh: "
                     r"got Mesh\(\)"):
    f(jnp.arange(8))
  with pytest.raises(jax.PartixError, match="requires a non-empty mesh"):
    jax.jit(f)(jnp.arange(8))
  with pytest.raises(jax.PartixError, match=r"requires a non-empty mesh: got AbstractMesh"):
    jax.shard_map(lambda x: x, mesh=AbstractMesh((), ()), in_specs=P(),
                  out_specs=P())(jnp.arange(8))


# ---- memory kinds ----

@pytest.mark.parametrize("kind", ["device", "pinned_host", "unpinned_host"])
def test_memory_kinds_are_kept(kind):
  mesh = jax.make_mesh((2,), ("x",))
  s = NamedSharding(mesh, P("x"), memory_kind=kind)
  assert s.memory_kind == kind and s.with_spec(P()).memory_kind == kind
  assert repr(s).endswith(f"memory_kind={kind})")
  assert NamedSharding(AbstractMesh((2,), ("x",)), P(), memory_kind=kind).memory_kind == kind


def test_default_memory_kind_is_the_devices_on_a_concrete_mesh():
  mesh, am = jax.make_mesh((2,), ("x",)), AbstractMesh((2,), ("x",))
  assert NamedSharding(mesh, P()).memory_kind == "device"
  assert NamedSharding(mesh, P()) == NamedSharding(mesh, P(), memory_kind="device")
  assert NamedSharding(am, P()).memory_kind is None
  assert NamedSharding(am, P()) != NamedSharding(am, P(), memory_kind="device")
  assert repr(NamedSharding(am, P())) == (
      "NamedSharding(mesh=AbstractMesh('x': 2, axis_types=(Auto,)), spec=P())")
  x = jax.device_put(jnp.arange(8), NamedSharding(mesh, P("x")))
  assert x.sharding.memory_kind == "device"
  assert jax.jit(lambda v: v * 2)(x).sharding.memory_kind == "device"
  assert SingleDeviceSharding(jax.devices()[0]).memory_kind == "device"


def test_invalid_memory_kinds_are_refused():
  mesh = jax.make_mesh((2,), ("x",))
  with pytest.raises(ValueError, match=r"\[NamedSharding\] Got invalid memory kind: "
                     r"memory_kind='hbm' on Mesh\('x': 2"):
    NamedSharding(mesh, P(), memory_kind="hbm")
  with pytest.raises(PartixTypeError, match=r"\[NamedSharding\] memory_kind=3 is not a "
                     "string"):
    NamedSharding(mesh, P(), memory_kind=3)
  with pytest.raises(jax.PartixError, match=r"\[SingleDeviceSharding\] Got invalid memory "
                     "kind: memory_kind='weird'"):
    SingleDeviceSharding(jax.devices()[0], memory_kind="weird")


# ---- unreduced axes ----

def test_unreduced_axis_errors_name_the_axes():
  mesh = jax.make_mesh((1, 1, 1), ("x", "y", "z"), axis_types=(E, A, A))
  with pytest.raises(ValueError, match=r"\[NamedSharding\] Unreduced axes of P\('x', "
                     r"unreduced=.*\) not found in mesh axis_names \('x', 'y', 'z'\): "
                     r"unreduced axis 'a' is not in Mesh\('x': 1, .*, nor is 'b'$"):
    NamedSharding(mesh, P("x", unreduced={"b", "a"}))
  with pytest.raises(ValueError, match=r"only refer to mesh axes of type Explicit \(Mesh\(.*\)\): "
                     r"unreduced axis 'y' of P\(.*\) is Auto, 'z' is Auto; unreduced axes "
                     "must be Explicit$"):
    NamedSharding(mesh, P(unreduced={"x", "y", "z"}))
  with pytest.raises(ValueError, match=r"\[PartitionSpec\] reduced cannot contain None"):
    P("x", reduced={None})
  s = NamedSharding(mesh, P(None, unreduced={"x"}))  # Explicit: allowed
  assert s.spec.unreduced == {"x"}


# ---- devices_indices_map ----

def test_devices_indices_map_needs_an_even_split(mesh8):
  s = NamedSharding(mesh8, P("x", "y"))
  idx = s.devices_indices_map((8, 4))
  assert len(idx) == 8 and idx[jax.devices()[0]] == (slice(0, 2), slice(0, 2))
  with pytest.raises(ValueError, match=r"\[NamedSharding.devices_indices_map\] P\('x', 'y'\) "
                     r"splits dimension 1 of shape \(8, 3\) 2 ways, which does not divide 3"):
    s.devices_indices_map((8, 3))
  with pytest.raises(jax.PartixError, match=r"does not divide 2"):
    NamedSharding(mesh8, P(("x", "y"))).addressable_devices_indices_map((2,))
  with pytest.raises(jax.PartixError, match=r"has 2 entries for shape \(8,\)"):
    s.devices_indices_map((8,))


# ---- ShapeDtypeStruct.like ----

def test_sds_like_of_scalars_numpy_and_structs():
  S = jax.ShapeDtypeStruct
  assert S.like(1.0) == S((), jnp.float32, weak_type=True)
  assert S.like(3) == S((), jnp.int32, weak_type=True)
  assert S.like(True) == S((), jnp.bool_)
  assert S.like(np.arange(6.0).reshape(2, 3)) == S((2, 3), jnp.float32)
  sds = S((4,), jnp.bfloat16, weak_type=True)
  assert S.like(sds) == sds and repr(S.like(sds)).endswith("weak_type=True)")
  with pytest.raises(PartixTypeError, match=r"\[ShapeDtypeStruct.like\] cannot take the "
                     r"shape and dtype of \[1, 2\] \(type list\)"):
    S.like([1, 2])
  with pytest.raises(jax.PartixError, match=r"\[ShapeDtypeStruct.like\] Python int "
                     "1099511627776 does not fit int32"):
    S.like(2 ** 40)


def test_sds_like_of_sharded_arrays(mesh8):
  s = NamedSharding(mesh8, P("x", "y"))
  x = jax.device_put(jnp.zeros((8, 4)), s)
  out = jax.ShapeDtypeStruct.like(x)
  assert (out.shape, out.dtype, out.sharding) == ((8, 4), np.float32, s)
  assert jax.ShapeDtypeStruct.like(jnp.zeros((8, 4))).sharding is None  # uncommitted
  # The struct stands for x: jit lowers for it and eval_shape gives its shape.
  assert jax.eval_shape(lambda v: v * 2, out).shape == (8, 4)


def test_sds_like_under_jit_and_shard_map():
  mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(E, E))
  x = jax.device_put(jnp.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x", "y")))
  seen = []

  @jax.jit
  def f(a):
    sds = jax.ShapeDtypeStruct.like(a)
    seen.append(sds.sharding.spec)
    return jnp.zeros(sds.shape, sds.dtype, out_sharding=sds.sharding) + a

  with jax.set_mesh(mesh):
    out = f(x)
  assert seen == [P("x", "y")] and out.sharding == x.sharding
  vmas = []

  def body(b):
    vmas.append(jax.ShapeDtypeStruct.like(b).vma)
    return b

  with jax.set_mesh(mesh):
    jax.shard_map(body, in_specs=P("x", "y"), out_specs=P("x", "y"))(x)
  assert vmas == [frozenset({"x", "y"})]


# ---- np.dtype(Array) ----

def test_numpy_dtype_of_an_array_is_deprecated():
  x = jnp.arange(4)
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    assert np.dtype(x) == np.int32
    assert np.zeros(2, dtype=jnp.ones(1)).dtype == np.float32
  msgs = [str(i.message) for i in w if issubclass(i.category, DeprecationWarning)]
  assert len(msgs) == 2 and all("Implicit conversion of an array to a dtype is deprecated" in m
                                for m in msgs), msgs
  assert "i32[4]" in msgs[0] and w[0].filename == __file__
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert np.dtype(x.dtype) == np.int32  # the dtype itself: no warning
    assert jnp.zeros(2, dtype=x.dtype).dtype == np.int32


def test_jit_refuses_shardings_on_the_empty_mesh():
  empty = jax.sharding.Mesh(np.empty((), dtype=object), ())
  s = jax.sharding.NamedSharding(empty, jax.sharding.PartitionSpec())
  for kw in ({"in_shardings": s}, {"out_shardings": s}, {"out_shardings": (s, None)}):
    with pytest.raises(jax.PartixError, match=r"\[jit\] (in|out)_shardings got an empty "
                       r"NamedSharding"):
      jax.jit(lambda x: (x, x), **kw)


def test_process_local_data_as_a_pytree_on_8_devices():
  mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
  s = NamedSharding(mesh, P("x"))
  data = {"w": np.arange(16.).reshape(8, 2), "b": [np.arange(8), np.ones(8, np.float32)]}
  out = jax.make_array_from_process_local_data(s, data, {"w": (8, 2), "b": (8,)})
  assert out["w"].sharding == s and out["b"][0].sharding == s
  np.testing.assert_array_equal(np.asarray(out["w"]), data["w"])
  np.testing.assert_array_equal(np.asarray(out["b"][1]), data["b"][1])
  with pytest.raises(jax.PartixError, match=r"global_shape \(9,\) does not fit"):
    jax.make_array_from_process_local_data(s, data["b"], (9,))
  with pytest.raises(jax.PartixError, match="does not match the structure"):
    jax.make_array_from_process_local_data(s, data, {"w": (8, 2)})


def test_lowering_an_aval_without_sharding_takes_in_shardings():
  import partix.core as jcore
  mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
  aval = jcore.ShapedArray((8, 8), np.int32)
  assert aval.sharding.mesh.empty and aval.sharding.spec == P(None, None)
  s = NamedSharding(mesh, P(("x", "y")))
  exe = jax.jit(lambda a, b: a @ b, in_shardings=(s, s), out_shardings=s).lower(aval, aval).compile()
  x = jnp.arange(64, dtype=jnp.int32).reshape(8, 8)
  out = exe(x, x)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(x) @ np.asarray(x))
  assert out.sharding == s


def test_unsafe_buffer_pointer_tells_copies_from_views():
  x = jnp.arange(8.)
  assert x.unsafe_buffer_pointer() == x.unsafe_buffer_pointer() != 0
  assert jnp.array(x, copy=True).unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
  mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
  s = jax.device_put(np.arange(16.), NamedSharding(mesh, P("x")))
  with pytest.raises(jax.PartixError, match=r"unsafe_buffer_pointer\] is supported only for "
                     r"arrays on one device"):
    s.unsafe_buffer_pointer()
  ptrs = {sh.data.unsafe_buffer_pointer() for sh in s.addressable_shards}
  assert len(ptrs) == 8


def test_typeof_a_constrained_value_names_the_constraints_mesh():
  # As JAX: inside jit, a value constrained on Auto axes has the constraint's abstract mesh in
  # its type (no Explicit axis splits it: its spec is all None); a one-device sharding given
  # as such leaves an empty mesh.
  mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                       devices=jax.devices()[:2])
  seen = []

  @jax.jit
  def f(v):
    y = jax.lax.with_sharding_constraint(v, NamedSharding(mesh, P("x")))
    seen.append(jax.typeof(y).sharding)
    z = jax.lax.with_sharding_constraint(y, jax.sharding.SingleDeviceSharding(jax.devices()[0]))
    seen.append(jax.typeof(z).sharding.mesh.empty)
    return z

  np.testing.assert_array_equal(np.asarray(f(jnp.ones((2, 2)))), np.ones((2, 2)))
  assert seen[0].mesh == mesh.abstract_mesh and seen[0].spec == P(None, None)
  assert seen[1] is True
