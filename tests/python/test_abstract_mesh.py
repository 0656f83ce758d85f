"""AbstractMesh as JAX 0.10.2's: axis sizes, names and types without devices; NamedSharding on
it; use_abstract_mesh; jit programs traced on abstract meshes, lowered with
lowering_platforms and compiled for a device_assignment; an abstract mesh standing for the
concrete mesh of its shape in context (or the arguments'); and jit tracing once across meshes
with one abstract mesh."""
import pickle

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec as P

E, A, M = AxisType.Explicit, AxisType.Auto, AxisType.Manual


@pytest.fixture(scope="module")
def devs():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices (PARTIX_NUM_CPU_DEVICES=8)")
  return jax.devices()


def _mesh(devices, shape, names, types=None):
  return Mesh(np.array(devices, dtype=object).reshape(shape), names, axis_types=types)


# ---- the abstract mesh itself ----

def test_abstract_mesh_is_the_shape_without_devices(devs):
  mesh = jax.make_mesh((2, 4), ("x", "y"))
  am = mesh.abstract_mesh
  assert isinstance(am, AbstractMesh)
  assert am is AbstractMesh((2, 4), ("x", "y"), (E, E))  # interned, as JAX's
  assert am == AbstractMesh((2, 4), ("x", "y"), (E, E))
  assert hash(am) == hash(AbstractMesh((2, 4), ("x", "y"), (E, E)))
  assert am != mesh and mesh != am
  assert am != AbstractMesh((2, 4), ("x", "y"))  # other axis types
  assert am != AbstractMesh((4, 2), ("x", "y"), (E, E))
  assert (am.axis_sizes, am.axis_names, am.axis_types) == ((2, 4), ("x", "y"), (E, E))
  assert (am.size, am.shape, am.empty) == (8, {"x": 2, "y": 4}, False)
  assert am.abstract_mesh is am
  # Other devices, the same abstract mesh.
  other = _mesh(devs[::-1], (2, 4), ("x", "y"), (E, E))
  assert other != mesh and other.abstract_mesh is am
  assert repr(am) == str(am) == "AbstractMesh('x': 2, 'y': 4, axis_types=(Explicit, Explicit))"
  assert repr(AbstractMesh((), ())) == "AbstractMesh((), axis_types=())"
  assert pickle.loads(pickle.dumps(am)) is am
  assert am.update_axis_types({"x": A}) is AbstractMesh((2, 4), ("x", "y"), (A, E))


def test_abstract_mesh_has_no_devices(devs):
  am = AbstractMesh((2,), ("x",))
  for what in ("devices", "device_ids", "local_devices"):
    with pytest.raises(jax.PartixError, match=rf"AbstractMesh does not implement {what}"):
      getattr(am, what)
  with pytest.raises(jax.PartixError, match="AbstractMesh does not implement __enter__"):
    with am:
      pass
  with pytest.raises(jax.PartixError, match=r"\[AbstractMesh\] 1 axis sizes \(2,\) for 2"):
    AbstractMesh((2,), ("x", "y"))


def test_named_sharding_on_an_abstract_mesh(devs):
  am = AbstractMesh((4, 2), ("x", "y"))
  s = NamedSharding(am, P("x"))
  assert s.mesh is am and s.spec == P("x")
  assert repr(s) == "NamedSharding(mesh=AbstractMesh('x': 4, 'y': 2, axis_types=(Auto, Auto)), " \
      "spec=P('x',))"
  assert s.memory_kind is None and s.num_devices == 8 and not s.is_fully_replicated
  assert s.shard_shape((8, 6)) == (2, 6)
  assert s == NamedSharding(AbstractMesh((4, 2), ("x", "y")), P("x"))
  assert s != NamedSharding(_mesh(devs, (4, 2), ("x", "y")), P("x"))
  assert s.is_equivalent_to(NamedSharding(am, P("x", None)), 2)
  for what in ("device_set", "addressable_devices", "is_fully_addressable"):
    with pytest.raises(jax.PartixError, match=rf"\[NamedSharding\] {what} is not implemented "
                       "for `jax.sharding.AbstractMesh`"):
      getattr(s, what)


# ---- the abstract mesh in context ----

def test_set_mesh_sets_its_abstract_mesh(devs):
  mesh = jax.make_mesh((2, 4), ("x", "y"))
  assert jax.sharding.get_abstract_mesh() == AbstractMesh((), ())
  with jax.set_mesh(mesh):
    assert jax.sharding.get_abstract_mesh() is mesh.abstract_mesh
    assert jax.sharding.get_mesh() is mesh
    seen = []

    @jax.jit
    def f(x):
      seen.append((jax.sharding.get_abstract_mesh(), jax.typeof(x).sharding.mesh))
      return x

    f(jnp.arange(8))
    assert seen == [(mesh.abstract_mesh, mesh.abstract_mesh)]
  assert jax.sharding.get_abstract_mesh().empty


def test_get_abstract_mesh_in_a_shard_map_body_is_manual(devs):
  mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(A, A))
  seen = []

  def body(x):
    seen.append(jax.sharding.get_abstract_mesh())
    return x

  jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})(
      jnp.arange(8))
  assert seen == [AbstractMesh((2, 4), ("x", "y"), (M, A))]


def test_use_abstract_mesh(devs):
  mesh = jax.make_mesh((2, 4), ("x", "y"))
  am = mesh.abstract_mesh
  with jax.sharding.use_abstract_mesh(am):
    assert jax.sharding.get_abstract_mesh() is am and jax.sharding.get_mesh() is None
    # A program traced here lowers onto the abstract mesh (no lowering_platforms needed).
    lowered = jax.jit(lambda x: x * 3).trace(
        jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(am, P("x")))).lower()
    assert "num_partitions = 8" in lowered.as_text()
  # Under a mesh: its devices, the abstract mesh's axis types.
  auto = am.update_axis_types({"x": A, "y": A})
  with jax.set_mesh(mesh), jax.sharding.use_abstract_mesh(auto):
    assert jax.sharding.get_abstract_mesh() is auto and jax.sharding.get_mesh() is mesh
    out = jax.device_put(np.arange(8.0), P("x"))
    assert out.sharding.mesh.axis_types == (A, A)
    assert sorted(d.id for d in out.sharding.device_set) == list(range(8))
  assert jax.sharding.get_abstract_mesh().empty
  with pytest.raises(jax.PartixError, match=r"\[use_abstract_mesh\] Expected mesh of type "
                     "`jax.sharding.AbstractMesh`"):
    with jax.sharding.use_abstract_mesh(mesh):
      pass
  with jax.set_mesh(mesh):
    with pytest.raises(jax.PartixError, match="use_abstract_mesh cannot change the size of the "
                       "mesh. Got new mesh: AbstractMesh\\('x': 2"):
      with jax.sharding.use_abstract_mesh(AbstractMesh((2,), ("x",))):
        pass


# ---- an abstract mesh standing for a concrete one ----

def test_placing_on_an_abstract_mesh_uses_the_mesh_in_context(devs):
  mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(A, A))
  s = NamedSharding(mesh.abstract_mesh, P("x", "y"))
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  with pytest.raises(jax.PartixError, match=r"\[device_put\] NamedSharding\(mesh=AbstractMesh"
                     r"\('x': 4, 'y': 2.*no concrete mesh is in context"):
    jax.device_put(x, s)
  with jax.set_mesh(mesh):
    a = jax.device_put(x, s)
    assert a.sharding == NamedSharding(mesh, P("x", "y"))
    np.testing.assert_array_equal(np.asarray(a), x)
    z = jnp.zeros((8, 4), out_sharding=s)
    assert z.sharding == NamedSharding(mesh, P("x", "y"))
    # shard_map given the context's abstract mesh runs on the concrete one.
    out = jax.shard_map(lambda b: b * 2, mesh=jax.sharding.get_abstract_mesh(),
                        in_specs=P("x"), out_specs=P("x"))(x)
    assert out.sharding.mesh == mesh
    np.testing.assert_array_equal(np.asarray(out), 2 * x)
  other = jax.make_mesh((8,), ("x",))
  with jax.set_mesh(other):
    with pytest.raises(jax.PartixError, match=r"\[device_put\] .* the mesh in context is "
                       r"Mesh\('x': 8.*, of another shape"):
      jax.device_put(x, s)


def test_eager_constraint_and_shard_map_take_the_arguments_mesh(devs):
  mesh = jax.make_mesh((2,), ("x",))
  am = mesh.abstract_mesh
  arr = jax.device_put(np.arange(8), NamedSharding(mesh, P("x")))
  out = lax.with_sharding_constraint(arr, NamedSharding(am, P()))
  assert out.sharding == NamedSharding(mesh, P())
  out = jax.shard_map(lambda b: b + 1, mesh=am, in_specs=P("x"), out_specs=P("x"))(arr)
  assert out.sharding == NamedSharding(mesh, P("x"))
  np.testing.assert_array_equal(np.asarray(out), np.arange(8) + 1)
  with pytest.raises(jax.PartixError, match=r"\[with_sharding_constraint\] Target sharding "
                     "contains a `jax.sharding.AbstractMesh` which requires the input passed "
                     "should be a `jax.Array`. Got <class 'numpy.ndarray'> with shape i64\\[8\\]"):
    lax.with_sharding_constraint(np.arange(8), NamedSharding(am, P("x")))
  with pytest.raises(jax.PartixError, match=r"\[with_sharding_constraint\] Mesh shape of the "
                     r"input \(\('x', 2\),\) does not match the mesh shape of the target "
                     r"sharding \(\('y', 2\),\)"):
    lax.with_sharding_constraint(arr, NamedSharding(AbstractMesh((2,), ("y",)), P("y")))
  with pytest.raises(jax.PartixError, match=r"\[shard_map\] Please pass `jax.Array`s with a "
                     "`NamedSharding` as input to `shard_map` when passing `AbstractMesh`"):
    jax.shard_map(lambda b: b, mesh=am, in_specs=P("x"), out_specs=P("x"))(np.arange(8))
  with pytest.raises(jax.PartixError, match=r"\[shard_map\] Mesh shape of the input "
                     r"\(\('x', 2\),\) does not match the mesh shape passed to shard_map"):
    jax.shard_map(lambda b: b, mesh=AbstractMesh((2,), ("y",)), in_specs=P("y"),
                  out_specs=P("y"))(arr)


def test_jit_in_shardings_on_an_abstract_mesh_follow_the_arguments(devs):
  mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(A, A))
  f = jax.jit(lambda v: v * 2, in_shardings=NamedSharding(mesh.abstract_mesh, P("x")),
              out_shardings=NamedSharding(mesh.abstract_mesh, P(None, "y")))
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  out = f(jax.device_put(x, NamedSharding(mesh, P("x"))))
  assert out.sharding == NamedSharding(mesh, P(None, "y"))
  np.testing.assert_array_equal(np.asarray(out), 2 * x)
  # Host data alone names no devices: as JAX, running needs a mesh in context.
  with pytest.raises(jax.PartixError, match=r"\[<lambda>\] only AbstractMesh exists in this "
                     r"jitted computation .* call it under jax.set_mesh\(mesh\)"):
    f(x)
  with jax.set_mesh(mesh):
    np.testing.assert_array_equal(np.asarray(f(x)), 2 * x)


# ---- ahead of time: lowered without devices, compiled for some ----

def test_aot_lower_on_an_abstract_mesh_and_compile_for_devices(devs):
  am = AbstractMesh((4, 2), ("x", "y"))
  sds = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=NamedSharding(am, P("x", "y")))
  f = jax.jit(lambda a, b: jnp.sin(a) @ b.T + 1)
  with pytest.raises(jax.PartixError, match=r"\[Traced.lower\] Passing lowering_platforms via "
                     r"jax.export or jit\(f\).trace\(\*args\).lower\(lowering_platforms=...\) "
                     "is required when only AbstractMesh exists in a jitted computation"):
    f.lower(sds, sds)
  with pytest.raises(jax.PartixError, match="lowering_platforms=.*must be a non-empty tuple"):
    f.trace(sds, sds).lower(lowering_platforms="cpu")
  lowered = f.trace(sds, sds).lower(lowering_platforms=("cpu",))
  assert lowered.as_text().startswith("# num_partitions = 8, num_replicas = 1\n")
  assert lowered.out_info.shape == (8, 8)
  with pytest.raises(jax.PartixError, match=r"\[Lowered.compile\] device_assignment cannot be "
                     "`None` during compilation"):
    lowered.compile()
  with pytest.raises(jax.PartixError, match=r"\[Lowered.compile\] The size of abstract mesh 8 "
                     r"in NamedSharding\(mesh=AbstractMesh.* must match the length of device "
                     "assignment: 4"):
    lowered.compile(device_assignment=devs[:4])
  # Compiled for the devices in reverse order: the mesh is laid over them in that order.
  order = devs[:8][::-1]
  compiled = lowered.compile(device_assignment=tuple(order))
  mesh = _mesh(order, (4, 2), ("x", "y"))
  rng = np.random.default_rng(0)
  a = rng.standard_normal((8, 4)).astype(np.float32)
  b = rng.standard_normal((8, 4)).astype(np.float32)
  sa, sb = (jax.device_put(v, NamedSharding(mesh, P("x", "y"))) for v in (a, b))
  out = compiled(sa, sb)
  np.testing.assert_allclose(np.asarray(out), np.sin(a) @ b.T + 1, rtol=1e-5, atol=1e-5)
  assert list(out.sharding.mesh.devices.flat) == list(order)
  assert compiled.input_shardings[0][0] == NamedSharding(mesh, P("x", "y"))
  # Arguments on other devices are refused, naming them.
  two = _mesh(devs[:2], (2,), ("x",))
  with pytest.raises(jax.PartixError, match=r"\[Compiled\] argument a is on device ids \[0, 1\]"
                     r", but the program was compiled for device_assignment"):
    compiled(jax.device_put(a, NamedSharding(two, P("x"))), sb)


def test_compile_on_devices_takes_only_the_programs_own(devs):
  mesh = jax.make_mesh((2,), ("x",))
  sds = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P("x")))
  lowered = jax.jit(lambda v: v + 1).lower(sds)
  assert "num_partitions = 2" in lowered.as_text()
  assert lowered.compile(device_assignment=devs[:2]) is not None
  with pytest.raises(jax.PartixError, match=r"\[Lowered.compile\] device_assignment passed to "
                     r"`.compile` must match the device_assignment calculated from array "
                     r"shardings and out_shardings. Got device ids passed to compile \[1, 0\] "
                     r"on platform CPU and devices ids calculated from array shardings and "
                     r"out_shardings \[0, 1\]"):
    lowered.compile(device_assignment=devs[:2][::-1])


def test_abstract_and_concrete_shardings_in_one_program(devs):
  mesh = jax.make_mesh((2,), ("x",))
  am1 = AbstractMesh((1,), ("x",))
  g = jax.jit(lambda x, y: (x, y))
  concrete = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P("x")))
  with pytest.raises(jax.PartixError, match=r"AbstractMesh size: 1 does not match the device "
                     "assignment size: 2"):
    g.lower(jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(am1, P("x"))),
            concrete)
  # Of the same size: laid over the concrete sharding's devices.
  a = jax.ShapeDtypeStruct((8, 2), jnp.float32,
                           sharding=NamedSharding(mesh.abstract_mesh, P(None, "x")))
  ins = g.lower(a, concrete).compile().input_shardings[0]
  assert ins == (NamedSharding(mesh, P(None, "x")), NamedSharding(mesh, P("x")))
  with pytest.raises(jax.PartixError, match=r"AbstractMesh should be of the same size across "
                     "all shardings"):
    g.trace(jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(am1, P("x"))),
            a).lower(lowering_platforms=("cpu",))


# ---- jit traces once per abstract mesh ----

def test_jit_traces_once_for_meshes_of_one_abstract_mesh(devs):
  mesh_a = _mesh(devs[:4], (2, 2), ("x", "y"))
  mesh_b = _mesh(devs[4:8], (2, 2), ("x", "y"))
  s = NamedSharding(mesh_a.abstract_mesh, P("x", "y"))
  runs = []

  @jax.jit
  def body(x):
    runs.append(1)
    return jnp.tanh(x) * 3 + x.sum()

  f = jax.jit(body, in_shardings=s, out_shardings=s)
  x = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
  want = np.tanh(x) * 3 + x.sum()
  for mesh in (mesh_a, mesh_b, mesh_a):
    with jax.set_mesh(mesh):
      out = f(x)
      assert out.sharding == NamedSharding(mesh, P("x", "y"))
      np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)
  assert len(runs) == 1
  # Its lowering under each mesh compiles for that mesh.
  with jax.set_mesh(mesh_b):
    lowered = f.trace(jax.ShapeDtypeStruct((4, 4), jnp.float32)).lower()
  assert lowered.compile().output_shardings.mesh == mesh_b
  assert len(runs) == 1


def test_a_program_naming_its_mesh_is_traced_per_mesh(devs):
  # A shard_map inside names the devices it runs on: traced again for other devices, and right.
  mesh_a = _mesh(devs[:2], (2,), ("x",))
  mesh_b = _mesh(devs[2:4], (2,), ("x",))
  am = mesh_a.abstract_mesh
  runs = []

  def body(x):
    runs.append(1)
    return jax.shard_map(lambda b: b - lax.pmean(b, "x"), mesh=am, in_specs=P("x"),
                         out_specs=P("x"))(x)

  f = jax.jit(body, in_shardings=NamedSharding(am, P("x")))
  x = np.arange(8, dtype=np.float32)
  want = x - np.concatenate([(x[:4] + x[4:]) / 2] * 2)
  for mesh in (mesh_a, mesh_b):
    with jax.set_mesh(mesh):
      out = f(x)
      assert out.sharding.mesh == mesh
      np.testing.assert_allclose(np.asarray(out), want)
  assert len(runs) == 2


def test_compile_for_devices_replays_the_trace_in_its_context(devs):
  # Traced under an abstract mesh in context (PartitionSpecs inside resolve against it), then
  # compiled elsewhere for devices: the function is not traced again, and runs right.
  am = AbstractMesh((2, 4), ("x", "y"))
  runs = []

  def body(v):
    runs.append(1)
    return lax.with_sharding_constraint(v * 2, P("x")) + 1

  f = jax.jit(body)
  with jax.sharding.use_abstract_mesh(am):
    lowered = f.trace(jax.ShapeDtypeStruct((8, 4), jnp.float32)).lower()
  compiled = lowered.compile(device_assignment=devs[:8])
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  out = compiled(x)
  np.testing.assert_array_equal(np.asarray(out), 2 * x + 1)
  assert out.sharding.spec == P("x") and out.sharding.mesh.axis_names == ("x", "y")
  assert len(runs) == 1
