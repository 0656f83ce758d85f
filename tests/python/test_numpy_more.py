"""The numpy names composed in partix/_src/numpy_more.py, each against numpy itself on the same
inputs (float32 results within float32 rounding), and the inverse trigonometric functions'
gradients against their closed forms."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp

R = np.random.default_rng(0)
A = R.standard_normal((3, 4)).astype(np.float32)
B = R.standard_normal((3, 4)).astype(np.float32)
V = np.array([0.3, -1.2, 2.0, 0.7], np.float32)
U = np.array([0.5, 0.1, -0.4], np.float32)
I = np.array([[0, 2, 1], [1, 3, 0]], np.int32)
NANS = np.array([[1.0, np.nan, 3.0], [np.nan, 2.0, 5.0]], np.float32)
SORTED = np.array([-1.0, 0.0, 0.5, 2.0, 3.0], np.float32)
UNIT = np.linspace(-0.95, 0.95, 9).astype(np.float32)

CASES = {
    "append": lambda m: m.append(A, B, axis=0),
    "append_flat": lambda m: m.append(A, V),
    "rot90": lambda m: m.rot90(A, 1),
    "rot90_3": lambda m: m.rot90(A, 3),
    "rot90_2": lambda m: m.rot90(A, 2),
    "rollaxis": lambda m: m.rollaxis(np.zeros((2, 3, 4), np.float32) + 1, 2),
    "ravel_multi_index": lambda m: m.ravel_multi_index((I[0], I[1]), (3, 4)),
    "unravel_index": lambda m: m.unravel_index(np.array([0, 5, 11], np.int32), (3, 4)),
    "tril_indices": lambda m: m.tril_indices(4, -1),
    "triu_indices": lambda m: m.triu_indices(3, 1, 4),
    "diag_indices": lambda m: m.diag_indices(3),
    "indices": lambda m: m.indices((2, 3)),
    "select": lambda m: m.select([A > 0.5, A < -0.5], [A * 2, A * 3], 7.0),
    "cross": lambda m: m.cross(A[:, :3], B[:, :3]),
    "kron": lambda m: m.kron(A[:2, :2], B[:2, :3]),
    "sinc": lambda m: m.sinc(np.append(V, 0).astype(np.float32)),
    "ldexp": lambda m: m.ldexp(V, np.array([1, 2, 0, -1], np.int32)),
    "fabs": lambda m: m.fabs(V),
    "divmod": lambda m: m.divmod(np.array([7, -7, 5], np.int32), np.array([2, 2, -3], np.int32)),
    "modf": lambda m: m.modf(V),
    "logaddexp2": lambda m: m.logaddexp2(A, B),
    "isin": lambda m: m.isin(I, np.array([1, 3], np.int32)),
    "isin_invert": lambda m: m.isin(I, np.array([1, 3], np.int32), invert=True),
    "searchsorted": lambda m: m.searchsorted(SORTED, np.float32([0.0, 2.5, -3, 9])),
    "searchsorted_right": lambda m: m.searchsorted(SORTED, np.float32([0.0, 2.0]), "right"),
    "digitize": lambda m: m.digitize(np.float32([0.2, -2, 2.0, 5]), SORTED),
    "digitize_right": lambda m: m.digitize(np.float32([0.2, -2, 2.0, 5]), SORTED, right=True),
    "digitize_decreasing": lambda m: m.digitize(np.float32([0.2, -2, 2.0, 5]), SORTED[::-1]),
    "nanprod": lambda m: m.nanprod(NANS, axis=1),
    "nanvar": lambda m: m.nanvar(NANS, axis=1),
    "nanstd": lambda m: m.nanstd(NANS, axis=0, ddof=0),
    "nancumsum": lambda m: m.nancumsum(NANS, axis=1),
    "nanargmax": lambda m: m.nanargmax(NANS, axis=1),
    "nanargmin": lambda m: m.nanargmin(NANS, axis=1),
    "quantile": lambda m: m.quantile(A, 0.3, axis=1),
    "quantile_many": lambda m: m.quantile(A, [0.1, 0.5, 1.0], axis=0),
    "percentile": lambda m: m.percentile(V, 75),
    "nanmedian": lambda m: m.nanmedian(A),
    "hsplit": lambda m: m.hsplit(A, 2)[1],
    "vsplit": lambda m: m.vsplit(A, [1])[1],
    "resize": lambda m: m.resize(V, (3, 3)),
    "trapezoid": lambda m: m.trapezoid(A, axis=1),
    "trapezoid_x": lambda m: m.trapezoid(V, SORTED[:4]),
    "cov": lambda m: m.cov(A),
    "cov_cols": lambda m: m.cov(A, rowvar=False),
    "corrcoef": lambda m: m.corrcoef(A),
    "convolve": lambda m: m.convolve(V, U),
    "convolve_same": lambda m: m.convolve(V, U, "same"),
    "correlate": lambda m: m.correlate(V, U),
    "correlate_full": lambda m: m.correlate(V, U, "full"),
    "polyval": lambda m: m.polyval(U, V),
    "polyadd": lambda m: m.polyadd(U, V),
    "polysub": lambda m: m.polysub(V, U),
    "polymul": lambda m: m.polymul(U, V),
    "polyder": lambda m: m.polyder(V, 2),
    "vander": lambda m: m.vander(U, 4),
    "geomspace": lambda m: m.geomspace(1.0, 1000.0, 4),
    "hamming": lambda m: m.hamming(6),
    "blackman": lambda m: m.blackman(5),
    "interp": lambda m: m.interp(np.float32([-2, 0.25, 1.0, 2.5, 9]), SORTED, SORTED ** 2),
    "arctan2": lambda m: m.arctan2(A, B),
    "arctan": lambda m: m.arctan(A * 10),
    "arcsin": lambda m: m.arcsin(UNIT),
    "arccos": lambda m: m.arccos(UNIT),
    "arcsinh": lambda m: m.arcsinh(A * 5),
    "arccosh": lambda m: m.arccosh(1 + np.abs(A) * 3),
    "arctanh": lambda m: m.arctanh(UNIT),
    "gcd": lambda m: m.gcd(np.array([12, -18, 7, 0], np.int32), np.array([18, 12, 0, 5], np.int32)),
    "lcm": lambda m: m.lcm(np.array([4, 6, 0], np.int32), np.array([6, 4, 3], np.int32)),
    "matvec": lambda m: m.matvec(A, V),
    "vecmat": lambda m: m.vecmat(U, A),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_numpy(name):
  got, want = CASES[name](jnp), CASES[name](np)
  got, want = (tuple(got), tuple(want)) if isinstance(want, tuple) else ((got,), (want,))
  assert len(got) == len(want)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=2e-5,
                               atol=2e-6, err_msg=name)


def test_ix_and_index_helpers():
  x = np.arange(20, dtype=np.float32).reshape(4, 5)
  rows, cols = np.array([0, 2], np.int32), np.array([1, 3, 4], np.int32)
  np.testing.assert_array_equal(jnp.asarray(x)[jnp.ix_(rows, cols)], x[np.ix_(rows, cols)])
  assert jnp.s_[1:3] == np.s_[1:3] and jnp.index_exp[::2] == np.index_exp[::2]
  assert jnp.array_equiv(A, A) and not jnp.array_equiv(A, B)
  assert not bool(jnp.iscomplex(A).any()) and bool(jnp.isreal(A).all())


def test_inverse_trig_gradients():
  x = UNIT[1:-1]
  np.testing.assert_allclose(jax.grad(lambda v: jnp.sum(jnp.arcsin(v)))(x), 1 / np.sqrt(1 - x * x),
                             rtol=1e-4)
  np.testing.assert_allclose(jax.grad(lambda v: jnp.sum(jnp.arctan(v)))(x), 1 / (1 + x * x),
                             rtol=1e-5)
  np.testing.assert_allclose(jax.jit(jnp.arctan2)(A, B), np.arctan2(A, B), rtol=1e-5, atol=1e-6)


def test_bad_input():
  with pytest.raises(jax.PartixError, match=r"\[cross\] needs vectors of 3 components"):
    jnp.cross(A, B)
  with pytest.raises(jax.PartixError, match=r"\[select\] 2 conditions for 1 choices"):
    jnp.select([A > 0, A < 0], [A])
  with pytest.raises(jax.PartixError, match=r"\[correlate\] mode 'wide'"):
    jnp.correlate(V, U, "wide")
  with pytest.raises(jax.PartixError, match=r"\[quantile\] method 'nearest'"):
    jnp.quantile(V, 0.5, method="nearest")
