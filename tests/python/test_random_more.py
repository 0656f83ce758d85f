"""partix.random's multivariate_normal, orthogonal, f, poisson, binomial and multinomial: shapes
and dtypes as JAX's, determinism per key, distributions (moments within 5 standard errors, pmfs
by a chi-square bound), edge parameters, jit and vmap over keys, and bad input."""
import math

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import random
from partix._src.core import PartixError

KEY = random.key(7)


def _chi2_bound(df, z=5.0):
  """The chi-square(df) quantile z standard deviations out on the normal scale (Wilson and
  Hilferty's cube-root approximation): exceeded with probability about 3e-7 for z = 5."""
  return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi2_pmf(samples, pmf, lo, hi):
  """Pearson's statistic of integer samples against pmf(k) over bins lo..hi and the two tails,
  and its degrees of freedom."""
  x = np.asarray(samples).ravel()
  n = x.size
  probs = [pmf(k) for k in range(lo, hi + 1)]
  obs = [np.sum(x == k) for k in range(lo, hi + 1)]
  below, above = sum(pmf(k) for k in range(0, lo)), 1 - sum(probs) - sum(
      pmf(k) for k in range(0, lo))
  probs += [below, above]
  obs += [np.sum(x < lo), np.sum(x > hi)]
  cells = [(o, p) for o, p in zip(obs, probs) if p * n >= 5]
  stat = sum((o - n * p) ** 2 / (n * p) for o, p in cells)
  assert sum(o for o, _ in cells) > 0.99 * n  # the cells kept hold nearly every sample
  return stat, len(cells) - 1


def _within(sample_mean, mean, var, n, z=5.0):
  assert abs(sample_mean - mean) < z * math.sqrt(var / n), (sample_mean, mean, var, n)


def _poisson_pmf(lam):
  return lambda k: math.exp(-lam + k * math.log(lam) - math.lgamma(k + 1))


def _binom_pmf(n, p):
  return lambda k: math.comb(n, k) * p ** k * (1 - p) ** (n - k) if 0 <= k <= n else 0.0


# ---- poisson ----

def test_poisson_shapes_dtypes_determinism():
  x = random.poisson(KEY, 3.0, (4, 5))
  assert x.shape == (4, 5) and x.dtype == np.int32
  assert random.poisson(KEY, jnp.ones(3)).shape == (3,)
  assert random.poisson(KEY, jnp.ones(3), (2, 3)).shape == (2, 3)
  assert random.poisson(KEY, 2.0, (3,), dtype=jnp.int16).dtype == np.int16
  assert random.poisson(KEY, 3, (2,)).dtype == np.int32
  assert random.poisson(KEY, 3.0, (2,), out_sharding=None).shape == (2,)
  np.testing.assert_array_equal(np.asarray(x), np.asarray(random.poisson(KEY, 3.0, (4, 5))))
  other = random.poisson(random.key(8), 3.0, (4, 5))
  assert not np.array_equal(np.asarray(x), np.asarray(other))


@pytest.mark.parametrize("lam", [0.7, 3.0, 9.5, 10.0, 25.0])
def test_poisson_pmf(lam):
  x = np.asarray(random.poisson(KEY, lam, (40000,)))
  lo, hi = max(0, int(lam - 4 * math.sqrt(lam))), int(lam + 4 * math.sqrt(lam)) + 1
  stat, df = _chi2_pmf(x, _poisson_pmf(lam), lo, hi)
  assert stat < _chi2_bound(df), (lam, stat, df)


@pytest.mark.parametrize("lam", [1e3, 1e6, 1e8])
def test_poisson_large_rates(lam):
  n = 20000
  x = np.asarray(random.poisson(KEY, lam, (n,))).astype(np.float64)
  _within(x.mean(), lam, lam, n)
  # The sample variance of a Poisson: Var(s^2) ~ (mu4 - sigma^4) / n, mu4 = lam (1 + 3 lam).
  _within(x.var(), lam, lam * (1 + 3 * lam) - lam * lam, n)


def test_poisson_edges():
  x = np.asarray(random.poisson(KEY, jnp.array([0.0, -1.0, np.nan, np.inf, 1e12])))
  np.testing.assert_array_equal(x, [0, -1, -1, 2**31 - 1, 2**31 - 1])
  assert np.all(np.asarray(random.poisson(KEY, 0.0, (1000,))) == 0)
  # an array of rates, each its own distribution
  lam = jnp.array([0.5, 4.0, 40.0])
  x = np.asarray(random.poisson(KEY, lam, (20000, 3))).astype(np.float64)
  for j, l in enumerate([0.5, 4.0, 40.0]):
    _within(x[:, j].mean(), l, l, 20000)


# ---- binomial ----

def test_binomial_shapes_dtypes_determinism():
  x = random.binomial(KEY, 10, 0.3, (4, 5))
  assert x.shape == (4, 5) and x.dtype == np.float32
  assert random.binomial(KEY, 3, 0.5).shape == ()
  assert random.binomial(KEY, jnp.ones(3), 0.5, (2, 3)).shape == (2, 3)
  assert random.binomial(KEY, jnp.ones((2, 1)), jnp.ones(3) / 2).shape == (2, 3)
  with jax.enable_x64():  # float64 is held with x64 on (as in JAX)
    assert random.binomial(KEY, 4, 0.5, (3,), dtype=jnp.float64).dtype == np.float64
  np.testing.assert_array_equal(np.asarray(x), np.asarray(random.binomial(KEY, 10, 0.3, (4, 5))))


@pytest.mark.parametrize("n,p", [(20, 0.3), (15, 0.9), (100, 0.3), (60, 0.75), (1, 0.5)])
def test_binomial_pmf(n, p):
  x = np.asarray(random.binomial(KEY, n, p, (40000,)))
  assert np.all(x == np.round(x)) and x.min() >= 0 and x.max() <= n
  stat, df = _chi2_pmf(x, _binom_pmf(n, p), 0, n)
  assert stat < _chi2_bound(df), (n, p, stat, df)


@pytest.mark.parametrize("n,p", [(10**6, 0.4), (10**5, 0.999), (10**7, 2e-6)])
def test_binomial_large(n, p):
  m = 20000
  with jax.enable_x64():  # float64 counts (as JAX's with x64)
    x = np.asarray(random.binomial(KEY, n, p, (m,), dtype=jnp.float64))
  _within(x.mean(), n * p, n * p * (1 - p), m)


def test_binomial_edges():
  n = jnp.array([0.0, 5.0, 5.0, 7.5, -1.0, np.nan, np.inf, 4.0, 4.0])
  p = jnp.array([0.5, 0.0, 1.0, 1.0, 0.5, 0.5, 0.5, 1.5, np.nan])
  x = np.asarray(random.binomial(KEY, n, p))
  np.testing.assert_array_equal(x[:4], [0, 0, 5, 7])
  assert np.all(np.isnan(x[[4, 5, 7, 8]])) and x[6] == np.inf
  assert np.all(np.asarray(random.binomial(KEY, 9, 1.0, (500,))) == 9)


# ---- multinomial ----

def test_multinomial():
  p = jnp.array([0.2, 0.3, 0.5])
  x = random.multinomial(KEY, 10, p)
  assert x.shape == (3,) and x.dtype == np.float32
  np.testing.assert_array_equal(np.asarray(x), np.asarray(random.multinomial(KEY, 10, p)))
  assert random.multinomial(KEY, 10, p, shape=(4, 3)).shape == (4, 3)
  assert random.multinomial(KEY, jnp.array([10.0, 20.0]), p, shape=(2, 3)).shape == (2, 3)
  assert random.multinomial(KEY, 10, p, dtype=jnp.int32).dtype == np.int32
  # JAX casts to dtype, None being the default float type, whatever n's and p's types
  assert random.multinomial(KEY, jnp.float16(10), jnp.asarray([0.5, 0.5], jnp.float16)).dtype \
      == np.float32
  m, n = 20000, 30
  probs = np.array([1.0, 0.0, 3.0, 2.0, 4.0])  # unnormalized, one impossible outcome
  x = np.asarray(random.multinomial(KEY, n, jnp.asarray(probs, jnp.float32), shape=(m, 5)))
  np.testing.assert_array_equal(x.sum(-1), n)
  assert np.all(x[:, 1] == 0)
  q = probs / probs.sum()
  for i in range(5):
    if q[i] > 0:
      _within(x[:, i].mean(), n * q[i], n * q[i] * (1 - q[i]), m)
  # the counts of two outcomes covary as -n q_i q_j
  c = np.mean((x[:, 0] - n * q[0]) * (x[:, 4] - n * q[4]))
  assert abs(c + n * q[0] * q[4]) < 0.2


# ---- multivariate_normal ----

COV = np.array([[2.0, 0.6, 0.3], [0.6, 1.0, 0.2], [0.3, 0.2, 0.5]])


@pytest.mark.parametrize("method", ["cholesky", "eigh", "svd"])
def test_multivariate_normal_covariance(method):
  n = 40000
  mean = np.array([1.0, -2.0, 0.5])
  x = np.asarray(random.multivariate_normal(KEY, jnp.asarray(mean, jnp.float32),
                                            jnp.asarray(COV, jnp.float32), (n,),
                                            method=method)).astype(np.float64)
  assert x.shape == (n, 3)
  for i in range(3):
    _within(x[:, i].mean(), mean[i], COV[i, i], n)
  s = (x - mean).T @ (x - mean) / n
  for i in range(3):
    for j in range(3):
      var = COV[i, i] * COV[j, j] + COV[i, j] ** 2  # Var of (x_i - m_i)(x_j - m_j)
      _within(s[i, j], COV[i, j], var, n)


def test_multivariate_normal_shapes():
  mvn = random.multivariate_normal
  x = mvn(KEY, jnp.zeros(3), jnp.eye(3))
  assert x.shape == (3,) and x.dtype == np.float32
  assert mvn(KEY, jnp.zeros(3), jnp.eye(3), (5,)).shape == (5, 3)
  assert mvn(KEY, jnp.zeros((2, 3)), jnp.eye(3)).shape == (2, 3)
  assert mvn(KEY, jnp.zeros(3), jnp.broadcast_to(jnp.eye(3), (4, 1, 3, 3))).shape == (4, 1, 3)
  assert mvn(KEY, jnp.zeros((2, 3)), jnp.eye(3), (5, 2)).shape == (5, 2, 3)
  assert mvn(KEY, jnp.zeros(3, jnp.int32), jnp.eye(3, dtype=jnp.int32)).dtype == np.float32
  with jax.enable_x64():
    assert mvn(KEY, jnp.zeros(2), jnp.eye(2), dtype=jnp.float64).dtype == np.float64
  np.testing.assert_array_equal(np.asarray(x), np.asarray(mvn(KEY, jnp.zeros(3), jnp.eye(3))))
  # a singular covariance by eigh / svd: samples stay on its range
  sing = jnp.array([[1.0, 1.0], [1.0, 1.0]])
  for method in ("eigh", "svd"):
    y = np.asarray(mvn(KEY, jnp.zeros(2), sing, (100,), method=method))
    np.testing.assert_allclose(y[:, 0], y[:, 1], atol=1e-4)


# ---- orthogonal ----

def test_orthogonal():
  q = np.asarray(random.orthogonal(KEY, 4, (500,))).astype(np.float64)
  assert q.shape == (500, 4, 4)
  eye = np.eye(4)
  np.testing.assert_allclose(np.einsum("bij,bik->bjk", q, q), np.broadcast_to(eye, q.shape),
                             atol=1e-4)
  # O(n)'s two components equally likely
  n = 4000
  q = np.asarray(random.orthogonal(random.key(1), 3, (n,))).astype(np.float64)
  pos = np.mean(np.linalg.det(q) > 0)
  _within(pos, 0.5, 0.25, n)
  # an entry of a Haar matrix is a coordinate of a uniform unit vector: E q^2 = 1/3,
  # E q^4 = 3 / (3 * 5); and its sign is balanced
  for i, j in [(0, 0), (2, 1), (1, 2)]:
    e = q[:, i, j]
    _within(np.mean(e * e), 1 / 3, 3 / 15 - 1 / 9, n)
    _within(np.mean(e > 0), 0.5, 0.25, n)


def test_orthogonal_shapes():
  r = random.orthogonal(KEY, 3, (2,), m=5)
  assert r.shape == (2, 3, 5) and r.dtype == np.float32
  rr = np.asarray(r).astype(np.float64)
  np.testing.assert_allclose(rr @ np.swapaxes(rr, -1, -2), np.broadcast_to(np.eye(3), (2, 3, 3)),
                             atol=1e-5)
  c = np.asarray(random.orthogonal(KEY, 5, m=2)).astype(np.float64)
  assert c.shape == (5, 2)
  np.testing.assert_allclose(c.T @ c, np.eye(2), atol=1e-5)
  assert random.orthogonal(KEY, 0).shape == (0, 0)
  with jax.enable_x64():
    assert random.orthogonal(KEY, 2, dtype=jnp.float64).dtype == np.float64
  np.testing.assert_array_equal(np.asarray(random.orthogonal(KEY, 3)),
                                np.asarray(random.orthogonal(KEY, 3)))


# ---- f ----

def test_f():
  x = random.f(KEY, 3.0, 4.0)
  assert x.shape == () and x.dtype == np.float32
  assert random.f(KEY, jnp.ones(3), 4.0, (2, 3)).shape == (2, 3)
  assert random.f(KEY, jnp.ones(3), jnp.ones((2, 1))).shape == (2, 3)
  with jax.enable_x64():
    assert random.f(KEY, 2.0, 2.0, (3,), dtype=jnp.float64).dtype == np.float64
  n = 40000
  d1, d2 = 5.0, 12.0
  y = np.asarray(random.f(KEY, d1, d2, (n,))).astype(np.float64)
  var = 2 * d2 ** 2 * (d1 + d2 - 2) / (d1 * (d2 - 2) ** 2 * (d2 - 4))
  _within(y.mean(), d2 / (d2 - 2), var, n)
  # F(2, 2) has the cdf x / (1 + x): its quartiles are 1/3, 1, 3
  z = np.asarray(random.f(random.key(3), 2.0, 2.0, (n,)))
  counts = np.histogram(z, [0, 1 / 3, 1, 3, np.inf])[0]
  stat = np.sum((counts - n / 4) ** 2 / (n / 4))
  assert stat < _chi2_bound(3)
  # F(d, d) and 1 / F(d, d) agree: the median is 1
  w = np.asarray(random.f(random.key(4), 7.0, 7.0, (n,)))
  _within(np.mean(w < 1), 0.5, 0.25, n)


# ---- jit and vmap over keys ----

def test_jit_and_vmap_over_keys():
  keys = random.split(KEY, 3)
  draws = [
      lambda k: random.poisson(k, jnp.array([2.0, 30.0]), (3, 2)),
      lambda k: random.binomial(k, jnp.array([5.0, 200.0]), 0.4, (3, 2)),
      lambda k: random.multinomial(k, 12.0, jnp.array([0.1, 0.6, 0.3])),
      lambda k: random.multivariate_normal(k, jnp.zeros(2), jnp.eye(2) * 2, (3,)),
      lambda k: random.orthogonal(k, 3),
      lambda k: random.f(k, 3.0, 5.0, (4,)),
  ]
  for fn in draws:
    eager = np.stack([np.asarray(fn(keys[i])) for i in range(3)])
    np.testing.assert_allclose(np.asarray(jax.vmap(fn)(keys)), eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(keys[0])), eager[0], rtol=1e-5, atol=1e-5)
    assert not np.allclose(eager[0], eager[1])


# ---- bad input ----

@pytest.mark.parametrize("call,words", [
    (lambda: random.multivariate_normal(KEY, jnp.zeros(3), jnp.eye(2)),
     ["random.multivariate_normal", "(2, 2)"]),
    (lambda: random.multivariate_normal(KEY, jnp.float32(0), jnp.eye(2)),
     ["random.multivariate_normal", "mean"]),
    (lambda: random.multivariate_normal(KEY, jnp.zeros(3), jnp.eye(3), method="qr"),
     ["random.multivariate_normal", "'qr'"]),
    (lambda: random.multivariate_normal(KEY, jnp.zeros(3), jnp.eye(3), dtype=jnp.int32),
     ["random.multivariate_normal", "int32"]),
    (lambda: random.multivariate_normal(KEY, jnp.zeros((2, 3)), jnp.eye(3), (5,)),
     ["random.multivariate_normal", "(5,)"]),
    (lambda: random.orthogonal(KEY, -1), ["random.orthogonal", "-1"]),
    (lambda: random.orthogonal(KEY, 3.0), ["random.orthogonal", "3.0"]),
    (lambda: random.orthogonal(KEY, 3, m=-2), ["random.orthogonal", "-2"]),
    (lambda: random.orthogonal(KEY, 3, dtype=jnp.int32), ["random.orthogonal", "int32"]),
    (lambda: random.poisson(KEY, jnp.ones(3), (2, 4)), ["random.poisson", "(2, 4)"]),
    (lambda: random.poisson(KEY, 3.0, dtype=jnp.float32), ["random.poisson", "float32"]),
    (lambda: random.binomial(KEY, 3, 0.5, dtype=jnp.int32), ["random.binomial", "int32"]),
    (lambda: random.binomial(KEY, jnp.ones(3), 0.5, (2, 4)), ["random.binomial", "(2, 4)"]),
    (lambda: random.f(KEY, jnp.ones(3), 4.0, (2, 4)), ["random.f", "(2, 4)"]),
    (lambda: random.f(KEY, 3.0, 4.0, dtype=jnp.int32), ["random.f", "int32"]),
    (lambda: random.multinomial(KEY, 10, jnp.array([0.2, 0.8]), shape=(4,)),
     ["random.multinomial", "(4,)"]),
    (lambda: random.multinomial(KEY, jnp.ones(3), jnp.array([0.2, 0.8])),
     ["random.multinomial", "(3,)"]),
    (lambda: random.multinomial(KEY, 10, 0.5), ["random.multinomial", "p"]),
    (lambda: random.poisson(jnp.zeros(3, jnp.int32), 1.0), ["random.poisson", "key"]),
    (lambda: random.poisson(KEY, 1.0, out_sharding="x"), ["random.poisson", "'x'"]),
])
def test_bad_input(call, words):
  with pytest.raises(PartixError) as e:
    call()
  for w in words:
    assert w in str(e.value), (w, str(e.value))


def test_multinomial_takes_shape_by_keyword_only():
  with pytest.raises(TypeError):
    random.multinomial(KEY, 10, jnp.array([0.5, 0.5]), (2,))  # as JAX's
