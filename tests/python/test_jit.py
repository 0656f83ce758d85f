"""jit: shardings, static and donated arguments, pytrees, trace counts, lower/compile, eval_shape,
with_sharding_constraint."""
import collections
import dataclasses
import functools

import numpy as np
import pytest

import partix as jax
from partix.experimental.pjit import pjit
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P


def counted(f):
  calls = []

  def g(*a, **k):
    calls.append(1)
    return f(*a, **k)
  g.calls = calls
  return g


def test_traced_once_per_signature(rng):
  f = counted(lambda x, y: x * 2 + y)
  jf = jax.jit(f)
  a = rng.standard_normal((4, 4)).astype(np.float32)
  b = rng.standard_normal((4, 4)).astype(np.float32)
  for _ in range(3):
    np.testing.assert_allclose(np.asarray(jf(a, b)), a * 2 + b, rtol=1e-6)
  assert len(f.calls) == 1
  jf(a[:2], b[:2])  # new shape
  assert len(f.calls) == 2
  jf(a.astype(np.int32), b.astype(np.int32))  # new dtype
  assert len(f.calls) == 3
  jf(a, b)
  assert len(f.calls) == 3


def test_retrace_on_sharding_and_tree(mesh8, rng):
  f = counted(lambda t: t["a"] + 1)
  jf = jax.jit(f)
  a = rng.standard_normal((8, 4)).astype(np.float32)
  jf({"a": a})
  jf({"a": jax.device_put(a, NamedSharding(mesh8, P("x")))})
  assert len(f.calls) == 2
  jf({"a": jax.device_put(a, NamedSharding(mesh8, P("x")))})
  assert len(f.calls) == 2
  out = jf({"a": a, "b": a})  # new tree structure
  assert len(f.calls) == 3
  np.testing.assert_allclose(np.asarray(out), a + 1)


def test_static_argnums_and_names(rng):
  f = counted(lambda x, n, *, mode="add": x + n if mode == "add" else x * n)
  jf = jax.jit(f, static_argnums=1, static_argnames="mode")
  x = rng.standard_normal((3,)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(jf(x, 2)), x + 2, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(jf(x, 2)), x + 2, rtol=1e-6)
  assert len(f.calls) == 1
  np.testing.assert_allclose(np.asarray(jf(x, 3)), x + 3, rtol=1e-6)
  assert len(f.calls) == 2
  np.testing.assert_allclose(np.asarray(jf(x, 3, mode="mul")), x * 3, rtol=1e-6)
  assert len(f.calls) == 3
  jf(x, 3, mode="mul")
  assert len(f.calls) == 3


def test_static_unhashable_raises(rng):
  jf = jax.jit(lambda x, s: x, static_argnums=1)
  with pytest.raises(jax.PartixError, match=r"^\[jit\].*hashable"):
    jf(np.ones(2, np.float32), [1, 2])


def test_kwargs(rng):
  f = counted(lambda x, y=None, scale=1.0: x * scale + (0 if y is None else y))
  jf = jax.jit(f)
  x = np.arange(4, dtype=np.float32)
  np.testing.assert_allclose(np.asarray(jf(x, y=x)), 2 * x)
  np.testing.assert_allclose(np.asarray(jf(x, y=x, scale=np.float32(3))), 4 * x)


Point = collections.namedtuple("Point", ["x", "y"])


@dataclasses.dataclass
class Params:
  w: object
  b: object


jax.tree_util.register_dataclass(Params, data_fields=["w", "b"], meta_fields=[])


@jax.tree_util.register_pytree_node_class
class Box:
  def __init__(self, v, tag):
    self.v, self.tag = v, tag

  def tree_flatten(self):
    return (self.v,), self.tag

  @classmethod
  def tree_unflatten(cls, aux, children):
    return cls(children[0], aux)


def test_pytrees_in_and_out(rng):
  a = rng.standard_normal((2, 3)).astype(np.float32)

  @jax.jit
  def f(d, lst, tup, none, pt, prm, box):
    assert none is None
    return {"s": d["a"] + lst[0], "t": (tup[0] * 2, None), "p": Point(pt.x + 1, pt.y),
            "prm": Params(prm.w * 2, prm.b), "box": Box(box.v + 1, box.tag)}
  out = f({"a": a}, [a], (a,), None, Point(a, a), Params(a, a), Box(a, "hi"))
  np.testing.assert_allclose(np.asarray(out["s"]), 2 * a)
  assert out["t"][1] is None
  np.testing.assert_allclose(np.asarray(out["t"][0]), 2 * a)
  assert isinstance(out["p"], Point)
  np.testing.assert_allclose(np.asarray(out["p"].x), a + 1)
  assert isinstance(out["prm"], Params)
  np.testing.assert_allclose(np.asarray(out["prm"].w), 2 * a)
  assert isinstance(out["box"], Box) and out["box"].tag == "hi"
  np.testing.assert_allclose(np.asarray(out["box"].v), a + 1)


def test_nested_jit_and_methods(rng):
  inner = counted(lambda x: x * 3)
  ji = jax.jit(inner)
  outer = jax.jit(lambda x: ji(x) + 1)
  x = np.arange(6, dtype=np.float32)
  np.testing.assert_allclose(np.asarray(outer(x)), x * 3 + 1)
  np.testing.assert_allclose(np.asarray(ji(x)), x * 3)

  class M:
    def __init__(self, k):
      self.k = k

    @functools.partial(jax.jit, static_argnums=0)
    def f(self, x):
      return x * self.k

    def __hash__(self):
      return hash(self.k)

    def __eq__(self, o):
      return self.k == o.k
  np.testing.assert_allclose(np.asarray(M(2).f(x)), 2 * x)
  np.testing.assert_allclose(np.asarray(M(5).f(x)), 5 * x)


def test_in_out_shardings(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  sx = NamedSharding(mesh8, P("x"))
  sy = NamedSharding(mesh8, P(None, "y"))
  f = jax.jit(lambda x, y: x + y, in_shardings=(sx, None), out_shardings=sy)
  out = f(a, a)
  assert out.sharding.spec == P(None, "y")
  np.testing.assert_allclose(np.asarray(out), 2 * a)
  # a single sharding for all inputs, a pytree prefix for the outputs
  g = jax.jit(lambda t: {"u": t["a"] * 2, "v": t["b"]}, in_shardings=sx,
              out_shardings={"u": sy, "v": NamedSharding(mesh8, P())})
  out = g({"a": a, "b": a})
  assert out["u"].sharding.spec == P(None, "y")
  assert out["v"].sharding.is_fully_replicated
  np.testing.assert_allclose(np.asarray(out["u"]), 2 * a)


def test_partition_spec_under_mesh(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  with jax.sharding.use_mesh(mesh8):
    f = jax.jit(lambda x: x * 2, in_shardings=P("x", "y"), out_shardings=P("x"))
    out = f(a)
  assert out.sharding.spec == P("x")
  assert out.sharding.mesh.shape == mesh8.shape
  np.testing.assert_allclose(np.asarray(out), 2 * a)
  with jax.set_mesh(mesh8):
    out = jax.jit(lambda x: x + 1, out_shardings=P(None, "y"))(a)
  assert out.sharding.spec == P(None, "y")
  # As JAX 0.10: a legacy `with mesh:` is not the mesh jit reads PartitionSpecs against
  # (pjit still reads it).
  with mesh8:
    with pytest.raises(jax.PartixError, match="jit requires a non-empty mesh in context"):
      jax.jit(lambda x: x + 1, out_shardings=P(None, "y"))(a)
    out = pjit(lambda x: x + 1, out_shardings=P(None, "y"))(a)
  assert out.sharding.spec == P(None, "y")


def test_current_mesh_is_per_thread():
  """As JAX's: a thread's use_mesh / set_mesh is seen by the programs that thread traces only;
  another thread inside its own context keeps its mesh when the first leaves."""
  import threading
  m42 = jax.make_mesh((4, 2), ("x", "y"))
  m24 = jax.make_mesh((2, 4), ("x", "y"))
  a = np.arange(64, dtype=np.float32).reshape(8, 8)
  f = jax.jit(lambda v: jax.lax.with_sharding_constraint(v * 2, P("x", "y")))
  a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
  seen, errors = {}, []

  def run(name, body):
    try:
      body()
    except Exception as e:  # reported below, with the thread's name
      errors.append((name, e))
    finally:
      a_in.set(); b_in.set(); a_out.set()

  def thread_a():
    with jax.sharding.use_mesh(m42):
      a_in.set()
      assert b_in.wait(60)
      out = f(a)
      seen["a"] = (out.sharding.mesh.shape, jax.sharding.get_mesh().shape)
      np.testing.assert_array_equal(np.asarray(out), 2 * a)
    a_out.set()

  def thread_b():
    assert a_in.wait(60)
    with jax.set_mesh(m24):
      b_in.set()
      assert a_out.wait(60)
      out = f(a)
      seen["b"] = (out.sharding.mesh.shape, jax.sharding.get_mesh().shape)
    seen["b_after"] = jax.sharding.get_mesh()

  ts = [threading.Thread(target=run, args=(n, b)) for n, b in (("a", thread_a), ("b", thread_b))]
  for t in ts:
    t.start()
  for t in ts:
    t.join(120)
  assert not errors, errors
  assert seen["a"] == (m42.shape, m42.shape)
  assert seen["b"] == (m24.shape, m24.shape)
  assert seen["b_after"] is None
  # One Mesh entered on two threads (`with m:`), left in the order it was entered: each thread
  # keeps its own context.
  entered, left = threading.Event(), threading.Event()
  inside = {}

  def first():
    with m42:
      entered.set()
      assert left.wait(60)
      inside["first"] = jax.sharding.get_mesh()
    inside["first_after"] = jax.sharding.get_mesh()

  def second():
    assert entered.wait(60)
    with m42:
      pass
    left.set()
    inside["second_after"] = jax.sharding.get_mesh()

  ts = [threading.Thread(target=run, args=(n, b)) for n, b in (("first", first),
                                                               ("second", second))]
  for t in ts:
    t.start()
  for t in ts:
    t.join(120)
  assert not errors, errors
  assert inside == {"first": m42, "first_after": None, "second_after": None}
  # A mesh set on this thread is not another thread's: there a bare spec needs its own mesh.
  with jax.set_mesh(m42):
    out = []
    t = threading.Thread(target=lambda: out.append(jax.sharding.get_mesh()))
    t.start()
    t.join(60)
    assert out == [None]
    assert jax.sharding.get_mesh() is m42
  assert jax.sharding.get_mesh() is None


def test_in_shardings_count_mismatch(mesh8):
  sx = NamedSharding(mesh8, P("x"))
  f = jax.jit(lambda x, y: x + y, in_shardings=(sx, sx, sx))
  with pytest.raises(jax.PartixError, match=r"in_shardings"):
    f(np.ones((8,), np.float32), np.ones((8,), np.float32))
  with pytest.raises(jax.PartixError, match=r"in_shardings"):
    jax.jit(lambda x: x, in_shardings=("x",))


def test_bad_specs(mesh8):
  with pytest.raises(jax.PartixError):
    jax.jit(lambda x: x, out_shardings=NamedSharding(mesh8, P("z")))(np.ones(8, np.float32))
  with pytest.raises(jax.PartixError):  # 8 rows over ('x','y','x')
    NamedSharding(mesh8, P("x", "x"))


def test_donate(rng):
  x = jnp.asarray(np.arange(4, dtype=np.float32))
  f = jax.jit(lambda x: x + 1, donate_argnums=0)
  y = f(x)
  np.testing.assert_allclose(np.asarray(y), np.arange(4) + 1)
  with pytest.raises(jax.PartixError, match="donat"):
    np.asarray(x)
  with pytest.raises(jax.PartixError, match="donat"):
    f(x)


def test_non_array_leaf_and_bool_of_tracer():
  f = jax.jit(lambda x, s: x)
  with pytest.raises(jax.PartixError, match=r"^\[.*\].*not an array"):
    f(np.ones(2, np.float32), "hello")

  @jax.jit
  def g(x):
    if x.sum() > 0:
      return x
    return -x
  with pytest.raises(jax.PartixError):
    g(np.ones(2, np.float32))

  with pytest.raises(jax.PartixError, match=r"results must be arrays"):
    jax.jit(lambda x: "s")(np.ones(2, np.float32))


def test_argnums_out_of_range():
  with pytest.raises(jax.PartixError, match="static_argnums"):
    jax.jit(lambda x: x, static_argnums=3)(np.ones(2, np.float32))
  with pytest.raises(jax.PartixError):
    jax.jit(lambda x: x, static_argnums="a")


def test_lower_compile(mesh8):
  sx = NamedSharding(mesh8, P(None, "x"))
  sy = NamedSharding(mesh8, P("x", None))
  f = jax.jit(lambda a, b: a @ b, out_shardings=NamedSharding(mesh8, P()))
  a = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=sx)
  b = jax.ShapeDtypeStruct((32, 8), jnp.float32, sharding=sy)
  lowered = f.lower(a, b)
  # As JAX: the lowered text is the traced program with the arguments' shardings, before
  # partitioning; the compiled text the per-device program with its collectives.
  traced = lowered.as_text()
  assert "dot_general" in traced and "P(None, 'x')" in traced and "all_reduce" not in traced, traced
  text = lowered.compile().as_text()
  assert "all_reduce" in text or "all-reduce" in text or "psum" in text, text
  cost = lowered.cost_analysis()
  assert isinstance(cost, dict) and cost["flops"] >= 2 * 16 * 32 * 8 / 4
  # Per device ('x' splits 4 ways): the local product [16, 8] x [8, 8] reads both blocks and
  # writes [16, 8]; one all-reduce makes the replicated result.
  assert cost["bytes accessed"] == (16 * 8 + 8 * 8 + 16 * 8) * 4, cost
  assert cost["collectives all_reduce"] == 1 and cost["instructions"] >= 2, cost
  mem = lowered.memory_analysis()
  assert mem.argument_size_in_bytes >= (16 * 8 + 8 * 8) * 4
  compiled = lowered.compile()
  assert compiled.as_text() == text
  assert isinstance(compiled.cost_analysis(), dict)
  an = np.random.default_rng(1).standard_normal((16, 32)).astype(np.float32)
  bn = np.random.default_rng(2).standard_normal((32, 8)).astype(np.float32)
  out = compiled(jax.device_put(an, sx), jax.device_put(bn, sy))
  np.testing.assert_allclose(np.asarray(out), an @ bn, rtol=1e-4, atol=1e-4)
  # lowering with concrete arrays
  l2 = jax.jit(lambda a: a.sum()).lower(jax.device_put(an, sx))
  assert isinstance(l2.as_text(), str) and l2.as_text()


def test_lower_abstract_mesh(mesh8):
  am = mesh8.abstract_mesh
  s = NamedSharding(am, P("x"))
  sds = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=s)
  # As JAX: with only AbstractMeshes (no devices anywhere) the platform must be named.
  with pytest.raises(jax.PartixError, match="lowering_platforms"):
    jax.jit(lambda a: a.sum()).lower(sds)
  l = jax.jit(lambda a: a.sum()).trace(sds).lower(lowering_platforms=("cpu",))
  assert l.as_text()
  with jax.set_mesh(mesh8):  # a mesh in context gives the devices
    assert jax.jit(lambda a: a.sum()).lower(sds).input_shardings[0].mesh == mesh8


def test_eval_shape(mesh8):
  f = counted(lambda x, y: {"s": x @ y, "t": (x.sum(axis=0).astype(jnp.int32),)})
  out = jax.eval_shape(f, jax.ShapeDtypeStruct((4, 6), jnp.float32),
                       jax.ShapeDtypeStruct((6, 2), jnp.float32))
  assert len(f.calls) == 1
  assert out["s"].shape == (4, 2) and out["s"].dtype == np.float32
  assert out["t"][0].shape == (6,) and out["t"][0].dtype == np.int32
  sx = NamedSharding(mesh8, P("x"))
  out = jax.eval_shape(lambda x: x * 2, jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=sx))
  assert out.shape == (8, 4)
  assert out.sharding.spec == P("x")


def test_with_sharding_constraint(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  sx = NamedSharding(mesh8, P("x"))
  sy = NamedSharding(mesh8, P(None, "y"))

  @jax.jit
  def f(t):
    t = jax.lax.with_sharding_constraint(t, {"a": sx, "b": sy})
    return {"a": t["a"] * 2, "b": t["b"] + 1}
  out = f({"a": a, "b": a})
  np.testing.assert_allclose(np.asarray(out["a"]), 2 * a)
  np.testing.assert_allclose(np.asarray(out["b"]), a + 1)
  assert out["a"].sharding.spec == P("x")
  assert out["b"].sharding.spec == P(None, "y")
  # eager: places the data
  y = jax.lax.with_sharding_constraint(jnp.asarray(a), sy)
  assert y.sharding.spec == P(None, "y")
  with jax.sharding.use_mesh(mesh8):
    z = jax.jit(lambda x: jax.lax.with_sharding_constraint(x, P("x", "y")))(a)
  assert z.sharding.spec == P("x", "y")
  with pytest.raises(jax.PartixError, match="with_sharding_constraint"):
    jax.lax.with_sharding_constraint({"a": a}, {"b": sx})


def test_one_device(mesh1, rng):
  a = rng.standard_normal((4, 4)).astype(np.float32)
  s = NamedSharding(mesh1, P("x"))
  out = jax.jit(lambda x: x @ x, in_shardings=s, out_shardings=s)(a)
  np.testing.assert_allclose(np.asarray(out), a @ a, rtol=1e-5)
  assert len(out.sharding.device_set) == 1


def test_static_by_position_or_keyword():
  f = counted(lambda x, n: x * n)
  x = np.ones(3, np.float32)
  for kw in ({"static_argnums": 1}, {"static_argnames": "n"}):
    f.calls.clear()
    g = jax.jit(f, **kw)
    np.testing.assert_allclose(np.asarray(g(x, 2)), 2 * x)
    np.testing.assert_allclose(np.asarray(g(x, n=5)), 5 * x)
    np.testing.assert_allclose(np.asarray(g(x, n=5)), 5 * x)
    assert len(f.calls) == 2
  with pytest.raises(jax.PartixError, match=r"^\[jit\].*static and donated"):
    jax.jit(lambda x: x, static_argnums=0, donate_argnums=0)(1)


def test_sharding_errors_name_jit(mesh8):
  x = np.ones((4,), np.float32)
  with pytest.raises(jax.PartixError, match=r"^\[jit\] out_shardings.*shape \(4,\)"):
    jax.jit(lambda x: x, out_shardings=NamedSharding(mesh8, P(None, "x")))(x)
  with pytest.raises(jax.PartixError, match=r"rank 1"):
    jax.jit(lambda x: x, in_shardings=NamedSharding(mesh8, P(None, "x")))(x)
  with pytest.raises(jax.PartixError, match=r"^\[jit\].*structure"):
    jax.jit(lambda t: t, in_shardings=({"a": None, "c": None},))({"a": x, "b": x})
  with pytest.raises(jax.PartixError, match=r"^\[jit\].*current mesh"):
    jax.jit(lambda x: x, in_shardings=P("x"))(x)
  with pytest.raises(jax.PartixError, match=r"^\[jit\] in_shardings entry 3"):
    jax.jit(lambda x: x, in_shardings=3)
  with pytest.raises(jax.PartixError, match=r"^\[jit\].*not callable"):
    jax.jit(3)
  # None entries leave the placement to propagation
  sx = NamedSharding(mesh8, P("x"))
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  out = jax.jit(lambda t: t, in_shardings=({"a": sx, "b": None},))({"a": a, "b": a})
  assert out["a"].sharding.spec == P("x")
  o1, o2 = jax.jit(lambda a, b: (a * 1, b * 1), out_shardings=(sx, None))(a, a)
  assert o1.sharding.spec == P("x")
  np.testing.assert_allclose(np.asarray(o2), a)


def test_compiled_checks_signature(mesh8):
  f = counted(lambda a: a * 2)
  compiled = jax.jit(f).lower(jax.ShapeDtypeStruct((4,), jnp.float32)).compile()
  x = np.arange(4, dtype=np.float32)
  np.testing.assert_allclose(np.asarray(compiled(x)), 2 * x)
  np.testing.assert_allclose(np.asarray(compiled(x)), 2 * x)
  assert len(f.calls) == 1
  with pytest.raises(jax.PartixError, match=r"^\[Compiled\]"):
    compiled(np.arange(5, dtype=np.float32))
  with pytest.raises(jax.PartixError, match=r"^\[Compiled\]"):
    compiled({"a": x})
  mem = compiled.memory_analysis()
  assert mem.output_size_in_bytes >= 16


def test_lower_on_abstract_mesh_shows_collective():
  am = jax.sharding.AbstractMesh((4, 2), ("x", "y"))
  a = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=NamedSharding(am, P(None, "x")))
  b = jax.ShapeDtypeStruct((4, 2), jnp.float32, sharding=NamedSharding(am, P("x")))
  lowered = jax.jit(lambda a, b: a @ b).trace(a, b).lower(lowering_platforms=("cpu",))
  assert "num_partitions = 8" in lowered.as_text()
  assert lowered.memory_analysis().argument_size_in_bytes > 0  # planned without devices
  text = lowered.compile(device_assignment=jax.devices()[:8]).as_text()
  assert "all_reduce" in text and "f32[8,1]" in text
  out = jax.eval_shape(lambda a: a * 2, a)
  assert out.shape == (8, 4) and out.sharding.spec == P(None, "x")


def test_nested_jit_shardings_become_constraints(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  sy = NamedSharding(mesh8, P(None, "y"))
  inner = jax.jit(lambda x: x * 2, out_shardings=sy)
  outer = jax.jit(lambda x: inner(x) + 1)
  out = outer(jax.device_put(a, NamedSharding(mesh8, P("x"))))
  np.testing.assert_allclose(np.asarray(out), 2 * a + 1, rtol=1e-6)
  text = outer.lower(jax.device_put(a, NamedSharding(mesh8, P("x")))).as_text()
  assert "'y'" in text, text
  inner2 = jax.jit(lambda x, k: x * k, in_shardings=(sy,), static_argnums=1)
  out = jax.jit(lambda x: inner2(x, 3))(a)
  np.testing.assert_allclose(np.asarray(out), 3 * a, rtol=1e-6)


def test_eval_shape_duck_typed_and_threads():
  class Aval:
    shape = (3, 5)
    dtype = np.dtype("float32")
  out = jax.eval_shape(lambda x: x.T, Aval())
  assert out.shape == (5, 3) and out.dtype == np.float32

  import threading
  f = counted(lambda x: x + 1)
  jf = jax.jit(f)
  x = np.ones(16, np.float32)
  errs = []

  def run():
    try:
      for _ in range(5):
        np.testing.assert_allclose(np.asarray(jf(x)), x + 1)
    except Exception as e:  # noqa: BLE001
      errs.append(e)
  ts = [threading.Thread(target=run) for _ in range(4)]
  for t in ts:
    t.start()
  for t in ts:
    t.join()
  assert not errs
  assert len(f.calls) == 1


def test_jitted_eval_shape(mesh8):
  f = counted(lambda x, n: {"y": x.reshape(n, -1)})
  jf = jax.jit(f, static_argnums=1, out_shardings=NamedSharding(mesh8, P("x")))
  out = jf.eval_shape(jax.ShapeDtypeStruct((8, 4), jnp.float32), 4)
  assert len(f.calls) == 1
  assert out["y"].shape == (4, 8) and out["y"].dtype == np.float32
  assert out["y"].sharding.spec == P("x")
  with pytest.raises(jax.PartixError, match=r"^\[eval_shape\].*not an array"):
    jax.eval_shape(lambda x: x, "s")


def test_trace_out_info(mesh8):
  f = counted(lambda x: {"s": x.sum(axis=1), "i": x.astype(jnp.int32)})
  tr = jax.jit(f).trace(jax.ShapeDtypeStruct((8, 4), jnp.float32,
                                             sharding=NamedSharding(mesh8, P("x"))))
  info = tr.out_info
  assert info["s"].shape == (8,) and info["s"].dtype == np.float32
  assert info["i"].shape == (8, 4) and info["i"].dtype == np.int32
  assert info["i"].sharding.spec == P("x")
  assert "sum" in tr.lower().as_text() or "reduce" in tr.lower().as_text()
  assert len(f.calls) == 1


def test_kwargs_with_in_shardings_rejected(mesh8):
  f = jax.jit(lambda x, y: x + y, in_shardings=NamedSharding(mesh8, P()))
  x = np.ones(4, np.float32)
  np.testing.assert_allclose(np.asarray(f(x, x)), 2 * x)
  with pytest.raises(jax.PartixError, match=r"^\[jit\] keyword arguments \['y'\]"):
    f(x, y=x)


def test_partition_specs_follow_the_current_mesh(mesh8):
  f = counted(lambda x: x * 2)
  jf = jax.jit(f, out_shardings=P("x"))
  a = np.arange(16, dtype=np.float32).reshape(8, 2)
  other = jax.make_mesh((2, 4), ("x", "y"))
  with jax.set_mesh(mesh8):
    o1 = jf(a)
    jf(a)
  with jax.set_mesh(other):
    o2 = jf(a)
  assert len(f.calls) == 2
  assert o1.sharding.mesh.shape == {"x": 4, "y": 2}
  assert o2.sharding.mesh.shape == {"x": 2, "y": 4}
  assert o2.sharding.shard_shape(a.shape) == (4, 2)
  np.testing.assert_allclose(np.asarray(o2), 2 * a)


def test_donate_by_keyword():
  f = jax.jit(lambda x, y: x + y, donate_argnames="y")
  x = jnp.asarray(np.arange(3, dtype=np.float32))
  y = jnp.asarray(np.ones(3, np.float32))
  np.testing.assert_allclose(np.asarray(f(x, y=y)), np.arange(3) + 1)
  np.testing.assert_allclose(np.asarray(x), np.arange(3))  # not donated
  with pytest.raises(jax.PartixError, match="donat"):
    np.asarray(y)
  y2 = jnp.asarray(np.ones(3, np.float32))
  f(x, y2)  # by position: the same parameter
  with pytest.raises(jax.PartixError, match="donat"):
    np.asarray(y2)


def test_lowered_text_shows_the_users_constraints_and_compiled_text_the_collectives(mesh8):
  # As JAX: lower().as_text() is the program as traced (a constraint the user wrote is there),
  # compile().as_text() the per-device program (the constraint realised, collectives inserted).
  s = NamedSharding(mesh8, P("x", "y"))
  f = jax.jit(lambda v: jax.lax.with_sharding_constraint(v * 2, s).sum(axis=0))
  x = np.ones((8, 4), np.float32)
  lowered = f.lower(x)
  assert "sharding_constraint" in lowered.as_text() and "f32[8,4]" in lowered.as_text()
  compiled = lowered.compile().as_text()
  assert "sharding_constraint" not in compiled and "all_reduce" in compiled, compiled
