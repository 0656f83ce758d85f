"""partix.lax's special functions, generic reductions and small names (python/partix/_src/
lax_extra.py, special_fns.py): values checked against JAX 0.10.2 (the numbers below were
printed by it), closed forms computed with numpy and math (no scipy), and finite differences
for the derivatives; also under jit and vmap, on inputs sharded over 8 devices, and inside
shard_map for the collectives."""
import math

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
import partix.scipy.special as sp
from partix import lax
from partix._src.core import PartixError

F32 = np.float32
A = np.array([0.3, 1.5, 4.0, 12.0, 150.0], F32)
X = np.array([0.2, 2.5, 3.0, 15.0, 140.0], F32)
B = np.array([0.5, 2.0, 3.0, 7.0, 40.0], F32)
U = np.array([0.1, 0.3, 0.5, 0.8, 0.97], F32)
Z = np.array([-20.0, -3.0, -0.5, 0.0, 0.7, 5.0, 15.5, 60.0], F32)
G = np.array([-2.5, -0.3, 0.1, 1.0, 2.5, 9.0, 33.0], F32)


def close(got, want, rtol=2e-5, atol=1e-6):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                             rtol=rtol, atol=atol)


# ---- special functions ----

def test_incomplete_gamma_matches_jax():
  # The last: P(150, 140) = 0.20954362 (float64); JAX 0.10.2 gives 0.20955312.
  close(lax.igamma(A, X), [0.6575069, 0.8282029, 0.35276785, 0.8152484, 0.20954362])
  close(lax.igammac(A, X), [0.34249312, 0.17179708, 0.6472322, 0.18475156, 0.79045638])
  close(lax.igamma_grad_a(A, X), [-1.0233808, -0.20882231, -0.20153049, -0.07499247,
                                  -0.02379478], rtol=1e-4)
  close(lax.random_gamma_grad(A, X), [1.2120372, 1.425897, 0.8995224, 1.1313249, 0.96697265],
        rtol=1e-4)
  close(sp.gammainc(A, X), lax.igamma(A, X))
  close(sp.gammaincc(A, X), lax.igammac(A, X))


def test_incomplete_gamma_closed_forms():
  x = np.linspace(0.05, 30.0, 41).astype(F32)
  close(lax.igamma(np.ones_like(x), x), -np.expm1(-x.astype(np.float64)), atol=2e-6)
  for n in (2, 5, 9):  # integer a: Q(n, x) = exp(-x) sum_{k<n} x^k / k!
    want = np.exp(-x.astype(np.float64)) * sum(x.astype(np.float64) ** k / math.factorial(k)
                                               for k in range(n))
    close(lax.igammac(np.full_like(x, n), x), want, rtol=2e-5, atol=1e-7)


def test_incomplete_gamma_edges_are_jaxs():
  a = np.array([0, 0, 1, -1, 1, np.inf, np.inf, 2, np.nan, 1], F32)
  x = np.array([0, 1, 0, 1, -1, 1, np.inf, np.inf, 1, 200], F32)
  np.testing.assert_array_equal(lax.igamma(a, x), [np.nan, 1, 0, np.nan, np.nan, np.nan, 1, 1,
                                                   np.nan, 1])
  np.testing.assert_array_equal(lax.igammac(a, x), [np.nan, 0, 1, np.nan, np.nan, np.nan, 0, 0,
                                                    np.nan, 0])


def test_incomplete_gamma_derivatives():
  close(jax.vmap(jax.grad(lax.igamma, 1))(A, X),
        [0.84434766, 0.14644977, 0.22404163, 0.06628732, 0.0246073], rtol=1e-4)
  close(jax.vmap(jax.grad(lax.igamma, 0))(A, X), lax.igamma_grad_a(A, X))
  close(jax.jit(jax.grad(lambda x: lax.igammac(F32(3.0), x)))(F32(2.0)),
        -np.exp(-2.0) * 2.0 ** 2 / 2, rtol=1e-5)
  # d/da P by central differences of P in float64 terms: P(3 +- h, 2) via the series.
  h = 1e-3

  def p64(a, x, terms=200):
    t, s = 1.0, 1.0
    for n in range(1, terms):
      t *= x / (a + n)
      s += t
    return math.exp(a * math.log(x) - x - math.lgamma(a + 1)) * s
  fd = (p64(3 + h, 2.0) - p64(3 - h, 2.0)) / (2 * h)
  close(lax.igamma_grad_a(F32(3.0), F32(2.0)), fd, rtol=1e-4)


def test_betainc_values_closed_forms_and_grad():
  close(lax.betainc(A, B, U), [0.37123507, 0.3368493, 0.34375003, 0.9487291, 1.0])
  x = np.linspace(0.0, 1.0, 21).astype(F32)
  close(lax.betainc(F32(1.0), F32(3.5), x), 1 - (1 - x.astype(np.float64)) ** 3.5, atol=2e-6)
  close(lax.betainc(F32(2.5), F32(1.0), x), x.astype(np.float64) ** 2.5, atol=2e-6)
  close(sp.betainc(2.0, 3.0, 0.4), 0.5248, rtol=1e-5)  # 6x^2 - 8x^3 + 3x^4 at x = 0.4
  close(jax.vmap(jax.grad(lax.betainc, 2))(A, B, U),
        [1.1599618, 1.4377714, 1.875001, 1.2246789, 2.8410997e-19], rtol=1e-4, atol=1e-12)
  np.testing.assert_array_equal(
      lax.betainc(np.array([0, 1, 1, -1, 2], F32), np.array([1, 0, 0, 1, 3], F32),
                  np.array([0.5, 0.5, 1, 0.5, 1.5], F32)), [1, 0, 1, np.nan, np.nan])


def test_lgamma_digamma_polygamma_zeta():
  close(lax.lgamma(G), [-0.056243896, 1.4648399, 2.2527127, 0.0, 0.28468299, 10.604603,
                        81.557968], rtol=2e-5, atol=2e-6)
  close(lax.lgamma(G), [math.lgamma(float(v)) for v in G], rtol=2e-5, atol=2e-6)
  close(lax.digamma(G), [1.1031562, 2.1133096, -10.423755, -0.5772154, 0.7031568, 2.1406412,
                         3.4812796], rtol=2e-5)
  close(lax.polygamma(np.array([0, 1, 2, 3, 1], F32), np.array([0.5, 2.0, 3.5, 1.25, 10.0], F32)),
        [-1.96351, 0.64493406, -0.10820407, 2.7821462, 0.10516632], rtol=3e-5)
  close(lax.zeta(np.array([1.5, 2.0, 3.0, 6.5, 11.0], F32), np.array([0.5, 1.0, 2.5, 0.1, 4.0], F32)),
        [4.7765384, 1.6449341, 0.11810203, 3.1622778e+06, 2.6232485e-07], rtol=3e-5)
  close(sp.zeta(F32(4.0)), math.pi ** 4 / 90, rtol=1e-6)
  close(sp.polygamma(1, F32(1.0)), math.pi ** 2 / 6, rtol=1e-6)
  # Trigamma left of 0 is sum_k 1 / (x + k)^2: positive (JAX 0.10.2's is not below x = -9).
  close(lax.polygamma(F32(1.0), F32(-10.5)), sum(1 / (-10.5 + k) ** 2 for k in range(200000)),
        rtol=1e-4)
  close(lax.zeta(F32(2.0), F32(-0.5)), 8.93480206, rtol=1e-6)
  assert np.isinf(float(lax.zeta(F32(1.0), F32(1.0)))) and np.isnan(float(lax.zeta(F32(0.5), F32(1.0))))
  # grad: lgamma' = digamma, digamma' = polygamma(1, .); zeta by central differences.
  close(jax.vmap(jax.grad(lax.lgamma))(G[2:]), lax.digamma(G[2:]), rtol=1e-4)
  close(jax.grad(lax.digamma)(F32(2.5)), lax.polygamma(F32(1.0), F32(2.5)), rtol=1e-4)
  h = 1e-3
  fd = (float(lax.zeta(F32(3.0), F32(2.0 + h))) - float(lax.zeta(F32(3.0), F32(2.0 - h)))) / (2 * h)
  close(jax.grad(lambda q: lax.zeta(F32(3.0), q))(F32(2.0)), fd, rtol=2e-3)


def test_bessel_and_erfcx():
  close(lax.bessel_i0e(Z), [0.0897803, 0.24300036, 0.6450353, 1.0, 0.55930555, 0.18354082,
                            0.1021805, 0.05161155], rtol=3e-6)
  close(lax.bessel_i1e(Z), [-0.08750622, -0.19682673, -0.1564208, 0.0, 0.18466999, 0.16397226,
                            0.09882736, 0.05117963], rtol=3e-6)
  z = np.linspace(-30, 30, 61).astype(F32)
  close(lax.bessel_i0e(z), np.i0(z.astype(np.float64)) * np.exp(-np.abs(z.astype(np.float64))),
        rtol=3e-6)
  close(sp.i0(F32(3.0)), np.i0(3.0), rtol=3e-6)
  close(sp.i1(F32(3.0)), 3.953370217402609, rtol=3e-6)
  close(sp.i0e(Z), lax.bessel_i0e(Z))
  close(sp.i1e(Z), lax.bessel_i1e(Z))
  close(jax.vmap(jax.grad(lax.bessel_i1e))(Z),
        [-2.1012276e-03, -1.9435287e-02, 1.7577294e-01, 0.5, 1.1082128e-01, -1.3225898e-02,
         -3.0228198e-03, -4.2108074e-04], rtol=1e-4, atol=1e-7)
  w = np.array([-3.0, -0.5, 0.0, 0.5, 1.9, 2.1, 5.0, 9.0, 20.0], F32)
  want = [math.exp(float(v) ** 2) * math.erfc(float(v)) for v in w]
  close(sp.erfcx(w), want, rtol=3e-6)
  close(sp.erfcx(F32(1e4)), 1 / (math.sqrt(math.pi) * 1e4), rtol=1e-6)


def test_special_functions_jit_vmap_and_sharded():
  mesh = jax.make_mesh((8,), ("x",))
  a = np.linspace(0.5, 20.0, 16).astype(F32)
  x = np.linspace(0.1, 25.0, 16).astype(F32)
  put = lambda v: jax.device_put(v, jax.NamedSharding(mesh, jax.P("x")))  # noqa: E731
  want = np.asarray(lax.igamma(a, x))
  close(jax.jit(lax.igamma)(put(a), put(x)), want, rtol=1e-6)
  close(jax.vmap(lax.igamma)(a, x), want, rtol=1e-6)
  close(jax.jit(lambda v: lax.bessel_i0e(v) + lax.lgamma(v))(put(a)),
        np.asarray(lax.bessel_i0e(a)) + np.asarray(lax.lgamma(a)), rtol=1e-6)
  close(jax.jit(lax.betainc)(put(a), put(a[::-1].copy()), put(np.linspace(0, 1, 16).astype(F32))),
        lax.betainc(a, a[::-1].copy(), np.linspace(0, 1, 16).astype(F32)), rtol=1e-6)


def test_special_functions_want_floats():
  for fn, args in [(lax.lgamma, (np.int32(3),)), (lax.igamma, (np.int32(1), 2.0)),
                   (lax.bessel_i0e, (np.arange(3),))]:
    with pytest.raises(PartixError, match=rf"\[{fn.__name__}\].*i32"):
      fn(*args)
  close(sp.gammainc(2, 1), 1 - 2 * math.exp(-1), rtol=1e-6)  # scipy's names promote ints


# ---- generic reductions ----

def test_reduce_fast_and_generic():
  x = np.arange(1.0, 8.0, dtype=F32)
  assert float(lax.reduce(x, F32(1.0), lax.add, (0,))) == 29.0  # the init value counts once
  assert float(lax.reduce(x, F32(0.0), lambda a, b: a + b, (0,))) == 28.0
  m = np.arange(24, dtype=np.int32).reshape(2, 3, 4) * 7 % 11
  np.testing.assert_array_equal(lax.reduce(m, np.int32(0), lambda a, b: a + b, (0, 2)),
                                m.sum(axis=(0, 2)))
  np.testing.assert_array_equal(lax.reduce(m, np.int32(0), lax.bitwise_or, (1,)),
                                np.bitwise_or.reduce(m, axis=1))
  np.testing.assert_array_equal(lax.reduce(m, np.int32(-100), lax.max, (2,)), m.max(axis=2))
  np.testing.assert_array_equal(lax.reduce_xor(m, (2,)), np.bitwise_xor.reduce(m, axis=2))
  assert not bool(lax.reduce_xor(np.array([True, True, False]), (0,)))
  # A pytree of operands: the argmax as a (value, index) reduction.
  v, i = lax.reduce((x[::-1].copy(), np.arange(7, dtype=np.int32)), (F32(-np.inf), np.int32(0)),
                    lambda p, q: (jnp.maximum(p[0], q[0]), jnp.where(p[0] >= q[0], p[1], q[1])),
                    (0,))
  assert float(v) == 7.0 and int(i) == 0
  f = jax.jit(lambda t: lax.reduce(t, F32(0.0), lambda a, b: jnp.maximum(a, b) * 1.0, (1,)))
  y = np.random.default_rng(0).normal(size=(16, 5)).astype(F32)
  mesh = jax.make_mesh((8,), ("x",))
  ys = jax.device_put(y, jax.NamedSharding(mesh, jax.P("x")))
  close(f(ys), np.maximum(y.max(axis=1), 0))
  # The generic fold along the split dimension itself (gathered there first).
  close(jax.jit(lambda t: lax.reduce(t, F32(0.0), lambda a, b: a + b, (0,)))(ys), y.sum(axis=0),
        rtol=1e-5, atol=1e-5)
  yi = (y * 10).astype(np.int32)
  np.testing.assert_array_equal(
      lax.reduce_xor(jax.device_put(yi, jax.NamedSharding(mesh, jax.P("x"))), (0,)),
      np.bitwise_xor.reduce(yi, axis=0))
  close(jax.vmap(lambda r: lax.reduce(r, F32(0.0), lax.add, (0,)))(y), y.sum(axis=1), rtol=1e-5)
  close(jax.grad(lambda t: lax.reduce(t, F32(0.0), lambda a, b: a + b, (0,)))(x), np.ones(7))
  with pytest.raises(PartixError, match=r"\[reduce\].*\(0, 5\)"):
    lax.reduce(x, F32(0.0), lax.add, (0, 5))
  with pytest.raises(PartixError, match=r"\[reduce_xor\].*f32"):
    lax.reduce_xor(x, (0,))


def test_reduce_window_matches_jax():
  x = np.arange(1.0, 13.0, dtype=F32).reshape(3, 4)
  close(lax.reduce_window(x, -np.inf, lax.max, (2, 2), (1, 2), ((1, 0), (0, 1))),
        [[2, 4], [6, 8], [10, 12]])
  close(lax.reduce_window(x, 0.0, lax.add, (2, 2), (2, 1), "SAME", (2, 1), (1, 2)),
        [[2, 4, 6, 3], [6, 12, 14, 7], [10, 20, 22, 11]])
  close(lax.reduce_window(x, F32(1.0), lambda a, b: a * b, (1, 3), (1, 1), "VALID"),
        [[6, 24], [210, 336], [990, 1320]])
  close(lax.reduce_window(np.arange(1.0, 8.0, dtype=F32), F32(1.0), lax.add, (3,), (1,), "VALID"),
        [7, 10, 13, 16, 19])  # the init value once per window
  assert lax.reduce_window_shape_tuple((7,), (3,), (2,), ((1, 1),), (2,), (2,)) == (6,)
  f = jax.jit(lambda t: lax.reduce_window(t, 0.0, lax.add, (2, 2), (1, 1), "VALID"))
  close(f(x), x[:-1, :-1] + x[1:, :-1] + x[:-1, 1:] + x[1:, 1:])
  g = jax.grad(lambda t: jnp.sum(lax.reduce_window(t, -jnp.inf, lax.max, (2,), (2,), "VALID")))
  close(g(np.array([1.0, 3.0, 5.0, 2.0], F32)), [0, 1, 1, 0])
  with pytest.raises(PartixError, match=r"\[reduce_window\] window_dimensions \(0,\)"):
    lax.reduce_window(x[0], 0.0, lax.add, (0,), (1,), "VALID")


# ---- small names ----

def test_mulhi_is_exact():
  i32 = np.array([-7, 2**30, -2**31, 123456789, 2**31 - 1, -1], np.int32)
  j32 = np.array([3, 8, -2**31, -987654321, 2**31 - 1, -1], np.int32)
  want = (i32.astype(np.int64) * j32.astype(np.int64)) >> 32
  np.testing.assert_array_equal(lax.mulhi(i32, j32), want)
  np.testing.assert_array_equal(want, [-1, 2, 1073741824, -28389653, 1073741823, 0])
  u = np.array([2**32 - 1, 2**31, 123456789], np.uint32)
  v = np.array([2**32 - 1, 3, 4000000000], np.uint32)
  np.testing.assert_array_equal(lax.mulhi(u, v), (u.astype(np.uint64) * v) >> np.uint64(32))
  np.testing.assert_array_equal(lax.mulhi(np.array([-30000, 30000, 123], np.int16),
                                          np.array([30000, 30000, -5], np.int16)),
                                [-13733, 13732, -1])
  np.testing.assert_array_equal(lax.mulhi(np.array([65535, 40000], np.uint16),
                                          np.array([65535, 3], np.uint16)), [65534, 1])
  r = np.random.default_rng(0).integers(-2**31, 2**31, (2, 64)).astype(np.int32)
  np.testing.assert_array_equal(jax.jit(lax.mulhi)(r[0], r[1]),
                                (r[0].astype(np.int64) * r[1]) >> 32)
  with pytest.raises(PartixError, match=r"\[mulhi\].*f32"):
    lax.mulhi(np.ones(2, F32), np.ones(2, F32))


def test_small_names():
  e = lax.empty((2, 3), jnp.float32)
  assert e.shape == (2, 3) and e.dtype == np.float32
  assert lax.dtype(1.0) == np.float32 and lax.dtype(3) == np.int32
  assert lax.dtype(jnp.ones(2, jnp.bfloat16)) == jnp.bfloat16

  @lambda f: lax.composite(f, name="my.double")
  def double(t):
    return 2 * t
  close(jax.jit(double)(np.ones(3, F32)), [2, 2, 2])
  assert lax.dce_sink(np.ones(2)) is None
  assert float(lax.platform_dependent(F32(2.0), cpu=lambda t: t + 1, default=lambda t: t)) == 3
  assert float(lax.platform_dependent(F32(2.0), tpu=lambda t: t + 1, default=lambda t: t)) == 2
  with pytest.raises(PartixError, match=r"\[platform_dependent\].*'cpu'"):
    lax.platform_dependent(1.0, tpu=lambda t: t)
  b = lax.broadcast_like(jnp.array([1, 2, 3]), jnp.zeros((2, 3)))
  np.testing.assert_array_equal(b, [[1, 2, 3], [1, 2, 3]])


def test_ragged_dot_matches_jax():
  lhs = np.arange(14.0, dtype=F32).reshape(7, 2) / 3
  rhs = np.arange(24.0, dtype=F32).reshape(3, 2, 4) - 5
  want = [[-0.33333334, 0.0, 0.33333334, 0.6666667], [-4.3333335, -2.6666667, -1.0, 0.6666666],
          [-8.333334, -5.3333335, -2.3333335, 0.6666665], [57.0, 61.333332, 65.666664, 70.0],
          [74.333336, 80.0, 85.66667, 91.333336], [0, 0, 0, 0], [0, 0, 0, 0]]
  sizes = np.array([3, 0, 2], np.int32)
  close(lax.ragged_dot(lhs, rhs, sizes), want, rtol=1e-5)
  close(jax.jit(lax.ragged_dot)(lhs, rhs, sizes), want, rtol=1e-5)
  g = jax.grad(lambda r: jnp.sum(lax.ragged_dot(lhs, r, sizes)))(rhs)
  close(g[0], np.outer(lhs[:3].sum(0), np.ones(4)), rtol=1e-5)
  close(g[1], np.zeros((2, 4)))
  with pytest.raises(PartixError, match=r"\[ragged_dot\]"):
    lax.ragged_dot(lhs, rhs, np.array([1, 2], np.int32))


def test_pbroadcast_and_pswapaxes_in_shard_map():
  mesh = jax.make_mesh((8,), ("x",))
  put = lambda v: jax.device_put(v, jax.NamedSharding(mesh, jax.P("x")))  # noqa: E731
  x = np.arange(16.0, dtype=F32).reshape(8, 2)
  f = jax.jit(jax.shard_map(lambda a: lax.pbroadcast(a, "x", 3), mesh=mesh, in_specs=jax.P("x"),
                            out_specs=jax.P("x")))
  np.testing.assert_array_equal(f(put(x)), np.tile(x[3], (8, 1)))
  y = np.arange(128.0, dtype=F32).reshape(64, 2)
  g = jax.shard_map(lambda a: lax.pswapaxes(a, "x", 0), mesh=mesh, in_specs=jax.P("x"),
                    out_specs=jax.P("x"))
  # Device d's block row j comes from device j's block row d (JAX 0.10.2 gives the same).
  want = y.reshape(8, 8, 2).transpose(1, 0, 2).reshape(64, 2)
  np.testing.assert_array_equal(g(put(y)), want)
  with pytest.raises(PartixError, match=r"\[pbroadcast\] source 8"):
    jax.shard_map(lambda a: lax.pbroadcast(a, "x", 8), mesh=mesh, in_specs=jax.P("x"),
                  out_specs=jax.P("x"))(put(x))
  with pytest.raises(PartixError, match=r"\[pswapaxes\].*size 2"):
    jax.shard_map(lambda a: lax.pswapaxes(a, "x", 1), mesh=mesh, in_specs=jax.P("x"),
                  out_specs=jax.P("x"))(put(y))


def test_linalg_namespace():
  rng = np.random.default_rng(3)
  a = rng.normal(size=(2, 4, 4)).astype(F32) + 4 * np.eye(4, dtype=F32)
  b = rng.normal(size=(2, 4, 3)).astype(F32)
  br = rng.normal(size=(2, 3, 4)).astype(F32)
  for lower in (True, False):
    t = np.tril(a) if lower else np.triu(a)
    for tr in (False, True):
      op = np.swapaxes(t, -1, -2) if tr else t
      close(lax.linalg.triangular_solve(a, b, left_side=True, lower=lower, transpose_a=tr),
            np.linalg.solve(op, b), rtol=1e-4, atol=1e-5)
      close(lax.linalg.triangular_solve(a, br, left_side=False, lower=lower, transpose_a=tr),
            np.swapaxes(np.linalg.solve(np.swapaxes(op, -1, -2), np.swapaxes(br, -1, -2)), -1, -2),
            rtol=1e-4, atol=1e-5)
  unit = np.tril(a, -1) + np.eye(4, dtype=F32)
  close(lax.linalg.triangular_solve(a, b, left_side=True, lower=True, unit_diagonal=True),
        np.linalg.solve(unit, b), rtol=1e-4, atol=1e-5)
  grad = jax.grad(lambda m: jnp.sum(lax.linalg.triangular_solve(m, b[0], left_side=True,
                                                                 lower=True)))(a[0])
  h, e = 1e-2, np.zeros((4, 4), F32)
  e[2, 1] = h
  fd = (np.linalg.solve(np.tril(a[0] + e), b[0]).sum() - np.linalg.solve(np.tril(a[0] - e),
                                                                          b[0]).sum()) / (2 * h)
  close(grad[2, 1], fd, rtol=1e-2)
  s = a @ np.swapaxes(a, -1, -2)
  chol = lax.linalg.cholesky(s)
  close(chol @ np.swapaxes(np.asarray(chol), -1, -2), s, rtol=1e-4, atol=1e-3)
  v, w = lax.linalg.eigh(s)
  close(w, np.linalg.eigvalsh(s), rtol=1e-4, atol=1e-3)
  close(np.asarray(v) @ (np.asarray(w)[..., None] * np.swapaxes(np.asarray(v), -1, -2)), s,
        rtol=1e-4, atol=1e-3)
  q, r = lax.linalg.qr(a)
  close(np.asarray(q) @ np.asarray(r), a, rtol=1e-4, atol=1e-4)
  u, sv, vt = lax.linalg.svd(a)
  close(sv, np.linalg.svd(a, compute_uv=False), rtol=1e-4, atol=1e-4)
  close((np.asarray(u) * np.asarray(sv)[..., None, :]) @ np.asarray(vt), a, rtol=1e-4, atol=1e-4)
  with pytest.raises(PartixError, match=r"\[qr\].*full_matrices"):
    lax.linalg.qr(np.ones((5, 3), F32))
  with pytest.raises(PartixError, match=r"\[triangular_solve\]"):
    lax.linalg.triangular_solve(a, b, left_side=False)


def _cg(matvec, b):
  """Conjugate gradients in a while_loop (which partix does not reverse-differentiate)."""
  def body(c):
    x, r, p, k = c
    ap = matvec(p)
    al = jnp.dot(r, r) / jnp.dot(p, ap)
    rn = r - al * ap
    return x + al * p, rn, rn + jnp.dot(rn, rn) / jnp.dot(r, r) * p, k + 1
  return lax.while_loop(lambda c: (c[3] < 20) & (jnp.sum(c[1] * c[1]) > 1e-14), body,
                        (jnp.zeros_like(b), b, b, 0))[0]


def test_custom_linear_solve_differentiates_implicitly():
  a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.0], [0.5, 0.0, 2.0]], F32)
  b = np.array([1.0, 2.0, -1.0], F32)

  def ls(m, v):
    return lax.custom_linear_solve(lambda t: m @ t, v, _cg, symmetric=True)
  close(ls(a, b), np.linalg.solve(a, b), rtol=1e-5)
  ga, gb = jax.grad(lambda m, v: jnp.sum(ls(m, v) ** 2), argnums=(0, 1))(a, b)
  # JAX 0.10.2's gradients of the same program.
  close(ga, [[-0.0089363, -0.03319195, 0.02936211], [-0.0641954, -0.23844004, 0.21092772],
             [0.09136903, 0.33937064, -0.30021247]], rtol=1e-4, atol=1e-6)
  close(gb, [0.05425608, 0.38975778, -0.5547405], rtol=1e-4)
  w = np.arange(3.0, dtype=F32)
  ga, gb = jax.jit(jax.grad(lambda m, v: jnp.sum(lax.custom_linear_solve(
      lambda t: m @ t, v, _cg, transpose_solve=_cg) * w), argnums=(0, 1)))(a, b)
  lam = np.linalg.solve(a.T, w)  # closed form: db = A^-T w, dA = -outer(db, x)
  close(gb, lam, rtol=1e-4)
  close(ga, -np.outer(lam, np.linalg.solve(a, b)), rtol=1e-4, atol=1e-6)
  x, aux = lax.custom_linear_solve(lambda t: a @ t, b, lambda mv, v: (_cg(mv, v), 7),
                                   symmetric=True, has_aux=True)
  close(x, np.linalg.solve(a, b), rtol=1e-5)
  assert aux == 7


def test_custom_root_differentiates_implicitly():
  def newton(f, x0):
    return lax.fori_loop(0, 30, lambda i, x: x - f(x) / jax.grad(f)(x), x0)

  def sqrt_root(a):
    return lax.custom_root(lambda x: x * x - a, 1.0, newton, lambda g, y: y / g(1.0))
  close(sqrt_root(F32(2.0)), math.sqrt(2.0), rtol=1e-6)
  close(jax.grad(sqrt_root)(F32(2.0)), 0.5 / math.sqrt(2.0), rtol=1e-5)
  close(jax.jit(jax.grad(sqrt_root))(F32(9.0)), 1 / 6, rtol=1e-5)
  close(jax.vmap(jax.grad(sqrt_root))(np.array([1.0, 4.0, 16.0], F32)), [0.5, 0.25, 0.125],
        rtol=1e-5)
  # A vector root: x with m x = p (linear f), tangent_solve by numpy-free Gauss elimination.
  m = np.array([[3.0, 1.0], [1.0, 2.0]], F32)

  def root_of(p):
    f = lambda x: m @ x - p  # noqa: E731
    solve = lambda g, x0: jnp.linalg.solve(m, p)  # noqa: E731
    tangent = lambda g, y: jnp.linalg.solve(m, y)  # noqa: E731
    return lax.custom_root(f, jnp.zeros(2), solve, tangent)
  close(jax.grad(lambda p: jnp.sum(root_of(p)))(np.array([1.0, 1.0], F32)),
        np.linalg.solve(m.T, np.ones(2)), rtol=1e-5)


def test_reduce_window_on_sharded_operands():
  mesh = jax.make_mesh((8,), ("x",))
  x = np.random.default_rng(0).normal(size=(16, 6)).astype(F32)
  xs = jax.device_put(x, jax.NamedSharding(mesh, jax.P("x")))
  f = jax.jit(lambda t: lax.reduce_window(t, -jnp.inf, lax.max, (3, 2), (1, 1), "SAME"))
  y = f(xs)
  close(y, lax.reduce_window(x, -np.inf, lax.max, (3, 2), (1, 1), "SAME"))
  assert y.sharding.spec == jax.P("x", None)  # the operand's, as JAX's
  close(lax.reduce_window(xs, 0.0, lax.add, (2, 3), (2, 1), "VALID"),
        lax.reduce_window(x, 0.0, lax.add, (2, 3), (2, 1), "VALID"), rtol=1e-6)
  # JAX refuses an output dimension that no longer divides over the mesh axis (14 by 8).
  with pytest.raises(PartixError, match=r"\[reduce_window\].*14"):
    lax.reduce_window(xs, 0.0, lax.add, (3, 1), (1, 1), "VALID")


def test_tokens_pass_through_transformations():
  from partix.extend.core import Token
  t = lax.create_token(None)
  assert isinstance(t, Token) and t == lax.after_all(t, jnp.ones(2))
  x, t2 = jax.jit(lambda x, t: (x * 2, lax.after_all(t, x)))(jnp.arange(3.), t)
  np.testing.assert_array_equal(np.asarray(x), [0., 2., 4.])
  assert isinstance(t2, Token)
  ys, tok = jax.vmap(lambda v, t: (v + 1, t), in_axes=(0, None), out_axes=(0, None))(
      jnp.arange(4.), t)
  assert isinstance(tok, Token)
  c, _ = lax.scan(lambda c, v: ((c[0] + v, lax.after_all(c[1])), None), (0., t),
                  jnp.arange(3.))
  assert float(c[0]) == 3. and isinstance(c[1], Token)
  assert jax.tree.leaves(t) == []
  with pytest.raises(jax.PartixError, match=r"\[after_all\] operand 'a'"):
    lax.after_all("a")
