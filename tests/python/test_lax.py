"""lax control flow (scan, fori_loop, while_loop, cond, switch, map) and the collectives inside
shard_map, against numpy."""
import collections
import math

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import NamedSharding, PartitionSpec as P


def test_scan_pytrees_and_reverse(rng):
  xs = {"a": rng.standard_normal((5, 3)).astype(np.float32),
        "b": rng.standard_normal((5,)).astype(np.float32)}

  def body(c, x):
    s, n = c
    s = s + x["a"] * x["b"]
    return (s, n + 1), {"cum": s, "twice": (x["b"] * 2,)}
  (s, n), ys = lax.scan(body, (jnp.zeros(3), jnp.asarray(0)), xs)
  ref = np.cumsum(xs["a"] * xs["b"][:, None], axis=0)
  np.testing.assert_allclose(np.asarray(s), ref[-1], rtol=1e-5)
  assert int(n) == 5
  np.testing.assert_allclose(np.asarray(ys["cum"]), ref, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(ys["twice"][0]), 2 * xs["b"])
  _, ys = lax.scan(lambda c, x: (c + x, c + x), jnp.zeros(()), xs["b"], reverse=True)
  np.testing.assert_allclose(np.asarray(ys), np.cumsum(xs["b"][::-1])[::-1], rtol=1e-5)
  c, ys = lax.scan(lambda c, _: (c * 2, c), jnp.ones(()), None, length=4)
  assert float(c) == 16
  np.testing.assert_allclose(np.asarray(ys), [1, 2, 4, 8])


def test_scan_traced_once_and_in_jit(rng):
  calls = []

  def body(c, x):
    calls.append(1)
    return c + x, c
  x = rng.standard_normal((6, 2)).astype(np.float32)
  c, _ = jax.jit(lambda x: lax.scan(body, jnp.zeros(2), x))(x)
  np.testing.assert_allclose(np.asarray(c), x.sum(0), rtol=1e-5)
  assert len(calls) == 1


def test_fori_while_cond_switch_map(rng):
  assert int(lax.fori_loop(0, 10, lambda i, c: c + i, jnp.asarray(0))) == 45
  out = lax.fori_loop(2, 5, lambda i, c: {"s": c["s"] * 2}, {"s": jnp.ones(3)})
  np.testing.assert_allclose(np.asarray(out["s"]), 8 * np.ones(3))
  v = lax.while_loop(lambda c: c[0] < 100, lambda c: (c[0] * 3, c[1] + 1),
                     (jnp.asarray(1), jnp.asarray(0)))
  assert int(v[0]) == 243 and int(v[1]) == 5
  x = rng.standard_normal((4,)).astype(np.float32)
  for p in (True, False):
    r = lax.cond(p, lambda a, b: {"o": a + b}, lambda a, b: {"o": a - b}, x, (x, x)[1])
    np.testing.assert_allclose(np.asarray(r["o"]), x + x if p else x - x)
  f = jax.jit(lambda p, x: lax.cond(p > 0, lambda x: x * 2, lambda x: x * 3, x))
  np.testing.assert_allclose(np.asarray(f(1, x)), 2 * x, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(f(-1, x)), 3 * x, rtol=1e-6)
  br = [lambda x: x + 1, lambda x: x * 10, lambda x: -x]
  for i, ref in [(0, x + 1), (1, x * 10), (2, -x), (7, -x), (-3, x + 1)]:
    np.testing.assert_allclose(np.asarray(lax.switch(i, br, x)), ref, rtol=1e-6)
  m = lax.map(lambda r: (r * r).sum(), rng.standard_normal((5, 3)).astype(np.float32))
  assert m.shape == (5,)


def test_control_flow_errors():
  x = jnp.ones(3)
  with pytest.raises(jax.PartixError, match=r"^\[cond\]"):
    lax.cond(True, lambda x: x, lambda x: (x, x), x)
  with pytest.raises(jax.PartixError, match=r"^\[cond\]"):
    lax.cond(True, lambda x: x, lambda x: x[:2], x)
  with pytest.raises(jax.PartixError, match=r"^\[scan\].*structure"):
    lax.scan(lambda c, x: ((c, c), x), x, jnp.ones((2, 3)))
  with pytest.raises(jax.PartixError, match=r"^\[scan\]"):
    lax.scan(lambda c, x: (c, x), x, None)
  with pytest.raises(jax.PartixError, match=r"^\[scan\]"):
    lax.scan(lambda c, x: c, x, jnp.ones((2, 3)))
  with pytest.raises(jax.PartixError, match=r"^\[fori_loop\]"):
    lax.fori_loop(0, 3, lambda i, c: (c, c), x)
  with pytest.raises(jax.PartixError, match=r"^\[while_loop\]"):
    lax.while_loop(lambda c: c, lambda c: c, x)
  with pytest.raises(jax.PartixError, match=r"^\[scan\]"):
    lax.scan(lambda c, x: (c, x), "init", jnp.ones((2, 3)))
  with pytest.raises(jax.PartixError):  # a traced value as a Python bool
    lax.scan(lambda c, x: (c if x.sum() > 0 else -c, x), x, jnp.ones((2, 3)))
  with pytest.raises(jax.PartixError):
    lax.cond(True, lambda x: x if x.sum() > 0 else -x, lambda x: x, x)
  with pytest.raises(jax.PartixError, match=r"^\[switch\]"):
    lax.switch(0, [], x)


def test_fori_loop_over_an_empty_range_returns_init():
  """As JAX (and range()): upper <= lower runs no iteration, static or traced bounds."""
  x = jnp.ones(2)
  body = lambda i, v: v + 1
  for lo, hi in ((0, -5), (3, 3), (7, 2)):
    np.testing.assert_array_equal(np.asarray(lax.fori_loop(lo, hi, body, x)), np.ones(2))
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda v: lax.fori_loop(lo, hi, body, v))(x)), np.ones(2))
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda n, v: lax.fori_loop(0, n, body, v))(jnp.int32(hi - lo), x)),
        np.ones(2) * (1 + max(hi - lo, 0)))
  g = jax.grad(lambda v: lax.fori_loop(4, 1, lambda i, c: c * 3.0, v).sum())(x)
  np.testing.assert_array_equal(np.asarray(g), np.ones(2))


def test_shard_map_inside_loop_bodies_and_branches(mesh8):
  """A shard_map inside a scan / fori_loop body or a cond branch, on host operands, runs on its
  mesh, eager and under jit (the program takes the mesh the shard_map names)."""
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  sm = jax.shard_map(lambda b: lax.psum(b.sum(), ("x", "y")), mesh=mesh8,
                     in_specs=P("x", "y"), out_specs=P())
  total = float(a.sum())
  scan_f = lambda v: lax.scan(lambda c, _: (c + sm(v), None), jnp.float32(0), None, length=3)[0]
  fori_f = lambda v: lax.fori_loop(0, 3, lambda i, c: c + sm(v), jnp.float32(0))
  cond_f = lambda v: lax.cond(v.sum() > 0, lambda: sm(v), lambda: jnp.float32(0))
  assert float(scan_f(a)) == 3 * total
  assert float(jax.jit(scan_f)(a)) == 3 * total
  assert float(jax.jit(fori_f)(a)) == 3 * total
  assert float(jax.jit(cond_f)(a)) == total
  assert float(fori_f(a)) == 3 * total
  assert float(cond_f(a)) == total


def blocks(a, mesh_shape=(4, 2)):
  """a (8, 4) split into blocks [i][j] by P('x', 'y')."""
  r, c = a.shape[0] // mesh_shape[0], a.shape[1] // mesh_shape[1]
  return [[a[i * r:(i + 1) * r, j * c:(j + 1) * c] for j in range(mesh_shape[1])]
          for i in range(mesh_shape[0])]


def smap(mesh, f, out_specs, in_specs=P("x", "y")):
  return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs))


def test_reductions(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  b = blocks(a)
  sx = sum(b[i][0] for i in range(4)), sum(b[i][1] for i in range(4))
  out = smap(mesh8, lambda x: lax.psum(x, "x"), P(None, "y"))(a)
  np.testing.assert_allclose(np.asarray(out), np.concatenate(sx, axis=1), rtol=1e-5)
  tot = sum(b[i][j] for i in range(4) for j in range(2))
  for op, ref in [(lax.psum, tot), (lax.pmean, tot / 8)]:
    out = smap(mesh8, lambda x: op(x, ("x", "y")), P())(a)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5)
  mx = np.max(np.stack([b[i][j] for i in range(4) for j in range(2)]), 0)
  mn = np.min(np.stack([b[i][j] for i in range(4) for j in range(2)]), 0)
  np.testing.assert_allclose(np.asarray(smap(mesh8, lambda x: lax.pmax(x, ("x", "y")), P())(a)),
                             mx)
  np.testing.assert_allclose(np.asarray(smap(mesh8, lambda x: lax.pmin(x, ("x", "y")), P())(a)),
                             mn)


def test_gather_scatter(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  # tiled all_gather over x: every device holds its column block of all rows
  out = smap(mesh8, lambda x: lax.all_gather(x, "x", tiled=True, to="invarying"), P(None, "y"))(a)
  np.testing.assert_allclose(np.asarray(out), a)
  # untiled stacks a new axis: (4, 2, 2) per device -> out_specs P(None, None, 'y')
  out = smap(mesh8, lambda x: lax.all_gather(x, "x", to="invarying"), P(None, None, "y"))(a)
  np.testing.assert_allclose(np.asarray(out), a.reshape(4, 2, 4))
  out = smap(mesh8, lambda x: lax.all_gather(x, "y", axis=1, tiled=True, to="invarying"), P("x"))(a)
  np.testing.assert_allclose(np.asarray(out), a)
  # psum_scatter: sum over x of the (2, 2) blocks, device i keeps row i (tiled -> (1, 2))
  a16 = rng.standard_normal((16, 4)).astype(np.float32)
  b = blocks(a16)
  out = smap(mesh8, lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True),
             P("x", "y"))(a16)
  ref = np.concatenate([sum(b[i][j] for i in range(4)) for j in range(2)], axis=1)
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5)
  out = smap(mesh8, lambda x: lax.psum_scatter(x, "y", scatter_dimension=1, tiled=True),
             P("x", "y"))(a)
  b = blocks(a)
  ref = np.concatenate([b[i][0] + b[i][1] for i in range(4)], axis=0)
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5)


def test_ppermute_all_to_all_axis_index(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  perm = [(i, (i + 1) % 4) for i in range(4)]
  out = smap(mesh8, lambda x: lax.ppermute(x, "x", perm), P("x", "y"))(a)
  np.testing.assert_allclose(np.asarray(out), np.roll(a, 2, axis=0))
  # all_to_all over x on (4, 2) blocks: device i sends row k of its block to device k and
  # receives row i of every block, in device order
  a16 = rng.standard_normal((16, 4)).astype(np.float32)
  out = smap(mesh8, lambda x: lax.all_to_all(x, "x", 0, 0, tiled=True), P("x", "y"))(a16)
  b = blocks(a16)
  ref = np.concatenate([np.concatenate([np.stack([b[k][j][i] for k in range(4)])
                                        for j in range(2)], axis=1) for i in range(4)], axis=0)
  np.testing.assert_allclose(np.asarray(out), ref)
  idx = smap(mesh8, lambda x: (lax.axis_index("x") * 10 + lax.axis_index("y")).reshape(1, 1)
             + jnp.zeros_like(x[:1, :1]).astype(jnp.int32), P("x", "y"))(a)
  np.testing.assert_array_equal(np.asarray(idx), [[10 * i + j for j in range(2)]
                                                  for i in range(4)])
  sizes = smap(mesh8, lambda x: jnp.zeros((1,), jnp.int32) + lax.axis_size("x") * 10
               + lax.axis_size(("x", "y")), P("x"), in_specs=P("x"))(a)
  np.testing.assert_array_equal(np.asarray(sizes), [48] * 4)


def test_collective_errors(mesh8):
  a = np.ones((8, 4), np.float32)
  with pytest.raises(jax.PartixError):  # outside shard_map
    lax.psum(jnp.ones(3), "x")
  with pytest.raises(jax.PartixError):
    smap(mesh8, lambda x: lax.psum(x, "z"), P())(a)
  with pytest.raises(jax.PartixError, match=r"^\[psum\].*axis_name"):
    smap(mesh8, lambda x: lax.psum(x, 3), P())(a)
  with pytest.raises(jax.PartixError, match=r"^\[ppermute\]"):
    smap(mesh8, lambda x: lax.ppermute(x, "x", [1, 2]), P("x", "y"))(a)
  with pytest.raises(jax.PartixError):
    smap(mesh8, lambda x: lax.axis_index("q").reshape(1, 1) + 0 * x[:1, :1], P("x", "y"))(a)


def test_collectives_over_axis_tuples(mesh8, rng):
  a = rng.standard_normal((16, 4)).astype(np.float32)
  out = smap(mesh8, lambda x: lax.all_gather(x, ("x", "y"), tiled=True, to="invarying"), P(),
             in_specs=P(("x", "y")))(a)
  np.testing.assert_allclose(np.asarray(out), a)
  out = smap(mesh8, lambda x: lax.psum_scatter(x, ("x", "y"), tiled=True), P(("x", "y")),
             in_specs=P())(a)
  np.testing.assert_allclose(np.asarray(out), 8 * a, rtol=1e-5)
  # a psum of a Python constant counts the devices of the group
  out = smap(mesh8, lambda x: lax.psum(1, "x") * jnp.ones((1, 1)), P("x", "y"))(a)
  np.testing.assert_allclose(np.asarray(out), np.full((4, 2), 4.0))


def test_more_control_flow_errors(mesh8):
  a = np.ones((16, 4), np.float32)
  with pytest.raises(jax.PartixError, match=r"^\[scan\].*length"):
    lax.scan(lambda c, x: (c, x), 0.0, {"a": jnp.ones((3, 2)), "b": jnp.ones((4,))})
  with pytest.raises(jax.PartixError, match=r"^\[scan\].*length 5"):
    lax.scan(lambda c, x: (c, x), 0.0, jnp.ones((3, 2)), length=5)
  with pytest.raises(jax.PartixError, match=r"^\[cond\] pred must be a scalar"):
    lax.cond(jnp.ones(2), lambda: 1.0, lambda: 2.0)
  with pytest.raises(jax.PartixError, match=r"^\[all_gather\].*out of range"):
    smap(mesh8, lambda x: lax.all_gather(x, "x", axis=5), P())(a)
  with pytest.raises(jax.PartixError, match=r"^\[all_to_all\].*out of range"):
    smap(mesh8, lambda x: lax.all_to_all(x, "x", 7, 0), P())(a)
  with pytest.raises(jax.PartixError, match=r"^\[ppermute\].*out of range"):
    smap(mesh8, lambda x: lax.ppermute(x, "x", [(0, 5)]), P("x", "y"))(a)
  with pytest.raises(jax.PartixError, match=r"^\[ppermute\].*twice"):
    smap(mesh8, lambda x: lax.ppermute(x, "x", [(0, 1), (0, 2)]), P("x", "y"))(a)
  with pytest.raises(jax.PartixError, match=r"^\[fori_loop\].*carry"):
    lax.fori_loop(0, 3, lambda i, c: c[:2], jnp.ones(3))
  with pytest.raises(jax.PartixError, match=r"^\[while_loop\].*carry"):
    lax.while_loop(lambda c: c.sum() > 0, lambda c: c.astype(jnp.int32), jnp.ones(3))


def test_control_flow_scalars():
  assert float(lax.fori_loop(0, 3, lambda i, c: c + i, 0.0)) == 3.0
  assert int(lax.while_loop(lambda c: c < 5, lambda c: c + 1, 0)) == 5
  np.testing.assert_array_equal(np.asarray(lax.map(lambda x: x * 2, jnp.arange(4),
                                                   batch_size=2)), [0, 2, 4, 6])
  c, ys = lax.scan(lambda c, x: (c + x, None), 0.0, jnp.arange(4.0))
  assert float(c) == 6.0 and ys is None


def test_switch_errors_name_switch():
  with pytest.raises(jax.PartixError, match=r"^\[switch\].*structures"):
    lax.switch(0, [lambda x: x, lambda x: (x,)], jnp.ones(2))
  with pytest.raises(jax.PartixError, match=r"^\[cond\].*structures"):
    lax.cond(True, lambda x: x, lambda x: [x], jnp.ones(2))
  with pytest.raises(jax.PartixError, match=r"^\[cond\] operand leaf 0 is 's'"):
    lax.cond(True, lambda x: x, lambda x: x, "s")


def test_pshuffle_pvary(mesh8, rng):
  a = rng.standard_normal((8, 4)).astype(np.float32)
  # device i takes the block of device perm[i]
  perm = [2, 0, 3, 1]
  out = smap(mesh8, lambda x: lax.pshuffle(x, "x", perm), P("x", "y"))(a)
  ref = np.concatenate([a[2 * p:2 * p + 2] for p in perm], axis=0)
  np.testing.assert_allclose(np.asarray(out), ref)
  with pytest.raises(jax.PartixError, match=r"^\[pshuffle\]"):
    smap(mesh8, lambda x: lax.pshuffle(x, "x", [0, 0, 1, 2]), P("x", "y"))(a)
  out = smap(mesh8, lambda x: lax.pcast(x.sum(), "x", to="varying").reshape(1, 1) * 0 + 1,
             P("x", "y"), in_specs=P())(a)
  np.testing.assert_allclose(np.asarray(out), np.ones((4, 2)))
  with pytest.raises(jax.PartixError, match=r"^\[pcast\]"):
    lax.pcast(jnp.ones(2), "x", to="invariant")


def test_eager_control_flow_keeps_no_trees(mesh8):
  from partix._src import api
  x = jnp.ones(3)
  sm = jax.shard_map(lambda v: v * 2, mesh=mesh8, in_specs=P("x"), out_specs=P("x"))
  v8 = np.ones(8, np.float32)
  for _ in range(2):  # warm up the jit caches
    lax.scan(lambda c, y: (c + y, y), x, jnp.ones((2, 3)))
    sm(v8)
  before = len(api._trees)
  for _ in range(20):
    lax.scan(lambda c, y: (c + y, y), x, jnp.ones((2, 3)))
    lax.cond(True, lambda v: v, lambda v: -v, x)
    lax.fori_loop(0, 2, lambda i, c: c + 1, x)
    lax.while_loop(lambda c: c.sum() < 10, lambda c: c + 1, x)
    jax.checkpoint(lambda v: v * 2)(x)
    sm(v8)
  assert len(api._trees) == before


def test_erfc_values_grad_and_sharded(mesh8, rng):
  # Against Python's math.erfc, evaluated in double and rounded to f32 once, as partix does.
  x = np.array([-6.0, -3.5, -1.25, -0.5, 0.0, 1e-3, 0.3, 1.0, 2.0, 3.0, 5.5, 9.0], np.float32)
  want = np.array([math.erfc(float(v)) for v in x]).astype(np.float32)
  got = lax.erfc(jnp.asarray(x))
  assert got.dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(got), want)
  ints = lax.erfc(jnp.asarray([-2, 0, 3]))  # integer operands become f32
  assert ints.dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(ints),
                                np.array([math.erfc(v) for v in (-2, 0, 3)], np.float32))
  # d/dx erfc = -2/sqrt(pi) exp(-x^2).
  g = jax.grad(lambda v: jnp.sum(lax.erfc(v)))(jnp.asarray(x))
  dref = -2 / math.sqrt(math.pi) * np.exp(-x.astype(np.float64) ** 2)
  np.testing.assert_allclose(np.asarray(g), dref, rtol=1e-6, atol=1e-30)
  # Sharded over the 8 devices, eagerly and under jit.
  a = (rng.standard_normal((8, 6)) * 3).astype(np.float32)
  s = NamedSharding(mesh8, P("x", "y"))
  ref = np.array([math.erfc(float(v)) for v in a.ravel()]).astype(np.float32).reshape(a.shape)
  for out in (lax.erfc(jax.device_put(a, s)), jax.jit(lax.erfc)(jax.device_put(a, s))):
    assert out.sharding.spec == P("x", "y")
    np.testing.assert_array_equal(np.asarray(out), ref)
