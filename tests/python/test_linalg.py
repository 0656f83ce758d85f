"""jnp.linalg.solve / inv / det / slogdet against numpy: batched, under jit, vmap and grad
(against finite differences), split over 8 devices, inside shard_map, and bad input."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P


def _mats(shape, seed=0):
  rng = np.random.default_rng(seed)
  n = shape[-1]
  return (rng.standard_normal(shape) + 2 * np.eye(n)).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 5, 5), (2, 3, 6, 6)], ids=str)
def test_against_numpy(shape):
  a = _mats(shape)
  b = np.random.default_rng(1).standard_normal(shape[:-1] + (2,)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(jnp.linalg.solve(a, b)), np.linalg.solve(a, b),
                             rtol=1e-4, atol=1e-4)
  v = b[(0,) * (b.ndim - 2)][:, 0]  # one vector for every matrix
  np.testing.assert_allclose(np.asarray(jnp.linalg.solve(a, v)), np.linalg.solve(a, v),
                             rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.asarray(jnp.linalg.inv(a)), np.linalg.inv(a), rtol=1e-4,
                             atol=1e-4)
  np.testing.assert_allclose(np.asarray(jnp.linalg.det(a)), np.linalg.det(a), rtol=1e-4)
  s, ld = jnp.linalg.slogdet(a)
  ws, wld = np.linalg.slogdet(a)
  np.testing.assert_array_equal(np.asarray(s), ws)
  np.testing.assert_allclose(np.asarray(ld), wld, rtol=1e-4, atol=1e-5)


def test_pivoting_handles_a_zero_leading_entry():
  a = np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)
  np.testing.assert_allclose(np.asarray(jnp.linalg.inv(a)), a)
  assert float(jnp.linalg.det(a)) == -1.0
  sing = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
  assert not np.isfinite(np.asarray(jnp.linalg.inv(sing))).all()
  assert float(jnp.linalg.det(sing)) == 0.0


def test_jit_vmap_and_grad():
  a = _mats((4, 4))
  b = np.arange(4, dtype=np.float32)
  np.testing.assert_allclose(np.asarray(jax.jit(jnp.linalg.solve)(a, b)),
                             np.linalg.solve(a, b), rtol=1e-4, atol=1e-5)
  batch = _mats((3, 4, 4), seed=2)
  np.testing.assert_allclose(np.asarray(jax.vmap(jnp.linalg.inv)(batch)),
                             np.linalg.inv(batch), rtol=1e-4, atol=1e-4)

  def f(m):
    return jnp.sum(jnp.linalg.solve(m, b) ** 2) + jnp.linalg.det(m)

  g = np.asarray(jax.grad(f)(a))
  eps, want = 1e-3, np.zeros_like(a)
  for i in range(4):
    for j in range(4):
      d = np.zeros_like(a)
      d[i, j] = eps
      want[i, j] = (float(f(a + d)) - float(f(a - d))) / (2 * eps)
  np.testing.assert_allclose(g, want, rtol=2e-2, atol=2e-2)


def test_sharded_batches_and_shard_map(mesh8):
  a = _mats((8, 5, 5), seed=3)
  s = NamedSharding(mesh8, P("x"))
  out = jax.jit(jnp.linalg.inv, out_shardings=s)(jax.device_put(a, s))
  assert out.sharding == s
  np.testing.assert_allclose(np.asarray(out), np.linalg.inv(a), rtol=1e-4, atol=1e-4)
  body = jax.shard_map(lambda m: jnp.linalg.det(m), mesh=mesh8, in_specs=P("x"),
                       out_specs=P("x"))
  np.testing.assert_allclose(np.asarray(body(jax.device_put(a, s))), np.linalg.det(a),
                             rtol=1e-4)


def test_bad_input():
  with pytest.raises(jax.PartixError, match=r"\[linalg.inv\] needs square matrices"):
    jnp.linalg.inv(np.ones((2, 3), np.float32))
  with pytest.raises(jax.PartixError, match=r"\[linalg.solve\] Invalid shapes for solve"):
    jnp.linalg.solve(np.ones((3, 4, 4), np.float32), np.ones((3, 4), np.float32))
  with pytest.raises(jax.PartixError, match=r"does not match a of shape"):
    jnp.linalg.solve(np.eye(3, dtype=np.float32), np.ones((4, 2), np.float32))
  assert jnp.linalg.inv(np.eye(2, dtype=np.int32)).dtype == np.float32  # ints become floats


def test_repeat_to_a_total_length_with_traced_counts():
  f = jax.jit(lambda r: jnp.repeat(jnp.arange(3), r, total_repeat_length=5))
  np.testing.assert_array_equal(np.asarray(f(jnp.array([2, 0, 1]))), [0, 0, 2, 2, 2])
  np.testing.assert_array_equal(np.asarray(f(jnp.array([3, 3, 3]))), [0, 0, 0, 1, 1])


def test_approx_max_k_is_exact_top_k():
  x = jnp.array([[3.0, 1.0, 4.0, 2.0], [0.0, 9.0, -1.0, 5.0]])
  v, i = jax.lax.approx_max_k(x, 2)
  np.testing.assert_array_equal(np.asarray(v), [[4.0, 3.0], [9.0, 5.0]])
  np.testing.assert_array_equal(np.asarray(i), [[2, 0], [1, 3]])
  v, i = jax.lax.approx_min_k(x, 1, reduction_dimension=0)
  np.testing.assert_array_equal(np.asarray(v), [[0.0, 1.0, -1.0, 2.0]])
  np.testing.assert_array_equal(np.asarray(i), [[1, 0, 1, 0]])


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (5, 3), (3, 5), (2, 6, 4)], ids=str)
def test_singular_values_and_svd_against_numpy(shape):
  a = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
  np.testing.assert_allclose(np.asarray(jnp.linalg.svdvals(a)),
                             np.linalg.svd(a, compute_uv=False), rtol=1e-5, atol=1e-5)
  u, s, vh = (np.asarray(t) for t in jnp.linalg.svd(a, full_matrices=False))
  k = min(shape[-2:])
  assert u.shape == shape[:-1] + (k,) and vh.shape == shape[:-2] + (k, shape[-1])
  np.testing.assert_allclose((u * s[..., None, :]) @ vh, a, atol=1e-5)
  np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(k), u.shape[:-2] + (k, k)),
                             atol=1e-5)
  for o in (2, -2, "nuc"):
    np.testing.assert_allclose(np.asarray(jnp.linalg.norm(a, o, axis=(-2, -1))),
                               np.linalg.norm(a, o, axis=(-2, -1)), rtol=1e-5)


def test_norms_under_jit_grad_and_bad_input():
  a = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
  u, _, vh = np.linalg.svd(a)
  g = jax.jit(jax.grad(lambda m: jnp.linalg.norm(m, "nuc")))(a)
  np.testing.assert_allclose(np.asarray(g), u @ vh, atol=1e-5)  # d||A||_* / dA = U V^T
  assert jnp.linalg.norm(a, 2, keepdims=True).shape == (1, 1)
  with pytest.raises(jax.PartixError, match="full_matrices=False"):
    jnp.linalg.svd(np.ones((3, 2), np.float32))
  with pytest.raises(jax.PartixError, match=r"\[linalg.svdvals\] needs matrices"):
    jnp.linalg.svdvals(np.ones(3, np.float32))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 4)], ids=str)
def test_qr_factors(shape):
  a = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
  q, r = (np.asarray(t) for t in jnp.linalg.qr(a))
  k = min(shape[-2:])
  assert q.shape == shape[:-1] + (k,) and r.shape == shape[:-2] + (k, shape[-1])
  np.testing.assert_allclose(q @ r, a, atol=1e-5)
  np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k)),
                             atol=1e-5)
  assert np.abs(np.tril(r, -1)).max() == 0  # upper triangular
  np.testing.assert_allclose(np.asarray(jnp.linalg.qr(a, mode="r")), r, atol=1e-6)
  with pytest.raises(jax.PartixError, match="mode='reduced'"):
    jnp.linalg.qr(np.ones((4, 2), np.float32), mode="complete")


def test_orthogonal_initializers():
  from partix.nn import initializers as init
  k = jax.random.key(0)
  w = np.asarray(init.orthogonal()(k, (6, 4)))
  np.testing.assert_allclose(w.T @ w, np.eye(4), atol=1e-5)
  w = np.asarray(init.orthogonal(scale=2.0)(k, (3, 8)))
  np.testing.assert_allclose(w @ w.T, 4 * np.eye(3), atol=1e-5)
  w = np.asarray(init.orthogonal(column_axis=0)(k, (5, 2, 3))).reshape(5, 6)
  np.testing.assert_allclose(w @ w.T, np.eye(5), atol=1e-5)
  d = np.asarray(init.delta_orthogonal()(k, (3, 3, 4, 6)))
  np.testing.assert_allclose(d[1, 1] @ d[1, 1].T, np.eye(4), atol=1e-5)
  assert np.abs(d).sum() == np.abs(d[1, 1]).sum()  # zero off the centre
  with pytest.raises(jax.PartixError, match="in channels <= out channels"):
    init.delta_orthogonal()(k, (3, 6, 4))


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 6, 6)], ids=str)
def test_eigh_against_numpy(shape):
  b = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
  a = b + np.swapaxes(b, -1, -2)
  w, v = (np.asarray(t) for t in jnp.linalg.eigh(a))
  np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=1e-5, atol=1e-5)  # ascending
  np.testing.assert_allclose(v @ (w[..., None] * np.swapaxes(v, -1, -2)), a, atol=2e-5)
  n = shape[-1]
  np.testing.assert_allclose(np.swapaxes(v, -1, -2) @ v, np.broadcast_to(np.eye(n), v.shape),
                             atol=2e-5)
  # eigvalsh reads the lower triangle (UPLO='L'), as numpy's
  np.testing.assert_allclose(np.asarray(jnp.linalg.eigvalsh(np.tril(a))), np.linalg.eigvalsh(a),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(jax.jit(jnp.linalg.eigvalsh)(a)), np.linalg.eigvalsh(a),
                             rtol=1e-5, atol=1e-5)
  with pytest.raises(jax.PartixError, match=r"\[linalg.eigh\] needs square matrices"):
    jnp.linalg.eigh(np.ones((2, 3), np.float32))


def test_cholesky_against_numpy():
  b = np.random.default_rng(9).standard_normal((3, 5, 5)).astype(np.float32)
  a = b @ np.swapaxes(b, -1, -2) + 5 * np.eye(5, dtype=np.float32)
  low = np.asarray(jnp.linalg.cholesky(a))
  np.testing.assert_allclose(low, np.linalg.cholesky(a), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(jnp.linalg.cholesky(a, upper=True)),
                             np.swapaxes(low, -1, -2), atol=1e-6)
  np.testing.assert_allclose(np.asarray(jax.jit(jnp.linalg.cholesky)(a)), low, atol=1e-6)
  assert np.isnan(np.asarray(jnp.linalg.cholesky(-np.eye(2, dtype=np.float32)))).any()
