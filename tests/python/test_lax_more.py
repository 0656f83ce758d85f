"""The jax.lax names of partix/_src/lax_more.py against numpy (and JAX's documented meaning of
each: clamp's argument order, select_n's case order, rev's dimensions, sort_key_val)."""
import numpy as np
import pytest

import partix as jax
from partix import lax

R = np.random.default_rng(0)
X = R.standard_normal((3, 4)).astype(np.float32)
U = np.linspace(-0.9, 0.9, 6).astype(np.float32)


def close(got, want):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                             rtol=2e-5, atol=2e-6)


def test_elementwise_names():
  for name, ref, x in [("asin", np.arcsin, U), ("acos", np.arccos, U), ("atan", np.arctan, X),
                       ("asinh", np.arcsinh, X), ("atanh", np.arctanh, U), ("cosh", np.cosh, X),
                       ("sinh", np.sinh, X), ("tan", np.tan, U), ("cbrt", np.cbrt, X),
                       ("exp2", np.exp2, X), ("reciprocal", np.reciprocal, X + 5)]:
    close(getattr(lax, name)(x), ref(x))
  close(lax.acosh(np.abs(X) + 1), np.arccosh(np.abs(X) + 1))
  close(lax.atan2(X, X[::-1]), np.arctan2(X, X[::-1]))
  np.testing.assert_array_equal(lax.is_finite(np.float32([1, np.inf, np.nan])), [1, 0, 0])
  close(lax.real(X), X)
  close(lax.imag(X), np.zeros_like(X))
  close(lax.conj(X), X)


def test_structural_names():
  close(lax.clamp(-0.5, X, 0.5), np.clip(X, -0.5, 0.5))
  close(lax.rev(X, (0, 1)), X[::-1, ::-1])
  close(lax.reduce_prod(X, (1,)), X.prod(1))
  np.testing.assert_array_equal(lax.reduce_and(X > -1, (0,)), (X > -1).all(0))
  np.testing.assert_array_equal(lax.reduce_or(X > 1, (1,)), (X > 1).any(1))
  close(lax.select_n(X > 0, -X, X), np.abs(X))  # false picks cases[0]
  which = np.array([[0, 1, 2, 0]] * 3, np.int32)
  close(lax.select_n(which, X, X * 2, X * 3), np.choose(which, [X, X * 2, X * 3]))
  k, v = lax.sort_key_val(X, np.arange(12, dtype=np.int32).reshape(3, 4))
  order = np.argsort(X, axis=-1)
  close(k, np.take_along_axis(X, order, -1))
  np.testing.assert_array_equal(v, np.take_along_axis(np.arange(12).reshape(3, 4), order, -1))
  a, b = lax.split(X, (1, 3), axis=1)
  close(a, X[:, :1])
  close(b, X[:, 1:])
  assert lax.collapse(np.zeros((2, 3, 4), np.float32), 1).shape == (2, 12)
  assert lax.broadcast_to_rank(X, 4).shape == (1, 1, 3, 4)
  close(lax.full((2, 2), 3.0), np.full((2, 2), 3.0))
  close(lax.batch_matmul(np.stack([X, X]), np.stack([X.T, X.T])), np.stack([X @ X.T] * 2))
  close(lax.optimization_barrier(X), X)
  got = jax.numpy.asarray(X).at[np.array([0, 7])].get(mode=lax.GatherScatterMode.FILL_OR_DROP,
                                                       fill_value=-1.0)
  close(got, np.stack([X[0], np.full(4, -1.0)]))


def test_bad_input():
  with pytest.raises(jax.PartixError, match=r"\[select_n\] a bool selector picks between 2"):
    lax.select_n(X > 0, X, X, X)
  with pytest.raises(jax.PartixError, match=r"\[split\] sizes \(1, 1\) do not add up"):
    lax.split(X, (1, 1), axis=1)


def test_cumulative_scans_and_associative_scan():
  x = np.array([[3.0, 1, 4, 1, 5, 9, 2], [2, 6, 5, 3, 5, 8, 9]], np.float32)
  np.testing.assert_array_equal(lax.cummax(x, axis=1), np.maximum.accumulate(x, 1))
  np.testing.assert_array_equal(lax.cummin(x, axis=1, reverse=True),
                                np.minimum.accumulate(x[:, ::-1], 1)[:, ::-1])
  np.testing.assert_allclose(lax.cumprod(x, axis=0), np.cumprod(x, 0))
  np.testing.assert_allclose(lax.cumlogsumexp(x, axis=1), np.logaddexp.accumulate(x, 1),
                             rtol=1e-6)
  np.testing.assert_array_equal(jax.jit(lambda v: lax.cummax(v, axis=1))(x),
                                np.maximum.accumulate(x, 1))
  # A non-commutative operation (2x2 matrix products, as pairs of rows) keeps its order.
  m = np.random.default_rng(0).standard_normal((6, 2, 2)).astype(np.float32)
  got = lax.associative_scan(lax.batch_matmul, m)
  want = [m[0]]
  for k in range(1, 6):
    want.append(want[-1] @ m[k])
  np.testing.assert_allclose(got, np.stack(want), rtol=1e-4, atol=1e-5)
  got = lax.associative_scan(lax.batch_matmul, m, reverse=True)
  want = [m[5]]
  for k in range(4, -1, -1):
    want.insert(0, m[k] @ want[0])
  np.testing.assert_allclose(got, np.stack(want), rtol=1e-4, atol=1e-5)
  with pytest.raises(jax.PartixError, match=r"^\[cummax\]"):
    lax.cummax(np.float32(1.0))
