"""Inside a shard_map manual over part of an Explicit mesh (axis_names=), values keep their
types along the other Explicit axes, and the results take those splits after the map."""
import functools

import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix import lax
from partix.sharding import AxisType, NamedSharding
from partix.sharding import PartitionSpec as P

EXPLICIT = (AxisType.Explicit,) * 2


@pytest.fixture
def mesh():
  m = partix.make_mesh((2, 4), ("x", "y"), axis_types=EXPLICIT)
  with partix.set_mesh(m):
    yield m


def _spec(v):
  return partix.typeof(v).sharding.spec


def test_body_types_and_result_sharding(mesh):
  seen = {}

  @functools.partial(partix.shard_map, out_specs=P("x"), axis_names={"x"})
  def f(v):
    seen["in"], seen["vary"] = _spec(v), partix.typeof(v).mat.varying
    out = jnp.sin(v) * 2
    seen["out"] = _spec(out)
    return out

  x = np.arange(64.).reshape(8, 8)
  arr = partix.device_put(x, P("x", "y"))
  out = partix.jit(f)(arr)
  assert seen == {"in": P(None, "y"), "vary": frozenset({"x"}), "out": P(None, "y")}
  assert out.sharding == NamedSharding(mesh, P("x", "y"))
  np.testing.assert_allclose(np.asarray(out), np.sin(x) * 2, rtol=1e-6)
  # Each device holds its own block of the result.
  for s in out.addressable_shards:
    np.testing.assert_allclose(np.asarray(s.data), (np.sin(x) * 2)[s.index], rtol=1e-6)
  # Eagerly the same.
  eager = f(arr)
  assert eager.sharding == out.sharding
  np.testing.assert_allclose(np.asarray(eager), np.asarray(out))


def test_mixed_dimension_and_transpose(mesh):
  @partix.jit
  @functools.partial(partix.shard_map, out_specs=P(None, "x"), axis_names={"x"})
  def f(v):
    assert v.shape == (4, 8) and _spec(v) == P("y", None)
    t = v.T
    assert _spec(t) == P(None, "y")
    return t

  x = np.arange(64.).reshape(8, 8)
  out = f(partix.device_put(x, P(("x", "y"), None)))
  assert out.sharding == NamedSharding(mesh, P(None, ("x", "y")))
  np.testing.assert_array_equal(np.asarray(out), x.reshape(2, 4, 8).transpose(2, 0, 1)
                                .reshape(8, 8))


def test_grad_collectives_and_scan_in_the_body(mesh):
  def body(w, v):
    h = v * w
    c, _ = lax.scan(lambda c, row: (c + row, None), jnp.zeros_like(h[0]), h)
    return lax.psum(c.sum(), "x")

  f = partix.shard_map(body, out_specs=P(), axis_names={"x"})

  w = partix.device_put(np.linspace(0.5, 1.5, 32).reshape(8, 4), P("x", "y"))
  v = partix.device_put(np.arange(32.).reshape(8, 4), P("x", "y"))
  loss = partix.jit(f)(w, v)
  np.testing.assert_allclose(float(loss), float((np.asarray(w) * np.asarray(v)).sum()),
                             rtol=1e-5)
  g = partix.jit(partix.grad(f))(w, v)
  assert g.sharding == NamedSharding(mesh, P("x", "y"))
  np.testing.assert_allclose(np.asarray(g), np.asarray(v), rtol=1e-6)


def test_reshard_inside_the_body(mesh):
  @partix.jit
  @functools.partial(partix.shard_map, out_specs=P("x"), axis_names={"x"})
  def f(v):
    r = partix.reshard(v, P("y", None))
    assert _spec(r) == P("y", None)
    return r + 1

  x = np.arange(64.).reshape(8, 8)
  out = f(partix.device_put(x, P("x", "y")))
  assert out.sharding == NamedSharding(mesh, P(("x", "y"), None))
  np.testing.assert_array_equal(np.asarray(out), x + 1)


def test_ambiguous_op_in_the_body_is_refused(mesh):
  @partix.jit
  @functools.partial(partix.shard_map, out_specs=P("x"), axis_names={"x"})
  def f(a, b):
    return a @ b  # contracts over 'y': the result's sharding is the user's choice

  a = partix.device_put(np.ones((8, 8)), P("x", "y"))
  b = partix.device_put(np.ones((8, 8)), P("y", None))
  with pytest.raises(partix.PartixError, match="explicit sharding"):
    f(a, b)


def test_full_manual_bodies_stay_untyped(mesh):
  @partix.jit
  @functools.partial(partix.shard_map, out_specs=P("x", "y"))
  def f(v):
    assert partix.typeof(v).sharding.spec == P(None, None)
    return v * 2

  x = np.arange(64.).reshape(8, 8)
  out = f(partix.device_put(x, P("x", "y")))
  assert out.sharding == NamedSharding(mesh, P("x", "y"))
  np.testing.assert_array_equal(np.asarray(out), x * 2)
