"""partix.numpy against numpy: creation, elementwise math with JAX's promotion, reductions,
contractions, shape and indexing ops; on one device, on sharded inputs (mesh8) and inside jit."""
import ml_dtypes
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix._src.errors import PartixTypeError
from partix.sharding import NamedSharding, PartitionSpec as P

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 4)).astype(np.float32)
Y = RNG.standard_normal((8, 4)).astype(np.float32)
XI = RNG.integers(-5, 6, (8, 4)).astype(np.int32)


def _placements(mesh8):
  return [lambda a: jnp.asarray(a),
          lambda a: jax.device_put(a, NamedSharding(mesh8, P("x", "y")))]


def close(got, want, rtol=1e-5, atol=1e-5):
  got_np = np.asarray(got)
  want = np.asarray(want)
  assert got_np.shape == want.shape, (got_np.shape, want.shape)
  np.testing.assert_allclose(got_np.astype(np.float64), want.astype(np.float64), rtol=rtol,
                             atol=atol)


UNARY = [("exp", np.exp), ("log", lambda a: np.log(np.abs(a) + 1)), ("sin", np.sin),
         ("cos", np.cos), ("tanh", np.tanh), ("abs", np.abs), ("sign", np.sign),
         ("floor", np.floor), ("ceil", np.ceil), ("square", np.square), ("negative", np.negative),
         ("sqrt", lambda a: np.sqrt(np.abs(a))), ("log1p", lambda a: np.log1p(np.abs(a))),
         ("expm1", np.expm1), ("tan", np.tan), ("sinh", np.sinh), ("cosh", np.cosh),
         ("exp2", np.exp2), ("log2", lambda a: np.log2(np.abs(a) + 1)),
         ("log10", lambda a: np.log10(np.abs(a) + 1)), ("round", np.round), ("rint", np.rint),
         ("reciprocal", lambda a: np.reciprocal(a + 10))]


@pytest.mark.parametrize("name,ref", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, ref, mesh8):
  arg = {"log": lambda a: jnp.abs(a) + 1, "sqrt": jnp.abs, "log1p": jnp.abs,
         "log2": lambda a: jnp.abs(a) + 1, "log10": lambda a: jnp.abs(a) + 1,
         "reciprocal": lambda a: a + 10}.get(name, lambda a: a)
  f = lambda a: getattr(jnp, name)(arg(a))
  want = ref(X)
  for put in _placements(mesh8):
    close(f(put(X)), want, rtol=1e-4, atol=1e-5)
    close(jax.jit(f)(put(X)), want, rtol=1e-4, atol=1e-5)


BINARY = [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
          ("divide", np.divide), ("maximum", np.maximum), ("minimum", np.minimum),
          ("less", np.less), ("less_equal", np.less_equal), ("greater", np.greater),
          ("greater_equal", np.greater_equal), ("equal", np.equal), ("not_equal", np.not_equal),
          ("power", lambda a, b: np.power(np.abs(a) + 1, b)), ("arctan2", np.arctan2)]
BINARY = [b for b in BINARY if hasattr(jnp, b[0])]


@pytest.mark.parametrize("name,ref", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcasting(name, ref, mesh8):
  row = Y[:1]  # (1, 4) broadcasts against (8, 4)
  f = getattr(jnp, name)
  if name == "power":
    f = lambda a, b: jnp.power(jnp.abs(a) + 1, b)
  for put in _placements(mesh8):
    close(f(put(X), row), ref(X, row), rtol=1e-4)
    close(jax.jit(f)(put(X), jnp.asarray(row)), ref(X, row), rtol=1e-4)
    close(f(put(X), 0.5), ref(X, np.float32(0.5)), rtol=1e-4)


def test_integer_ops_match_numpy():
  a, b = XI, np.where(XI == 0, 3, XI).astype(np.int32)
  close(jnp.floor_divide(a, b), np.floor_divide(a, b))
  close(jnp.remainder(a, b), np.remainder(a, b))
  close(jnp.asarray(a) // 2, a // 2)
  close(jnp.asarray(a) % 3, a % 3)
  assert (jnp.asarray(a) // 2).dtype == np.int32


def test_promotion_rules():
  i = jnp.asarray(np.arange(4, dtype=np.int32))
  assert (i + 1).dtype == np.int32
  assert (i + 1.5).dtype == np.float32 and (1.5 + i).dtype == np.float32
  assert (i / i).dtype == np.float32
  close(i / 2, np.arange(4) / 2)
  b = jnp.ones(3, jnp.bfloat16)
  assert (b * 2.0).dtype == jnp.bfloat16 and (2 * b).dtype == jnp.bfloat16
  assert (b + jnp.ones(3, jnp.float32)).dtype == np.float32
  assert jnp.asarray(np.ones(3, np.float64)).dtype == np.float32
  assert jnp.asarray(np.ones(3, np.int64)).dtype == np.int32
  assert jnp.asarray(3).dtype == np.int32 and jnp.asarray(3.0).dtype == np.float32
  assert jnp.asarray(True).dtype == np.bool_
  assert (jnp.asarray([True, False]) + 1).dtype == np.int32
  h = jnp.ones(2, jnp.float16)
  assert (h + 1.0).dtype == np.float16
  assert (i + jnp.ones(4, jnp.float16)).dtype == np.float16
  assert jnp.result_type(jnp.int32, jnp.float32) == np.float32
  assert jnp.promote_types(jnp.bfloat16, jnp.float16) == np.float32
  # numpy operands on either side give partix arrays
  out = np.ones(4, np.float32) + i
  assert isinstance(out, jax.Array) and out.dtype == np.float32
  close(out, np.arange(4) + 1.0)


def test_creation(mesh8):
  close(jnp.zeros((2, 3)), np.zeros((2, 3)))
  assert jnp.zeros(3).dtype == np.float32 and jnp.zeros(3, jnp.int32).dtype == np.int32
  close(jnp.ones((2, 3), jnp.bfloat16), np.ones((2, 3)))
  assert jnp.ones(2, dtype=jnp.bfloat16).dtype == jnp.bfloat16
  close(jnp.full((2, 2), 7), np.full((2, 2), 7))
  assert jnp.full((2,), 7).dtype == np.int32 and jnp.full((2,), 7.0).dtype == np.float32
  close(jnp.full((2, 3), np.arange(3)), np.full((2, 3), np.arange(3)))
  a = jnp.asarray(XI)
  for f, r in [(jnp.zeros_like, np.zeros_like), (jnp.ones_like, np.ones_like)]:
    assert f(a).dtype == np.int32 and f(a).shape == XI.shape
    close(f(a), r(XI))
    assert f(a, dtype=jnp.float32).dtype == np.float32
  close(jnp.full_like(a, 3), np.full_like(XI, 3))
  for args in [(5,), (1, 10, 2), (0, 1, 0.25), (10, 0, -3)]:
    close(jnp.arange(*args), np.arange(*args))
  assert jnp.arange(5).dtype == np.int32 and jnp.arange(0, 1, 0.25).dtype == np.float32
  assert jnp.arange(3, dtype=jnp.float32).dtype == np.float32
  for args in [(2, -7, 3), (0.5, 3), (-1.5, 2.0, 0.5), (np.int32(2), 9, 2), (5, 1)]:
    close(jnp.arange(*args), np.arange(*args).astype(np.float32), rtol=1e-6)
    assert jnp.arange(*args).dtype == np.dtype(
        np.int32 if all(isinstance(v, (int, np.integer)) for v in args) else np.float32)
  close(jnp.arange(0, 5, 2, dtype=jnp.float32), np.arange(0, 5, 2))
  close(jnp.linspace(0, 1, 7), np.linspace(0, 1, 7))
  close(jnp.linspace(-3, 7.5, 13), np.linspace(-3, 7.5, 13))
  assert float(jnp.linspace(0.1, 0.7, 9)[-1]) == np.float32(0.7)
  close(jnp.linspace(-1, 2, 4, dtype=jnp.int32), np.floor(np.linspace(-1, 2, 4)))
  close(jnp.linspace([0, 1], [2, 5], 3), np.linspace([0, 1], [2, 5], 3))
  close(jnp.linspace([0, 1], [2, 5], 3, axis=1), np.linspace([0, 1], [2, 5], 3, axis=1))
  got, step = jnp.linspace(0, 1, 5, retstep=True)
  assert step == 0.25 and jnp.linspace(0, 1, 0).shape == (0,)
  close(jnp.linspace(0, 1, 1), np.linspace(0, 1, 1))
  close(jnp.linspace(0, 1, 4, endpoint=False), np.linspace(0, 1, 4, endpoint=False))
  for k in (-1, 0, 2):
    close(jnp.eye(3, 4, k), np.eye(3, 4, k))
    close(jnp.tri(4, 3, k), np.tri(4, 3, k))
    close(jnp.tril(X, k), np.tril(X, k))
    close(jnp.triu(X, k), np.triu(X, k))
  close(jnp.identity(3), np.identity(3))
  close(jnp.array([[1, 2], [3, 4]], ndmin=3), np.array([[1, 2], [3, 4]], ndmin=3))
  s = NamedSharding(mesh8, P("x", "y"))
  for z in (jnp.zeros((8, 4), out_sharding=s), jnp.ones((8, 4), device=s),
            jnp.full((8, 4), 2.0, out_sharding=s), jnp.arange(8, out_sharding=NamedSharding(
                mesh8, P("x"))), jnp.asarray(X, out_sharding=s)):
    assert z.sharding.spec[0] == "x"
  close(jnp.full((8, 4), 2.0, out_sharding=s), np.full((8, 4), 2.0))
  close(jnp.asarray(X, out_sharding=s), X)


REDUCTIONS = ["sum", "mean", "max", "min", "prod", "std", "var", "argmax", "argmin", "any",
              "all"]


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(name, axis, keepdims, mesh8):
  if name in ("argmax", "argmin") and isinstance(axis, tuple):
    return
  src = X > 0.3 if name in ("any", "all") else X[:4] * 0.5 if name == "prod" else X
  want = getattr(np, name)(src, axis=axis, keepdims=keepdims)
  s = NamedSharding(mesh8, P("x", "y")) if src.shape[0] == 8 else NamedSharding(mesh8, P("x"))
  f = lambda a: getattr(jnp, name)(a, axis=axis, keepdims=keepdims)
  for a in (jnp.asarray(src), jax.device_put(src, s)):
    got = f(a)
    assert np.asarray(got).dtype == want.dtype or name in ("argmax", "argmin"), got.dtype
    close(got, want, rtol=1e-4, atol=1e-5)
    close(jax.jit(f)(a), want, rtol=1e-4, atol=1e-5)


def test_reduction_details():
  close(jnp.std(X, axis=0, ddof=1), np.std(X, axis=0, ddof=1), rtol=1e-5)
  close(jnp.var(X, ddof=1), np.var(X, ddof=1), rtol=1e-5)
  close(X.shape[0] and jnp.asarray(X).std(axis=1, ddof=1), np.std(X, axis=1, ddof=1), rtol=1e-5)
  assert jnp.sum(XI).dtype == np.int32 and jnp.mean(XI).dtype == np.float32
  close(jnp.mean(XI, axis=0), np.mean(XI, axis=0))
  assert jnp.sum(jnp.asarray(X > 0)).dtype == np.int32
  close(jnp.sum(X, initial=10.0), np.sum(X, initial=10.0), rtol=1e-5)
  close(jnp.cumsum(XI), np.cumsum(XI))
  close(jnp.cumsum(X, axis=1), np.cumsum(X, axis=1), rtol=1e-5)
  close(jnp.cumsum(XI, axis=-2), np.cumsum(XI, axis=-2))
  close(jnp.count_nonzero(XI, axis=0), np.count_nonzero(XI, axis=0))
  close(jnp.average(X, axis=0, weights=np.arange(1, 9, dtype=np.float32)),
        np.average(X, axis=0, weights=np.arange(1, 9)), rtol=1e-5)
  close(jnp.amax(X), np.amax(X))


def test_contractions(mesh8):
  a = RNG.standard_normal((4, 8)).astype(np.float32)
  v = RNG.standard_normal(8).astype(np.float32)
  b3 = RNG.standard_normal((2, 4, 8)).astype(np.float32)
  c3 = RNG.standard_normal((2, 8, 3)).astype(np.float32)
  s = NamedSharding(mesh8, P("x", "y"))
  for xa in (jnp.asarray(X), jax.device_put(X, s)):
    close(xa @ a, X @ a, rtol=1e-4, atol=1e-4)
    close(jnp.matmul(xa, a), X @ a, rtol=1e-4, atol=1e-4)
    close(jax.jit(jnp.matmul)(xa, jnp.asarray(a)), X @ a, rtol=1e-4, atol=1e-4)
    close(jnp.dot(xa, a), X @ a, rtol=1e-4, atol=1e-4)
    close(jnp.einsum("ij,jk->ik", xa, a), X @ a, rtol=1e-4, atol=1e-4)
    close(jnp.einsum("ij->j", xa), X.sum(0), rtol=1e-4, atol=1e-4)
    close(jnp.tensordot(xa, a, 1), np.tensordot(X, a, 1), rtol=1e-4, atol=1e-4)
    close(jnp.tensordot(xa, X, axes=([0, 1], [0, 1])), np.tensordot(X, X, ([0, 1], [0, 1])),
          rtol=1e-4, atol=1e-4)
  close(jnp.matmul(a, v), a @ v, rtol=1e-4, atol=1e-4)
  close(jnp.matmul(b3, c3), b3 @ c3, rtol=1e-4, atol=1e-4)
  close(jnp.einsum("bij,bjk->bik", b3, c3), np.einsum("bij,bjk->bik", b3, c3), rtol=1e-4,
        atol=1e-4)
  close(jnp.dot(v, v), np.dot(v, v), rtol=1e-4)
  close(jnp.dot(2.0, v), 2.0 * v)
  close(jnp.dot(b3, c3[0]), np.dot(b3, c3[0]), rtol=1e-4, atol=1e-4)
  close(jnp.inner(a, a), np.inner(a, a), rtol=1e-4, atol=1e-4)
  close(jnp.outer(v, v[:3]), np.outer(v, v[:3]), rtol=1e-5)
  close(jnp.vdot(v, v), np.vdot(v, v), rtol=1e-4)
  assert jnp.matmul(jnp.ones((2, 3), jnp.int32), jnp.ones((3, 2), jnp.float32)).dtype == np.float32


def test_shape_ops(mesh8):
  s = NamedSharding(mesh8, P("x", "y"))
  x3 = X.reshape(2, 4, 4)
  for xa in (jnp.asarray(X), jax.device_put(X, s)):
    close(jnp.transpose(xa), X.T)
    close(jnp.reshape(xa, (4, -1)), X.reshape(4, -1))
    close(jnp.ravel(xa), X.ravel())
    close(jnp.swapaxes(xa, 0, 1), X.swapaxes(0, 1))
    close(jnp.expand_dims(xa, (0, -1)), np.expand_dims(X, (0, -1)))
    close(jnp.squeeze(jnp.expand_dims(xa, 1), 1), X)
    close(jnp.concatenate([xa, Y], axis=1), np.concatenate([X, Y], 1))
    close(jnp.concatenate([xa, Y], axis=None), np.concatenate([X, Y], axis=None))
    close(jnp.stack([xa, Y], axis=-1), np.stack([X, Y], -1))
    for got, want in zip(jnp.split(xa, 4), np.split(X, 4)):
      close(got, want)
    for got, want in zip(jnp.split(xa, [1, 5], axis=0), np.split(X, [1, 5], axis=0)):
      close(got, want)
    for got, want in zip(jnp.array_split(xa, 3, axis=0), np.array_split(X, 3, axis=0)):
      close(got, want)
    close(jnp.pad(xa, ((1, 2), (0, 1))), np.pad(X, ((1, 2), (0, 1))))
    close(jnp.pad(xa, 1, constant_values=3.0), np.pad(X, 1, constant_values=3.0))
    close(jnp.roll(xa, 3, axis=0), np.roll(X, 3, axis=0))
    close(jnp.roll(xa, -1), np.roll(X, -1))
    close(jnp.roll(xa, (1, 2), axis=(0, 1)), np.roll(X, (1, 2), axis=(0, 1)))
    close(jnp.flip(xa, 1), np.flip(X, 1))
    close(jnp.repeat(xa, 2, axis=1), np.repeat(X, 2, axis=1))
    close(jnp.repeat(xa, 2), np.repeat(X, 2))
    close(jnp.tile(xa, (2, 1)), np.tile(X, (2, 1)))
    close(jnp.clip(xa, -0.5, 0.5), np.clip(X, -0.5, 0.5))
    close(jnp.clip(xa, max=0.2), np.clip(X, None, 0.2))
    close(jnp.sort(xa, axis=0), np.sort(X, axis=0))
    close(jnp.sort(xa), np.sort(X))
    close(jnp.argsort(xa), np.argsort(X, kind="stable"))
    close(jnp.argsort(xa, axis=0), np.argsort(X, axis=0, kind="stable"))
    close(jnp.where(xa > 0, xa, Y), np.where(X > 0, X, Y))
    close(jnp.where(xa > 0, 1.0, 0), np.where(X > 0, 1.0, 0.0))
  close(jnp.moveaxis(x3, 0, -1), np.moveaxis(x3, 0, -1))
  close(jnp.moveaxis(x3, (0, 1), (2, 0)), np.moveaxis(x3, (0, 1), (2, 0)))
  close(jnp.transpose(x3, (1, 0, 2)), np.transpose(x3, (1, 0, 2)))
  close(jnp.repeat(np.arange(3), np.array([1, 0, 2])), np.repeat(np.arange(3), [1, 0, 2]))
  close(jnp.hstack([X, Y]), np.hstack([X, Y]))
  close(jnp.vstack([X, Y]), np.vstack([X, Y]))
  close(jnp.broadcast_to(X[0], (3, 4)), np.broadcast_to(X[0], (3, 4)))
  assert jnp.broadcast_shapes((2, 1), (1, 3)) == (2, 3)
  close(jnp.atleast_2d(np.float32(1.0)), np.atleast_2d(np.float32(1.0)))


def test_indexing_ops(mesh8):
  idx = np.array([3, 0, 7, 7], np.int32)
  s = NamedSharding(mesh8, P("x", "y"))
  for xa in (jnp.asarray(X), jax.device_put(X, s)):
    close(jnp.take(xa, idx, axis=0), np.take(X, idx, axis=0))
    close(jnp.take(xa, np.array([1, 2]), axis=1), np.take(X, [1, 2], axis=1))
    close(jnp.take(xa, np.array([5, 30])), np.take(X, [5, 30]))
    ii = np.argsort(X, axis=1).astype(np.int32)
    close(jnp.take_along_axis(xa, ii, axis=1), np.take_along_axis(X, ii, axis=1))
    close(jax.jit(lambda a, i: jnp.take(a, i, axis=0))(xa, jnp.asarray(idx)), X[idx])
  close(jnp.diagonal(X[:4]), np.diagonal(X[:4]))
  close(jnp.trace(X[:4]), np.trace(X[:4]), rtol=1e-5)
  for got, want in zip(jnp.meshgrid(np.arange(3), np.arange(2)),
                       np.meshgrid(np.arange(3), np.arange(2))):
    close(got, want)


def test_sort_and_argsort_forms():
  b = np.array([True, False, True, False])
  np.testing.assert_array_equal(np.asarray(jnp.sort(b)), np.sort(b))
  np.testing.assert_array_equal(np.asarray(jnp.argsort(X, axis=None)),
                                np.argsort(X, axis=None, kind="stable"))
  np.testing.assert_array_equal(np.asarray(jnp.sort(X, axis=None)), np.sort(X, axis=None))
  np.testing.assert_array_equal(np.asarray(jnp.sort(X, descending=True)), -np.sort(-X))


def test_misc_predicates():
  v = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
  close(jnp.isnan(v), np.isnan(v))
  close(jnp.isinf(v), np.isinf(v))
  close(jnp.isfinite(v), np.isfinite(v))
  close(jnp.nan_to_num(v), np.nan_to_num(v))
  close(jnp.logical_xor(v > 0, v < 1), np.logical_xor(v > 0, v < 1))
  assert bool(jnp.array_equal(X, X)) and not bool(jnp.array_equal(X, Y))
  assert jnp.allclose(X, X + 1e-7)
  close(jnp.isclose(X, X + 1e-7), np.isclose(X, X + 1e-7))
  close(jnp.linalg.norm(X), np.linalg.norm(X), rtol=1e-5)


BAD = [
    ("add shapes", lambda: jnp.add(jnp.ones(3), jnp.ones(4)), "[add]"),
    ("reshape", lambda: jnp.reshape(jnp.ones(6), (4, 2)), "[reshape]"),
    ("reshape -1", lambda: jnp.reshape(jnp.ones(6), (4, -1)), "[reshape]"),
    ("matmul", lambda: jnp.matmul(jnp.ones((2, 3)), jnp.ones((4, 2))), "[matmul]"),
    ("sum axis", lambda: jnp.sum(jnp.ones(3), axis=2), "[sum]"),
    ("argmax axis", lambda: jnp.argmax(jnp.ones(3), axis=-2), "[argmax]"),
    ("concat axis", lambda: jnp.concatenate([jnp.ones(3), jnp.ones(3)], axis=1), "[concatenate]"),
    ("concat shapes", lambda: jnp.concatenate([jnp.ones((2, 3)), jnp.ones((2, 4))]),
     "[concatenate]"),
    ("transpose perm", lambda: jnp.transpose(jnp.ones((2, 3)), (0, 0)), "[transpose]"),
    ("split uneven", lambda: jnp.split(jnp.ones(5), 2), "[split]"),
    ("squeeze", lambda: jnp.squeeze(jnp.ones((2, 3)), 0), "[squeeze]"),
    ("string", lambda: jnp.sin("abc"), "[sin]"),
    ("dict", lambda: jnp.add({"a": 1}, 1), "[add]"),
    ("None", lambda: jnp.multiply(None, jnp.ones(2)), "[multiply]"),
    ("None reduce", lambda: jnp.sum(None), "[sum]"),
    ("complex dtype", lambda: jnp.zeros(3, jnp.complex64), "[zeros]"),
    ("complex data", lambda: jnp.asarray(np.ones(2, np.complex64)), "[asarray]"),
    ("object dtype", lambda: jnp.ones(3, dtype=object), "[ones]"),
    ("astype complex", lambda: jnp.astype(jnp.ones(3), np.complex64), "[astype]"),
    ("negative shape", lambda: jnp.zeros((2, -1)), "[zeros]"),
    ("einsum", lambda: jnp.einsum("ij,jk->ik", jnp.ones((2, 3)), jnp.ones((4, 2))), "[einsum]"),
    ("take float idx", lambda: jnp.take(jnp.ones(3), jnp.ones(2)), "[take]"),
    ("where one arg traced", lambda: jax.jit(lambda c: jnp.where(c))(jnp.ones(3) > 0),
     "[nonzero]"),
    ("broadcast_to", lambda: jnp.broadcast_to(jnp.ones(3), (2, 4)), "[broadcast_to]"),
    ("pad mode", lambda: jnp.pad(jnp.ones(3), 1, mode="median"), "[pad]"),
    ("stack shapes", lambda: jnp.stack([jnp.ones(3), jnp.ones(4)]), "[stack]"),
    ("tensordot", lambda: jnp.tensordot(jnp.ones((2, 3)), jnp.ones((2, 3)), 1), "[tensordot]"),
    ("empty concat", lambda: jnp.concatenate([]), "[concatenate]"),
    ("arange zero step", lambda: jnp.arange(0, 3, 0), "[arange]"),
    ("arange string", lambda: jnp.arange("a"), "[arange]"),
    ("linspace num", lambda: jnp.linspace(0, 1, -2), "[linspace]"),
    ("full int overflow", lambda: jnp.full(2, 2**40), "[full]"),
    ("asarray list overflow", lambda: jnp.asarray([1, 2**40]), "[asarray]"),
    ("asarray int64 overflow", lambda: jnp.asarray(np.array([2**35])), "[asarray]"),
    ("int overflow", lambda: jnp.arange(3) + 2**40, "[add]"),
    ("complex scalar", lambda: jnp.add(jnp.arange(3), 1j), "[add]"),
    ("full string", lambda: jnp.full(3, "a"), "[full]"),
    ("zeros shape string", lambda: jnp.zeros("ab"), "[zeros]"),
    ("zeros shape float", lambda: jnp.zeros((2.5,)), "[zeros]"),
    ("zeros shape past int64", lambda: jnp.zeros((2**63,)), "[zeros]"),
    ("make_mesh negative", lambda: jax.make_mesh((-1, -8), ("a", "b")), "[make_mesh]"),
    ("make_mesh -1", lambda: jax.make_mesh((-1, 8), ("a", "b")), "[make_mesh]"),
    ("make_mesh float", lambda: jax.make_mesh((2.0, 4), ("a", "b")), "[make_mesh]"),
    ("scan negative length", lambda: jax.lax.scan(lambda c, x: (c, c), jnp.ones(2), None,
                                                   length=-1), "[scan]"),
    ("roll float shift", lambda: jnp.roll(jnp.arange(3), 1.5), "[roll]"),
    ("repeat negative", lambda: jnp.repeat(jnp.arange(3), -1), "[repeat]"),
    ("repeat counts", lambda: jnp.repeat(jnp.arange(3), np.array([1, 2])), "[repeat]"),
    ("tril 1d", lambda: jnp.tril(jnp.arange(3)), "[tril]"),
    ("sum float axis", lambda: jnp.sum(jnp.arange(3), axis=0.5), "[sum]"),
    ("sum repeated axis", lambda: jnp.sum(jnp.ones((2, 3)), axis=(0, -2)), "[sum]"),
    ("expand_dims axis", lambda: jnp.expand_dims(jnp.ones(3), 3), "[expand_dims]"),
    ("matmul scalar", lambda: jnp.matmul(jnp.ones(3), 2.0), "[matmul]"),
    ("einsum spec", lambda: jnp.einsum("ij->k", jnp.ones((2, 2))), "[einsum]"),
    ("take_along shape", lambda: jnp.take_along_axis(jnp.ones((2, 3)), jnp.zeros((3, 1),
                                                                               jnp.int32), 1),
     "[take_along"),
    ("average weights", lambda: jnp.average(jnp.ones((2, 3)), weights=jnp.ones(3)), "[average]"),
]


@pytest.mark.parametrize("name,f,api", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, f, api):
  with pytest.raises(jax.PartixError) as e:
    f()
  assert str(e.value).startswith(api), str(e.value)


def test_max_min_of_bool_stay_bool():
  """As JAX: max and min of a bool array are any and all, of dtype bool."""
  b = np.array([[True, False, False], [True, True, False]])
  for f, g in ((jnp.max, np.max), (jnp.min, np.min), (jnp.amax, np.amax)):
    for axis in (None, 0, 1):
      r = f(jnp.asarray(b), axis=axis)
      assert r.dtype == np.bool_, (f, axis, r.dtype)
      np.testing.assert_array_equal(np.asarray(r), g(b, axis=axis))
  assert jnp.max(jnp.asarray(b), axis=1, keepdims=True).shape == (2, 1)
  assert bool(jax.jit(lambda x: jnp.min(x))(jnp.asarray(b))) is False


def test_quantized_arrays_refused_by_math():
  q = pytest.importorskip("partix").numpy
  assert q.q8_0.name == "q8_0"
  with pytest.raises(jax.PartixError, match=r"^\[zeros\]"):
    jnp.zeros((32,), jnp.q8_0)
  with pytest.raises(jax.PartixError, match=r"^\[asarray\]"):
    jnp.asarray(np.ones(32, np.float32), jnp.q8_0)


def _q8_rows(rows, scale=0.5, q=3):
  """A q8_0 array [rows, 32] from its blocks: one f16 scale, then 32 int8 values per row."""
  from partix import _core
  from partix._src.core import Array
  blk = np.zeros((rows, 34), np.uint8)
  blk[:, :2] = np.frombuffer(np.float16(scale).tobytes(), np.uint8)
  blk[:, 2:] = np.uint8(q)
  return Array(_core.from_host(blk.reshape(-1), [rows, 32], "q8_0"))


def test_quantized_arrays():
  w = _q8_rows(4)
  assert w.dtype == jnp.q8_0 and w.shape == (4, 32)
  np.testing.assert_array_equal(np.asarray(w.astype(jnp.float32)), np.full((4, 32), 1.5))
  x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
  # the activations become 8-bit codes inside the quantized product: close, not exact
  close(jnp.tensordot(x, w, axes=([1], [1])), x @ np.full((32, 4), 1.5), rtol=1e-3)
  for f, api in [(lambda: w + 1, "add"), (lambda: jnp.multiply(2.0, w), "multiply"),
                 (lambda: jnp.maximum(w, w), "maximum"), (lambda: jnp.where(True, w, 0.0),
                                                           "where"),
                 (lambda: np.asarray(w), r"Array.__array__"), (lambda: jnp.exp(w), "exp"),
                 (lambda: jnp.zeros_like(w), "zeros"), (lambda: jnp.sum(w), "")]:
    with pytest.raises(jax.PartixError, match=r"^\[" + api):
      f()


def test_composed_functions(mesh8):
  z = np.array([-2.5, -0.0, 0.0, 1.5, np.nan, 3.0], np.float32)
  close(jnp.trunc(X * 3), np.trunc(X * 3))
  close(jnp.fix(X * 3), np.fix(X * 3))
  close(jnp.fmod(XI, 3), np.fmod(XI, 3))
  close(jnp.fmod(X * 4, 1.5), np.fmod(X * 4, np.float32(1.5)), atol=1e-5)
  close(jnp.hypot(X, Y), np.hypot(X, Y))
  close(jnp.logaddexp(X, Y), np.logaddexp(X, Y))
  close(jnp.signbit(z), np.signbit(z))
  close(jnp.copysign(X, Y), np.copysign(X, Y))
  close(jnp.heaviside(z[:4], 0.5), np.heaviside(z[:4], 0.5))
  close(jnp.float_power(np.abs(X) + 1, 2), np.float_power(np.abs(X) + 1, 2), rtol=1e-5)
  close(jnp.cbrt(X), np.cbrt(X), rtol=1e-5)
  close(jnp.deg2rad(X), np.deg2rad(X))
  close(jnp.degrees(X), np.degrees(X), rtol=1e-5)
  inf = np.array([np.inf, -np.inf, 1.0], np.float32)
  close(jnp.isposinf(inf), np.isposinf(inf))
  close(jnp.isneginf(inf), np.isneginf(inf))
  close(jnp.logspace(0, 2, 5), np.logspace(0, 2, 5), rtol=1e-5)
  for xa in (jnp.asarray(X), jax.device_put(X, NamedSharding(mesh8, P("x", "y")))):
    close(jnp.diff(xa), np.diff(X))
    close(jnp.diff(xa, n=2, axis=0), np.diff(X, n=2, axis=0))
    close(jnp.diff(xa, axis=0, prepend=0.0), np.diff(X, axis=0, prepend=0.0))
    close(jnp.ptp(xa, axis=1), np.ptp(X, axis=1))
    close(jnp.median(xa, axis=0), np.median(X, axis=0))
    close(jnp.median(xa[:7], axis=0, keepdims=True), np.median(X[:7], axis=0, keepdims=True))
    close(jnp.vecdot(xa, Y), np.sum(X * Y, axis=-1), rtol=1e-5)
  close(jnp.median(XI), np.median(XI))
  close(jnp.ediff1d(X[0], to_end=9.0), np.ediff1d(X[0], to_end=9.0))
  close(jnp.nansum(z), np.nansum(z))
  close(jnp.nanmean(z), np.nanmean(z))
  close(jnp.nanmax(z), np.nanmax(z))
  close(jnp.nanmin(z), np.nanmin(z))
  close(jnp.cumulative_sum(XI[0], include_initial=True), np.concatenate([[0], np.cumsum(XI[0])]))
  close(jnp.column_stack([X[0], Y[0]]), np.column_stack([X[0], Y[0]]))
  close(jnp.dstack([X, Y]), np.dstack([X, Y]))
  close(jnp.atleast_3d(X[0]), np.atleast_3d(X[0]))
  for got, want in zip(jnp.unstack(X, axis=1), [X[:, i] for i in range(4)]):
    close(got, want)
  with pytest.raises(jax.PartixError, match=r"^\[diff\]"):
    jnp.diff(X, n=-1)
  with pytest.raises(jax.PartixError, match=r"^\[cumulative_sum\]"):
    jnp.cumulative_sum(X)


def test_prod_and_diagonal_forms():
  v = (np.arange(1, 14, dtype=np.float32) / 7.0).reshape(13)
  close(jnp.prod(v), np.prod(v), rtol=1e-5)
  m = np.arange(1, 37, dtype=np.float32).reshape(3, 4, 3) / 20.0
  for axis in (None, 0, 1, (0, 2)):
    close(jnp.prod(m, axis=axis), np.prod(m, axis=axis), rtol=1e-5)
  close(jnp.prod(np.ones((2, 0)), axis=1), np.prod(np.ones((2, 0)), axis=1))
  close(jnp.prod(np.array([2, 3, 4], np.int32)), 24)
  assert jnp.prod(np.array([True, False])).dtype == np.int32
  d = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
  for off, a1, a2 in [(0, 0, 1), (1, 0, 1), (-2, 0, 1), (2, 1, 2), (0, 2, 0), (-1, -1, 0)]:
    close(jnp.diagonal(d, off, a1, a2), np.diagonal(d, off, a1, a2))
  inf = np.array([[1.0, np.inf], [np.nan, 2.0]], np.float32)
  close(jnp.diagonal(inf), [1.0, 2.0])  # off-diagonal inf/nan do not leak in
  close(jnp.trace(d[0], 1), np.trace(d[0], 1))
  with pytest.raises(jax.PartixError, match=r"^\[diagonal\]"):
    jnp.diagonal(d, 0, 1, 1)


def test_sharded_axis_ops_in_jit(mesh8):
  s = NamedSharding(mesh8, P("x", "y"))
  xa = jax.device_put(X, s)
  xi = jax.device_put(XI, s)
  cases = [(lambda a: jnp.cumsum(a, axis=0), lambda: np.cumsum(X, axis=0), xa),
           (lambda a: jnp.cumsum(a, axis=1), lambda: np.cumsum(XI, axis=1), xi),
           (lambda a: jnp.sort(a, axis=0), lambda: np.sort(X, axis=0), xa),
           (lambda a: jnp.argsort(a, axis=1), lambda: np.argsort(X, 1, kind="stable"), xa),
           (lambda a: jnp.roll(a, 3, axis=0), lambda: np.roll(X, 3, axis=0), xa),
           (lambda a: jnp.flip(a, (0, 1)), lambda: np.flip(X, (0, 1)), xa),
           (lambda a: jnp.argmax(a, axis=0), lambda: np.argmax(X, axis=0), xa),
           (lambda a: jnp.std(a, axis=0, ddof=1), lambda: np.std(X, axis=0, ddof=1), xa),
           (lambda a: jnp.var(a, keepdims=True), lambda: np.var(X, keepdims=True), xa),
           (lambda a: a[::-1, 1:3], lambda: X[::-1, 1:3], xa),
           (lambda a: a.T @ a, lambda: X.T @ X, xa),
           (lambda a: jnp.concatenate([a, a], axis=0), lambda: np.concatenate([X, X]), xa),
           (lambda a: jnp.repeat(a, 2, axis=0), lambda: np.repeat(X, 2, axis=0), xa),
           (lambda a: jnp.take_along_axis(a, jnp.argsort(a, axis=0), axis=0),
            lambda: np.sort(X, axis=0), xa),
           (lambda a: jnp.tril(a), lambda: np.tril(X), xa),
           (lambda a: jnp.clip(a, -1, 1).sum(axis=1), lambda: np.clip(X, -1, 1).sum(1), xa)]
  for f, ref, a in cases:
    close(jax.jit(f)(a), ref(), rtol=1e-4, atol=1e-4)


def test_errors_inside_jit_are_partix_errors():
  f = jax.jit(lambda a, b: a + b)
  with pytest.raises(jax.PartixError, match=r"^\[add\]"):
    f(jnp.ones(3), jnp.ones(4))
  with pytest.raises(jax.PartixError, match=r"^\[matmul\]"):
    jax.jit(lambda a: a @ a)(jnp.ones((2, 3)))
  with pytest.raises(jax.PartixError, match=r"^\[reshape\]"):
    jax.jit(lambda a: a.reshape(4, 4))(jnp.ones(8))
  # an error raised by the C++ library is a PartixError (a ValueError), never RuntimeError
  from partix import _core
  with pytest.raises(jax.PartixError) as e:
    _core.reshape(jnp.ones(6)._a, [4])
  assert type(e.value) is jax.PartixError and isinstance(e.value, ValueError)
  assert str(e.value).startswith("[reshape]")


def test_power_dtypes():
  xi = np.arange(-3, 5, dtype=np.int32)
  for n in (0, 1, 2, 3, 7):
    got = jnp.power(xi, n)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), xi ** n)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(xi) ** n), xi ** n)
  e = np.array([0, 1, 2, 3, 0, 1, 2, 3], np.int32)
  got = jnp.asarray(xi) ** jnp.asarray(e)
  assert got.dtype == np.int32
  np.testing.assert_array_equal(np.asarray(got), xi ** e)
  close(jnp.power(X, 3), X ** 3, rtol=1e-5)
  close(jnp.power(X, -2), X.astype(np.float64) ** -2, rtol=1e-4)
  close(jnp.asarray(X) ** 0.5, np.abs(X) ** 0.5 * np.where(X < 0, np.nan, 1), rtol=1e-5)
  assert (jnp.ones(2, jnp.bfloat16) ** 2).dtype == jnp.bfloat16
  assert (jnp.arange(3) ** 2.0).dtype == np.float32
  with pytest.raises(jax.PartixError, match=r"^\[power\]"):
    jnp.power(xi, -1)


def test_any_all_truth_of_floats():
  v = np.array([[0.0, 0.5], [np.nan, 0.0], [-0.25, 2.0]], np.float32)
  for axis in (None, 0, 1):
    np.testing.assert_array_equal(np.asarray(jnp.any(v, axis=axis)), np.any(v, axis=axis))
    np.testing.assert_array_equal(np.asarray(jnp.all(v, axis=axis)), np.all(v, axis=axis))
  assert bool(jnp.asarray([0.5]).any()) and not bool(jnp.asarray([0.5, 0.0]).all())


NOT_FUNCTIONS = {"dtype", "ndarray", "shape", "ndim", "size", "isscalar", "iscomplexobj",
                 "broadcast_shapes", "finfo", "iinfo", "issubdtype", "result_type",
                 "promote_types", "linalg", "isrealobj", "vectorize", "can_cast", "isdtype",
                 "iterable", "get_printoptions", "set_printoptions", "printoptions"}


@pytest.mark.parametrize("obj", [None, "s", {"a": 1}, object()], ids=repr)
def test_every_function_refuses_non_arrays(obj):
  """Each partix.numpy function given a non-array first argument raises a PartixError that
  names an API in brackets (never TypeError, IndexError or a nanobind signature error)."""
  import inspect
  checked = 0
  for name in sorted(dir(jnp)):
    f = getattr(jnp, name)
    if name.startswith("_") or name in NOT_FUNCTIONS or not callable(f) or isinstance(f, type):
      continue
    if name in ("load", "save", "savez"):
      continue  # their first argument is a file: numpy's OSError / TypeError, as JAX's
    try:
      params = inspect.signature(f).parameters.values()
      n = len([p for p in params if p.default is p.empty and p.kind in (
          p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
      if any(p.default is p.empty and p.kind == p.KEYWORD_ONLY for p in params):
        continue  # a required keyword (fromstring's sep=): a call without it is Python's error
    except (TypeError, ValueError):
      n = 1
    with pytest.raises(jax.PartixError, match=r"^\[") as e:
      f(obj, *[jnp.ones(3)] * max(0, n - 1))
    # PartixError itself, or its form where JAX raises TypeError (jnp.angle) or
    # NotImplementedError (fill_diagonal's default inplace=True, refused first as JAX's).
    assert e.type in (jax.PartixError, PartixTypeError) or (
        issubclass(e.type, NotImplementedError) and issubclass(e.type, jax.PartixError)), name
    checked += 1
  assert checked > 150


def test_take_modes():
  v = np.arange(10, 70, 10, dtype=np.float32).reshape(2, 3)
  idx = np.array([0, -1, 3, -4, 2], np.int32)
  got = np.asarray(jnp.take(v, idx, axis=1))  # JAX's default mode: fill out of range
  want = np.where((idx >= -3) & (idx < 3), np.take(v, np.clip(idx, -3, 2), axis=1), np.nan)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(np.asarray(jnp.take(v, idx, axis=1, mode="clip")),
                                np.take(v, np.clip(idx, 0, 2), axis=1))
  np.testing.assert_array_equal(np.asarray(jnp.take(v, idx, axis=1, mode="wrap")),
                                np.take(v, idx, axis=1, mode="wrap"))
  np.testing.assert_array_equal(np.asarray(jnp.take(v, idx, axis=1, fill_value=-1.0)),
                                np.nan_to_num(want, nan=-1.0))
  vi = np.arange(4, dtype=np.int32)
  np.testing.assert_array_equal(np.asarray(jnp.take(vi, np.array([1, 9]))),
                                [1, np.iinfo(np.int32).min])
  with pytest.raises(jax.PartixError, match=r"^\[take\]"):
    jnp.take(vi, np.array([0]), mode="raise")
