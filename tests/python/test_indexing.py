"""Advanced indexing and .at updates with integer arrays, against numpy's fancy indexing and
in-place updates (np.add.at for repeated indices)."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P

X = np.arange(48, dtype=np.float32).reshape(8, 6)
X3 = np.arange(48, dtype=np.float32).reshape(4, 2, 6)


def _both(mesh8, host):
  return [jnp.asarray(host), jax.device_put(host, NamedSharding(mesh8, P("x")))]


def test_integer_array_indices(mesh8):
  r, c = np.array([0, 7, -1, 3]), np.array([1, 5, 2, -6])
  cases2 = [(r, c), (r[:, None], c[None, :2]), (1, np.array([0, 2])), (np.array([2, 0]), 3),
            (np.array([[1, 2], [3, 4]]),), (slice(1, 3), np.array([0, 0, 5])),
            (np.array([4, 1]), slice(None, None, -2))]
  for a in _both(mesh8, X):
    for idx in cases2:
      np.testing.assert_array_equal(np.asarray(a[idx]), X[idx], err_msg=str(idx))
    got = jax.jit(lambda v, i, j: v[i, j])(a, jnp.asarray(r), jnp.asarray(c))
    np.testing.assert_array_equal(np.asarray(got), X[r, c])
  for a in _both(mesh8, X3):
    idx = (np.array([3, 0]), np.array([1, 0]), slice(1, 4))
    np.testing.assert_array_equal(np.asarray(a[idx]), X3[idx])
    idx = (slice(None), np.array([1, 0, 1]), np.array([5, 0, 2]))
    np.testing.assert_array_equal(np.asarray(a[idx]), X3[idx])


# Index arrays anywhere: separated by slices or None (their dims go first, as numpy's rule
# says), with ints and strided slices between them.
I2, I3 = np.array([0, -1]), np.array([[1], [0], [-2]])
GENERAL = [(I2, slice(None), I2), (1, slice(None), I2), (I2, None, I2), (slice(None), 1, I2),
           (I3, slice(None, None, -1), np.array([5, 0])), (I2, slice(0, 2), 4),
           (Ellipsis, I2, None), (None, I2, 0, slice(1, 5, 2))]


@pytest.mark.parametrize("idx", GENERAL, ids=range(len(GENERAL)))
def test_integer_arrays_anywhere_as_numpy(idx, mesh8):
  for a in _both(mesh8, X3):
    np.testing.assert_array_equal(np.asarray(a[idx]), X3[idx], err_msg=str(idx))
    arrays = [i for i, it in enumerate(idx) if isinstance(it, np.ndarray)]
    # Under jit with the index arrays traced.
    def f(v, *arrs, idx=idx, arrays=arrays):
      full = list(idx)
      for k, arr in zip(arrays, arrs):
        full[k] = arr
      return v[tuple(full)]
    got = jax.jit(f)(a, *[jnp.asarray(idx[k]) for k in arrays])
    np.testing.assert_array_equal(np.asarray(got), X3[idx])
  # The gradient of a gather is a scatter-add: repeated positions accumulate.
  w = np.random.default_rng(0).normal(size=X3[idx].shape).astype(np.float32)
  g = jax.grad(lambda v: jnp.sum(v[idx] * w))(jnp.asarray(X3))
  want = np.zeros_like(X3)
  np.add.at(want, idx, w)
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)


@pytest.mark.parametrize("op", ["set", "add", "multiply", "max"])
@pytest.mark.parametrize("idx", GENERAL[:6], ids=range(6))
def test_at_with_integer_arrays_anywhere(op, idx, mesh8):
  vals = np.arange(np.prod(X3[idx].shape), dtype=np.float32).reshape(X3[idx].shape) + 0.5
  positions = np.arange(X3.size).reshape(X3.shape)[idx]
  repeated = len(np.unique(positions)) != positions.size
  want = X3.copy()
  if op == "set":
    want[idx] = vals
  else:
    {"add": np.add, "multiply": np.multiply, "max": np.maximum}[op].at(want, idx, vals)
  for a in _both(mesh8, X3):
    if op in ("multiply", "max") and repeated:
      with pytest.raises(jax.PartixError, match="repeated"):
        getattr(a.at[idx], op)(vals)
      continue
    got = getattr(a.at[idx], op)(vals)
    if op == "set" and repeated:  # which repeated update wins is unspecified in JAX
      got = np.asarray(got)
      mask = np.zeros(X3.shape, bool)
      mask[idx] = True
      np.testing.assert_array_equal(got[~mask], X3[~mask])
      continue
    np.testing.assert_array_equal(np.asarray(got), want, err_msg=str(idx))
  # Out-of-range positions drop their updates; the values broadcast to x[idx]'s shape.
  got = jnp.zeros((2, 3, 4)).at[np.array([0, 5]), :, np.array([1, 1])].add(1.0)
  want = np.zeros((2, 3, 4), np.float32)
  want[0, :, 1] = 1
  np.testing.assert_array_equal(np.asarray(got), want)
  with pytest.raises(jax.PartixError, match=r"^\[Array.at\[\].set\].*broadcast"):
    jnp.zeros((2, 3, 4)).at[np.array([0, 1]), :, np.array([1, 1])].set(np.ones((3, 2)))


def test_advanced_index_errors():
  a = jnp.asarray(X3)
  with pytest.raises(jax.PartixError, match=r"^\[Array.__getitem__\].*do not broadcast"):
    a[np.array([0, 1]), np.array([0, 1, 0])]


def _ref(op, idx, v):
  out = X.copy()
  uf = {"set": None, "add": np.add, "multiply": np.multiply, "min": np.minimum,
        "max": np.maximum, "subtract": np.subtract}[op]
  if uf is None:
    out[idx] = v  # numpy: the last of repeated indices wins
  else:
    uf.at(out, idx, v)
  return out


@pytest.mark.parametrize("op", ["set", "add", "subtract", "multiply", "min", "max"])
def test_at_with_index_arrays(op, mesh8):
  uniq = np.array([6, 0, -3], np.int32)
  rep = np.array([2, 5, 2, -6], np.int32)  # -6 is row 2 as well
  vals = np.arange(100, 118, dtype=np.float32).reshape(3, 6)
  for a in _both(mesh8, X):
    got = getattr(a.at[uniq], op)(vals)
    np.testing.assert_array_equal(np.asarray(got), _ref(op, uniq, vals))
    got = getattr(a.at[uniq], op)(7.0)
    np.testing.assert_array_equal(np.asarray(got), _ref(op, uniq, 7.0))
    got = getattr(a.at[::3], op)(2.0)
    np.testing.assert_array_equal(np.asarray(got), _ref(op, slice(None, None, 3), 2.0))
    if op in ("set", "add", "subtract"):
      v4 = np.arange(24, dtype=np.float32).reshape(4, 6) - 50
      np.testing.assert_array_equal(np.asarray(getattr(a.at[rep], op)(v4)), _ref(op, rep, v4))
      f = jax.jit(lambda v, i, u: getattr(v.at[i], op)(u))
      np.testing.assert_array_equal(np.asarray(f(a, jnp.asarray(rep), jnp.asarray(v4))),
                                    _ref(op, rep, v4))
    else:
      with pytest.raises(jax.PartixError, match=r"^\[Array.at\[\]." + op + r"\].*repeated"):
        getattr(a.at[rep], op)(1.0)
      with pytest.raises(jax.PartixError, match=r"^\[Array.at\[\]." + op + r"\].*traced"):
        jax.jit(lambda v, i: getattr(v.at[i], op)(1.0))(a, jnp.asarray(uniq))


def test_at_errors():
  a = jnp.asarray(X)
  with pytest.raises(jax.PartixError, match=r"^\[Array.at\[\].set\].*integers"):
    a.at[np.array([0.5])].set(1.0)
  with pytest.raises(jax.PartixError, match=r"^\[Array.at\[\].set\].*broadcast"):
    a.at[np.array([0, 1])].set(np.ones((3, 6)))
  with pytest.raises(jax.PartixError, match=r"^\[Array.at\[\].add\].*integers"):
    a.at[:, np.array([1.5])].add(1.0)


def test_out_of_range_index_arrays_clamp():
  # JAX clamps out-of-range indices of a retrieval (x[idx]); numpy would raise.
  a = jnp.asarray(X)
  np.testing.assert_array_equal(np.asarray(a[np.array([9, -9])]), X[[7, 0]])


@pytest.mark.parametrize("op", ["set", "add", "subtract"])
def test_at_drops_out_of_range_rows(op):
  # JAX's scatters drop out-of-range indices (after negative ones count from the end).
  a = jnp.asarray(X)
  idx = np.array([9, 1, -9, -2], np.int32)
  got = getattr(a.at[idx], op)(3.0)
  keep = np.array([1, 6])
  np.testing.assert_array_equal(np.asarray(got), _ref(op, keep, 3.0))


def test_at_with_integer_arrays_on_the_leading_axes():
  # numpy's advanced indexing: the arrays broadcast together; repeated indices accumulate.
  x = np.zeros((3, 3, 2), np.float32)
  i, j = np.array([0, 1, 2, 2]), np.array([0, 1, 2, 2])
  want = x.copy()
  np.add.at(want, (i, j), 1.0)
  np.testing.assert_array_equal(jnp.asarray(x).at[i, j].add(1.0), want)
  want = x.copy()
  want[i, j, :] = np.arange(8).reshape(4, 2)
  np.testing.assert_array_equal(
      jnp.asarray(x).at[i, j, :].set(np.arange(8, dtype=np.float32).reshape(4, 2)), want)
  m = x[:, :, 0].copy()
  m[np.array([[0], [2]]), np.array([1, -1])] = 5
  np.testing.assert_array_equal(
      jnp.asarray(x[:, :, 0]).at[np.array([[0], [2]]), np.array([1, -1])].set(5.0), m)
  # Under jit, with traced indices.
  f = jax.jit(lambda v, a, b: v.at[a, b].add(3.0))
  got = f(np.ones((3, 3), np.float32), np.array([0, 2]), np.array([1, 1]))
  want = np.ones((3, 3), np.float32)
  want[[0, 2], [1, 1]] += 3
  np.testing.assert_array_equal(got, want)
  # An index out of range on any axis drops its update, as JAX's scatters do.
  np.testing.assert_array_equal(
      jnp.zeros((2, 3)).at[np.array([0, 1, 5]), np.array([7, 2, 0])].set(1.0),
      [[0, 0, 0], [0, 0, 1]])
  with pytest.raises(jax.PartixError, match=r"index arrays must be integers"):
    jnp.zeros((2, 2)).at[np.array([0.5]), np.array([1])].set(1.0)


def test_concrete_boolean_masks_index_as_numpy():
  # As JAX outside jit: a mask whose value is known selects its elements; inside jit the
  # result's shape would depend on the mask's values, which is refused with a way out.
  x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
  a = jnp.asarray(x)
  np.testing.assert_array_equal(a[np.array([True, False, True])], x[[True, False, True]])
  np.testing.assert_array_equal(a[a > 5], x[x > 5])
  np.testing.assert_array_equal(a[:, np.array([1, 0, 0, 1], bool)], x[:, [True, False, False, True]])
  np.testing.assert_array_equal(a[[True, False, True]], x[[True, False, True]])
  with pytest.raises(jax.PartixError, match=r"traced boolean mask has a data-dependent shape"):
    jax.jit(lambda v: v[v > 1])(a)


def test_static_out_of_bounds_indices_clamp_and_updates_are_skipped():
  # JAX's "Out-of-bounds indexing" gotcha: a retrieval clamps the index into the axis, an
  # update at an out-of-bounds index is skipped (numpy would raise for both).
  x = jnp.arange(10)
  assert int(x[11]) == 9 and int(x[-11]) == 0
  assert float(jnp.arange(10.0).at[11].get()) == 9.0
  assert np.isnan(float(jnp.arange(10.0).at[11].get(mode="fill", fill_value=np.nan)))
  assert int(jax.jit(lambda v: v[12])(x)) == 9
  m = jnp.arange(12).reshape(3, 4)
  assert int(m[5, -9]) == 8  # row 2, column 0
  y = jnp.arange(5.0)
  np.testing.assert_array_equal(np.asarray(y.at[7].set(1.0)), np.arange(5.0))
  np.testing.assert_array_equal(np.asarray(y.at[-7].add(3.0)), np.arange(5.0))
  np.testing.assert_array_equal(np.asarray(y.at[2].set(9.0)), [0, 1, 9, 3, 4])
  with pytest.raises(jax.PartixError, match="out of bounds for axis 0 of size 0"):
    jnp.zeros((0,))[0]
