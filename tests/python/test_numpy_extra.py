"""numpy_extra's names (choose, the functional index updates, bits, histograms, i0,
polynomials, angle, host I/O, jnp.ufunc) against numpy, or against values checked with JAX
0.10.2 where JAX's semantics differ from numpy's; under jit, grad, vmap and an 8-device
sharded input where JAX allows them, and their errors where it does not."""
import io

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix._src.core import PartixError

A = np.arange(12.0, dtype=np.float32).reshape(3, 4)


def close(a, b, rtol=1e-5, atol=1e-6):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def same(a, b, dtype=None):
  """Equal values, and the dtype (b's, or the one given)."""
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert np.asarray(a).dtype == np.dtype(dtype if dtype is not None else np.asarray(b).dtype)


def fd_grad(f, x, h=1e-3):
  """Central finite differences of the scalar f at x (float64 on the host)."""
  x = np.asarray(x, np.float64)
  g = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    e = np.zeros_like(x)
    e[i] = h
    g[i] = (f(x + e) - f(x - e)) / (2 * h)
  return g


def sharded(x):
  mesh = jax.make_mesh((8,), ("x",))
  return jax.device_put(x, jax.NamedSharding(mesh, jax.P("x")))


# ---- choose ----

def test_choose_values_modes_and_dtypes():
  idx = np.array([0, 1, 2, 1])
  ch = [np.arange(4), np.arange(4) * 10, np.arange(4) * 100]
  same(jnp.choose(idx, ch), np.choose(idx, ch).astype(np.int32))
  bad = np.array([0, 4, -1])
  two = [np.arange(3), np.arange(3) * 10]
  same(jnp.choose(bad, two, mode="wrap"), np.choose(bad, two, mode="wrap").astype(np.int32))
  same(jnp.choose(bad, two, mode="clip"), np.choose(bad, two, mode="clip").astype(np.int32))
  # Broadcasting, a Python scalar choice, and promotion of the choices (int and float: float32).
  same(jnp.choose(np.array([[0], [1]]), [np.arange(3), 5]), np.array([[0, 1, 2], [5, 5, 5]],
                                                                     np.int32))
  same(jnp.choose(np.array([0, 1]), [np.array([1.0, 2.0], np.float32), np.array([3, 4])]),
       np.array([1.0, 4.0], np.float32))
  # choices given as one array: its rows.
  same(jnp.choose(np.array([1, 0]), jnp.asarray(np.array([[1, 2], [3, 4]], np.int32))),
       np.array([3, 2], np.int32))


def test_choose_jit_grad_vmap_sharded():
  i = np.arange(12).reshape(3, 4) % 3
  f = jax.jit(lambda a, i: jnp.choose(i, [a, -a, 2 * a], mode="clip"))
  close(f(A, i), np.choose(i, [A, -A, 2 * A]))
  w = np.linspace(1, 2, 12).reshape(3, 4)
  g = jax.grad(lambda c: jnp.sum(jnp.choose(i, [c, c * 3, c * c]) * w))(A)
  ref = fd_grad(lambda c: np.sum(np.choose(i, [c, c * 3, c * c]) * w), A)
  close(g, ref, rtol=1e-4, atol=1e-3)
  v = jax.vmap(lambda k: jnp.choose(k, [np.arange(4.0), -np.arange(4.0)], mode="wrap"))(i)
  close(v, np.choose(i % 2, [np.arange(4.0), -np.arange(4.0)]))
  xs = sharded(jnp.arange(16.0))
  out = jnp.choose(jnp.astype(xs, jnp.int32) % 2, [xs, -xs])
  close(out, np.where(np.arange(16) % 2, -np.arange(16.0), np.arange(16.0)))
  assert out.sharding.spec == jax.P("x")


def test_choose_errors():
  with pytest.raises(PartixError, match=r"jnp\.choose.*invalid entry.*3"):
    jnp.choose(np.array([0, 3]), [np.arange(2)])
  with pytest.raises(PartixError, match=r"jnp\.choose.*mode='raise'.*'wrap'.*'clip'"):
    jax.jit(lambda a: jnp.choose(a, [jnp.arange(2)]))(jnp.array([0, 0]))
  with pytest.raises(PartixError, match=r"jnp\.choose.*integer.*float32"):
    jnp.choose(np.array([0.0, 1.0], np.float32), [np.arange(2)])
  with pytest.raises(PartixError, match=r"jnp\.choose.*mode='bad'"):
    jnp.choose(np.array([0]), [np.arange(1)], mode="bad")
  with pytest.raises(NotImplementedError, match=r"jnp\.choose.*out"):
    jnp.choose(np.array([0]), [np.arange(1)], out=np.zeros(1))
  with pytest.raises(TypeError, match=r"jnp\.choose.*list"):
    jnp.choose([0, 1], [np.arange(2), np.arange(2)])


# ---- fill_diagonal, put, put_along_axis, place ----

def test_fill_diagonal():
  ref = np.zeros((3, 4), np.float32)
  np.fill_diagonal(ref, 5)
  same(jnp.fill_diagonal(jnp.zeros((3, 4)), 5, inplace=False), ref)
  # Values cycle along the diagonal and take the array's type (1.5 -> 1, as JAX's).
  same(jnp.fill_diagonal(jnp.zeros((4, 3), jnp.int32), np.array([1.5, 2.5]), inplace=False),
       np.array([[1, 0, 0], [0, 2, 0], [0, 0, 1], [0, 0, 0]], np.int32))
  ref = np.zeros((2, 2, 2), np.float32)
  np.fill_diagonal(ref, [1, 2])
  same(jnp.fill_diagonal(jnp.zeros((2, 2, 2)), np.array([[1, 2]]), inplace=False), ref)
  f = jax.jit(lambda a, v: jnp.fill_diagonal(a, v, inplace=False))
  close(f(A, np.array([-1.0, -2.0], np.float32)), [[-1, 1, 2, 3], [4, -2, 6, 7], [8, 9, -1, 11]])
  with pytest.raises(NotImplementedError, match=r"jnp\.fill_diagonal.*inplace=True"):
    jnp.fill_diagonal(jnp.zeros((3, 3)), 1)
  with pytest.raises(PartixError, match=r"jnp\.fill_diagonal.*inplace=True"):
    jnp.fill_diagonal(jnp.zeros((3, 3)), 1)
  with pytest.raises(NotImplementedError, match=r"jnp\.fill_diagonal.*wrap=True"):
    jnp.fill_diagonal(jnp.zeros((3, 3)), 1, wrap=True, inplace=False)
  with pytest.raises(PartixError, match=r"jnp\.fill_diagonal.*equal length.*\(2, 3, 3\)"):
    jnp.fill_diagonal(jnp.zeros((2, 3, 3)), 1, inplace=False)
  with pytest.raises(PartixError, match=r"jnp\.fill_diagonal.*at least 2-d.*\(3,\)"):
    jnp.fill_diagonal(jnp.zeros(3), 1, inplace=False)


def test_put_modes_as_jax():
  z = jnp.zeros((2, 3))
  v = np.array([1.0, 2.0], np.float32)
  # JAX 0.10.2's values: mode None counts negative indices from the end and clamps the rest;
  # the values cycle; of repeated indices the last wins.
  same(jnp.put(z, np.array([0, 5, 7]), v, inplace=False), [[1, 0, 0], [0, 0, 1]], np.float32)
  same(jnp.put(z, np.array([-1, -7]), v, inplace=False), [[2, 0, 0], [0, 0, 1]], np.float32)
  same(jnp.put(z, np.array([0, 5, 7, -1]), v, mode="clip", inplace=False),
       [[2, 0, 0], [0, 0, 1]], np.float32)
  same(jnp.put(z, np.array([0, 5, 7, -1]), v, mode="wrap", inplace=False),
       [[1, 1, 0], [0, 0, 2]], np.float32)
  same(jnp.put(jnp.zeros((2, 3), jnp.int32), np.array([1]), 2.7, inplace=False),
       [[0, 2, 0], [0, 0, 0]], np.int32)
  ref = np.arange(6.0, dtype=np.float32)
  np.put(ref, [4, 0], [9.0, 8.0])
  same(jax.jit(lambda a, i: jnp.put(a, i, np.array([9.0, 8.0], np.float32), inplace=False))(
      jnp.arange(6.0), jnp.array([4, 0])), ref)
  same(jnp.put(z, np.array([], np.int32), v, inplace=False), np.zeros((2, 3), np.float32))
  with pytest.raises(PartixError, match=r"jnp\.put.*inplace=True"):
    jnp.put(jnp.zeros(3), 0, 1.0)
  with pytest.raises(NotImplementedError, match=r"jnp\.put.*'raise'"):
    jnp.put(jnp.zeros(3), 0, 1.0, mode="raise", inplace=False)
  with pytest.raises(PartixError, match=r"jnp\.put.*mode='foo'"):
    jnp.put(jnp.zeros(3), 0, 1.0, mode="foo", inplace=False)
  with pytest.raises(TypeError, match=r"jnp\.put.*ind.*float32"):
    jnp.put(jnp.zeros(3), np.array([0.5], np.float32), 1.0, inplace=False)


def test_put_along_axis():
  i1 = np.array([[0], [3], [1]])
  ref = A.copy()
  np.put_along_axis(ref, i1, 99.0, axis=1)
  same(jnp.put_along_axis(A, i1, 99.0, axis=1, inplace=False), ref)
  i0 = np.array([[2, 0, 1, -1]])
  ref = A.copy()
  np.put_along_axis(ref, i0, np.array([[7, 8, 9, 10]]), axis=0)
  same(jnp.put_along_axis(A, i0, np.array([[7, 8, 9, 10]]), axis=0, inplace=False), ref)
  # axis=None: the flattened array; out-of-range indices drop their update (JAX's scatter).
  same(jnp.put_along_axis(A, np.array([1, 13, -2]), 5.0, axis=None, inplace=False),
       [[0, 5, 2, 3], [4, 5, 6, 7], [8, 9, 5, 11]], np.float32)
  same(jnp.put_along_axis(A, np.array([[1], [13], [-9]]), 5.0, axis=1, inplace=False),
       [[0, 5, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], np.float32)
  same(jnp.put_along_axis(A, np.array([[1], [13], [-9]]), 5.0, axis=1, inplace=False,
                          mode="clip"), [[0, 5, 2, 3], [4, 5, 6, 5], [5, 9, 10, 11]], np.float32)
  f = jax.jit(lambda a, i, v: jnp.put_along_axis(a, i, v, 1, inplace=False))
  same(f(A, i1, np.array([[7.0], [8.0], [9.0]], np.float32)),
       [[7, 1, 2, 3], [4, 5, 6, 8], [8, 9, 10, 11]], np.float32)
  v = jax.vmap(lambda r, i: jnp.put_along_axis(r, i, 0.0, 0, inplace=False))(
      A, np.array([[1], [2], [0]]))
  same(v, [[0, 0, 2, 3], [4, 5, 0, 7], [0, 9, 10, 11]], np.float32)
  with pytest.raises(PartixError, match=r"jnp\.put_along_axis.*inplace=True"):
    jnp.put_along_axis(A, np.array([[0]]), 5.0, axis=1)
  with pytest.raises(PartixError, match=r"jnp\.put_along_axis.*same ndim.*arr.ndim=2.*"
                     r"indices.ndim=1"):
    jnp.put_along_axis(A, np.array([0]), 5.0, axis=1, inplace=False)
  with pytest.raises(PartixError, match=r"jnp\.put_along_axis.*broadcastable.*\(2,\)"):
    jnp.put_along_axis(A, np.array([[0]]), np.ones(2), axis=1, inplace=False)


def test_put_along_axis_grad():
  i1 = np.array([[0, 2], [3, 3], [1, 0]])
  w = np.linspace(-1, 1, 12).reshape(3, 4)

  def ref(a, v):
    out = np.array(a, np.float64)
    np.put_along_axis(out, i1, v, axis=1)
    return np.sum(out * w)
  vals = np.array([[7.0, 1.0], [8.0, 2.0], [9.0, 3.0]], np.float32)
  f = lambda a, v: jnp.sum(jnp.put_along_axis(a, i1, v, 1, inplace=False) * w)  # noqa: E731
  ga, gv = jax.grad(f, argnums=(0, 1))(A, vals)
  close(ga, fd_grad(lambda a: ref(a, vals), A), atol=1e-4)
  close(gv, fd_grad(lambda v: ref(A, v), vals), atol=1e-4)


def test_place():
  m = np.arange(6).reshape(2, 3) % 2 == 0
  ref = np.arange(6.0, dtype=np.float32).reshape(2, 3)
  np.place(ref, m, [10.0, 20.0])
  same(jnp.place(jnp.arange(6.0).reshape(2, 3), m, np.array([10.0, 20.0]), inplace=False), ref)
  f = jax.jit(lambda x, m: jnp.place(x, m, np.array([10, 20, 30, 40]), inplace=False))
  same(f(jnp.arange(6), jnp.arange(6) > 2), np.array([0, 1, 2, 10, 20, 30], np.int32))
  with pytest.raises(PartixError, match=r"jnp\.place.*inplace=True"):
    jnp.place(jnp.arange(3), np.ones(3, bool), 1)
  with pytest.raises(PartixError, match=r"jnp\.place.*empty"):
    jnp.place(jnp.arange(3), np.ones(3, bool), np.array([]), inplace=False)
  with pytest.raises(PartixError, match=r"jnp\.place.*same size.*3 and 2"):
    jnp.place(jnp.arange(3), np.ones(2, bool), 1, inplace=False)


def test_mask_indices():
  for k in (0, 1, -1):
    for fn, nf in ((jnp.triu, np.triu), (jnp.tril, np.tril)):
      got, want = jnp.mask_indices(4, fn, k), np.mask_indices(4, nf, k)
      for g, w in zip(got, want):
        same(g, w.astype(np.int32))
  i, j = jnp.mask_indices(3, jnp.tril, size=8)
  same(i, np.array([0, 1, 1, 2, 2, 2, 0, 0], np.int32))
  same(j, np.array([0, 0, 1, 0, 1, 2, 0, 0], np.int32))
  i, j = jax.jit(lambda: jnp.mask_indices(3, jnp.triu, size=4))()
  same(i, np.array([0, 0, 0, 1], np.int32))
  same(j, np.array([0, 1, 2, 1], np.int32))
  with pytest.raises(PartixError, match=r"size="):
    jax.jit(lambda: jnp.mask_indices(3, jnp.triu))()


# ---- bits ----

def test_packbits_unpackbits():
  b = np.array([[1, 0, 1, 1, 0, 0, 1, 0, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1, 1, 0]])
  for kw in ({}, {"axis": 1}, {"axis": 0}, {"axis": -1, "bitorder": "little"}):
    same(jnp.packbits(b, **kw), np.packbits(b, **kw))
    same(jnp.packbits(b > 0, **kw), np.packbits(b > 0, **kw))
  same(jnp.packbits(np.array([-3, 0, 7, 0, 0, 0, 0, 0, 1], np.int8)),
       np.packbits(np.array([-3, 0, 7, 0, 0, 0, 0, 0, 1], np.int8) != 0))
  same(jnp.packbits(np.array(5)), np.array([128], np.uint8))
  u = np.array([[2, 255], [7, 128]], np.uint8)
  for kw in ({}, {"axis": 1}, {"axis": 0, "count": 3}, {"axis": 1, "count": 20,
                                                          "bitorder": "little"},
             {"axis": 1, "count": -3}):
    same(jnp.unpackbits(u, **kw), np.unpackbits(u, **kw))
  same(jax.jit(lambda x: jnp.packbits(x, axis=1))(A > 3), np.packbits(A > 3, axis=1))
  same(jax.jit(lambda x: jnp.unpackbits(x, axis=1, count=5))(u),
       np.unpackbits(u, axis=1, count=5))
  xs = sharded(jnp.arange(16, dtype=jnp.uint8))
  same(jnp.unpackbits(xs), np.unpackbits(np.arange(16, dtype=np.uint8)))
  with pytest.raises(TypeError, match=r"jnp\.packbits.*float32"):
    jnp.packbits(np.array([1.0, 0.0], np.float32))
  with pytest.raises(PartixError, match=r"jnp\.packbits.*'x'"):
    jnp.packbits(b, bitorder="x")
  with pytest.raises(TypeError, match=r"jnp\.unpackbits.*uint8.*int32"):
    jnp.unpackbits(np.array([1, 2], np.int32))
  with pytest.raises(PartixError, match=r"jnp\.unpackbits.*axis 2"):
    jnp.unpackbits(u, axis=2)


# ---- histograms ----

X = np.array([0.1, 0.5, 0.9, 0.3, 1.0, 0.2], np.float32)
Y = np.array([1.0, 2.0, 3.0, 1.5, 2.5, 3.0], np.float32)


def test_histogram2d():
  for kw in ({"bins": 3}, {"bins": [2, 3], "range": [[0, 1], [1, 3]], "density": True},
             {"bins": np.array([0.0, 0.5, 1.0, 2.0, 3.0]), "weights": np.arange(6.0)}):
    h, xe, ye = jnp.histogram2d(X, Y, **kw)
    h2, xe2, ye2 = np.histogram2d(X, Y, **kw)
    close(h, h2)
    close(xe, xe2)
    close(ye, ye2)
  h, xe, ye = jnp.histogram2d(X, Y, bins=3)
  assert h.dtype == np.int32 and xe.dtype == np.float32
  # The edges are JAX's (start * (1 - t) + stop * t), to the bit.
  same(xe, np.array([0.1, 0.4000000059604645, 0.7000000476837158, 1.0], np.float32))
  h, xe, ye = jnp.histogram2d(np.array([1, 2, 3]), np.array([0, 0, 1]), bins=2)
  same(h, np.array([[1, 0], [1, 1]], np.int32))
  same(ye, np.array([0.0, 0.5, 1.0], np.float32))
  f = jax.jit(lambda x, y: jnp.histogram2d(x, y, bins=2, weights=x))
  h, _, _ = f(A[:, 0], A[:, 1])
  close(h, np.histogram2d(A[:, 0], A[:, 1], bins=2, weights=A[:, 0])[0])


def test_histogramdd():
  s = np.stack([X, Y, X * Y], 1)
  for bins in ((2, 3, 2), [np.array([0, 0.5, 1]), 2, np.array([0.0, 1, 2, 3])], 4):
    h, e = jnp.histogramdd(s, bins=bins)
    h2, e2 = np.histogramdd(s, bins=bins)
    same(h, h2.astype(np.int32))
    assert len(e) == 3
    for a, b in zip(e, e2):
      close(a, b)
  h, e = jnp.histogramdd(s, bins=2, range=[(0, 1), None, (0, 4)], weights=np.arange(6.0),
                         density=True)
  h2, _ = np.histogramdd(s, bins=2, range=[(0, 1), (1, 3), (0, 4)], weights=np.arange(6.0),
                         density=True)
  close(h, h2)
  h, e = jax.jit(lambda s: jnp.histogramdd(s, bins=2))(s)
  same(h, np.histogramdd(s, bins=2)[0].astype(np.int32))
  h, e = jnp.histogramdd(s.astype(np.float16), bins=2)
  assert h.dtype == np.int32 and e[0].dtype == np.float16
  with pytest.raises(PartixError, match=r"jnp\.histogramdd.*bin for each dimension.*2 bins"):
    jnp.histogramdd(s, bins=(2, 3))
  with pytest.raises(PartixError, match=r"jnp\.histogramdd.*range.*\(0, 1\)"):
    jnp.histogramdd(s, range=[(0, 1)])
  with pytest.raises(PartixError, match=r"jnp\.histogramdd.*one weight.*\(5,\)"):
    jnp.histogramdd(s, weights=np.ones(5))


# ---- i0 ----

def test_i0_values_and_dtypes():
  x = np.array([0.0, 0.5, -1.0, 3.0, 10.0, 14.9, 15.1, 20.0, -50.0, 88.0], np.float32)
  close(jnp.i0(x), np.i0(x.astype(np.float64)), rtol=2e-6, atol=0)
  out = np.asarray(jnp.i0(np.array([89.0, -100.0, np.inf, -np.inf, np.nan], np.float32)))
  assert np.isinf(out[:2]).all() and np.isnan(out[2:]).all()  # as JAX's (inf gives nan)
  for arg, dt in ((np.array([0, 1, 2]), np.float32), (2, np.float32),
                  (np.array([True, False]), np.float32),
                  (np.array([1.0, 2.0], np.float16), np.float16),
                  (np.array([1.0, 2.0], jnp.bfloat16), jnp.bfloat16)):
    out = jnp.i0(arg)
    assert out.dtype == np.dtype(dt)
    close(np.asarray(out, np.float32), np.i0(np.asarray(arg, np.float64)), rtol=1e-2)
  close(jax.jit(jnp.i0)(A), np.i0(A.astype(np.float64)), rtol=2e-6, atol=0)
  close(jax.vmap(jnp.i0)(A), np.i0(A.astype(np.float64)), rtol=2e-6, atol=0)
  xs = sharded(jnp.arange(16.0))
  out = jnp.i0(xs)
  close(out, np.i0(np.arange(16.0)), rtol=2e-6, atol=0)
  assert out.sharding.spec == jax.P("x")
  with pytest.raises(TypeError, match=r"jnp\.i0.*list"):
    jnp.i0([1.0, 2.0])


def test_i0_grad():
  x = np.array([0.0, 0.5, -1.0, 3.0, 10.0, 14.99, 15.01, 20.0], np.float32)
  g = jax.vmap(jax.grad(jnp.i0))(x)
  ref = np.array([fd_grad(lambda t: float(np.i0(t)), np.float64(v), h=1e-5) for v in x])
  close(g, ref, rtol=1e-5, atol=1e-6)
  assert float(g[0]) == 0.0  # I0'(0) = 0, as JAX's


# ---- polynomials ----

def test_polydiv():
  for u, v in (([1.0, 3.0, 5.0, 2.0], [1.0, 2.0]), ([1, 3, 5, 2], [2, 1, 1]),
               ([1.0, 2.0, 3.0, 4.0, 5.0], [0.5, -1.0, 2.0])):
    q, r = jnp.polydiv(np.array(u), np.array(v))
    q2, r2 = np.polydiv(np.array(u, np.float64), np.array(v, np.float64))
    assert q.dtype == np.float32 and r.dtype == np.float32
    close(q, q2, rtol=1e-5)
    # JAX keeps u's length: leading zeros before numpy's remainder.
    assert r.shape == (len(u),)
    close(r[len(u) - len(r2):], r2, rtol=1e-5, atol=1e-5)
    close(r[:len(u) - len(r2)], np.zeros(len(u) - len(r2)), atol=1e-5)
  q, r = jnp.polydiv(np.array([1.0, 2.0]), np.array([1.0, 2.0, 3.0]))
  same(q, np.zeros(1, np.float32))
  same(r, np.array([1.0, 2.0], np.float32))
  q, r = jnp.polydiv(np.array([1.0, 3.0, 3.0, 1.0]), np.array([1.0, 1.0]),
                     trim_leading_zeros=True)
  same(q, np.array([1.0, 2.0, 1.0], np.float32))
  assert r.shape == (0,)
  q, r = jnp.polydiv(np.array([1.0, 3.0, 4.0]), np.array([1.0, 1.0]), trim_leading_zeros=True)
  same(r, np.array([2.0], np.float32))
  q, r = jax.jit(jnp.polydiv)(np.array([1.0, 3.0, 5.0, 2.0]), np.array([1.0, 2.0]))
  same(q, np.array([1.0, 1.0, 3.0], np.float32))
  same(r, np.array([0.0, 0.0, 0.0, -4.0], np.float32))
  with pytest.raises(PartixError, match=r"jnp\.polydiv.*trim_leading_zeros.*outside jit"):
    jax.jit(lambda u, v: jnp.polydiv(u, v, trim_leading_zeros=True))(
        np.array([1.0, 3.0]), np.array([1.0, 2.0]))


XP = np.linspace(0, 1, 7).astype(np.float32)
YP = (1 + 2 * XP - 3 * XP ** 2 + 0.1 * np.sin(9 * XP)).astype(np.float32)


def test_polyfit_values_full_cov():
  close(jnp.polyfit(XP, YP, 2), np.polyfit(XP, YP, 2), rtol=1e-4, atol=1e-5)
  w = np.arange(1.0, 8.0, dtype=np.float32)
  close(jnp.polyfit(XP, YP, 2, w=w), np.polyfit(XP, YP, 2, w=w), rtol=1e-4, atol=1e-5)
  c, res, rank, s, rc = jnp.polyfit(XP, YP, 2, full=True)
  c2, res2, rank2, s2, _ = np.polyfit(XP, YP, 2, full=True)
  close(c, c2, rtol=1e-4, atol=1e-5)
  close(res, res2, rtol=1e-3)
  assert res.shape == (1,) and rank.dtype == np.int32 and int(rank) == rank2
  close(s, s2, rtol=1e-5)
  close(rc, 7 * np.finfo(np.float32).eps)  # JAX's rcond: len(x) * eps of x's dtype
  assert rc.dtype == np.float32 and rc.shape == ()
  for cov in (True, "unscaled"):
    c, v = jnp.polyfit(XP, YP, 2, cov=cov)
    _, v2 = np.polyfit(XP, YP, 2, cov=cov)
    close(v, v2, rtol=1e-3, atol=1e-6)
  # rcond: singular values below rcond * the largest are dropped (JAX 0.10.2's values).
  c, res, rank, s, rc = jnp.polyfit(XP, YP, 3, rcond=0.1, full=True)
  assert int(rank) == 2
  close(c, [-0.986909806728363, -0.4529823958873749, 0.32237347960472107, 1.2288035154342651],
        rtol=1e-5)
  close(rc, 0.1)
  yy = np.stack([YP, 2 * YP + 1], 1)
  close(jnp.polyfit(XP, yy, 1), np.polyfit(XP, yy, 1), rtol=1e-4, atol=1e-5)
  c, v = jnp.polyfit(XP, yy, 1, cov=True)
  _, v2 = np.polyfit(XP, yy, 1, cov=True)
  assert v.shape == (2, 2, 2)
  close(v, v2, rtol=1e-3, atol=1e-6)
  c, res, rank, s, rc = jax.jit(lambda x, y: jnp.polyfit(x, y, 2, full=True))(XP, XP ** 2)
  close(c, [1.0, 0.0, 0.0], atol=1e-5)
  assert int(rank) == 3


def test_polyfit_grad_and_errors():
  wts = np.array([1.0, -2.0, 0.5], np.float32)
  g = jax.grad(lambda y: jnp.sum(jnp.polyfit(XP, y, 2) * wts))(YP)
  ref = fd_grad(lambda y: np.sum(np.polyfit(XP.astype(np.float64), y, 2) * wts), YP)
  close(g, ref, rtol=1e-3, atol=1e-4)
  with pytest.raises(PartixError, match=r"jnp\.polyfit.*deg >= 0.*-1"):
    jnp.polyfit(XP, YP, -1)
  with pytest.raises(TypeError, match=r"jnp\.polyfit.*1D vector for x.*\(7, 1\)"):
    jnp.polyfit(XP[:, None], YP, 1)
  with pytest.raises(TypeError, match=r"jnp\.polyfit.*same length.*7 and 3"):
    jnp.polyfit(XP, YP[:3], 1)
  with pytest.raises(PartixError, match=r"jnp\.polyfit.*data points \(3\).*order \(3\)"):
    jnp.polyfit(XP[:3], YP[:3], 2, cov=True)
  with pytest.raises(PartixError, match=r"jnp\.polyfit.*rcond.*int32"):
    jnp.polyfit(np.arange(5), np.arange(5) ** 2, 2)


# ---- angle ----

def test_angle():
  x = np.array([1.0, -2.0, 0.0, -0.0, np.nan, -np.inf], np.float32)
  same(jnp.angle(x), np.angle(x))
  same(jnp.angle(np.array([1, -2, 0]), deg=True), np.array([0.0, 180.0, 0.0], np.float32))
  # 0-d floats, ints and bools give float32, as JAX's; float16 arrays stay float16.
  assert jnp.angle(np.float16(-1)).dtype == np.float32
  close(jnp.angle(-1.0), np.pi)
  assert jnp.angle(np.array([-1.0], np.float16)).dtype == np.float16
  same(jnp.angle(np.array([True, False])), np.zeros(2, np.float32))
  same(jax.jit(lambda z: jnp.angle(z, deg=True))(np.array([-1.0, 2.0], np.float32)),
       np.array([180.0, 0.0], np.float32))
  xs = sharded(-jnp.arange(16.0))
  out = jnp.angle(xs)
  same(out, np.angle(-np.arange(16.0, dtype=np.float32)))
  assert out.sharding.spec == jax.P("x")


# ---- host I/O ----

def test_frombuffer_fromstring_and_impure_readers():
  same(jnp.frombuffer(np.arange(4, dtype=np.float64).tobytes()), np.arange(4, dtype=np.float32))
  same(jnp.frombuffer(b"\x01\x02\x03\x04", dtype=np.uint8, count=2, offset=1),
       np.array([2, 3], np.uint8))
  same(jnp.frombuffer(np.arange(4, dtype=np.int16).tobytes(), dtype=np.int16),
       np.arange(4, dtype=np.int16))
  same(jnp.fromstring("1 2 3.5", sep=" "), np.array([1.0, 2.0, 3.5], np.float32))
  same(jnp.fromstring("1,2,3", dtype=int, sep=","), np.array([1, 2, 3], np.int32))
  with pytest.raises(NotImplementedError, match=r"jnp\.fromfile.*np\.fromfile"):
    jnp.fromfile("x")
  with pytest.raises(NotImplementedError, match=r"jnp\.fromiter.*np\.fromiter"):
    jnp.fromiter(iter([1, 2]))


def test_save_load_savez(tmp_path):
  p = tmp_path / "a.npy"
  jnp.save(p, jnp.arange(3.0))
  out = jnp.load(p)
  assert isinstance(out, jax.Array)
  same(out, np.arange(3, dtype=np.float32))
  np.save(tmp_path / "b.npy", np.arange(3.0))  # float64 on disk: float32 in partix
  same(jnp.load(tmp_path / "b.npy"), np.arange(3, dtype=np.float32))
  jnp.save(tmp_path / "c.npy", jnp.astype(jnp.arange(3.0), jnp.bfloat16))
  out = jnp.load(tmp_path / "c.npy")
  assert out.dtype == jnp.bfloat16
  close(np.asarray(out, np.float32), [0, 1, 2])
  np.save(tmp_path / "s.npy", np.array(["a", "b"]))
  out = jnp.load(tmp_path / "s.npy")  # strings: numpy's array, as JAX's
  assert isinstance(out, np.ndarray) and out.tolist() == ["a", "b"]
  jnp.savez(tmp_path / "z.npz", x=jnp.arange(3.0), y=jnp.ones(2, jnp.int8))
  with jnp.load(tmp_path / "z.npz") as z:
    same(z["x"], np.arange(3, dtype=np.float32))
    same(z["y"], np.ones(2, np.int8))
  buf = io.BytesIO()
  jnp.save(buf, jnp.arange(4, dtype=jnp.uint8))
  buf.seek(0)
  same(jnp.load(buf), np.arange(4, dtype=np.uint8))


def test_from_dlpack():
  out = jnp.from_dlpack(np.arange(3.0))
  assert isinstance(out, jax.Array)
  same(out, np.arange(3, dtype=np.float32))
  same(jnp.from_dlpack(np.arange(3, dtype=np.uint32)), np.arange(3, dtype=np.uint32))
  same(jnp.from_dlpack(jnp.arange(3.0)), np.arange(3, dtype=np.float32))
  dev = jax.devices()[1]
  out = jnp.from_dlpack(np.arange(4, dtype=np.int32), device=dev)
  assert out.devices() == {dev}
  with pytest.raises(TypeError, match=r"jnp\.from_dlpack.*__dlpack__.*list"):
    jnp.from_dlpack([1, 2])
  with pytest.raises(PartixError, match=r"jnp\.from_dlpack.*copy=False"):
    jnp.from_dlpack(np.arange(3.0), copy=False)
  mesh = jax.make_mesh((8,), ("x",))
  with pytest.raises(PartixError, match=r"jnp\.from_dlpack.*8 devices"):
    jnp.from_dlpack(np.arange(8.0), device=jax.NamedSharding(mesh, jax.P("x")))


# ---- ufunc ----

def _f(x, y):
  return x * 2 + y


U = jnp.frompyfunc(_f, 2, 1, identity=0)
A23 = np.arange(6.0, dtype=np.float32).reshape(2, 3)


def test_ufunc_attributes_and_call():
  assert (U.__name__, U.nin, U.nout, U.nargs, U.identity) == ("_f", 2, 1, 2, 0)
  assert repr(U) == "<jnp.ufunc '_f'>"
  assert jnp.ufunc(_f, 2, 1, name="g").__name__ == "g"
  assert U == jnp.frompyfunc(_f, 2, 1, identity=0) and hash(U) == hash(
      jnp.frompyfunc(_f, 2, 1, identity=0))
  assert U != jnp.frompyfunc(_f, 2, 1)
  same(U(A23, 1), A23 * 2 + 1)
  same(U(2, 3), np.array(7, np.int32))
  same(U(2.0, 3), np.array(7.0, np.float32))
  # A Python int takes the array's type (JAX's weak typing); a float makes ints float32.
  assert U(np.arange(3, dtype=np.int8), 1).dtype == np.int8
  assert U(np.arange(3, dtype=np.int8), 1.5).dtype == np.float32
  h = jnp.ufunc(lambda x, y: (x + y, x - y), 2, 2)
  s, d = h(np.arange(3), 1)
  same(s, np.array([1, 2, 3], np.int32))
  same(d, np.array([-1, 0, 1], np.int32))
  sq = jnp.frompyfunc(lambda x: x * x, 1, 1)
  same(sq(np.arange(3)), np.array([0, 1, 4], np.int32))
  assert sq(jnp.zeros((0, 3))).shape == (0, 3)
  custom = jnp.ufunc(_f, 2, 1, call=lambda x, y: x - y)
  same(custom(5, 3), 2)
  same(jax.jit(lambda a: U(a, 1.0))(A23), A23 * 2 + 1)
  same(jax.vmap(U)(A23, np.ones((2, 3), np.float32)), A23 * 2 + 1)
  xs = sharded(jnp.arange(16.0))
  out = U(xs, 1.0)
  same(out, np.arange(16.0, dtype=np.float32) * 2 + 1)
  assert out.sharding.spec == jax.P("x")
  with pytest.raises(TypeError, match=r"_f.*list"):
    U([1, 2], 3)
  with pytest.raises(NotImplementedError, match=r"_f.*out"):
    U(A23, 1, out=A23)


def _fold(a, axis, init=None):
  """numpy reference: _f folded along axis of a."""
  a = np.moveaxis(np.asarray(a, np.float64), axis, 0)
  acc = a[0] if init is None else np.full(a.shape[1:], init, np.float64)
  for row in (a[1:] if init is None else a):
    acc = acc * 2 + row
  return acc


def test_ufunc_outer_reduce_accumulate():
  same(U.outer(np.arange(3), np.arange(2.0)), np.arange(3)[:, None] * 2 + np.arange(2.0),
       np.float32)
  assert U.outer(A23, np.arange(2)).shape == (2, 3, 2)
  same(U.outer(2, 3), np.array(7, np.int32))
  same(U.reduce(A23), _fold(A23, 0), np.float32)
  same(U.reduce(A23, axis=1), _fold(A23, 1), np.float32)
  same(U.reduce(A23, axis=None), np.array(57.0, np.float32))
  assert U.reduce(A23, axis=1, keepdims=True).shape == (2, 1)
  assert U.reduce(A23, axis=None, keepdims=True).shape == (1, 1)
  same(U.reduce(A23, axis=0, initial=10.0), _fold(A23, 0, 10.0), np.float32)
  same(U.reduce(A23, axis=1, where=np.array([True, False, True])),
       np.array([2.0, 11.0], np.float32))
  same(U.reduce(np.arange(4)), np.array(11, np.int32))
  same(U.reduce(np.arange(4), dtype=np.float32), np.array(11.0, np.float32))
  assert U.reduce(np.arange(3, dtype=np.int8), initial=5).dtype == np.int8
  same(U.reduce(np.zeros((0, 3), np.float32)), np.zeros(3, np.float32))
  same(U.accumulate(A23), np.array([[0, 1, 2], [3, 6, 9]], np.float32))
  same(U.accumulate(A23, axis=1), np.array([[0, 1, 4], [3, 10, 25]], np.float32))
  same(U.accumulate(np.arange(4), dtype=np.float32), np.array([0, 1, 4, 11], np.float32))
  assert U.accumulate(np.zeros((0, 3), np.float32)).shape == (0, 3)
  same(jax.jit(lambda a: U.reduce(a, axis=1))(A), _fold(A, 1), np.float32)
  same(jax.jit(lambda a: U.accumulate(a, axis=1))(A)[:, -1], _fold(A, 1), np.float32)
  same(jnp.ufunc(_f, 2, 1, reduce=lambda a, **kw: jnp.sum(a)).reduce(A23), np.float32(15.0))
  with pytest.raises(NotImplementedError, match=r"_f\.reduce.*tuple of axes"):
    U.reduce(A23, axis=(0, 1))
  with pytest.raises(PartixError, match=r"_f\.reduce.*zero-size.*no identity"):
    jnp.frompyfunc(_f, 2, 1).reduce(np.zeros((0, 3)))
  with pytest.raises(PartixError, match=r"_f\.reduce.*identity.*initial"):
    jnp.frompyfunc(_f, 2, 1).reduce(A23, where=np.array([True, False, True]))
  with pytest.raises(PartixError, match=r"_f\.reduce.*dtype=bool.*int"):
    U.reduce(A23, where=np.array([1, 0, 1]))
  with pytest.raises(PartixError, match=r"_f\.reduce.*axis 3 is out of bounds"):
    U.reduce(np.arange(3), axis=3)
  with pytest.raises(PartixError, match=r"_f\.accumulate.*multiple axes.*None"):
    U.accumulate(A23, axis=None)
  with pytest.raises(PartixError, match=r"reduce only supported for binary ufuncs.*nin=1"):
    jnp.frompyfunc(lambda x: x, 1, 1).reduce(np.arange(3))
  with pytest.raises(PartixError, match=r"outer only supported for binary ufuncs.*nin=1"):
    jnp.frompyfunc(lambda x: x, 1, 1).outer(np.arange(3), np.arange(3))
  with pytest.raises(PartixError, match=r"single value.*nout=2"):
    jnp.ufunc(lambda x, y: (x, y), 2, 2).accumulate(np.arange(3))


def test_ufunc_at_and_reduceat():
  # Each index in turn: a repeated index sees the earlier update (JAX 0.10.2's values).
  same(U.at(jnp.arange(5.0), np.array([0, 1, 1]), np.array([1.0, 2.0, 3.0]), inplace=False),
       np.array([1, 11, 2, 3, 4], np.float32))
  same(U.at(jnp.arange(5.0), np.array([0, 7, -1]), 1.0, inplace=False),
       np.array([1, 1, 2, 3, 9], np.float32))
  same(U.at(A23, (0, 1), 5.0, inplace=False), np.array([[0, 7, 2], [3, 4, 5]], np.float32))
  same(U.at(A23, 1, np.array([1.0, 2.0, 3.0]), inplace=False),
       np.array([[0, 1, 2], [7, 10, 13]], np.float32))
  same(U.at(np.arange(6).reshape(2, 3), (np.array([1, 1]), 0), np.array([1.0, 2.0]),
            inplace=False), np.array([[0, 1, 2], [16, 4, 5]], np.float32))
  same(U.at(np.arange(5, dtype=np.int8), np.array([0]), 1, inplace=False),
       np.array([1, 1, 2, 3, 4], np.int8))
  sq = jnp.frompyfunc(lambda x: x * x, 1, 1)
  same(sq.at(jnp.arange(5.0), np.array([1, 1, 3]), inplace=False),
       np.array([0, 1, 2, 9, 4], np.float32))
  same(jax.jit(lambda a, i: U.at(a, i, 1.0, inplace=False))(jnp.arange(5.0),
                                                            jnp.array([0, 1, 1, 9])),
       np.array([1, 7, 2, 3, 4], np.float32))
  same(U.at(jnp.arange(5.0), (), 1.0, inplace=False), np.arange(5, dtype=np.float32))
  with pytest.raises(NotImplementedError, match=r"_f\.at.*inplace=False"):
    U.at(A23, 0, 1.0)
  with pytest.raises(TypeError, match=r"_f\.at.*non-tuple sequence"):
    U.at(jnp.arange(5.0), [0, 1], 1.0, inplace=False)
  with pytest.raises(TypeError, match=r"_f\.at.*slice"):
    U.at(A23, (slice(None), np.array([0])), 1.0, inplace=False)
  # numpy's slices [0, 4), a[4] alone (4 > 1), [1, 5), [5, end), each folded with _f.
  same(U.reduceat(jnp.arange(8.0), np.array([0, 4, 1, 5])), np.array([11, 4, 26, 39],
                                                                    np.float32))
  same(U.reduceat(A23, np.array([0, 2]), axis=1), np.array([[1, 2], [10, 5]], np.float32))
  same(U.reduceat(jnp.arange(5.0), np.array([-1, 2])), np.array([17, 18], np.float32))
  out = U.reduceat(jnp.arange(5.0), np.array([3, 9]))  # past the end: NaN, as JAX's take
  assert float(out[0]) == 10.0 and np.isnan(float(out[1]))
  same(U.reduceat(np.arange(5), np.array([0, 2]), dtype=np.float32),
       np.array([1, 18], np.int32))  # JAX's generic reduceat ignores dtype
  same(jax.jit(lambda a: U.reduceat(a, jnp.array([0, 4, 1, 5])))(jnp.arange(8.0)),
       np.array([11, 4, 26, 39], np.float32))
  with pytest.raises(PartixError, match=r"_f\.reduceat.*one-dimensional.*\(1, 2\)"):
    U.reduceat(jnp.arange(5.0), np.array([[0, 2]]))
  with pytest.raises(PartixError, match=r"_f\.reduceat.*single integer axis.*None"):
    U.reduceat(jnp.arange(5.0), np.array([0, 2]), axis=None)


def test_pad_constant_values_per_axis_and_traced():
  # numpy's forms: a scalar, one (before, after) pair, one pair per axis (axis by axis, a
  # later axis' values covering the corners); a traced scalar under jit.
  x = np.arange(6.).reshape(2, 3)
  for cv in (5.0, (1.0, 2.0), ((1.0, 2.0), (3.0, 4.0)), ((0.0, 0.0), (0.0, 0.0))):
    np.testing.assert_array_equal(np.asarray(jnp.pad(x, [(1, 2), (2, 1)], constant_values=cv)),
                                  np.pad(x, [(1, 2), (2, 1)], constant_values=cv))
  f = jax.jit(lambda v, c: jnp.pad(v, 1, constant_values=c))
  np.testing.assert_array_equal(np.asarray(f(jnp.asarray(x), jnp.float32(7))),
                                np.pad(x, 1, constant_values=7.0))
  with pytest.raises(jax.PartixError, match=r"\[pad\] constant_values .* does not broadcast"):
    jnp.pad(x, 1, constant_values=((1.0, 2.0, 3.0),))
