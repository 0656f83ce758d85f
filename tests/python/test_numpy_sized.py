"""numpy's value-dependent functions as JAX has them: concrete inputs against numpy itself;
traced inputs (under jit) with size= and fill_value= against numpy's result cut or padded;
sharded inputs as unsharded; a traced input without size= refused by name."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P

X = np.array([[0, 3, 0, 1], [2, 0, 5, 0]], np.int32)
A = np.array([3, 1, 3, 2, 1, 1, 7, 2], np.int32)


def pad(v, size, fill):
  v = np.asarray(v)[:size]
  return np.concatenate([v, np.full(size - len(v), fill, v.dtype)])


def test_nonzero_argwhere_flatnonzero_where(mesh8):
  for got, want in zip(jnp.nonzero(X), np.nonzero(X)):
    np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(jnp.argwhere(X), np.argwhere(X))
  np.testing.assert_array_equal(jnp.flatnonzero(X), np.flatnonzero(X))
  np.testing.assert_array_equal(jnp.where(X)[1], np.where(X)[1])
  sharded = jax.device_put(X, NamedSharding(mesh8, P("y")))
  for size, fill in ((6, -1), (2, 0)):
    got = jax.jit(lambda v: jnp.nonzero(v, size=size, fill_value=fill))(sharded)
    for g, w in zip(got, np.nonzero(X)):
      np.testing.assert_array_equal(g, pad(w, size, fill))
    np.testing.assert_array_equal(jax.jit(lambda v: jnp.argwhere(v, size=size))(X),
                                  np.stack([pad(w, size, 0) for w in np.nonzero(X)], -1))
  with pytest.raises(jax.PartixError, match=r"^\[nonzero\].*size="):
    jax.jit(lambda v: jnp.nonzero(v))(X)
  with pytest.raises(jax.PartixError, match=r"^\[nonzero\].*0-d"):
    jnp.nonzero(jnp.asarray(1))


def test_unique_and_its_named_forms(mesh8):
  v, idx, inv, cnt = np.unique(A, return_index=True, return_inverse=True, return_counts=True)
  got = jnp.unique(A, return_index=True, return_inverse=True, return_counts=True)
  for g, w in zip(got, (v, idx, inv, cnt)):
    np.testing.assert_array_equal(g, w)
  f = jax.jit(lambda a: jnp.unique(a, size=6, fill_value=-9, return_index=True,
                                   return_inverse=True, return_counts=True))
  gv, gi, ginv, gc = f(jax.device_put(A, NamedSharding(mesh8, P("x"))))
  np.testing.assert_array_equal(gv, pad(v, 6, -9))
  np.testing.assert_array_equal(gi, pad(idx, 6, 0))
  np.testing.assert_array_equal(ginv, inv)
  np.testing.assert_array_equal(gc, pad(cnt, 6, 0))
  # Without fill_value the padding repeats the smallest value, as JAX's.
  np.testing.assert_array_equal(jax.jit(lambda a: jnp.unique(a, size=6))(A), pad(v, 6, v.min()))
  np.testing.assert_array_equal(jnp.unique_counts(A).counts, cnt)
  np.testing.assert_array_equal(jnp.unique_all(A).inverse_indices, inv)
  np.testing.assert_array_equal(jnp.unique_values(A), v)
  with pytest.raises(jax.PartixError, match=r"^\[unique\].*size="):
    jax.jit(jnp.unique)(A)


def test_cumprod_exact_and_under_jit():
  x = np.array([[1, 2, -3, 4, 0, 6, 7], [2, 2, 2, 2, 2, 2, 2]], np.int32)
  for axis in (0, 1, None):
    np.testing.assert_array_equal(jnp.cumprod(x, axis=axis), np.cumprod(x, axis=axis))
  f = np.linspace(0.5, 1.5, 9, dtype=np.float32)
  np.testing.assert_allclose(jax.jit(jnp.cumprod)(f), np.cumprod(f), rtol=1e-6)
  np.testing.assert_allclose(jnp.nancumprod(np.array([2.0, np.nan, 3.0], np.float32)), [2, 2, 6])
  np.testing.assert_array_equal(jnp.cumulative_prod(np.arange(1, 5), include_initial=True),
                                [1, 1, 2, 6, 24])
  g = jax.grad(lambda v: jnp.sum(jnp.cumprod(v)))(f)  # by finite differences
  eps = 1e-3
  for i in (0, 4, 8):
    e = np.zeros_like(f)
    e[i] = eps
    fd = (np.cumprod(f + e).sum() - np.cumprod(f - e).sum()) / (2 * eps)
    np.testing.assert_allclose(g[i], fd, rtol=2e-3)


def test_set_operations_histogram_bincount_lexsort():
  b = np.array([2, 9, 3], np.int32)
  for name in ("intersect1d", "union1d", "setdiff1d", "setxor1d"):
    np.testing.assert_array_equal(getattr(jnp, name)(A, b), getattr(np, name)(A, b), name)
  np.testing.assert_array_equal(jnp.bincount(A), np.bincount(A))
  np.testing.assert_array_equal(jax.jit(lambda a: jnp.bincount(a, length=9))(A),
                                np.bincount(A, minlength=9))
  with pytest.raises(jax.PartixError, match=r"^\[bincount\].*length="):
    jax.jit(jnp.bincount)(A)
  h = np.random.default_rng(0).normal(size=200).astype(np.float32)
  for bins, rng in ((7, None), (4, (-1.0, 1.0))):
    c, e = jnp.histogram(h, bins, range=rng)
    c2, e2 = np.histogram(h, bins, range=rng)
    np.testing.assert_array_equal(c, c2)
    np.testing.assert_allclose(e, e2, rtol=1e-6)
  k1, k2 = np.array([1, 1, 0, 0, 1]), np.array([3, 1, 2, 1, 1])
  np.testing.assert_array_equal(jnp.lexsort((k2, k1)), np.lexsort((k2, k1)))
  np.testing.assert_array_equal(jnp.partition(A, 3)[3], np.partition(A, 3)[3])


def test_insert_delete_extract_compress_trim():
  x = np.arange(6).reshape(2, 3)
  cases = [(np.arange(5), 2, 9, None), (x, [1, 1], [7, 8], 1), (x, 1, [7, 8], 1),
           (x, 2, 5, 0), (x, slice(0, 2), 9, 1)]
  for arr, obj, vals, axis in cases:
    np.testing.assert_array_equal(jnp.insert(arr, obj, vals, axis=axis),
                                  np.insert(arr, obj, vals, axis=axis))
  np.testing.assert_array_equal(jnp.delete(x, [0, 2], axis=1), np.delete(x, [0, 2], axis=1))
  np.testing.assert_array_equal(jnp.extract(A > 2, A), np.extract(A > 2, A))
  np.testing.assert_array_equal(jax.jit(lambda a: jnp.extract(a > 2, a, size=4))(A),
                                pad(np.extract(A > 2, A), 4, 0))
  np.testing.assert_array_equal(jnp.compress([True, False], x, axis=0),
                                np.compress([True, False], x, axis=0))
  np.testing.assert_array_equal(jnp.trim_zeros(np.array([0, 0, 1, 2, 0])), [1, 2])
  with pytest.raises(jax.PartixError, match=r"^\[insert\].*static"):
    jax.jit(lambda a, i: jnp.insert(a, i, 0))(A, jnp.asarray([1]))
