"""The JAX modules partix.as_jax installs beside the core ones: jax.scipy.special and
jax.scipy.stats.norm against scipy's closed forms (numpy), jax.flatten_util.ravel_pytree,
jax.dtypes, jax.typing, lax.Precision, jnp.vectorize against a loop, and numpy.linalg.norm's
ords against numpy."""
import math

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import dtypes, flatten_util, lax, typing
from partix.scipy import special
from partix.scipy.stats import norm


def test_special_and_norm():
  x = np.linspace(-2.5, 2.5, 11).astype(np.float32)
  erf = np.vectorize(math.erf)
  np.testing.assert_allclose(special.erf(x), erf(x), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(special.ndtr(x), 0.5 * (1 + erf(x / np.sqrt(2))), atol=1e-6)
  p = np.array([0.05, 0.3, 0.5, 0.9], np.float32)
  np.testing.assert_allclose(special.ndtr(special.ndtri(p)), p, atol=1e-5)
  np.testing.assert_allclose(special.expit(x), 1 / (1 + np.exp(-x)), rtol=1e-6)
  np.testing.assert_allclose(special.xlogy(np.float32([0, 2]), np.float32([0, 3])),
                             [0, 2 * np.log(3)], rtol=1e-6)
  np.testing.assert_allclose(norm.logpdf(x, 1.0, 2.0),
                             -((x - 1) / 2) ** 2 / 2 - np.log(2) - 0.5 * np.log(2 * np.pi),
                             rtol=1e-5)
  np.testing.assert_allclose(norm.ppf(norm.cdf(x)), x, atol=2e-3)
  np.testing.assert_allclose(jax.grad(lambda v: norm.cdf(v))(0.0), 1 / np.sqrt(2 * np.pi),
                             rtol=1e-5)
  with pytest.raises(AttributeError, match="partix does not provide jax.scipy.special.spence"):
    special.spence


def test_ravel_pytree_dtypes_typing_precision():
  tree = {"a": np.ones((2, 3), np.float32), "b": [np.arange(2, dtype=np.float32)]}
  flat, unravel = flatten_util.ravel_pytree(tree)
  assert flat.shape == (8,)
  back = unravel(flat * 2)
  np.testing.assert_array_equal(back["a"], np.full((2, 3), 2))
  np.testing.assert_array_equal(back["b"][0], [0, 2])
  with pytest.raises(jax.PartixError, match=r"unravel takes a vector of 8 values"):
    unravel(flat[:3])
  assert dtypes.canonicalize_dtype(np.float64) == np.float32
  assert dtypes.issubdtype(dtypes.bfloat16, np.floating)
  assert typing.ArrayLike is not None and typing.DTypeLike is not None
  a = np.ones((2, 3), np.float32)
  np.testing.assert_allclose(jnp.dot(a, a.T, precision=lax.Precision.HIGHEST), a @ a.T)


def test_vectorize():
  dot = jnp.vectorize(jnp.dot, signature="(n),(n)->()")
  a = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
  b = np.random.default_rng(1).standard_normal((3,)).astype(np.float32)
  np.testing.assert_allclose(dot(a, b), a @ b, rtol=1e-6)  # b broadcast over a's rows
  clip = jnp.vectorize(lambda v, lo: jnp.maximum(v, lo), excluded={1})
  np.testing.assert_array_equal(clip(a, 0.0), np.maximum(a, 0))
  with pytest.raises(jax.PartixError, match=r"fewer dimensions than its core dimensions"):
    dot(np.float32(1), b)


@pytest.mark.parametrize("ord", [None, 1, 2, np.inf, -np.inf, 0, 1.5, -1.5])
def test_vector_norms(ord):
  x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
  np.testing.assert_allclose(jnp.linalg.norm(x, ord, axis=1), np.linalg.norm(x, ord, axis=1),
                             rtol=1e-5)
  np.testing.assert_allclose(jnp.linalg.norm(x[0], ord), np.linalg.norm(x[0], ord), rtol=1e-5)


@pytest.mark.parametrize("ord", [None, "fro", 1, -1, np.inf, -np.inf])
def test_matrix_norms(ord):
  x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
  for axis in ((1, 2), (2, 1)):
    np.testing.assert_allclose(jnp.linalg.norm(x, ord, axis=axis, keepdims=True),
                               np.linalg.norm(x, ord, axis=axis, keepdims=True), rtol=1e-5)
  np.testing.assert_allclose(jnp.linalg.norm(x[0], ord), np.linalg.norm(x[0], ord), rtol=1e-5)


def test_spectral_norms_and_a_matrix_norm_of_a_vector():
  np.testing.assert_allclose(float(jnp.linalg.norm(np.ones((2, 2), np.float32), 2)), 2.0,
                             rtol=1e-6)  # the largest singular value of [[1, 1], [1, 1]]
  with pytest.raises(jax.PartixError, match=r"ord='nuc' is a matrix norm"):
    jnp.linalg.norm(np.ones(2, np.float32), "nuc")


def test_check_grads():
  from partix.test_util import check_grads
  x = np.array([0.3, -1.2, 2.0])
  check_grads(lambda v: jnp.sin(v) * v ** 2, (x,), order=2)
  check_grads(lambda a, b: jnp.sum(jnp.tanh(a * b)), (x, x[::-1].copy()), order=1,
              modes=["rev"])
  f32 = x.astype(np.float32)
  check_grads(lambda v: jnp.exp(v) / 3, (f32,), order=1)

  @jax.custom_jvp
  def wrong(v):
    return jnp.sin(v)
  wrong.defjvp(lambda p, t: (jnp.sin(p[0]), 2 * t[0]))  # not sin's derivative
  with pytest.raises(AssertionError, match=r"jvp against central differences"):
    check_grads(wrong, (x,), order=1, modes=["fwd"])


def test_reductions_with_where():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  m = x % 3 != 0
  for name, kw in [("sum", {}), ("mean", {}), ("max", {"initial": -1.0}),
                   ("min", {"initial": 100.0})]:
    for axis in (None, 0, 1):
      np.testing.assert_allclose(getattr(jnp, name)(x, axis=axis, where=m, **kw),
                                 getattr(np, name)(x, axis=axis, where=m, **kw), rtol=1e-6)
  np.testing.assert_array_equal(jnp.all(x > 0, axis=1, where=m), np.all(x > 0, axis=1, where=m))
  np.testing.assert_array_equal(jnp.any(x > 5, where=m), np.any(x > 5, where=m))
  with pytest.raises(jax.PartixError, match=r"\[max\] where= needs initial="):
    jnp.max(x, where=m)
  # The gradient flows only through the elements taken.
  g = jax.grad(lambda v: jnp.sum(v * v, where=m))(x)
  np.testing.assert_array_equal(g, np.where(m, 2 * x, 0))


def test_softmax_and_logsumexp_with_where_and_weights():
  # Values from JAX 0.10.2 (jax.nn on the same inputs).
  x = np.array([[1., 2., 3.], [0., -1., 4.]], np.float32)
  m = np.array([[True, False, True], [True, True, False]])
  np.testing.assert_allclose(jax.nn.softmax(x, where=m),
                             [[0.11920291, 0., 0.880797], [0.7310586, 0.26894143, 0.]],
                             rtol=1e-6)
  np.testing.assert_allclose(jax.nn.log_softmax(x, where=m),
                             [[-2.126928, -np.inf, -0.12692805], [-0.31326163, -1.3132616,
                                                                 -np.inf]], rtol=1e-6)
  np.testing.assert_allclose(jax.nn.logsumexp(x, axis=1, where=m), [3.126928, 0.31326163],
                             rtol=1e-6)
  v, s = jax.nn.logsumexp(x, axis=1, b=np.array([1., -2., 1.], np.float32), return_sign=True)
  np.testing.assert_allclose(v, [2.0826497, 4.004828], rtol=1e-6)
  np.testing.assert_array_equal(s, [1, 1])
  assert float(jax.nn.logsumexp(x, b=0.0)) == -np.inf
  assert np.isnan(float(jax.nn.logsumexp(np.float32([0, 1]), b=np.float32([1, -2]))))
  np.testing.assert_allclose(jax.nn.sparse_plus(np.float32([-2, 0, 0.5, 3])),
                             [0, 0.25, 0.5625, 3])
  np.testing.assert_allclose(jax.nn.sparse_sigmoid(np.float32([-2, 0, 0.5, 3])),
                             [0, 0.5, 0.75, 1])


@pytest.mark.parametrize("k", [0, 1, -2])
def test_diag(k):
  v = np.array([1., 2., 3.], np.float32)
  np.testing.assert_array_equal(jnp.diag(v, k), np.diag(v, k))
  m = np.arange(12.).reshape(3, 4).astype(np.float32)
  np.testing.assert_array_equal(jnp.diag(m, k), np.diag(m, k))
  np.testing.assert_array_equal(jnp.diagflat(m[:2, :2], k), np.diagflat(m[:2, :2], k))
  np.testing.assert_array_equal(jax.jit(lambda u: jnp.diag(u, k))(v), np.diag(v, k))
  with pytest.raises(jax.PartixError, match=r"\[diag\] takes a 1-D or 2-D array"):
    jnp.diag(np.ones((2, 2, 2), np.float32))


def test_nn_initializers():
  from partix.nn import initializers as init
  k = jax.random.key(0)
  cases = [(init.glorot_uniform(), (256, 512), np.sqrt(2 / (256 + 512))),
           (init.glorot_normal(), (256, 512), np.sqrt(2 / (256 + 512))),
           (init.he_normal(), (1000, 300), np.sqrt(2 / 1000)),
           (init.he_uniform(), (1000, 300), np.sqrt(2 / 1000)),
           (init.lecun_normal(), (3, 3, 64, 128), np.sqrt(1 / (3 * 3 * 64))),
           (init.lecun_uniform(), (3, 3, 64, 128), np.sqrt(1 / (3 * 3 * 64))),
           (init.normal(0.5), (400, 400), 0.5)]
  for f, shape, std in cases:
    w = np.asarray(f(k, shape))
    assert w.shape == shape and w.dtype == np.float32
    assert abs(w.std() / std - 1) < 0.03, (f, w.std(), std)
  bound = np.sqrt(6 / (256 + 512))
  w = np.asarray(init.glorot_uniform()(k, (256, 512)))
  assert w.max() <= bound and w.min() >= -bound
  w = np.asarray(init.glorot_normal()(k, (256, 512)))
  assert np.abs(w).max() <= 2 * np.sqrt(2 / (256 + 512)) / 0.87962566103423978 + 1e-6
  u = np.asarray(init.uniform(0.1)(k, (1000,)))
  assert u.min() >= 0 and u.max() < 0.1
  np.testing.assert_array_equal(init.constant(3.0)(k, (2,)), [3, 3])
  assert init.zeros(k, (2,), jnp.int32).dtype == np.int32 and float(init.ones(k, ()).sum()) == 1
  with pytest.raises(jax.PartixError, match=r"\[variance_scaling\] mode 'fan'"):
    init.variance_scaling(1.0, "fan", "normal")
  with pytest.raises(jax.PartixError, match=r"at least 2 dimensions"):
    init.glorot_uniform()(k, (5,))
  with pytest.raises(AttributeError, match=r"partix does not provide jax.nn.initializers.frobnicate"):
    init.frobnicate


@pytest.mark.parametrize("name,draw,mean,var", [
    ("exponential", lambda r, k, n: r.exponential(k, n), 1.0, 1.0),
    ("gumbel", lambda r, k, n: r.gumbel(k, n), 0.5772157, np.pi ** 2 / 6),
    ("laplace", lambda r, k, n: r.laplace(k, n), 0.0, 2.0),
    ("logistic", lambda r, k, n: r.logistic(k, n), 0.0, np.pi ** 2 / 3),
    ("lognormal", lambda r, k, n: r.lognormal(k, 0.5, n), np.exp(0.125),
     (np.exp(0.25) - 1) * np.exp(0.25)),
    ("rademacher", lambda r, k, n: r.rademacher(k, n), 0.0, 1.0),
    ("maxwell", lambda r, k, n: r.maxwell(k, n), 2 * np.sqrt(2 / np.pi), 3 - 8 / np.pi),
    ("weibull_min", lambda r, k, n: r.weibull_min(k, 1.0, 2.0, n), np.sqrt(np.pi) / 2,
     1 - np.pi / 4),
    ("pareto", lambda r, k, n: r.pareto(k, 5.0, n), 5 / 4, 5 / (16 * 3)),
])
def test_random_distributions_moments(name, draw, mean, var):
  n = 200_000
  x = np.asarray(draw(jax.random, jax.random.key(1), (n,)), np.float64)
  assert x.shape == (n,) and np.all(np.isfinite(x))
  assert abs(x.mean() - mean) < 5 * np.sqrt(var / n), (x.mean(), mean)
  assert abs(x.var() / var - 1) < 0.05, (x.var(), var)


def test_random_choice_and_others():
  r, k = jax.random, jax.random.key(2)
  assert sorted(np.asarray(r.choice(k, 5, (5,), replace=False)).tolist()) == [0, 1, 2, 3, 4]
  a = np.arange(10, 20, dtype=np.float32)
  got = np.asarray(r.choice(k, a, (4,), replace=False))
  assert len(set(got.tolist())) == 4 and set(got.tolist()) <= set(a.tolist())
  freq = np.bincount(np.asarray(r.choice(k, 3, (30000,), p=np.array([0.2, 0.3, 0.5],
                                                                      np.float32)))) / 30000
  np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.015)
  assert abs(np.median(np.asarray(r.cauchy(k, (100000,))))) < 0.02
  assert np.asarray(r.bits(k, (3,))).dtype == np.uint32  # JAX's default
  assert np.asarray(r.bits(k, (3,), np.int32)).dtype == np.int32
  x = np.asarray(r.double_sided_maxwell(k, 1.0, 2.0, (100000,)))
  assert abs(x.mean() - 1.0) < 0.05
  with pytest.raises(jax.PartixError, match=r"cannot take 6 samples without replacement from 5"):
    r.choice(k, 5, (6,), replace=False)
  with pytest.raises(jax.PartixError, match=r"\[random.bits\] dtype must be an integer type"):
    r.bits(k, (2,), np.float32)
  # Per-example keys under vmap draw as each example's key alone.
  keys = r.split(k, 3)
  np.testing.assert_array_equal(jax.vmap(lambda kk: r.exponential(kk, (2,)))(keys),
                                np.stack([np.asarray(r.exponential(kk, (2,))) for kk in keys]))


def test_more_tree_util():
  # Results as JAX 0.10.2 gives them on the same inputs.
  tu = jax.tree_util
  assert tu.flatten_one_level({"a": 1, "b": (2, 3)}) == ([1, (2, 3)], ("a", "b"))
  assert tu.flatten_one_level([1, (2,)]) == ([1, (2,)], None)
  assert tu.flatten_one_level(None) == ((), None)
  keys, data = tu.flatten_one_level_with_keys({"a": 1, "b": (2, 3)})
  assert [str(k) for k, _ in keys] == ["['a']", "['b']"] and data == ("a", "b")
  with pytest.raises(jax.PartixError, match=r"can't tree-flatten type"):
    tu.flatten_one_level(1)
  assert tu.tree_broadcast((1, {"a": 2}), ((3, 4), {"a": [5, 6]})) == ((1, 1), {"a": [2, 2]})
  assert tu.tree_reduce_associative(lambda a, b: a + b, [1, 2, 3, 4, 5]) == 15
  assert tu.tree_reduce_associative(lambda a, b: a + b, [], identity=0) == 0
  assert not tu.all_leaves([1, 2.0, None]) and not tu.all_leaves([1, (2,)])
  assert tu.all_leaves([1, np.ones(2)])
  assert tu.is_tree_node(tuple) and tu.is_tree_node(dict) and not tu.is_tree_node(int)
  outer, inner = tu.tree_structure([0, 0]), tu.tree_structure((0, 0))
  assert tu.tree_transpose(outer, inner, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
  t = tu.tree_structure({"x": 1, "y": (2, 3)})
  assert tu.treedef_children(t) == [tu.tree_structure(1), tu.tree_structure((2, 3))]
  assert tu.treedef_tuple([t, t]) == tu.tree_structure(({"x": 1, "y": (2, 3)},) * 2)

  @tu.register_pytree_with_keys_class
  class Pair:
    def __init__(self, a, b):
      self.a, self.b = a, b

    def tree_flatten_with_keys(self):
      return ((tu.GetAttrKey("a"), self.a), (tu.GetAttrKey("b"), self.b)), None

    @classmethod
    def tree_unflatten(cls, aux, children):
      return cls(*children)
  doubled = jax.tree_util.tree_map(lambda v: v * 2, Pair(1, 2))
  assert (doubled.a, doubled.b) == (2, 4)
  paths = [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(Pair(1, 2))]
  assert paths == [".a", ".b"]
