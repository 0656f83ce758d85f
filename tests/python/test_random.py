"""partix.random: keys, shapes, dtypes, statistics, determinism, sharding independence."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import random
from partix.sharding import NamedSharding, PartitionSpec as P


def test_keys_split_fold_in():
  # random.key gives a typed key (shape (), dtype key<fry>), as JAX; PRNGKey its raw data.
  k = random.key(0)
  assert k.shape == ()
  kd = lambda x: np.asarray(random.key_data(x))
  np.testing.assert_array_equal(np.asarray(random.PRNGKey(0)), kd(k))
  assert not np.array_equal(kd(random.key(1)), kd(k))
  ks = random.split(k)
  assert ks.shape == (2,)
  assert random.split(k, 5).shape == (5,)
  k23 = random.split(k, (2, 3))
  assert k23.shape == (2, 3)
  np.testing.assert_array_equal(kd(k23).reshape(6, 2), kd(random.split(k, 6)))
  assert len({tuple(r) for r in kd(random.split(k, 5))}) == 5
  np.testing.assert_array_equal(kd(random.split(k, 3)), kd(random.split(k, 3)))
  f1, f2 = random.fold_in(k, 1), random.fold_in(k, 2)
  assert not np.array_equal(kd(f1), kd(f2))
  np.testing.assert_array_equal(kd(f1), kd(random.fold_in(k, 1)))
  # split keys can be used directly
  a, b = random.split(k)
  assert not np.array_equal(np.asarray(random.normal(a, (4,))), np.asarray(random.normal(b, (4,))))


def test_distributions_statistics():
  k = random.key(42)
  n = 20000
  x = np.asarray(random.normal(k, (n,)))
  assert x.dtype == np.float32 and x.shape == (n,)
  assert abs(x.mean()) < 0.05 and abs(x.std() - 1) < 0.05
  u = np.asarray(random.uniform(k, (n,), minval=2.0, maxval=4.0))
  assert u.min() >= 2.0 and u.max() < 4.0 and abs(u.mean() - 3.0) < 0.03
  assert abs(u.std() - 2 / np.sqrt(12)) < 0.02
  r = np.asarray(random.randint(k, (n,), 3, 9))
  assert r.dtype == np.int32 and r.min() == 3 and r.max() == 8
  assert abs(r.mean() - 5.5) < 0.1
  b = np.asarray(random.bernoulli(k, 0.3, (n,)))
  assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.02
  logits = np.log(np.array([0.1, 0.2, 0.7], np.float32))
  c = np.asarray(random.categorical(k, np.broadcast_to(logits, (n, 3)).copy()))
  assert c.shape == (n,)
  freq = np.bincount(c, minlength=3) / n
  np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.02)
  h = random.normal(k, (3, 4), dtype=jnp.bfloat16)
  assert h.dtype == jnp.bfloat16 and h.shape == (3, 4)
  assert random.normal(k).shape == ()


def test_determinism_and_sharding_independence(mesh8):
  k = random.key(7)
  ref = np.asarray(random.normal(k, (8, 6)))
  np.testing.assert_array_equal(np.asarray(random.normal(k, (8, 6))), ref)
  for spec in (P("x"), P("x", "y"), P(None, "y"), P()):
    s = NamedSharding(mesh8, spec)
    y = random.normal(k, (8, 6), out_sharding=s)
    assert y.sharding.spec == spec
    np.testing.assert_array_equal(np.asarray(y), ref)
    u = random.uniform(k, (8, 6), out_sharding=s)
    np.testing.assert_array_equal(np.asarray(u), np.asarray(random.uniform(k, (8, 6))))
    r = random.randint(k, (8, 6), 0, 100, out_sharding=s)
    np.testing.assert_array_equal(np.asarray(r), np.asarray(random.randint(k, (8, 6), 0, 100)))
  with jax.set_mesh(mesh8):
    y = random.normal(k, (8, 6), out_sharding=P("x"))
  np.testing.assert_array_equal(np.asarray(y), ref)
  # inside jit, the same values
  yj = jax.jit(lambda k: random.normal(k, (8, 6)))(k)
  np.testing.assert_allclose(np.asarray(yj), ref)


def test_bad_input():
  with pytest.raises(jax.PartixError, match=r"^\[random\.key\]"):
    random.key("a")
  with pytest.raises(jax.PartixError, match=r"^\[random\.normal\]"):
    random.normal(jnp.ones(3), (2,))
  with pytest.raises(jax.PartixError, match=r"^\[random\.uniform\]"):
    random.uniform(random.key(0), (2,), dtype=jnp.int32)
  with pytest.raises(jax.PartixError, match=r"^\[random\.randint\]"):
    random.randint(random.key(0), (2,), 0, 5, dtype=jnp.float32)
  with pytest.raises(jax.PartixError):
    random.normal(random.key(0), (-1,))
  with pytest.raises(jax.PartixError, match=r"^\[random\.split\]"):
    random.split(random.key(0), "2")
  with pytest.raises(jax.PartixError, match=r"^\[random\.split\]"):
    random.split(random.key(0), -1)


def test_bernoulli_array_p():
  k = random.key(3)
  p = np.array([0.0, 1.0, 0.25, 0.75], np.float32)
  b = np.asarray(random.bernoulli(k, jnp.asarray(p)))
  assert b.dtype == np.bool_ and b[0] == False and b[1] == True  # noqa: E712
  # the same stream as a scalar p: uniform(key, shape) < p
  np.testing.assert_array_equal(np.asarray(random.bernoulli(k, 0.3, (500,))),
                                np.asarray(random.uniform(k, (500,))) < 0.3)
  big = np.asarray(random.bernoulli(k, np.full((2, 5000), 0.25, np.float32)))
  assert abs(big.mean() - 0.25) < 0.02
  with pytest.raises(jax.PartixError, match=r"^\[random\.bernoulli\]"):
    random.bernoulli(k, jnp.ones(3) * 0.5, (4,))


@pytest.mark.parametrize("a", [0.3, 1.0, 2.5, 9.0])
def test_gamma_family_moments(a):
  # Gamma(a) has mean a and variance a; the others follow from it (n = 40000 draws: the
  # standard error of the mean is sqrt(a / n) < 1.5% of a here).
  k = jax.random.key(3)
  g = np.asarray(jax.random.gamma(k, a, (40000,)))
  assert abs(g.mean() - a) < 5 * np.sqrt(a / 40000) and abs(g.var() / a - 1) < 0.06
  assert (g > 0).all()
  np.testing.assert_array_equal(jax.jit(lambda k: jax.random.gamma(k, a, (40000,)))(k), g)


def test_beta_dirichlet_chisquare_t():
  k = jax.random.key(5)
  b = np.asarray(jax.random.beta(k, 2.0, 5.0, (40000,)))
  assert abs(b.mean() - 2 / 7) < 0.005 and ((b > 0) & (b < 1)).all()
  d = np.asarray(jax.random.dirichlet(k, np.array([1.0, 2.0, 3.0], np.float32), (20000,)))
  np.testing.assert_allclose(d.sum(1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(d.mean(0), [1 / 6, 2 / 6, 3 / 6], atol=0.01)
  assert abs(np.asarray(jax.random.chisquare(k, 4.0, (40000,))).mean() - 4.0) < 0.08
  assert abs(np.asarray(jax.random.t(k, 10.0, (40000,))).var() - 10 / 8) < 0.06
  assert np.asarray(jax.random.loggamma(k, 2.0, (3,))).shape == (3,)


def test_more_distributions_moments():
  k, n = jax.random.key(1), 40000
  r = np.asarray(jax.random.rayleigh(k, 2.0, (n,)))
  assert abs(r.mean() - 2 * np.sqrt(np.pi / 2)) < 0.03
  t = np.asarray(jax.random.triangular(k, 0.0, 1.0, 4.0, (n,)))
  assert abs(t.mean() - 5 / 3) < 0.02 and t.min() >= 0 and t.max() <= 4
  w = np.asarray(jax.random.wald(k, 1.5, (n,)))
  assert abs(w.mean() - 1.5) < 0.03 and abs(w.var() / 1.5 ** 3 - 1) < 0.08
  g = np.asarray(jax.random.geometric(k, 0.25, (n,)))
  assert abs(g.mean() - 4) < 0.06 and g.min() == 1 and g.dtype == np.int32
  gn = np.asarray(jax.random.generalized_normal(k, 2.0, (n,)))  # p = 2: N(0, 1/2)
  assert abs(gn.var() - 0.5) < 0.02 and abs(gn.mean()) < 0.02
  b = np.asarray(jax.random.ball(k, 3, 2, (n,)))
  radius = np.linalg.norm(b, axis=-1)
  assert radius.max() <= 1.0 + 1e-6 and abs((radius ** 3).mean() - 0.5) < 0.01  # uniform volume
  np.testing.assert_array_equal(jax.random.key_data(jax.random.clone(k)),
                                jax.random.key_data(k))
