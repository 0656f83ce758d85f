"""The Array type: metadata, shards, host conversion, operators, indexing, .at updates,
methods, dtypes and the errors of concrete-value use inside traces."""
import ml_dtypes
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P

X = np.arange(32, dtype=np.float32).reshape(8, 4) - 10.0


def test_metadata_and_shards(mesh8):
  s = NamedSharding(mesh8, P("x", "y"))
  a = jax.device_put(X, s)
  assert a.shape == (8, 4) and a.dtype == np.float32 and a.ndim == 2 and a.size == 32
  assert a.sharding.spec == P("x", "y") and a.nbytes == 128
  shards = a.addressable_shards
  assert len(shards) == 8
  seen = set()
  for sh in shards:
    assert sh.data.shape == (2, 2)  # a device's block, not the gathered array
    assert sh.replica_id == 0
    np.testing.assert_array_equal(np.asarray(sh.data), X[sh.index])
    seen.add((sh.index[0].start, sh.index[1].start))
  assert len(seen) == 8 and len({sh.device.id for sh in shards}) == 8
  r = jax.device_put(X, NamedSharding(mesh8, P("x")))  # replicated over 'y'
  assert sorted(sh.replica_id for sh in r.addressable_shards) == [0, 0, 0, 0, 1, 1, 1, 1]
  assert a.block_until_ready() is a
  one = jnp.asarray(X)
  assert len(one.addressable_shards) == 1 and one.addressable_shards[0].data.shape == (8, 4)


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.int32, np.bool_,
                                np.float16])
def test_dtype_round_trip(dt, mesh8):
  host = (np.arange(-8, 24) % 5).reshape(8, 4).astype(dt)
  if np.dtype(dt).kind in "fV":  # arbitrary values: the bits survive, not just small ints
    host = (np.random.default_rng(1).standard_normal((8, 4)) * 1e3).astype(dt)
  for a in (jnp.asarray(host), jax.device_put(host, NamedSharding(mesh8, P("x", "y")))):
    assert a.dtype == np.dtype(dt)
    back = np.asarray(a)
    assert back.dtype == np.dtype(dt)
    np.testing.assert_array_equal(back.view(np.uint8), host.view(np.uint8))
  assert jnp.asarray(host, dtype=jnp.float32).dtype == np.float32
  assert jnp.zeros(2, dt).dtype == np.dtype(dt)
  assert np.asarray(jnp.asarray(host), dtype=np.float64).dtype == np.float64


def test_host_values():
  a = jnp.asarray(X)
  assert a.tolist() == X.tolist()
  assert float(a[1, 2]) == float(X[1, 2]) and int(a[3, 0]) == int(X[3, 0])
  assert bool(a[0, 0] < 0) is True and a[2, 1].item() == X[2, 1]
  assert "{:.1f}".format(a[0, 0]) == "-10.0"
  assert repr(jnp.asarray([1, 2])) == "Array([1, 2], dtype=int32)"
  assert "bfloat16" in repr(jnp.ones(2, jnp.bfloat16))
  assert len(a) == 8 and [float(r[0]) for r in a] == X[:, 0].tolist()
  with pytest.raises(jax.PartixError, match=r"^\[Array.__len__\]"):
    len(jnp.asarray(1.0))
  assert list(range(10))[jnp.asarray(3)] == 3
  for f, api in [(float, "__float__"), (int, "__int__"), (bool, "__bool__")]:
    with pytest.raises(jax.PartixError, match=r"^\[Array." + api + r"\].*one element"):
      f(a)
  with pytest.raises(jax.PartixError, match=r"^\[Array.__index__\]"):
    [1, 2][jnp.asarray([1])]
  with pytest.raises(jax.PartixError, match=r"^\[Array.__index__\]"):
    [1, 2][jnp.asarray(1.0)]


def test_operators_with_scalars_and_numpy(mesh8):
  for a in (jnp.asarray(X), jax.device_put(X, NamedSharding(mesh8, P("x", "y")))):
    n = X[0]
    cases = [(a + 2, X + 2), (2 + a, 2 + X), (a - 1.5, X - 1.5), (1.5 - a, 1.5 - X),
             (a * 3, X * 3), (3 * a, 3 * X), (a / 4, X / 4), (4 / (a + 100), 4 / (X + 100)),
             (a ** 2, X ** 2), (2 ** (a / 10), 2 ** (X / 10)), (a // 3, X // 3),
             (a % 3, X % 3), (-a, -X), (abs(a), abs(X)), (+a, X), (a + n, X + n),
             (n + a, n + X), (n * a, n * X), (n - a, n - X), (a @ X.T, X @ X.T),
             (X.T @ a, X.T @ X), (a < 0, X < 0), (0 >= a, 0 >= X), (a == n, X == n),
             (a != 2, X != 2), ((a > 0) & (a < 5), (X > 0) & (X < 5)),
             ((a > 0) | (a < -5), (X > 0) | (X < -5)), (~(a > 0), ~(X > 0)),
             ((a > 0) ^ (a > 3), (X > 0) ^ (X > 3))]
    for got, want in cases:
      assert isinstance(got, jax.Array), type(got)
      np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-4)
  a = jnp.asarray(X)
  for other in ("s", None, {"k": 1}):
    for op in (lambda: a + other, lambda: other * a, lambda: a < other, lambda: a @ other):
      with pytest.raises(jax.PartixError, match=r"^\[(add|multiply|less|greater|matmul)\]"):
        op()
  assert (a == None) is False and (a != "s") is True  # noqa: E711  Python's identity fallback
  assert (jnp.asarray(X) + np.float32(1)).dtype == np.float32
  assert (np.int32(2) * jnp.arange(3)).dtype == np.int32


def test_indexing(mesh8):
  x3 = np.arange(48, dtype=np.float32).reshape(4, 3, 4)
  idx = np.array([2, -1, 0], np.int32)
  cases = [0, -1, (1, 2), (slice(None), slice(1, 3)), slice(None, None, -1),
           (Ellipsis, None), (None, 1), (slice(1, None, 2), slice(None, None, -2)),
           (Ellipsis, 2), (1, Ellipsis, slice(0, 2)), idx, (slice(None), idx[:2]),
           (-2, slice(None, -1)), slice(10, 20), (0, 0, -1)]
  for a in (jnp.asarray(x3), jax.device_put(x3, NamedSharding(mesh8, P("x")))):
    for c in cases:
      got = a[c]
      np.testing.assert_array_equal(np.asarray(got), x3[c], err_msg=str(c))
      if not isinstance(c, np.ndarray):
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda v, c=c: v[c])(a)), x3[c])
  a = jnp.asarray(x3)
  np.testing.assert_array_equal(np.asarray(a[jnp.asarray(idx)]), x3[idx])
  f = jax.jit(lambda v, i: v[i])
  for i in (0, 3, -1):
    np.testing.assert_array_equal(np.asarray(f(a, jnp.asarray(i))), x3[i])


def test_indexing_errors():
  a = jnp.asarray(X)
  for bad, pat in [(lambda: a[0, 0, 0], r"too many indices"),
                   (lambda: a["k"], r"not supported"), (lambda: a[1.5], r"not supported"),
                   (lambda: jax.jit(lambda v: v[v > 0])(a), r"traced boolean mask"),
                   (lambda: a[..., ...], r"Ellipsis"),
                   (lambda: a[np.array([0.5])], r"integers")]:
    with pytest.raises(jax.PartixError, match=r"^\[Array.__getitem__\].*" + pat):
      bad()
  with pytest.raises(jax.PartixError, match=r"^\[Array.__setitem__\]"):
    a[0] = 1


def test_at_updates(mesh8):
  for a in (jnp.asarray(X), jax.device_put(X, NamedSharding(mesh8, P("x", "y")))):
    def ref(idx, op, v):
      out = X.copy()
      if op == "set":
        out[idx] = v
      elif op == "add":
        out[idx] += v
      elif op == "multiply":
        out[idx] *= v
      elif op == "min":
        out[idx] = np.minimum(out[idx], v)
      else:
        out[idx] = np.maximum(out[idx], v)
      return out
    for idx in [1, (2, 3), (slice(1, 3),), (slice(None), 1), (-1, slice(0, 2))]:
      for op in ("set", "add", "multiply", "min", "max"):
        got = getattr(a.at[idx], op)(5.0)
        np.testing.assert_allclose(np.asarray(got), ref(idx, op, 5.0), err_msg=f"{idx} {op}")
    np.testing.assert_array_equal(np.asarray(a.at[1].set(np.arange(4.0))),
                                  ref(1, "set", np.arange(4.0)))
    np.testing.assert_array_equal(np.asarray(a.at[0, 1].get()), X[0, 1])
    np.testing.assert_array_equal(np.asarray(a), X)  # the original is unchanged
  a = jnp.asarray(X)
  f = jax.jit(lambda v, i: v.at[i].set(0.0))
  np.testing.assert_array_equal(np.asarray(f(a, jnp.asarray(2))), ref(2, "set", 0.0))
  rows = np.array([0, 2, 0], np.int32)
  want = X.copy()
  np.add.at(want, rows, 1.0)
  np.testing.assert_array_equal(np.asarray(a.at[rows].add(1.0)), want)


def test_methods():
  a = jnp.asarray(X)
  np.testing.assert_array_equal(np.asarray(a.T), X.T)
  np.testing.assert_array_equal(np.asarray(a.reshape(4, 8)), X.reshape(4, 8))
  np.testing.assert_array_equal(np.asarray(a.reshape((2, -1))), X.reshape(2, -1))
  np.testing.assert_array_equal(np.asarray(a.reshape(-1)), X.reshape(-1))
  assert a.astype(jnp.bfloat16).dtype == jnp.bfloat16 and a.astype("int32").dtype == np.int32
  np.testing.assert_array_equal(np.asarray(a.astype(jnp.int32)), X.astype(np.int32))
  for m in ("sum", "mean", "max", "min", "std", "var", "argmax", "argmin"):
    np.testing.assert_allclose(np.asarray(getattr(a, m)()), getattr(X, m)(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(getattr(a, m)(axis=0)), getattr(X, m)(axis=0),
                               rtol=1e-5)
  np.testing.assert_allclose(np.asarray(a.sum(axis=1, keepdims=True)), X.sum(1, keepdims=True))
  np.testing.assert_allclose(np.asarray(a.std(ddof=1)), X.std(ddof=1), rtol=1e-5)
  np.testing.assert_array_equal(np.asarray(a.transpose(1, 0)), X.T)
  np.testing.assert_array_equal(np.asarray(a.flatten()), X.flatten())
  np.testing.assert_array_equal(np.asarray(a.cumsum(axis=0)), X.cumsum(0))
  np.testing.assert_array_equal(np.asarray(a.clip(0, 3)), X.clip(0, 3))
  assert bool((a > -100).all()) and not bool((a > 100).any())


def test_traced_values_as_python_values():
  a = jnp.asarray(X)
  for f, what in [(lambda v: 1 if v[0, 0] > 0 else 2, "__bool__"), (lambda v: int(v[0, 0]),
                  "__int__"), (lambda v: float(v.sum()), "__float__"),
                  (lambda v: [0, 1][v[0, 0].astype(jnp.int32)], "__index__"),
                  (lambda v: np.asarray(v), "__array__")]:
    with pytest.raises(jax.PartixError, match=r"^\[Array\." + what + r"\].*traced"):
      jax.jit(f)(a)
  # Eager grad sees the primal values (as JAX's); under jit it has none.
  f = lambda v: v.sum() if v[0, 0] > 0 else v.mean()  # noqa: E731
  want = np.ones_like(X) if X[0, 0] > 0 else np.full_like(X, 1 / X.size)
  np.testing.assert_allclose(np.asarray(jax.grad(f)(a)), want, rtol=1e-6)
  with pytest.raises(jax.PartixError, match=r"^\[Array.__bool__\]"):
    jax.jit(jax.grad(f))(a)


def test_numpy_view_without_copy(mesh8):
  x = jnp.asarray(X)
  v1, v2 = np.asarray(x), np.asarray(x)
  assert np.shares_memory(v1, v2) and not v1.flags.writeable  # one buffer, read-only
  np.testing.assert_array_equal(v1, X)
  del x
  np.testing.assert_array_equal(v1, X)  # the view keeps the buffer alive
  c = np.array(jnp.asarray(X))
  c[0, 0] = 99.0  # np.array copies
  assert c.flags.writeable and c[0, 0] == 99.0
  r = jax.device_put(X, NamedSharding(mesh8, P()))  # replicated: one shard is the whole array
  assert np.shares_memory(np.asarray(r), np.asarray(r))
  s = jax.device_put(X, NamedSharding(mesh8, P("x", "y")))  # sharded: gathered into a copy
  g = np.asarray(s)
  assert not np.shares_memory(g, np.asarray(s))
  np.testing.assert_array_equal(g, X)
  # a donated array's buffer is not reused in place while a view of it is alive
  y = jnp.asarray(X) + 0
  yv = np.asarray(y)
  out = jax.jit(lambda t: t * 2, donate_argnums=0)(y)
  np.testing.assert_array_equal(yv, X)
  np.testing.assert_array_equal(np.asarray(out), X * 2)


def test_reshape_forms_and_errors():
  a = jnp.asarray(X)
  np.testing.assert_array_equal(np.asarray(a.reshape(np.int64(2), 16)), X.reshape(2, 16))
  np.testing.assert_array_equal(np.asarray(a.reshape([16, -1])), X.reshape(16, -1))
  np.testing.assert_array_equal(np.asarray(a.diagonal()), X.diagonal())
  np.testing.assert_array_equal(np.asarray(a.ptp(axis=0)), np.ptp(X, axis=0))
  for bad, pat in [(lambda: a.reshape(5, -1), "cannot reshape"), (lambda: a.reshape(-1, -1),
                   "only one dimension may be -1"), (lambda: a.reshape(4, 8, order="F"), "order"),
                   (lambda: a.reshape("ab"), "not a sequence"), (lambda: a.reshape(3, 3),
                                                                  "")]:
    with pytest.raises(jax.PartixError, match=r"^\[reshape\].*" + pat):
      bad()


def test_array_copy_argument(mesh8):
  a = jnp.asarray(X)
  assert np.shares_memory(np.asarray(a, copy=False), np.asarray(a))
  assert not np.shares_memory(np.asarray(a, copy=True), np.asarray(a))
  s = jax.device_put(X, NamedSharding(mesh8, P("x", "y")))
  with pytest.raises(jax.PartixError, match=r"^\[Array.__array__\].*copy=False"):
    np.asarray(s, copy=False)


def test_method_argument_errors():
  a = jnp.asarray(X)
  for f, api in [(lambda: a.reshape(1.5), "reshape"), (lambda: a.transpose(1.5), "transpose"),
                 (lambda: a.astype(None), "astype"), (lambda: a.round("s"), "round"),
                 (lambda: a.at[slice("a", 2)].set(1.0), r"Array.at"),
                 (lambda: a.at[0].set("s"), r"(asarray|Array.at)"),
                 (lambda: a.sum(axis="s"), "sum"), (lambda: a.take("s"), "take"),
                 (lambda: a.clip("s"), "maximum"), (lambda: a.repeat(None), "repeat")]:
    with pytest.raises(jax.PartixError, match=r"^\[" + api):
      f()


def test_str_prints_values_as_numpy_and_repr_shows_empty_shapes():
  # As JAX: str() of a concrete array is numpy's; repr() names the shape only of an empty one.
  x = jnp.arange(6).reshape(2, 3)
  assert str(x) == str(np.arange(6).reshape(2, 3))
  assert str(jnp.float32(1.5)) == "1.5"
  assert repr(jnp.arange(3)) == "Array([0, 1, 2], dtype=int32)"
  assert repr(jnp.zeros((0, 2))) == "Array([], shape=(0, 2), dtype=float32)"
  assert str(jax.ShapeDtypeStruct((2,), jnp.float32)).startswith("ShapeDtypeStruct")


def test_array_device_does_not_move_committed_arrays():
  # As JAX: jnp.array(x, device=d) places host data and uncommitted arrays on d, but an array
  # committed to other devices is refused, not moved.
  d = jax.devices()
  if len(d) < 2:
    pytest.skip("needs 2 devices")
  committed = jax.device_put(np.arange(4), d[0])
  with pytest.raises(jax.PartixError, match=r"^\[array\] Received incompatible devices.*\[0\].*"
                                            r"\[1\]"):
    jnp.array(committed, device=d[1])
  with pytest.raises(jax.PartixError, match=r"^\[asarray\] Received incompatible devices"):
    jnp.asarray(committed, device=d[1])
  assert jnp.array(committed, device=d[0]).devices() == {d[0]}
  moved = jnp.array(jnp.arange(4), device=d[1])  # uncommitted: placed
  assert moved.devices() == {d[1]} and moved.committed
  np.testing.assert_array_equal(jnp.array(np.arange(3), device=d[1]), np.arange(3))
