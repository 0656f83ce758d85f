"""Unreduced Arrays (JAX's P(..., unreduced={'x'}) on a concrete array): each device of an
unreduced axis holds a partial sum and the array's value is their sum. Made by jit results,
eager ops with out_sharding=, reshard and device_put; read (np.asarray) as the sum; consumed by
jit, eager linear ops and resharding; refused where partial sums cannot be used. On 8 devices,
against numpy."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P

E = AxisType.Explicit


@pytest.fixture(scope="module")
def m2():
  return jax.make_mesh((2,), ("x",), axis_types=(E,))


@pytest.fixture(scope="module")
def m42():
  return jax.make_mesh((4, 2), ("x", "y"), axis_types=(E, E))


def _put(a, mesh, spec):
  return jax.device_put(a, NamedSharding(mesh, spec))


def _shards(x):
  return [np.asarray(s.data) for s in x.addressable_shards]


def _matmul_partials(m42):
  a = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) / 7
  b = np.arange(6 * 4, dtype=np.float32).reshape(6, 4) / 5
  x, y = _put(a, m42, P("x", "y")), _put(b, m42, P("y", None))
  f = jax.jit(lambda x, y: jnp.dot(x, y, out_sharding=P("x", None, unreduced={"y"})))
  return a, b, f(x, y)


def test_jit_returns_partial_sums_and_reading_sums_them(m42):
  a, b, u = _matmul_partials(m42)
  assert u.sharding == NamedSharding(m42, P("x", None, unreduced={"y"}))
  # Device (i, j) holds rows i of a's column half j times b's row half j.
  shards = _shards(u)
  for k, s in enumerate(u.addressable_shards):
    i, j = divmod(k, 2)
    rows, cols = slice(2 * i, 2 * i + 2), slice(3 * j, 3 * j + 3)
    np.testing.assert_allclose(shards[k], a[rows, cols] @ b[cols], rtol=1e-5)
    assert s.index[0] == rows
  np.testing.assert_allclose(np.asarray(u), a @ b, rtol=1e-5)
  with jax.sharding.use_mesh(m42):
    np.testing.assert_allclose(np.asarray(jax.reshard(u, P("x", None))), a @ b, rtol=1e-5)
  # JAX's text: shape, dtype and sharding, never a device's partial values.
  assert repr(u) == str(u) == (f"Array(shape=(8, 4), dtype=float32, sharding={u.sharding})")
  assert f"{u}" == repr(u)


def test_jit_and_eager_ops_take_unreduced_arguments(m42):
  a, b, u = _matmul_partials(m42)
  want = a @ b
  # Linear ops keep the partial sums; a product with a reduced value too (multilinear).
  s = u + u
  assert s.sharding == u.sharding
  np.testing.assert_allclose(np.asarray(s), 2 * want, rtol=1e-5)
  twice = _put(np.full((8, 4), 2, np.float32), m42, P("x", None))
  np.testing.assert_allclose(np.asarray(u * twice), 2 * want, rtol=1e-5)
  j = jax.jit(lambda v: v * 3)(u)
  assert j.sharding == u.sharding
  np.testing.assert_allclose(np.asarray(j), 3 * want, rtol=1e-5)
  r = jax.jit(lambda v: jnp.tanh(jax.reshard(v, NamedSharding(m42, P("x", None)))))(u)
  assert r.sharding == NamedSharding(m42, P("x", None))
  np.testing.assert_allclose(np.asarray(r), np.tanh(want), rtol=1e-5)
  # A nonlinear op cannot take partial sums: JAX's words, eagerly and under jit.
  with pytest.raises(jax.PartixError, match=r"unreduced rule for sin is not implemented"):
    jnp.sin(u)
  with pytest.raises(jax.PartixError, match=r"unreduced rule for sin is not implemented"):
    jax.jit(jnp.sin)(u)


def test_reshard_and_device_put_make_partial_sums(m2, m42):
  v = np.arange(8, dtype=np.float32)
  with jax.sharding.use_mesh(m2):
    for u in (jax.reshard(jnp.asarray(v), P(unreduced={"x"})),
              jax.device_put(v, NamedSharding(m2, P(unreduced={"x"}))),
              jax.device_put(_put(v, m2, P("x")), NamedSharding(m2, P(unreduced={"x"})))):
      assert u.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
      np.testing.assert_array_equal(_shards(u)[0] + _shards(u)[1], v)
      np.testing.assert_array_equal(np.asarray(u), v)
  # Across meshes the sums are reduced on the way: the value moves, exactly.
  u = jax.device_put(v, NamedSharding(m2, P(unreduced={"x"})))
  moved = jax.device_put(u, NamedSharding(m42, P("x")))
  np.testing.assert_array_equal(np.asarray(moved), v)
  again = jax.device_put(u, NamedSharding(m42, P("y", unreduced={"x"})))
  assert again.sharding == NamedSharding(m42, P("y", unreduced={"x"}))
  np.testing.assert_array_equal(np.asarray(again), v)
  # lax.reduce_sum leaves the sum over a split dimension unreduced (JAX's printing case).
  with jax.sharding.use_mesh(m2):
    s = lax.reduce_sum(_put(v, m2, P("x")), [0], out_sharding=P(unreduced={"x"}))
    assert "unreduced" in str(s.sharding) and str(s).startswith("Array(shape=(), dtype=float32")
    assert float(np.asarray(s)) == v.sum()


def test_grad_through_partial_sums_matches_numpy(m42):
  a = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) / 11
  b = np.arange(6 * 4, dtype=np.float32).reshape(6, 4) / 13
  x, y = _put(a, m42, P("x", "y")), _put(b, m42, P("y", None))

  def loss(x, y):
    u = jnp.dot(x, y, out_sharding=P("x", None, unreduced={"y"}))
    return jnp.sum(jax.reshard(u, NamedSharding(m42, P("x", None))) ** 2)

  gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, y)
  c = a @ b
  np.testing.assert_allclose(np.asarray(gx), 2 * c @ b.T, rtol=1e-4)
  np.testing.assert_allclose(np.asarray(gy), 2 * a.T @ c, rtol=1e-4)
  assert gx.sharding == x.sharding and gy.sharding == y.sharding


def test_partial_sums_refused_where_they_cannot_be_used(m2, tmp_path):
  v = np.arange(8, dtype=np.float32)
  # Only Explicit axes hold partial sums.
  auto = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
  with pytest.raises(jax.PartixError, match=r"Unreduced axes can only refer to mesh axes of type "
                     r"Explicit"):
    jax.device_put(v, NamedSharding(auto, P(unreduced={"x"})))
  # A checkpoint stores values, never one device's partial sum: refused until resharded.
  u = jax.device_put(v, NamedSharding(m2, P(unreduced={"x"})))
  with pytest.raises(jax.PartixError, match=r"\[ckpt.save\] leaf 'u' is unreduced"):
    jax.ckpt.save(str(tmp_path), 0, {"u": u})
  whole = jax.device_put(u, NamedSharding(m2, P()))
  jax.ckpt.save(str(tmp_path), 0, {"u": whole})
  jax.ckpt.wait()
  back = jax.ckpt.restore(str(tmp_path), 0, target={"u": whole})
  np.testing.assert_array_equal(np.asarray(back["u"]), v)
  # Quantized blocks cannot be summed.
  from partix import _core
  from partix._src.core import Array
  blk = np.zeros((2, 34), np.uint8)  # two q8_0 blocks: an f16 scale, then 32 int8 codes
  q = Array(_core.from_host(blk.reshape(-1), [2, 32], "q8_0"))
  with pytest.raises(jax.PartixError, match=r"quantized q8_0 array cannot be unreduced"):
    jax.device_put(q, NamedSharding(m2, P(unreduced={"x"})))


def test_shard_map_returns_and_takes_partial_sums(m42):
  """out_specs P(..., unreduced=) returns each device's block unsummed; in_specs unreduced=
  (also inferred from the argument's type) hands each device its partial sum; grads through
  both match numpy; eagerly and under jit."""
  a = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) / 7
  b = np.arange(6 * 4, dtype=np.float32).reshape(6, 4) / 5
  x, y = _put(a, m42, P("x", "y")), _put(b, m42, P("y", None))
  with jax.sharding.use_mesh(m42):
    partial = jax.shard_map(lambda p, q: p @ q, in_specs=(P("x", "y"), P("y", None)),
                            out_specs=P("x", None, unreduced={"y"}))
    scatter = jax.shard_map(lambda u: lax.psum_scatter(u, "y", scatter_dimension=1, tiled=True),
                            out_specs=P("x", "y"))
    for run in (lambda f, *v: f(*v), lambda f, *v: jax.jit(f)(*v)):
      u = run(partial, x, y)
      assert u.sharding == NamedSharding(m42, P("x", None, unreduced={"y"}))
      np.testing.assert_allclose(np.asarray(u), a @ b, rtol=1e-5)
      s = run(scatter, u)  # in_specs inferred: P('x', None, unreduced={'y'})
      assert s.sharding == NamedSharding(m42, P("x", "y"))
      np.testing.assert_allclose(np.asarray(s), a @ b, rtol=1e-5)

    def loss(x, y):
      return jnp.sum(scatter(partial(x, y)) ** 2)
    gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, y)
    np.testing.assert_allclose(np.asarray(gx), 2 * (a @ b) @ b.T, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(gy), 2 * a.T @ (a @ b), rtol=1e-4)
    # The gradient of an unreduced argument: the one value every partial sum has.
    u = partial(x, y)
    gu = jax.grad(lambda u: jnp.sum(scatter(u) ** 2))(u)
    np.testing.assert_allclose(np.asarray(gu), 2 * (a @ b), rtol=1e-4)
    # pcast(to='unreduced') takes a varying value as partial sums.
    f = jax.shard_map(lambda p, q: lax.pcast(p @ q, "y", to="unreduced"),
                      in_specs=(P("x", "y"), P("y", None)), out_specs=P("x", None, unreduced={"y"}))
    np.testing.assert_allclose(np.asarray(jax.jit(f)(x, y)), a @ b, rtol=1e-5)


def test_shard_map_unreduced_specs_bad_input(m42):
  x = _put(np.ones((8, 4), np.float32), m42, P("x", None))
  with jax.sharding.use_mesh(m42):
    # A value that does not vary over 'y' has no partial sums over it.
    f = jax.shard_map(lambda v: v * 2, in_specs=P("x", None),
                      out_specs=P("x", None, unreduced={"y"}))
    with pytest.raises(jax.PartixError, match=r"out_specs\[0\] is unreduced over 'y', but the "
                       r"result does not vary over 'y'"):
      jax.jit(f)(x)
    # in_specs must say what the argument is: partial sums enter only as such.
    g = jax.shard_map(lambda v: v, in_specs=P("x", None, unreduced={"y"}), out_specs=P("x", None))
    with pytest.raises(jax.PartixError, match=r"in_specs containing unreduced"):
      g(x)
    # A map nested in another's body takes no partial sums.
    outer = jax.shard_map(
        lambda v: jax.shard_map(lambda w: w, in_specs=P(), out_specs=P(unreduced={"y"}),
                                axis_names={"y"})(v),
        in_specs=P("x", None), out_specs=P("x", None), axis_names={"x"})
    with pytest.raises(jax.PartixError, match=r"a shard_map nested in another's body takes and "
                       r"returns no partial sums"):
      jax.jit(outer)(x)


def test_reduced_arrays_are_replicated_values_whose_gradients_come_back_unreduced(m2):
  """P(reduced={'x'}): stored replicated, typed so that its cotangent is partial sums over
  'x' (JAX's transpose); through shard_map in_specs (inferred), out_specs, all_gather(to=
  'reduced') and pcast(to='reduced'); gradients against the replicated input's."""
  v = np.arange(8, dtype=np.float32)
  r = jax.device_put(v, NamedSharding(m2, P(reduced={"x"})))
  assert r.sharding == NamedSharding(m2, P(None, reduced={"x"}))
  assert r.sharding != NamedSharding(m2, P(None))  # a type of its own
  for s in r.addressable_shards:
    np.testing.assert_array_equal(np.asarray(s.data), v)
  x = _put(np.arange(16, dtype=np.float32), m2, P("x"))
  with jax.sharding.use_mesh(m2):
    f = jax.shard_map(lambda a, b: a * b, out_specs=P("x"))  # in_specs inferred, b reduced
    for run in (lambda g, *a: g(*a), lambda g, *a: jax.jit(g)(*a)):
      out = run(f, x, r)
      np.testing.assert_array_equal(np.asarray(out), np.arange(16) * np.tile(v, 2))
      gx, gr = run(jax.grad(lambda a, b: jnp.sum(f(a, b) ** 2), argnums=(0, 1)), x, r)
      # The reduced input's cotangent: partial sums over 'x', summing to the replicated one's.
      assert gr.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
      want = 2 * (np.arange(16) * np.tile(v, 2)) * np.arange(16)
      np.testing.assert_allclose(np.asarray(gr), want[:8] + want[8:], rtol=1e-6)
      np.testing.assert_allclose(np.asarray(gx), 2 * np.arange(16) * np.tile(v, 2) ** 2)
    # Reduced results: the gathered value, typed reduced.
    g = jax.shard_map(lambda a: lax.all_gather(a, "x", tiled=True, to="reduced"),
                      out_specs=P(reduced={"x"}))
    out = g(x)
    assert out.sharding == NamedSharding(m2, P(None, reduced={"x"}))
    np.testing.assert_array_equal(np.asarray(out), np.arange(16))
    h = jax.shard_map(lambda a: lax.pcast(a, "x", to="reduced"), in_specs=P(),
                      out_specs=P(reduced={"x"}))
    assert jax.jit(h)(jnp.asarray(v)).sharding == NamedSharding(m2, P(None, reduced={"x"}))
    # A reduced result must be the same on every device of the axis.
    bad = jax.shard_map(lambda a: a, in_specs=P("x"), out_specs=P(reduced={"x"}))
    with pytest.raises(jax.PartixError, match=r"varies over 'x'"):
      jax.jit(bad)(x)
    # Reduced axes are a type of Explicit axes only.
    auto = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    with pytest.raises(jax.PartixError, match=r"Reduced axes can only refer to mesh axes of type "
                       r"Explicit"):
      NamedSharding(auto, P(reduced={"x"}))


def test_backward_map_takes_unreduced_primals_as_partial_sums(m2):
  """The gradient of a replicated weight multiplied by partial sums in the body: each device's
  product is its share, so the weight's gradient is the partials' sum times the cotangent,
  not that sum counted once per device."""
  v = np.arange(8, dtype=np.float32) + 1
  w0 = np.linspace(0.5, 2.0, 8).astype(np.float32)
  u = jax.device_put(v, NamedSharding(m2, P(unreduced={"x"})))
  w = jax.device_put(w0, NamedSharding(m2, P()))
  with jax.sharding.use_mesh(m2):
    f = jax.shard_map(lambda a, b: lax.psum(a * b, "x"), out_specs=P())  # (Σ partials) * w
    loss = lambda a, b: jnp.sum(f(a, b) ** 2)
    np.testing.assert_allclose(np.asarray(f(u, w)), v * w0, rtol=1e-6)
    gw = jax.jit(jax.grad(loss, argnums=1))(u, w)
  np.testing.assert_allclose(np.asarray(gw), 2 * (v * w0) * v, rtol=1e-5)


def test_body_types_of_partial_sums_and_reduced_values(m42):
  """Inside the body (check_vma): an unreduced argument is typed unreduced, not varying; linear
  ops keep it, a collective summing over the axis ends it, a nonlinear op is refused with JAX's
  words; a reduced argument is typed reduced until a varying value meets it."""
  u = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(m42, P("x", None, unreduced={"y"})))
  r = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(m42, P("x", None, reduced={"y"})))
  seen = {}
  with jax.sharding.use_mesh(m42):
    def body(a, b):
      seen["a"] = jax.typeof(a).mat
      seen["2a"] = jax.typeof(2.0 * a).mat
      seen["b"] = jax.typeof(b).mat
      seen["b.T.T"] = jax.typeof(jnp.transpose(jnp.transpose(b))).mat
      s = lax.psum(a, "y")
      seen["psum"] = jax.typeof(s).mat
      return s + b
    out = jax.jit(jax.shard_map(body, out_specs=P("x", None)))(u, r)
    np.testing.assert_array_equal(np.asarray(out), np.full((8, 4), 2.0))  # value 1, plus 1
    assert seen["a"].unreduced == {"y"} and seen["a"].varying == {"x"}
    assert seen["2a"].unreduced == {"y"}
    assert seen["b"].reduced == {"y"} and seen["b.T.T"].reduced == {"y"}
    assert seen["psum"].unreduced == frozenset() and seen["psum"].varying == {"x"}
    bad = jax.shard_map(lambda a: lax.psum(jnp.sin(a), "y"), out_specs=P("x", None))
    with pytest.raises(jax.PartixError, match=r"unreduced rule for sin is not implemented"):
      jax.jit(bad)(u)
    add = jax.shard_map(lambda a: lax.psum(a + 1.0, "y"), out_specs=P("x", None))
    with pytest.raises(jax.PartixError, match=r"unreduced rule for add is not implemented"):
      jax.jit(add)(u)  # adding 1 to each partial sum would add it once per device


def test_partial_sums_under_vmap_and_loops(m2):
  """vmap of a map that returns partial sums batches them; a loop carrying partial sums inside
  a body is refused by name (its body would have to be typed per iteration)."""
  a = np.arange(3 * 8, dtype=np.float32).reshape(3, 8)
  with jax.sharding.use_mesh(m2):
    x = jax.device_put(a, NamedSharding(m2, P(None, "x")))
    f = jax.shard_map(lambda v: jnp.sum(v, keepdims=True), in_specs=P("x"),
                      out_specs=P(None, unreduced={"x"}))
    out = jax.jit(jax.vmap(lambda row: jax.reshard(f(row), P())))(x)
    np.testing.assert_allclose(np.asarray(out).ravel(), a.sum(1))

    def body(v):
      return lax.scan(lambda c, _: (c * 2.0, None), v, None, length=3)[0]
    h = jax.shard_map(body, in_specs=P(None, unreduced={"x"}), out_specs=P(None, unreduced={"x"}))
    u = jax.device_put(np.arange(4, dtype=np.float32), NamedSharding(m2, P(unreduced={"x"})))
    with pytest.raises(jax.PartixError, match=r"\[scan\] unreduced rule for scan is not "
                       r"implemented"):
      jax.jit(h)(u)


def test_reduced_arrays_checkpoint_and_restore_onto_another_mesh(m2, m42, tmp_path):
  """A reduced array is replicated values: it saves as any, and restores onto another mesh as
  the target says, reduced too."""
  v = np.arange(8, dtype=np.float32)
  r = jax.device_put(v, NamedSharding(m2, P(reduced={"x"})))
  jax.ckpt.save(str(tmp_path), 0, {"r": r})
  jax.ckpt.wait()
  target = jax.device_put(np.zeros(8, np.float32), NamedSharding(m42, P(None, reduced={"x", "y"})))
  back = jax.ckpt.restore(str(tmp_path), 0, target={"r": target})["r"]
  assert back.sharding == NamedSharding(m42, P(None, reduced={"x", "y"}))
  np.testing.assert_array_equal(np.asarray(back), v)
  split = jax.ckpt.restore(str(tmp_path), 0, target={"r": _put(np.zeros(8, np.float32), m42,
                                                               P("x"))})["r"]
  assert split.sharding == NamedSharding(m42, P("x"))
  np.testing.assert_array_equal(np.asarray(split), v)
