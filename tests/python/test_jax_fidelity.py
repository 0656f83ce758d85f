"""JAX 0.10's everyday names and semantics, each checked against what JAX 0.10.2 gives (the
values and messages were read off JAX itself): device_put's aliasing and donation, jit's
options, PartitionSpec's printing and arithmetic, shard_map's inferred and pass-through
specs, partial manual axes and smap, the ahead-of-time stages, and multihost_utils."""
import json

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.experimental import multihost_utils
from partix.experimental.pjit import pjit
from partix.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
from mpi_job import needs_mpirun, run_two_processes

E, A = AxisType.Explicit, AxisType.Auto


def test_device_put_copies_when_it_may_not_alias_and_donation_gives_the_argument_up():
  d = jax.devices()[0]
  y = jax.device_put(np.arange(8), d)
  z = jax.device_put(y, d, may_alias=False)
  jax.jit(lambda v: v * 2, donate_argnums=0)(y)
  assert y.is_deleted() and not z.is_deleted()  # the copy outlives the donated original
  np.testing.assert_array_equal(z, np.arange(8))
  tree = {"p": jnp.ones(3), "q": jnp.zeros(2)}
  out = jax.device_put(tree, donate={"p": True, "q": False})
  assert tree["p"].is_deleted() and not tree["q"].is_deleted()
  np.testing.assert_array_equal(out["p"], np.ones(3))
  with pytest.raises(jax.PartixError, match="donate"):
    jax.device_put(out, donate=[True, False, True])
  assert not out["p"].is_deleted()  # a refused call gives nothing up
  # Under a trace there is nowhere to move a value: device_put(x) is x.
  f = jax.shard_map(lambda x: x + jax.device_put(1.0),
                    mesh=jax.make_mesh((8,), ("i",), axis_types=(A,)), in_specs=P("i"),
                    out_specs=P("i"))
  np.testing.assert_array_equal(f(jnp.arange(16.0)), np.arange(16.0) + 1)


def test_jit_options_reach_the_function_in_every_form():
  f = jax.jit(device=jax.devices()[1])(lambda x: x * 2)  # the decorator form
  assert f(jnp.arange(4)).devices() == {jax.devices()[1]}
  np.testing.assert_array_equal(jax.jit(lambda x: x, backend="cpu")(jnp.ones(2)), np.ones(2))
  with pytest.raises(jax.PartixError, match="both a device and a backend"):
    jax.jit(lambda x: x, device=jax.devices()[0], backend="cpu")
  with pytest.raises(jax.PartixError, match="then in_shardings should not be specified"):
    jax.jit(lambda x: x, device=jax.devices()[0], in_shardings=P())
  with pytest.raises(jax.PartixError, match="backend='tpu'"):
    jax.jit(lambda x: x, backend="tpu")


def test_sharding_constraint_of_none_and_eval_shape_inside_a_trace():
  with pytest.raises(jax.PartixError, match="got sharding None which is not allowed"):
    lax.with_sharding_constraint(jnp.arange(8), None)
  g = jax.jit(lambda x: x + jax.eval_shape(jnp.sin, x).shape[0])
  np.testing.assert_array_equal(g(jnp.ones(3)), np.full(3, 4.0))


def test_partition_spec_prints_adds_and_checks_as_jax():
  assert repr(P("x")) == "P('x',)" and repr(P()) == "P()" and repr(P(None)) == "P(None,)"
  assert repr(P("x", unreduced={"y"})) == "P('x', unreduced={'y'})"
  assert repr(P(None, reduced={"x"})) == "P(None, reduced={'x'})"
  s = P("x", unreduced={"z"}) + P("a", unreduced={"b"})
  assert isinstance(s, P) and tuple(s) == ("x", "a") and s.unreduced == {"z", "b"}
  assert ("y",) + P("x") == P("y", "x") and isinstance(("y",) + P("x"), P)
  assert P("x", reduced={"y"}) != P("x") and hash(P("x", reduced={"y"})) == hash(P("x"))
  with pytest.raises(jax.PartixError, match="cannot overlap with unreduced"):
    P("x", "y", unreduced={"x"})
  with pytest.raises(jax.PartixError, match="cannot overlap"):
    P("x", unreduced={"y"}, reduced={"y"})
  with pytest.raises(TypeError):
    type("MyP", (P,), {})
  mesh = jax.make_mesh((4, 2), ("x", "y"))
  assert repr(NamedSharding(mesh, P("x"))) == (
      "NamedSharding(mesh=Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)), spec=P('x',), "
      "memory_kind=device)")
  assert NamedSharding(mesh, P("x")).memory_kind == "device"
  pinned = NamedSharding(mesh, P("x"), memory_kind="pinned_host")
  assert pinned.memory_kind == "pinned_host" and pinned != NamedSharding(mesh, P("x"))
  with pytest.raises(jax.PartixError, match="memory_kind='hbm'"):
    NamedSharding(mesh, P("x"), memory_kind="hbm")
  # Equivalence is placement: the same blocks on the same devices, whatever the axis names.
  m1 = Mesh(np.array(jax.devices()[:4]), ("a",))
  m2 = Mesh(np.array(jax.devices()[:4]), ("b",))
  assert NamedSharding(m1, P("a")).is_equivalent_to(NamedSharding(m2, P("b")), 2)
  assert not NamedSharding(m1, P("a")).is_equivalent_to(NamedSharding(m2, P(None, "b")), 2)


def test_shard_map_infers_in_specs_on_explicit_meshes_and_passes_none_through():
  mesh = jax.make_mesh((4, 2), ("x", "y"))  # Explicit
  x = jax.device_put(np.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x", "y")))
  f = jax.shard_map(lambda a: a * 2, mesh=mesh, out_specs=P("x", "y"))
  out = f(x)
  np.testing.assert_array_equal(out, np.arange(32.0).reshape(8, 4) * 2)
  assert out.sharding.spec == P("x", "y")
  with pytest.raises(jax.PartixError, match="does not match the specs of the input"):
    jax.shard_map(lambda a: a, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)
  auto = jax.make_mesh((8,), ("i",), axis_types=(A,))
  with pytest.raises(jax.PartixError, match="in_specs argument must be a pytree"):
    jax.shard_map(lambda a: a, mesh=auto, out_specs=P())(jnp.ones(8))
  obj = object()

  def body(o, a):
    assert o is obj  # the very object, not a traced value
    return jnp.sin(a)
  y = jax.shard_map(body, mesh=auto, in_specs=(None, P("i")), out_specs=P("i"))(obj, jnp.ones(8))
  np.testing.assert_allclose(y, np.sin(np.ones(8)), rtol=1e-6)
  assert jax.shard_map(lambda: None, mesh=auto, in_specs=(), out_specs=None)() is None
  with pytest.raises(jax.PartixError, match="out_specs is required"):
    jax.shard_map(lambda a: a, mesh=auto, in_specs=P())


def test_shard_map_unreduced_specs_need_explicit_axes_and_reduced_ones_are_refused():
  mesh = jax.make_mesh((2,), ("x",))  # Explicit, as JAX 0.10's default
  out = jax.jit(jax.shard_map(lambda z: z, mesh=mesh, in_specs=P(), out_specs=P(unreduced={"x"}),
                              check_vma=False))(jnp.arange(8.0))
  assert out.sharding == jax.sharding.NamedSharding(mesh, P(None, unreduced={"x"}))
  np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(8.0))  # both blocks summed
  auto = jax.make_mesh((2,), ("x",), axis_types=(A,))
  with pytest.raises(jax.PartixError, match=r"unreduced in out_specs P\(unreduced=\{'x'\}\) can "
                     r"only be used when the mesh passed to shard_map contains axis names all "
                     r"of type `Explicit`"):
    jax.jit(jax.shard_map(lambda z: z, mesh=auto, in_specs=P(), out_specs=P(unreduced={"x"}),
                          check_vma=False))(jnp.arange(8.0))
  with pytest.raises(jax.PartixError, match="reduced"):
    jax.shard_map(lambda z: z, mesh=mesh, in_specs=P(reduced={"x"}), out_specs=P())(jnp.ones(2))


def test_partial_manual_shard_map_and_smap():
  mesh = jax.make_mesh((4, 2), ("i", "j"), axis_types=(A, A))
  x = jnp.arange(64.0).reshape(8, 8)

  def body(a):
    assert jax.sharding.get_abstract_mesh().manual_axes == ("i",)
    assert jax.typeof(a).mat.varying == {"i"}
    return lax.psum(a, "i")
  f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P(), axis_names={"i"}))
  np.testing.assert_allclose(f(x), x.reshape(4, 2, 8).sum(0))
  with pytest.raises(jax.PartixError, match="not manual"):  # a collective over an auto axis
    jax.jit(jax.shard_map(lambda a: lax.psum(a, "j"), mesh=mesh, in_specs=P("i"),
                          out_specs=P("i"), axis_names={"i"}))(x)
  with pytest.raises(jax.PartixError, match=r"in_specs refers to 'j' \(P\('j'\)\), a mesh axis "
                     r"this shard_map is not manual over"):
    jax.shard_map(lambda a: a, mesh=mesh, in_specs=P("j"), out_specs=P("j"),
                  axis_names={"i"})(x)
  with pytest.raises(jax.PartixError, match="subset"):
    jax.shard_map(lambda a: a, mesh=mesh, in_specs=P(), out_specs=P(), axis_names={"k"})(x)
  with jax.sharding.use_mesh(mesh):
    g = jax.smap(lambda a: a * lax.axis_index("i"), in_axes=0, out_axes=0, axis_name="i")
    np.testing.assert_array_equal(g(np.ones(8, np.float32)), np.repeat(np.arange(4.0), 2))


def test_all_gather_result_varies_unless_asked_invariant():
  mesh = jax.make_mesh((4,), ("x",), axis_types=(A,))
  gather = lambda a: lax.all_gather(a, "x", tiled=True)  # noqa: E731
  with pytest.raises(jax.PartixError, match="varies over 'x'"):
    jax.shard_map(gather, mesh=mesh, in_specs=P("x"), out_specs=P())(jnp.arange(8.0))
  inv = jax.shard_map(lambda a: lax.all_gather(a, "x", tiled=True, to="invarying"), mesh=mesh,
                      in_specs=P("x"), out_specs=P())(jnp.arange(8.0))
  np.testing.assert_array_equal(inv, np.arange(8.0))
  with pytest.raises(jax.PartixError, match="allowed values"):
    jax.shard_map(lambda a: lax.all_gather(a, "x", to="bad"), mesh=mesh, in_specs=P("x"),
                  out_specs=P())(jnp.arange(8.0))


def test_ahead_of_time_stages_as_jax():
  x = jnp.arange(8.0)
  lowered = jax.jit(lambda a, b: a * b, donate_argnums=0).lower(x, x)
  assert lowered.donate_argnums == (0,)
  assert [i.donated for i in lowered.args_info[0]] == [True, False]
  assert lowered.in_tree == jax.tree_util.tree_structure(((0, 0), {}))
  assert [str(a) for a in lowered.in_avals[0]] == ["float32[8]"] * 2
  assert lowered.out_info.shape == (8,) and lowered.out_info.sharding is None
  compiled = lowered.compile()
  assert compiled.out_info.sharding is not None
  ins, kws = compiled.input_shardings
  assert len(ins) == 2 and kws == {}
  assert compiled.runtime_executable() is not None
  assert "multiply(" in lowered.compiler_ir(dialect="hlo").as_hlo_text()
  with pytest.raises(jax.PartixError, match="not StableHLO"):
    lowered.compiler_ir(dialect="stablehlo")
  # A compiled program takes the dynamic arguments only.
  c = jax.jit(lambda k, a: a + k, static_argnums=0).lower(1, x).compile()
  np.testing.assert_array_equal(c(x), np.arange(8.0) + 1)


def test_mesh_as_decorator_and_axis_type_sets():
  mesh = jax.make_mesh((2, 2, 2), ("a", "b", "c"), axis_types=(E, A, E))
  assert mesh.explicit_axes == ("a", "c") and mesh.auto_axes == ("b",) and not mesh.manual_axes

  @mesh
  def current():
    return jax.sharding.get_mesh()
  assert current() == mesh and jax.sharding.get_mesh() is None


def test_array_device_members():
  x = jnp.arange(16.0)
  assert x.device == jax.devices()[0] and x.is_ready() and x.on_device_size_in_bytes() == 64
  assert x.to_device(jax.devices()[1]).devices() == {jax.devices()[1]}
  mesh = jax.make_mesh((4, 2), ("x", "y"))
  y = jax.device_put(np.arange(16.0, dtype=np.float32).reshape(8, 2), NamedSharding(mesh, P("x")))
  assert y.device == y.sharding and y.on_device_size_in_bytes() == 128
  assert jnp.array(x) is not x  # copy=True


def test_make_array_from_single_device_arrays_checks_as_jax():
  make = jax.make_array_from_single_device_arrays
  mesh = jax.make_mesh((1, 2), ("x", "y"), axis_types=(A, A))
  s = NamedSharding(mesh, P("x", "y"))
  data = np.arange(16.0, dtype=np.float32).reshape(8, 2)
  bufs = [jax.device_put(data[i], d) for d, i in s.addressable_devices_indices_map((8, 2)).items()]
  np.testing.assert_array_equal(make((8, 2), s, tuple(bufs)), data)
  with pytest.raises(jax.PartixError, match=r"Expected 2 per-device arrays .* but got 1"):
    make((8, 2), s, bufs[:1])
  with pytest.raises(jax.PartixError, match="`dtype` must be provided"):
    make((8, 2), s, [])
  with pytest.raises(jax.PartixError, match="must be from distinct devices"):
    make((8, 2), NamedSharding(mesh, P("x")), [jax.device_put(data, jax.devices()[0])] * 2)
  other = [jax.device_put(data, d) for d in jax.devices()[2:4]]
  with pytest.raises(jax.PartixError, match=r"Sharding contains devices \{0, 1\}"):
    make((8, 2), NamedSharding(mesh, P("x")), other)
  with pytest.raises(TypeError, match="`arrays` argument"):
    make((8, 2), s, bufs[0])
  with pytest.raises(jax.PartixError, match="requires a list of concrete arrays"):
    v = jnp.arange(10)
    jax.jit(lambda t: make(t.shape, v.sharding, [t]))(v)


def test_pjit_none_shardings_are_replicated_under_a_mesh():
  mesh = jax.make_mesh((2,), ("x",), axis_types=(A,))
  f = pjit(lambda a, b: a + b, in_shardings=(P("x"), P("x")), out_shardings=None)
  with mesh:
    out = f(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))
  assert out.sharding.spec == P() and len(out.addressable_shards) == 2
  np.testing.assert_array_equal(out, np.full((8, 8), 2.0))


def test_pad_modes_as_numpy():
  x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
  for mode in ("wrap", "edge", "reflect", "symmetric"):
    np.testing.assert_array_equal(jnp.pad(jnp.asarray(x), ((1, 2), (3, 1)), mode=mode),
                                  np.pad(x, ((1, 2), (3, 1)), mode=mode), err_msg=mode)
  with pytest.raises(jax.PartixError, match="mode 'median'"):
    jnp.pad(jnp.asarray(x), 1, mode="median")


def test_multihost_utils_in_one_process():
  got = multihost_utils.process_allgather({"a": np.arange(3)})
  np.testing.assert_array_equal(got["a"], np.arange(3)[None])
  np.testing.assert_array_equal(multihost_utils.process_allgather(np.arange(3), tiled=True),
                                np.arange(3))
  np.testing.assert_array_equal(multihost_utils.broadcast_one_to_all(np.ones(2)), np.ones(2))
  multihost_utils.sync_global_devices("here")


_TWO = """
import json, sys
import numpy as np
import partix as jax
from partix.experimental import multihost_utils as mu
jax.distributed.initialize()
me = jax.process_index()
g = mu.process_allgather(np.full((2,), me, np.int32))
t = mu.process_allgather(np.full((2,), me, np.int32), tiled=True)
b = mu.broadcast_one_to_all(np.array([10 + me], np.int32))
s = mu.broadcast_one_to_all(np.array([20 + me], np.int32), is_source=me == 1)
mu.sync_global_devices("end")
open(f"{sys.argv[1]}/out{me}.json", "w").write(json.dumps(
    dict(g=g.tolist(), t=t.tolist(), b=b.tolist(), s=s.tolist())))
"""


@needs_mpirun
def test_multihost_utils_across_two_processes(tmp_path):
  p = run_two_processes(tmp_path, _TWO)
  assert p.returncode == 0, p.stdout + p.stderr
  for me in (0, 1):
    got = json.loads((tmp_path / f"out{me}.json").read_text())
    assert got == {"g": [[0, 0], [1, 1]], "t": [0, 0, 1, 1], "b": [10], "s": [21]}, got


def test_shape_dtype_struct_update_lazy_spec_and_rank_check():
  s = jax.ShapeDtypeStruct((2, 2), np.int32)
  u = s.update(shape=(4, 2), dtype=np.float32)
  assert u.shape == (4, 2) and u.dtype == np.float32 and not u.weak_type
  assert s.update(weak_type=True).weak_type
  sds = jax.ShapeDtypeStruct((2, 2), np.float32, sharding=P("x"))
  mesh = jax.make_mesh((2,), ("x",))
  with jax.sharding.use_mesh(mesh):
    assert sds.sharding == NamedSharding(mesh, P("x"))  # resolved when read
  with pytest.raises(TypeError, match="context mesh cannot be empty"):
    sds.sharding
  with pytest.raises(jax.PartixError, match="only valid for values of rank at least 3"):
    jax.ShapeDtypeStruct((128, 128), np.float32, sharding=P(None, "x", None))


def test_jit_names_argument_leaves_by_parameter():
  def f(params, *rest, lr=1.0):
    return params["w"] * lr
  with pytest.raises(jax.PartixError, match=r"argument params\['w'\] is"):
    jax.jit(f)({"w": object()}, 1.0)
  with pytest.raises(jax.PartixError, match=r"argument lr is"):
    jax.jit(f)({"w": np.ones(2)}, 1.0, lr=object())
  with pytest.raises(jax.PartixError, match=r"argument rest\[1\] is"):
    jax.jit(f)({"w": np.ones(2)}, 1.0, object())


def test_unreduced_constraints_keep_partial_sums_and_make_none():
  m = jax.make_mesh((2,), ("x",))
  x = jax.device_put(np.arange(8.0), NamedSharding(m, P("x")))
  assert NamedSharding(m, P(reduced={"x"})).spec == P(reduced={"x"})  # a type partix holds
  with pytest.raises(jax.PartixError, match="cannot make a value partial sums"):
    jax.jit(lambda v: lax.with_sharding_constraint(v, NamedSharding(m, P(unreduced={"x"}))))(x)
  # A value that already holds partial sums keeps its type through such a constraint.
  a = jax.device_put(np.ones((4, 2), np.float32), NamedSharding(m, P(None, "x")))
  b = jax.device_put(np.ones((2, 3), np.float32), NamedSharding(m, P("x", None)))

  def f(a, b):
    c = jnp.matmul(a, b, out_sharding=P(unreduced={"x"}))
    c = lax.with_sharding_constraint(c, NamedSharding(m, P(unreduced={"x"})))
    return jax.reshard(c, P())
  with jax.sharding.use_mesh(m):
    np.testing.assert_array_equal(jax.jit(f)(a, b), np.full((4, 3), 2.0))


def test_named_call_environment_info_and_module_attributes():
  f = jax.named_call(lambda x: x * 2, name="double_it")
  np.testing.assert_array_equal(f(jnp.ones(2)), [2.0, 2.0])
  assert "double_it" in jax.jit(f).lower(jnp.ones(2)).as_text()
  info = jax.print_environment_info(return_string=True)
  assert "numpy" in info and f"devices: {jax.device_count()}" in info
  assert jax.copy_to_host_async(jnp.ones(2)) is None
  assert jax.scipy.special.gammaln is not None and jax.typing.ArrayLike is not None
  assert jax.sharding.ManualAxisType(varying={"x"}).varying == {"x"}


def test_partial_manual_shard_map_under_grad_vmap_and_scan():
  mesh = jax.make_mesh((4, 2), ("i", "j"), axis_types=(A, A))
  f = jax.shard_map(lambda a: lax.psum(jnp.sin(a), "i"), mesh=mesh, in_specs=P("i"),
                    out_specs=P(), axis_names={"i"})
  x = np.arange(64.0, dtype=np.float32).reshape(8, 8) / 10
  s = np.sin(x).reshape(4, 2, 8).sum(0)
  want = 2 * np.tile(s, (4, 1)) * np.cos(x)  # d/dx sum(psum(sin x)^2)
  loss = lambda v: jnp.sum(f(v) ** 2)  # noqa: E731
  np.testing.assert_allclose(jax.grad(loss)(x), want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), want, rtol=1e-5, atol=1e-6)
  xb = np.stack([x, 2 * x])
  np.testing.assert_allclose(jax.vmap(f)(xb), np.sin(xb).reshape(2, 4, 2, 8).sum(1), rtol=1e-6,
                             atol=1e-6)
  total = lax.scan(lambda c, v: (c + f(v).sum(), None), 0.0, xb)[0]
  np.testing.assert_allclose(float(total), np.sin(xb).sum(), rtol=1e-5)


def test_named_sharding_check_compatible_aval():
  mesh = jax.make_mesh((2, 4), ("x", "y"))
  s = NamedSharding(mesh, P("x", None, "y"))
  s.check_compatible_aval((4, 3, 8))
  s.check_compatible_aval((4, 3, 8, 1))  # a longer rank takes the spec
  with pytest.raises(jax.PartixError, match=r"only valid for values of rank at least 3, but was "
                                            r"applied to a value of rank 2"):
    s.check_compatible_aval((4, 8))
  with pytest.raises(jax.PartixError, match=r"For scalars the PartitionSpec should be P\(\)"):
    NamedSharding(mesh, P("x")).check_compatible_aval(())
  NamedSharding(mesh, P()).check_compatible_aval(())


def test_default_device_places_uncommitted_work_inside_the_block():
  d0, d3 = jax.devices()[0], jax.devices()[3]
  f = jax.jit(lambda x: x + 1)
  assert f(jnp.ones(2)).devices() == {d0}
  with jax.default_device(d3):
    a = jnp.arange(4.0)  # host data
    assert a.devices() == {d3} and not a.committed
    assert jax.device_put(np.ones(2)).devices() == {d3}
    out = f(a)  # the jit traced for device 0 compiles again for device 3
    assert out.devices() == {d3} and not out.committed
    np.testing.assert_array_equal(np.asarray(out), np.arange(4.0) + 1)
    g = jax.grad(lambda x: (x * x).sum())(a)
    assert g.devices() == {d3}
    np.testing.assert_array_equal(np.asarray(g), 2 * np.arange(4.0))
    # committed arguments still decide
    c = jax.device_put(jnp.ones(2), d0)
    assert f(c).devices() == {d0}
  assert jnp.ones(2).devices() == {d0}
  with pytest.raises(jax.PartixError, match=r"^\[default_device\] expected a partix Device"):
    with jax.default_device("cpu:1"):
      pass
  jax.config.update("jax_default_device", jax.devices()[2])
  try:
    assert jnp.ones(2).devices() == {jax.devices()[2]}
  finally:
    jax.config.update("jax_default_device", None)
  assert jnp.ones(2).devices() == {d0}


def test_unreduced_values_enter_shard_map_as_partial_sums():
  # As JAX: a shard_map with inferred in_specs hands the body each device's partial sum of an
  # unreduced argument (in_specs P(None, None, unreduced={'x'})), so a psum_scatter in the body
  # sums it exactly once; giving in_specs that drop the unreduced axes is refused by name.
  with jax.set_mesh(jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))):
    a = jax.device_put(np.ones((4, 8), np.float32), P(None, "x"))
    b = jax.device_put(np.ones((8, 4), np.float32), P("x", None))
    scatter = jax.shard_map(lambda x: lax.psum_scatter(x, "x", tiled=True), out_specs=P("x"))

    def f(a, b):
      c = jnp.dot(a, b, out_sharding=P(None, None, unreduced={"x"}))
      assert jax.typeof(c).sharding.spec == P(None, None, unreduced={"x"})
      return scatter(c)
    out = jax.jit(f)(a, b)
    np.testing.assert_array_equal(np.asarray(out), np.full((4, 4), 8.0, np.float32))
    drop = jax.shard_map(lambda x: x * 2, in_specs=P(), out_specs=P())
    with pytest.raises(jax.PartixError, match=r"in_specs containing unreduced P\(\) passed to "
                       r"shard_map should be equal to the unreduced present on the input"):
      jax.jit(lambda a, b: drop(jnp.dot(a, b, out_sharding=P(None, None, unreduced={"x"}))))(a, b)
    # Resharding an Array to unreduced keeps its value: one device of the group holds it.
    u = jax.reshard(jnp.arange(8.0), P(unreduced={"x"}))
    assert u.sharding == jax.sharding.NamedSharding(u.sharding.mesh, P(None, unreduced={"x"}))
    np.testing.assert_array_equal(np.asarray(u.addressable_shards[0].data), np.arange(8.0))
    np.testing.assert_array_equal(np.asarray(u.addressable_shards[1].data), np.zeros(8))
    np.testing.assert_array_equal(np.asarray(u), np.arange(8.0))


def test_equal_specs_meshes_and_shardings_are_one_object_and_unequal_ones_never():
  devs = jax.devices()[:4]
  assert P(None, "x") is P((), "x") and P("x", unreduced={"y"}) is P("x", unreduced={"y"})
  assert P("x") is not P("x", unreduced={"y"}) and P(("x", "y")) is not P("x", "y")
  m = Mesh(np.array(devs), ("x",))
  assert m is Mesh(np.array(devs), "x")
  assert m is not Mesh(np.array(devs[::-1]), ("x",))  # another device order
  assert m is not Mesh(np.array(devs), ("x",), axis_types=(AxisType.Explicit,))
  assert m is not Mesh(np.array(devs), ("y",))
  a = jax.device_put(jnp.arange(8.0), NamedSharding(m, P("x")))
  f = jax.jit(lambda v: v * 2)
  assert f(a).sharding is f(f(a)).sharding is a.sharding
  b = jax.device_put(jnp.arange(8.0), NamedSharding(Mesh(np.array(devs[::-1]), "x"), P("x")))
  assert b.sharding is not a.sharding and b.sharding != a.sharding
  np.testing.assert_array_equal(np.asarray(f(b)), 2 * np.arange(8.0))
  with pytest.raises(jax.PartixError, match="axis_types"):
    Mesh(np.array(devs), ("x",), axis_types=("explicit",))
  with pytest.raises(TypeError, match=r"axis_types.*must be of type AxisType"):
    jax.make_mesh((4,), ("x",), axis_types="explicit")
