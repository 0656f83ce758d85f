"""partix.nn against numpy formulas, on one device, on sharded inputs and inside jit."""
import math

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P

X = np.linspace(-4, 4, 32, dtype=np.float32).reshape(8, 4)


def _softmax(x, axis):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


def _lse(x, axis=None, keepdims=False):
  m = np.max(x, axis=axis, keepdims=True)
  out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
  return out if keepdims else np.squeeze(out, axis=axis)


_erf = np.vectorize(math.erf)
REFS = {
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
    "gelu_exact": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "softmax": lambda x: _softmax(x, -1),
    "softmax0": lambda x: _softmax(x, 0),
    "log_softmax": lambda x: np.log(_softmax(x, -1)),
    "log_softmax0": lambda x: np.log(_softmax(x, 0)),
    "logsumexp": lambda x: _lse(x),
    "logsumexp1": lambda x: _lse(x, 1),
    "logsumexp_k": lambda x: _lse(x, (0, 1), True),
    "softplus": lambda x: np.log1p(np.exp(x)),
    "log_sigmoid": lambda x: -np.log1p(np.exp(-x)),
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.01 * x),
    "elu": lambda x: np.where(x > 0, x, np.exp(x) - 1),
    "celu": lambda x: np.where(x > 0, x, 0.5 * (np.exp(x / 0.5) - 1)),
    "selu": lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 *
                                                     (np.exp(x) - 1)),
    "relu6": lambda x: np.minimum(np.maximum(x, 0), 6),
    "hard_tanh": lambda x: np.clip(x, -1, 1),
    "hard_sigmoid": lambda x: np.minimum(np.maximum(x + 3, 0), 6) / 6,
    "hard_silu": lambda x: x * np.minimum(np.maximum(x + 3, 0), 6) / 6,
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
    "glu": lambda x: x[:, :2] / (1 + np.exp(-x[:, 2:])),
    "tanh": np.tanh,
}
FNS = {
    "relu": jax.nn.relu, "sigmoid": jax.nn.sigmoid, "silu": jax.nn.silu, "gelu": jax.nn.gelu,
    "gelu_exact": lambda x: jax.nn.gelu(x, approximate=False),
    "softmax": jax.nn.softmax, "softmax0": lambda x: jax.nn.softmax(x, axis=0),
    "log_softmax": jax.nn.log_softmax,
    "log_softmax0": lambda x: jax.nn.log_softmax(x, axis=0),
    "logsumexp": jax.nn.logsumexp, "logsumexp1": lambda x: jax.nn.logsumexp(x, axis=1),
    "logsumexp_k": lambda x: jax.nn.logsumexp(x, axis=(0, -1), keepdims=True),
    "celu": lambda x: jax.nn.celu(x, alpha=0.5),
}
for _n in ("softplus", "log_sigmoid", "leaky_relu", "elu", "selu", "relu6", "hard_tanh",
           "hard_sigmoid", "hard_silu", "mish", "glu", "tanh"):
  FNS[_n] = getattr(jax.nn, _n)


@pytest.mark.parametrize("name", sorted(FNS))
def test_activation_matches_numpy(name, mesh8):
  want = REFS[name](X.astype(np.float64))
  for a in (jnp.asarray(X), jax.device_put(X, NamedSharding(mesh8, P("x", "y")))):
    for got in (FNS[name](a), jax.jit(FNS[name])(a)):
      assert got.dtype == np.float32
      np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-6)


def test_dtypes_and_ints():
  b = jnp.asarray(X, jnp.bfloat16)
  assert jax.nn.relu(b).dtype == jnp.bfloat16 and jax.nn.softmax(b).dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(jax.nn.relu(np.array([-2, 3], np.int32))), [0, 3])
  np.testing.assert_allclose(np.asarray(jax.nn.sigmoid(np.array([0], np.int32))), [0.5])
  np.testing.assert_allclose(np.asarray(jax.nn.softmax(np.array([0, 0], np.int32))), [0.5, 0.5])


def test_one_hot(mesh8):
  labels = np.array([0, 3, 1, 3, 2, 0, 1, 2], np.int32)
  want = np.eye(4, dtype=np.float32)[labels]
  for a in (jnp.asarray(labels), jax.device_put(labels, NamedSharding(mesh8, P("x")))):
    got = jax.nn.one_hot(a, 4)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), want)
  np.testing.assert_array_equal(np.asarray(jax.nn.one_hot(labels, 4, dtype=jnp.int32)),
                                want.astype(np.int32))
  np.testing.assert_array_equal(np.asarray(jax.nn.one_hot(labels, 4, axis=0)), want.T)
  # out-of-range labels give all-zero rows, as in JAX
  np.testing.assert_array_equal(np.asarray(jax.nn.one_hot(np.array([5, -1]), 4)),
                                np.zeros((2, 4)))


def test_standardize():
  want = (X - X.mean(-1, keepdims=True)) / np.sqrt(X.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(np.asarray(jax.nn.standardize(X)), want, rtol=1e-5, atol=1e-5)


BAD = [
    ("softmax axis", lambda: jax.nn.softmax(jnp.ones((2, 3)), axis=2), "softmax"),
    ("log_softmax axis", lambda: jax.nn.log_softmax(jnp.ones(3), axis=-2), "log_softmax"),
    ("logsumexp axis", lambda: jax.nn.logsumexp(jnp.ones(3), axis=1), "logsumexp"),
    ("relu string", lambda: jax.nn.relu("x"), "relu"),
    ("gelu None", lambda: jax.nn.gelu(None), "gelu"),
    ("one_hot axis", lambda: jax.nn.one_hot(jnp.arange(3), 4, axis=2), "one_hot"),
    ("one_hot classes", lambda: jax.nn.one_hot(jnp.arange(3), -1), "one_hot"),
    ("glu odd", lambda: jax.nn.glu(jnp.ones((2, 3))), "glu"),
    ("elu string", lambda: jax.nn.elu("x"), "elu"),
    ("one_hot dtype", lambda: jax.nn.one_hot(jnp.arange(3), 3, dtype=np.complex64), "one_hot"),
]


@pytest.mark.parametrize("name,f,api", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, f, api):
  with pytest.raises(jax.PartixError, match=r"^\[" + api):
    f()


def test_one_hot_float_labels():
  np.testing.assert_array_equal(np.asarray(jax.nn.one_hot(np.array([1.0, 2.5]), 3)),
                                [[0, 1, 0], [0, 0, 0]])


def _attention_reference(q, k, v, keep):
  g = q.shape[2] // k.shape[2]
  k, v = np.repeat(k, g, 2), np.repeat(v, g, 2)
  lg = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
  lg = np.where(keep, lg, -1e30)
  w = np.exp(lg - lg.max(-1, keepdims=True))
  return np.einsum("bnts,bsnh->btnh", w / w.sum(-1, keepdims=True), v)


def test_dot_product_attention_against_numpy():
  r = np.random.default_rng(0)
  q = r.standard_normal((2, 5, 4, 8)).astype(np.float32)
  k = r.standard_normal((2, 7, 2, 8)).astype(np.float32)  # grouped heads: 4 queries, 2 keys
  v = r.standard_normal((2, 7, 2, 8)).astype(np.float32)
  causal = np.tril(np.ones((5, 7), bool))
  np.testing.assert_allclose(jax.nn.dot_product_attention(q, k, v, is_causal=True),
                             _attention_reference(q, k, v, causal), atol=2e-6)
  lengths = np.array([3, 7])
  keep = np.arange(7)[None, None, None, :] < lengths[:, None, None, None]
  got = jax.jit(lambda a, b, c: jax.nn.dot_product_attention(
      a, b, c, key_value_seq_lengths=lengths))(q, k, v)
  np.testing.assert_allclose(got, _attention_reference(q, k, v, keep), atol=2e-6)
  np.testing.assert_allclose(jax.nn.dot_product_attention(q[0], k[0], v[0]),
                             _attention_reference(q[:1], k[:1], v[:1], True)[0], atol=2e-6)
  g = jax.grad(lambda a: jax.nn.dot_product_attention(a, k, v).sum())(q)
  assert np.all(np.isfinite(np.asarray(g)))
  with pytest.raises(jax.PartixError, match=r"^\[dot_product_attention\].*multiple"):
    jax.nn.dot_product_attention(q[:, :, :3], k, v)


def test_more_activations():
  x = np.array([-2.0, 0.0, 3.0], np.float32)
  np.testing.assert_allclose(jax.nn.soft_sign(x), x / (np.abs(x) + 1), rtol=1e-6)
  np.testing.assert_allclose(jax.nn.squareplus(x), (x + np.sqrt(x * x + 4)) / 2, rtol=1e-6)
  np.testing.assert_array_equal(jax.nn.identity(x), x)
  p = np.array([1e-3, 1.0, 30.0], np.float32)
  d = p.astype(np.float64)  # float64 reference, each branch where it is exact
  want = np.where(d < np.log(2), np.log(-np.expm1(-d)), np.log1p(-np.exp(-d)))
  np.testing.assert_allclose(jax.nn.log1mexp(p), want, rtol=1e-5)
  m = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
  np.testing.assert_allclose(jax.nn.logmeanexp(m, axis=1), np.log(np.exp(m).mean(1)), rtol=1e-6)


def test_softmax_family_on_an_empty_axis():
  # JAX: softmax and log_softmax of nothing are nothing; logsumexp of nothing is -inf (optax's
  # masked losses reach this when a random mask keeps no element).
  e = np.zeros((0,), np.float32)
  for f in (jax.nn.softmax, jax.nn.log_softmax):
    assert f(e).shape == (0,)
    assert jax.jit(f)(e).shape == (0,)
  assert float(jax.nn.logsumexp(e)) == -np.inf
  np.testing.assert_array_equal(jax.nn.logsumexp(np.zeros((3, 0), np.float32), axis=1),
                                np.full(3, -np.inf, np.float32))
  assert jax.nn.softmax(np.zeros((0, 4), np.float32), axis=0).shape == (0, 4)
  g = jax.grad(lambda x: jax.nn.log_softmax(x).sum())(e)
  assert g.shape == (0,)
