"""partix.scipy.special's gamma family and its relatives against Python's own math module
(lgamma, gamma, comb, erfc: float64 references), finite differences for digamma, and the
asymptotic series of the normal tail for log_ndtr far out."""
import math

import numpy as np
import pytest

import partix as jax
import partix.scipy.special as sp

X = np.array([-3.5, -2.5, -0.5, 0.1, 0.5, 1.0, 1.5, 2.0, 3.7, 10.0, 30.0], np.float32)


def test_gammaln_gamma_and_sign_against_math():
  got = np.asarray(sp.gammaln(X))
  want = np.array([math.lgamma(float(v)) for v in X])
  np.testing.assert_allclose(got, want, atol=5e-6 * np.maximum(1, np.abs(want)).max())
  np.testing.assert_allclose(sp.gamma(X[:-1]), [math.gamma(float(v)) for v in X[:-1]],
                             rtol=2e-5)
  np.testing.assert_array_equal(sp.gammasgn(X), np.sign([math.gamma(float(v)) for v in X]))
  assert np.isinf(float(sp.gammaln(np.float32(-2.0)))) and np.isinf(float(sp.gammaln(0.0)))
  np.testing.assert_allclose(jax.jit(sp.gammaln)(X), got)


def test_digamma_is_the_derivative_of_gammaln():
  h = 1e-5
  for v in [0.1, 0.5, 1.0, 2.5, 7.0, 40.0, -0.5, -2.3]:
    fd = (math.lgamma(v + h) - math.lgamma(v - h)) / (2 * h)
    np.testing.assert_allclose(float(sp.digamma(np.float32(v))), fd, rtol=2e-4, atol=1e-5)
  np.testing.assert_allclose(float(sp.digamma(1.0)), -0.5772156649015329, rtol=1e-6)
  assert np.isnan(float(sp.digamma(-3.0)))


def test_combinatorics_and_beta():
  np.testing.assert_allclose(sp.comb(10.0, np.array([0.0, 3.0, 5.0, 11.0], np.float32)),
                             [1, 120, 252, 0], rtol=1e-5)
  np.testing.assert_allclose(sp.factorial(np.array([0.0, 5.0, 10.0], np.float32)),
                             [1, 120, 3628800], rtol=1e-5)
  np.testing.assert_allclose(sp.poch(np.float32(3.0), 4.0), math.gamma(7) / math.gamma(3),
                             rtol=1e-5)
  a, b = np.array([0.5, 2.0, 10.0], np.float32), np.array([1.5, 3.0, 0.2], np.float32)
  want = [math.lgamma(p) + math.lgamma(q) - math.lgamma(p + q) for p, q in zip(a, b)]
  np.testing.assert_allclose(sp.betaln(a, b), want, rtol=1e-5)
  np.testing.assert_allclose(sp.beta(a, b), np.exp(want), rtol=1e-5)
  np.testing.assert_allclose(sp.multigammaln(np.float32(3.5), 3),
                             3 * 2 / 4 * math.log(math.pi) + sum(math.lgamma(3.5 - j / 2)
                                                                  for j in range(3)),
                             rtol=1e-6)
  with pytest.raises(NotImplementedError):
    sp.comb(5, 2, exact=True)


def test_entropies_boxcox_and_log_ndtr():
  x, y = np.array([0.0, 1.0, 2.0, 3.0], np.float32), np.array([1.0, 2.0, 0.5, 0.0], np.float32)
  rel = np.array([0.0, math.log(0.5), 2 * math.log(4.0), np.inf])
  np.testing.assert_allclose(sp.rel_entr(x, y), rel, rtol=1e-6)
  np.testing.assert_allclose(sp.kl_div(x, y), rel - x + y, rtol=1e-6)
  v = np.array([0.5, 1.0, 4.0], np.float32)
  np.testing.assert_allclose(sp.boxcox(v, 0.5), (v ** 0.5 - 1) / 0.5, rtol=1e-6)
  np.testing.assert_allclose(sp.boxcox(v, 0.0), np.log(v), rtol=1e-6)
  np.testing.assert_allclose(sp.boxcox1p(v, 2.0), ((1 + v) ** 2 - 1) / 2, rtol=1e-6)
  mid = np.array([-5.0, -3.5, -1.5, -0.5, 0.0, 2.0, 6.0], np.float32)
  want = [math.log(0.5 * math.erfc(-float(t) / math.sqrt(2))) for t in mid]
  np.testing.assert_allclose(sp.log_ndtr(mid), want, rtol=5e-6)
  # Far in the lower tail: -x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - 15/x^6).
  for t in (-20.0, -40.0):
    series = -t * t / 2 - math.log(-t) - 0.5 * math.log(2 * math.pi) + math.log(
        1 - 1 / t ** 2 + 3 / t ** 4 - 15 / t ** 6)
    np.testing.assert_allclose(float(sp.log_ndtr(np.float32(t))), series, rtol=1e-6)
