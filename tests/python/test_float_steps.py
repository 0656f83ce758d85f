"""jnp.nextafter / lax.nextafter and jnp.spacing against numpy, bit for bit, in f32, f16 and
bf16 (subnormals kept, as numpy's; JAX's CPU backend flushes them, docs/python.md), under jit,
vmap and on 8 devices; and lax.round's rounding methods against JAX 0.10.2's values."""
import ml_dtypes
import numpy as np
import pytest

import partix
import partix.lax as lax
import partix.numpy as jnp
from partix._src.core import PartixError


def _cases(dt, n=3000, seed=0):
  rng = np.random.default_rng(seed)
  fi = np.finfo(dt)
  special = [0, -0.0, 1, -1, 2, 0.5, fi.max, -fi.max, fi.tiny, fi.smallest_subnormal,
             -fi.smallest_subnormal, np.inf, -np.inf, np.nan, 3 * fi.smallest_subnormal]
  towards = [1, -1, 0, 0, -5, 0.5, np.inf, -np.inf, 0, 1, 1, 0, 0, 0, -1]
  with np.errstate(over="ignore"):
    x = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.integers(-45, 39, n), special])
    y = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.integers(-45, 39, n), towards])
  return x.astype(dt), y.astype(dt)


def _same(got, want):
  got, want = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
  both_nan = np.isnan(got) & np.isnan(want)
  same = ((got == want) & (np.signbit(got) == np.signbit(want))) | both_nan
  assert same.all(), (got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("dt", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_nextafter_is_numpys_bit_for_bit(dt):
  x, y = _cases(dt)
  got = jnp.nextafter(x, y)
  assert got.dtype == dt
  if dt is ml_dtypes.bfloat16:  # numpy has no bf16 nextafter: step in f32 bits by hand
    bits = x.view(np.uint16).astype(np.int32)
    up = (y.astype(np.float32) > x.astype(np.float32)) == (x.astype(np.float32) > 0)
    want = np.where(up, bits + 1, bits - 1).astype(np.uint16).view(ml_dtypes.bfloat16)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    tiny = np.float32(np.finfo(dt).smallest_subnormal)
    want = np.where(xf == 0, np.where(yf > xf, tiny, -tiny).astype(dt), want)
    want = np.where(xf == yf, y, want)
    want = np.where(np.isnan(xf) | np.isnan(yf), np.float32(np.nan).astype(dt), want)
    with np.errstate(invalid="ignore"):
      want = np.where((want.astype(np.float32) == 0) & (xf != yf), (xf * 0).astype(dt), want)
  else:
    # x == y gives y (C's and JAX's rule; numpy's float16 gives x: nextafter(-0, 0) is -0).
    with np.errstate(over="ignore"):
      want = np.where(x == y, y, np.nextafter(x, y))
  _same(got, want)


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_spacing_is_numpys(dt):
  x, _ = _cases(dt, seed=1)
  x = x[np.isfinite(x)]
  with np.errstate(invalid="ignore"):
    want = np.spacing(x)
  got = jnp.spacing(x)
  assert got.dtype == dt
  keep = ~((x == 0) & np.signbit(x))  # -0: numpy +tiny, JAX's rule (copysign) -tiny
  _same(np.asarray(got)[keep], want[keep])
  assert float(jnp.spacing(np.float32(-0.0))) == -np.finfo(np.float32).smallest_subnormal
  assert float(jnp.spacing(np.float32(1))) == np.finfo(np.float32).eps
  assert float(jnp.spacing(np.float32(-1))) == -np.finfo(np.float32).eps


def test_under_jit_vmap_and_sharded():
  x, y = _cases(np.float32, n=509, seed=2)
  x, y = x[:512], y[:512]
  want = np.nextafter(x, y)
  _same(partix.jit(lax.nextafter)(x, y), want)
  _same(partix.vmap(jnp.nextafter)(x.reshape(8, 64), y.reshape(8, 64)), want.reshape(8, 64))
  mesh = partix.make_mesh((8,), ("x",))
  s = partix.NamedSharding(mesh, partix.P("x"))
  xs, ys = partix.device_put(x, s), partix.device_put(y, s)
  got = partix.jit(jnp.nextafter)(xs, ys)
  _same(got, want)
  assert got.sharding.spec == partix.P("x")
  with np.errstate(invalid="ignore"):
    want_s = np.spacing(x)
  finite = np.isfinite(x) & (x != 0)
  _same(np.asarray(jnp.spacing(xs))[finite], want_s[finite])


def test_integers_become_floats_and_bad_input():
  assert jnp.nextafter(np.int32(1), np.int32(2)).dtype == np.float32
  assert float(jnp.nextafter(np.int32(1), np.int32(2))) == np.nextafter(np.float32(1), 2)
  with pytest.raises(PartixError):
    jnp.nextafter(np.array(["a"]), 1.0)


def test_lax_round_methods_as_jax():
  # JAX 0.10.2: lax.round rounds halves away from zero unless asked for TO_NEAREST_EVEN.
  x = np.float32([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 3.0, -1e30, 8388609.0])
  np.testing.assert_array_equal(lax.round(x),
                                np.float32([1, 2, 3, -1, -3, 0, 3, -1e30, 8388609.0]))
  np.testing.assert_array_equal(lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
                                np.float32([0, 2, 2, -0.0, -2, 0, 3, -1e30, 8388609.0]))
  np.testing.assert_array_equal(lax.round(x, 1), lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN))
  assert np.signbit(np.asarray(lax.round(np.float32(-0.2))))  # -0.2 rounds to -0, as XLA's
  np.testing.assert_array_equal(partix.jit(lax.round)(x), lax.round(x))
  g = partix.grad(lambda v: lax.round(v).sum())(x)
  np.testing.assert_array_equal(g, np.zeros_like(x))
  with pytest.raises(TypeError, match="lax.round.*int32"):
    lax.round(np.int32([1, 2]))
  with pytest.raises(PartixError, match="rounding_method=7"):
    lax.round(x, 7)
