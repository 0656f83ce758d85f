"""jax.ops' segment reductions against JAX 0.10.2's results (tests/golden/ops_image.npz, written
by tools/golden/ops_image.py), eagerly, under jit, vmap and grad, on a sharded input, and their
refusals of bad input."""
import os

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P

GOLDEN = np.load(os.path.join(os.path.dirname(__file__), "..", "golden", "ops_image.npz"))
OPS = {"sum": jax.ops.segment_sum, "prod": jax.ops.segment_prod,
       "max": jax.ops.segment_max, "min": jax.ops.segment_min}
DATA, IDS = GOLDEN["in_seg_data"], GOLDEN["in_seg_ids"]


def close(got, want, tol=1e-6):
  got = np.asarray(got)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  assert got.shape == want.shape, (got.shape, want.shape)
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def np_segment(op, data, ids, n):
  """numpy's reference: ids outside [0, n) dropped."""
  ident = {"sum": 0, "prod": 1, "max": -np.inf, "min": np.inf}[op]
  out = np.full((n,) + data.shape[1:], ident, data.dtype)
  ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
  keep = (ids >= 0) & (ids < n)
  ufunc.at(out, ids[keep], data[keep])
  return out


@pytest.mark.parametrize("op", list(OPS))
def test_values_match_jax(op):
  f = OPS[op]
  close(f(DATA, IDS, 5), GOLDEN[f"seg_{op}_default"])
  close(f(DATA, IDS, 5, mode="clip"), GOLDEN[f"seg_{op}_clip"])
  close(f(DATA, IDS, 5, mode=jax.lax.GatherScatterMode.CLIP), GOLDEN[f"seg_{op}_clip"])
  close(f(DATA, IDS, 5, bucket_size=3), GOLDEN[f"seg_{op}_bucket"])
  close(f(DATA, GOLDEN["in_seg_auto_ids"]), GOLDEN[f"seg_{op}_auto"])
  close(f(jnp.asarray(DATA), jnp.asarray(IDS), 5, indices_are_sorted=False,
          unique_indices=False), GOLDEN[f"seg_{op}_default"])
  got = f(GOLDEN["in_seg_int"], IDS, 5)
  np.testing.assert_array_equal(np.asarray(got), GOLDEN[f"seg_{op}_int"])
  assert got.dtype == np.int32


def test_docstring_examples():
  data, ids = jnp.arange(6), jnp.array([0, 0, 1, 1, 2, 2])
  assert jax.ops.segment_sum(data, ids).tolist() == [1, 5, 9]
  assert jax.ops.segment_prod(data, ids).tolist() == [0, 6, 20]
  assert jax.ops.segment_max(data, ids).tolist() == [1, 3, 5]
  assert jax.ops.segment_min(data, ids).tolist() == [0, 2, 4]
  # Empty segments hold the reduction's identity.
  assert jax.ops.segment_max(jnp.arange(3.), jnp.array([0, 0, 2]), 4).tolist() == [
      1.0, -np.inf, 2.0, -np.inf]
  assert jax.ops.segment_min(jnp.arange(3), jnp.array([0, 0, 2]), 3).tolist() == [
      0, np.iinfo(np.int32).max, 2]


@pytest.mark.parametrize("op", list(OPS))
def test_gradients_match_jax(op):
  f, w = OPS[op], GOLDEN["in_seg_w"]
  if op == "prod":
    uids = GOLDEN["in_seg_unique_ids"]
    g = jax.grad(lambda d: jnp.sum(f(d, uids, 10, unique_indices=True)[:5] * w))(DATA)
  else:
    g = jax.grad(lambda d: jnp.sum(f(d, IDS, 5) * w))(DATA)
  close(g, GOLDEN[f"seggrad_{op}"], 1e-5)


def test_gradient_by_finite_differences():
  rng = np.random.RandomState(1)
  x = rng.randn(7, 2).astype(np.float64)
  ids = np.array([2, 0, 1, 2, 0, 1, 1], np.int32)
  w = rng.randn(3, 2)
  for op in ("sum", "max", "min", "prod"):
    f = OPS[op]

    def loss(d):
      return jnp.sum(f(d, ids, 3) * jnp.asarray(w, jnp.float64))
    g = np.asarray(jax.grad(loss)(jnp.asarray(x, jnp.float64)))
    eps = 1e-6
    for i in range(x.shape[0]):
      for j in range(x.shape[1]):
        dp, dm = x.copy(), x.copy()
        dp[i, j] += eps
        dm[i, j] -= eps
        fd = (np.sum(np_segment(op, dp, ids, 3) * w) -
              np.sum(np_segment(op, dm, ids, 3) * w)) / (2 * eps)
        assert abs(g[i, j] - fd) < 1e-5, (op, i, j, g[i, j], fd)


@pytest.mark.parametrize("op", list(OPS))
def test_under_jit(op):
  f = OPS[op]
  want = GOLDEN[f"seg_{op}_default"]
  close(jax.jit(f, static_argnums=2)(DATA, IDS, 5), want)
  close(jax.jit(lambda d, i: f(d, i, num_segments=5))(DATA, IDS), want)
  close(jax.jit(lambda d, i: f(d, i, 5, bucket_size=3))(DATA, IDS), GOLDEN[f"seg_{op}_bucket"])
  w = GOLDEN["in_seg_w"]
  if op != "prod":
    g = jax.jit(jax.grad(lambda d: jnp.sum(f(d, IDS, 5) * w)))(DATA)
    close(g, GOLDEN[f"seggrad_{op}"], 1e-5)


@pytest.mark.parametrize("op", list(OPS))
def test_under_vmap(op):
  f = OPS[op]
  rng = np.random.RandomState(2)
  batch = rng.randn(4, 10, 3).astype(np.float32)
  ids = rng.randint(-1, 6, size=(4, 10)).astype(np.int32)
  got = jax.vmap(lambda d: f(d, IDS, 5))(batch)
  for k in range(4):
    close(got[k], np_segment(op, batch[k], IDS, 5), 1e-5)
  got = jax.vmap(lambda d, i: f(d, i, 5))(batch, ids)  # ids batched too
  for k in range(4):
    close(got[k], np_segment(op, batch[k], ids[k], 5), 1e-5)
  got = jax.vmap(lambda d: f(d, IDS, 5), in_axes=1, out_axes=1)(np.moveaxis(batch, 0, 1))
  close(np.moveaxis(np.asarray(got), 1, 0), np.stack([np_segment(op, b, IDS, 5)
                                                       for b in batch]), 1e-5)


def test_grad_under_vmap():
  rng = np.random.RandomState(3)
  batch = rng.randn(3, 10, 3).astype(np.float32)
  w = GOLDEN["in_seg_w"]
  for op in ("sum", "max", "min"):
    f = OPS[op]
    per = jax.vmap(jax.grad(lambda d, f=f: jnp.sum(f(d, IDS, 5) * w)))(batch)
    for k in range(3):
      one = jax.grad(lambda d, f=f: jnp.sum(f(d, IDS, 5) * w))(batch[k])
      close(per[k], np.asarray(one), 1e-6)


def test_sharded_input():
  """On an Explicit mesh (jax.make_mesh's default) JAX asks for out_sharding, as partix does;
  on an Auto mesh the result's sharding is propagated."""
  rng = np.random.RandomState(4)
  data = rng.randn(16, 4).astype(np.float32)
  ids = rng.randint(0, 6, size=16).astype(np.int32)
  mesh = jax.make_mesh((8,), ("x",))
  xs = jax.device_put(data, NamedSharding(mesh, P("x")))
  ids_s = jax.device_put(ids, NamedSharding(mesh, P("x")))
  assert len(xs.sharding.device_set) == 8
  with pytest.raises(jax.PartixError, match=r"ops.segment_sum.*split as P\('x', None\) over "
                     r"Explicit mesh axes.*out_sharding="):
    jax.ops.segment_sum(xs, ids_s, 6)
  replicated = NamedSharding(mesh, P())
  for op, f in OPS.items():
    want = np_segment(op, data, ids, 6)
    got = f(xs, ids_s, 6, out_sharding=replicated)
    close(got, want, 1e-5)
    assert got.sharding.is_fully_replicated
    with jax.set_mesh(mesh):
      close(f(xs, ids_s, 6, out_sharding=P()), want, 1e-5)
      got = jax.jit(lambda d, i, f=f: f(d, i, 6, out_sharding=P()))(xs, ids_s)
      close(got, want, 1e-5)
  with jax.set_mesh(mesh):
    g = jax.jit(jax.grad(lambda d: jnp.sum(
        jax.ops.segment_sum(d, ids_s, 6, out_sharding=P()) ** 2)))(xs)
  sums = np_segment("sum", data, ids, 6)
  close(g, 2 * sums[ids], 1e-5)
  auto = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
  xa = jax.device_put(data, NamedSharding(auto, P("x")))
  ia = jax.device_put(ids, NamedSharding(auto, P("x")))
  for op, f in OPS.items():
    want = np_segment(op, data, ids, 6)
    close(f(xa, ia, 6), want, 1e-5)
    close(jax.jit(f, static_argnums=2)(xa, ia, 6), want, 1e-5)
  g = jax.jit(jax.grad(lambda d: jnp.sum(jax.ops.segment_max(d, ia, 6) * 2.0)))(xa)
  close(g, np.asarray(jax.grad(lambda d: jnp.sum(jax.ops.segment_max(d, ids, 6) * 2.0))(
      data)), 1e-6)


def test_bad_input():
  with pytest.raises(jax.PartixError, match=r"ops.segment_sum.*segment_ids must be an integer "
                     r"array, got float32"):
    jax.ops.segment_sum(DATA, IDS.astype(np.float32), 5)
  with pytest.raises(TypeError):  # JAX raises a TypeError here too
    jax.ops.segment_max(DATA, IDS.astype(np.float32), 5)
  with pytest.raises(jax.PartixError, match=r"num_segments must be non-negative, got -2"):
    jax.ops.segment_sum(DATA, IDS, -2)
  with pytest.raises(jax.PartixError, match=r"num_segments must be an int, got 2.5"):
    jax.ops.segment_sum(DATA, IDS, 2.5)
  with pytest.raises(jax.errors.ConcretizationTypeError, match=r"num_segments=None"):
    jax.jit(lambda d, i: jax.ops.segment_sum(d, i))(DATA, IDS)
  with pytest.raises(jax.errors.ConcretizationTypeError, match=r"num_segments is a traced"):
    jax.jit(lambda d, i, n: jax.ops.segment_sum(d, i, n))(DATA, IDS, 5)
  with pytest.raises(jax.PartixError, match=r"unknown mode 'wrap'"):
    jax.ops.segment_min(DATA, IDS, 5, mode="wrap")
  with pytest.raises(jax.PartixError, match=r"bucket_size must be positive, got 0"):
    jax.ops.segment_sum(DATA, IDS, 5, bucket_size=0)
  with pytest.raises(jax.PartixError, match=r"data has 10 rows .* segment_ids has 4"):
    jax.ops.segment_sum(DATA, IDS[:4], 5)
