"""shard_map (both call styles, prefixes, check_vma, caching), pmap, and the sharding objects:
Mesh, make_mesh, set_mesh/use_mesh, NamedSharding, PartitionSpec, mesh_utils."""
import functools

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.experimental import mesh_utils
from partix.experimental.shard_map import shard_map as exp_shard_map
from partix.sharding import Mesh, NamedSharding, PartitionSpec as P


def test_call_styles(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  f = lambda x: lax.psum(x, "y")
  ref = np.concatenate([a[:, :2] + a[:, 2:]] * 1, axis=1)
  s1 = jax.shard_map(f, mesh=mesh8, in_specs=P("x", "y"), out_specs=P("x"))
  s2 = exp_shard_map(f, mesh8, P("x", "y"), P("x"))
  s3 = exp_shard_map(f, mesh8, in_specs=(P("x", "y"),), out_specs=P("x"), check_rep=False)

  @functools.partial(jax.shard_map, mesh=mesh8, in_specs=P("x", "y"), out_specs=P("x"))
  def s4(x):
    return lax.psum(x, "y")
  for s in (s1, s2, s3, s4, jax.jit(s1)):
    np.testing.assert_allclose(np.asarray(s(a)), ref, rtol=1e-6)


def test_traced_once_eager_and_jit(mesh8, rng):
  calls = []

  def f(x):
    calls.append(1)
    return x * 2
  s = jax.shard_map(f, mesh=mesh8, in_specs=P("x"), out_specs=P("x"))
  a = rng.standard_normal((8, 4)).astype(np.float32)
  for _ in range(3):
    np.testing.assert_allclose(np.asarray(s(a)), 2 * a)
  assert len(calls) == 1
  s(a[:4])
  assert len(calls) == 2
  j = jax.jit(s)
  j(a)
  j(a)
  assert len(calls) == 3


def test_spec_prefixes_and_pytrees(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  b = rng.standard_normal((4,)).astype(np.float32)

  def f(p, x):
    return {"y": x * p["scale"] + p["bias"], "n": lax.psum(jnp.ones((1,)), "x")}
  s = jax.shard_map(f, mesh=mesh8, in_specs=({"scale": P(), "bias": P("y")}, P("x", "y")),
                    out_specs={"y": P("x", "y"), "n": P()})
  out = s({"scale": np.float32(3), "bias": b}, a)
  np.testing.assert_allclose(np.asarray(out["y"]), a * 3 + b, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(out["n"]), [4.0])
  # one spec for a whole tree
  s = jax.shard_map(lambda t: jax.tree_util.tree_map(lambda v: v + 1, t), mesh=mesh8,
                    in_specs=P("x"), out_specs=P("x"))
  out = s({"a": a, "b": (a, a)})
  np.testing.assert_allclose(np.asarray(out["b"][1]), a + 1)


def test_set_mesh_and_one_device(mesh8, mesh1, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  with jax.set_mesh(mesh8):
    out = jax.shard_map(lambda x: lax.pmax(x, "x"), in_specs=P("x"), out_specs=P())(a)
  np.testing.assert_allclose(np.asarray(out), a.reshape(4, 2, 4).max(0))
  out = jax.shard_map(lambda x: lax.psum(x, "x"), mesh=mesh1, in_specs=P("x"), out_specs=P())(a)
  np.testing.assert_allclose(np.asarray(out), a)


def test_check_vma(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  # a device-varying value claimed replicated: rejected by check_vma, accepted without it
  bad = lambda x: x
  with pytest.raises(jax.PartixError, match=r"shard_map"):
    jax.shard_map(bad, mesh=mesh8, in_specs=P("x"), out_specs=P())(a)
  out = jax.shard_map(lambda x: lax.psum(x, "x"), mesh=mesh8, in_specs=P("x"), out_specs=P(),
                      check_vma=True)(a)
  np.testing.assert_allclose(np.asarray(out), a.reshape(4, 2, 4).sum(0), rtol=1e-5)
  out = jax.shard_map(bad, mesh=mesh8, in_specs=P("x"), out_specs=P(), check_vma=False)(a)
  assert out.shape == (2, 4)


def test_shard_map_errors(mesh8):
  a = np.ones((8, 4), np.float32)
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\]"):
    jax.shard_map(lambda x: x, mesh=mesh8, in_specs=P("z"), out_specs=P("z"))(a)
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\]"):
    jax.shard_map(lambda x: x, mesh=mesh8, in_specs=(P("x"), P("x")), out_specs=P("x"))(a)
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\]"):
    jax.shard_map(lambda x: x, mesh=mesh8, in_specs=P("x"), out_specs="x")
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\]"):
    jax.shard_map(lambda x: x, mesh=mesh8, in_specs=P("x"))
  with pytest.raises(jax.PartixError):
    jax.shard_map(lambda x: x, mesh=mesh8, in_specs=P("x"), out_specs=P("x"))(np.ones(6))
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\].*not an array"):
    jax.shard_map(lambda x: x, mesh=mesh8, in_specs=P(), out_specs=P())("s")
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\].*mesh"):
    jax.shard_map(lambda x: x, in_specs=P(), out_specs=P())(a)
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\]"):
    jax.shard_map(lambda x: {"a": x}, mesh=mesh8, in_specs=P(), out_specs={"b": P()})(a)


def test_pmap(rng):
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  a = rng.standard_normal((8, 3)).astype(np.float32)
  out = jax.pmap(lambda x: lax.psum(x, "i") + x, axis_name="i")(a)
  np.testing.assert_allclose(np.asarray(out), a.sum(0) + a, rtol=1e-5)


def test_mesh_objects(mesh8):
  devs = mesh_utils.create_device_mesh((4, 2))
  assert devs.shape == (4, 2)
  m = Mesh(devs, ("x", "y"))
  assert m.shape == {"x": 4, "y": 2} and tuple(m.axis_names) == ("x", "y")
  assert m == mesh8
  with jax.set_mesh(m):
    out = jax.jit(lambda v: v * 1, out_shardings=P("x"))(np.zeros((8, 2), np.float32))
    assert out.sharding.spec == P("x")
  m2 = jax.make_mesh((2, 4), ("a", "b"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
  assert m2.shape == {"a": 2, "b": 4}
  with jax.set_mesh(m2):
    assert jax.sharding.get_abstract_mesh().shape == {"a": 2, "b": 4}
  with pytest.raises(jax.PartixError):
    mesh_utils.create_device_mesh((3, 5))
  with pytest.raises(jax.PartixError):
    jax.make_mesh((3, 3), ("x", "y"))
  with pytest.raises(jax.PartixError):
    jax.make_mesh((4, 2), ("x", "x"))


def test_named_sharding_attributes(mesh8):
  s = NamedSharding(mesh8, P("x", None))
  assert s.mesh == mesh8 and s.spec == P("x", None)
  assert s.shard_shape((8, 6)) == (2, 6)
  assert len(s.device_set) == 8
  assert not s.is_fully_replicated
  assert NamedSharding(mesh8, P()).is_fully_replicated
  idx = s.devices_indices_map((8, 6))
  assert len(idx) == 8
  rows = sorted({(sl[0].start, sl[0].stop) for sl in idx.values()})
  assert rows == [(0, 2), (2, 4), (4, 6), (6, 8)]
  s2 = NamedSharding(mesh8, P(("x", "y")))
  assert s2.shard_shape((16, 3)) == (2, 3)
  with pytest.raises(jax.PartixError):
    s.shard_shape((7, 6))


def test_partition_spec_semantics():
  p = P("x", None, ("y", "z"))
  assert isinstance(p, tuple) and len(p) == 3
  assert p[0] == "x" and p[1] is None and p[2] == ("y", "z")
  assert P("x") == P("x") and P("x") != P("y")
  assert hash(P("x", None)) == hash(P("x", None))
  assert tuple(P()) == ()


def test_pmap_traced_once(rng):
  if jax.device_count() < 4:
    pytest.skip("needs 4 devices")
  calls = []

  def f(x):
    calls.append(1)
    return x * 2
  p = jax.pmap(f)
  a = rng.standard_normal((4, 3)).astype(np.float32)
  for _ in range(3):
    np.testing.assert_allclose(np.asarray(p(a)), 2 * a)
  assert len(calls) == 1


def test_grad_of_shard_map_check_vma(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  w = rng.standard_normal((4,)).astype(np.float32)

  # replicated w, rows of a over x: w's gradient sums the per-device contributions
  def loss(w, a):
    f = jax.shard_map(lambda w, a: lax.psum(((a * w) ** 2).sum(), "x"), mesh=mesh8,
                      in_specs=(P(), P("x")), out_specs=P())
    return f(w, a)
  g = jax.grad(loss)(w, a)
  np.testing.assert_allclose(np.asarray(g), (2 * a ** 2 * w).sum(0), rtol=1e-4)
  gj = jax.jit(jax.grad(loss))(w, a)
  np.testing.assert_allclose(np.asarray(gj), np.asarray(g), rtol=1e-5)

  # summed over x only, the value still varies over y: out_specs P() is rejected
  def bad(w, a):
    f = jax.shard_map(lambda w, a: lax.psum(((a * w) ** 2).sum(), "x"), mesh=mesh8,
                      in_specs=(P("y"), P("x", "y")), out_specs=P())
    return f(w, a)
  with pytest.raises(jax.PartixError, match="shard_map"):
    jax.grad(bad)(w, a)


def test_spec_rank_errors(mesh8):
  sm = lambda f, i, o: jax.shard_map(f, mesh=mesh8, in_specs=i, out_specs=o)
  x8 = np.ones((8,), np.float32)
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\] out_specs.*result 0"):
    sm(lambda x: x.sum(), P("x"), P("x"))(x8)
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\] shard_map applied to the function "
                     r"'<lambda>' was given an in_specs entry P\('x'\) for argument 0"):
    sm(lambda x: x, P("x"), P("x"))(np.float32(1))
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\].*evenly"):
    sm(lambda x: x, P("x"), P("x"))(np.ones(6, np.float32))
  with pytest.raises(jax.PartixError, match=r"^\[shard_map\] shard_map out_specs "
                     r"specification must be a tree prefix .* has 1 entries"):
    sm(lambda x: (x, x), P("x"), (P("x"),))(x8)


def test_device_put_pytrees(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  sx, sy = NamedSharding(mesh8, P("x")), NamedSharding(mesh8, P(None, "y"))
  out = jax.device_put({"a": a, "b": (a, a)}, {"a": sx, "b": sy})
  assert out["a"].sharding.spec == P("x") and out["b"][1].sharding.spec == P(None, "y")
  np.testing.assert_array_equal(np.asarray(out["b"][0]), a)
  d3 = jax.devices()[3]
  assert jax.device_put(a, d3).sharding.device_set == {d3}
  with pytest.raises(jax.PartixError, match=r"^\[device_put\].*structure"):
    jax.device_put({"a": a}, {"b": sx})
  with pytest.raises(jax.PartixError, match=r"^\[device_put\].*not a sharding"):
    jax.device_put(a, "x")
  with pytest.raises(jax.PartixError, match=r"^\[device_put\].*not an array"):
    jax.device_put("s", sx)
  made = jax.make_array_from_callback((8, 4), sx, lambda idx: a[idx])
  np.testing.assert_array_equal(np.asarray(made), a)
  assert made.sharding.spec == P("x")
  with pytest.raises(jax.PartixError, match=r"^\[make_array_from_callback\] Expected shard shape "
                     r"\(2, 4\) doesn't match the single device array shape \(8, 4\)"):
    jax.make_array_from_callback((8, 4), sx, lambda idx: a)


def test_axis_types():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  AT = jax.sharding.AxisType
  d = mesh_utils.create_device_mesh((4, 2))
  m = Mesh(d, ("x", "y"), axis_types=(AT.Explicit, AT.Auto))
  assert m.axis_types == (AT.Explicit, AT.Auto)
  assert jax.make_mesh((4, 2), ("x", "y"), axis_types=(AT.Explicit,) * 2).axis_types == (
      AT.Explicit, AT.Explicit)
  with pytest.raises(jax.PartixError, match=r"^\[Mesh\] Number of axis names should match the "
                     r"number of axis_types"):
    Mesh(d, ("x", "y"), axis_types=(AT.Explicit,))


def test_eval_shape_and_full_like_keep_varying_axes_inside_shard_map(mesh8):
  # eval_shape's ShapeDtypeStruct carries the manual axes its value varies over (vma), typeof
  # reads them, and lax.full_like of it varies alike, as JAX's.
  seen = {}

  def body(x):
    y = jax.eval_shape(lambda v: v * 2, x)
    seen["vma"] = y.vma
    seen["typeof"] = jax.typeof(y).mat.varying
    one = jax.lax.full_like(y, 1.0)
    seen["one"] = jax.typeof(one).mat.varying
    return x + one

  x = jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh8, P("x")))
  out = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=P("x"), out_specs=P("x")))(x)
  np.testing.assert_array_equal(np.asarray(out), np.arange(8.0) + 1)
  assert seen["vma"] == frozenset({"x"}) and seen["typeof"] == frozenset({"x"})
  assert seen["one"] == frozenset({"x"})
  sds = jax.ShapeDtypeStruct((2,), np.float32)
  assert sds.vma == frozenset() and jax.typeof(sds).shape == (2,)


def test_closing_over_an_array_on_explicit_axes_is_refused_as_in_jax():
  # JAX 0.10: such a value must be an argument (the body cannot reshard it in); an argument,
  # or a closed-over array off the mesh, is fine.
  mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
  w = jax.device_put(jnp.ones((2, 4), jnp.float32), NamedSharding(mesh, P()))
  x = jax.device_put(jnp.ones((4, 4), jnp.float32), NamedSharding(mesh, P("x")))
  body = lambda w, xi: jnp.sum(w * xi, axis=-1)
  with pytest.raises(jax.PartixError, match=r"Closing over inputs to shard_map where the input "
                     r"is sharded on `Explicit` axes is not implemented(.|\n)*f32\[2,4\]"):
    jax.shard_map(lambda xi: body(w, xi), mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)
  with pytest.raises(jax.PartixError, match="Closing over inputs to shard_map"):
    jax.jit(lambda w, x: jax.shard_map(lambda xi: body(w, xi), mesh=mesh, in_specs=P("x"),
                                       out_specs=P("x"))(x))(w, x)
  out = jax.shard_map(body, mesh=mesh, in_specs=(P(), P("x")), out_specs=P("x"))(w, x)
  np.testing.assert_array_equal(np.asarray(out), np.full(4, 4., np.float32))
  w_off = jnp.ones((2, 4), jnp.float32)
  out = jax.shard_map(lambda xi: body(w_off, xi), mesh=mesh, in_specs=P("x"),
                      out_specs=P("x"))(x)
  np.testing.assert_array_equal(np.asarray(out), np.full(4, 4., np.float32))
