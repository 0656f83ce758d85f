"""lax.gather, lax.scatter* and lax.index_take (partix/_src/lax_gather.py) against a numpy loop
oracle of XLA's semantics, and against values computed with JAX 0.10.2. The configurations are
those of JAX's tests/lax_test.py (testGather, testScatter*, testScatterApply, testIndexTake and
the two *ShapeCheckingRule tests), re-expressed; each names its JAX case."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix._src.core import PartixError

GDN, SDN = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers


# ---- the oracle: one loop over the result (gather) or the updates (scatter) ----

def _start(shape, vec, batch, smap, op_b, idx_b, sizes, clamp):
  """(the window's start in the operand, whether it lies wholly in bounds)."""
  start, ok = [0] * len(shape), True
  for k, d in enumerate(smap):
    s, hi = int(vec[k]), shape[d] - sizes[d]
    ok = ok and 0 <= s <= hi
    start[d] = min(max(s, 0), max(hi, 0)) if clamp else s
  for o, j in zip(op_b, idx_b):
    start[o] = batch[j]
  return start, ok


def np_gather(op, idx, dn, sizes, mode=None, fill=np.nan):
  offset, collapsed, smap, op_b, idx_b = dn
  rank = len(offset) + idx.ndim - 1
  win = [d for d in range(op.ndim) if d not in collapsed and d not in op_b]
  bi, wi = iter(idx.shape[:-1]), iter([sizes[d] for d in win])
  out = np.zeros([next(wi) if i in offset else next(bi) for i in range(rank)], op.dtype)
  batch_pos = [i for i in range(rank) if i not in offset]
  for o in np.ndindex(*out.shape):
    batch = tuple(o[p] for p in batch_pos)
    start, ok = _start(op.shape, idx[batch], batch, smap, op_b, idx_b, sizes, mode != "fill")
    if not ok and mode == "fill":
      out[o] = fill
      continue
    for d, p in zip(win, offset):
      start[d] += o[p]
    out[o] = op[tuple(start)]
  return out


def np_scatter(op, idx, upd, dn, combine, mode=None):
  """XLA's scatter; updates apply in row-major order (a position named twice by lax.scatter
  keeps the last, one of the orders JAX allows)."""
  uwd, inserted, sdims, op_b, idx_b = dn
  win = [d for d in range(op.ndim) if d not in inserted and d not in op_b]
  sizes = [1] * op.ndim
  for d, p in zip(win, uwd):
    sizes[d] = upd.shape[p]
  out = op.copy()
  batch_pos = [i for i in range(upd.ndim) if i not in uwd]
  for u in np.ndindex(*upd.shape):
    batch = tuple(u[p] for p in batch_pos)
    start, ok = _start(op.shape, idx[batch], batch, sdims, op_b, idx_b, sizes, mode == "clip")
    if not ok and mode != "clip":
      continue  # FILL_OR_DROP (the default) and PROMISE_IN_BOUNDS drop the whole window
    for d, p in zip(win, uwd):
      start[d] += u[p]
    out[tuple(start)] = combine(out[tuple(start)], upd[u])
  return out


def close(got, want, tol=1e-5):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                             rtol=tol, atol=tol)


# (name, operand shape, indices shape, dimension numbers, slice sizes)
GATHER_CASES = [
    ("testGather_0", (5,), (2, 1), GDN((), (0,), (0,)), (1,)),
    ("testGather_1", (10,), (3, 1), GDN((1,), (), (0,)), (2,)),
    ("testGather_2", (10, 5), (3, 1), GDN((1,), (0,), (0,)), (1, 3)),
    ("testGather_3", (10, 5), (2, 2), GDN((1,), (0,), (0, 1)), (1, 3)),
    ("testGather_4_batching", (2, 5), (2, 2, 1), GDN((), (1,), (1,), (0,), (0,)), (1, 1)),
    ("testGather_5_batching", (2, 3, 10), (3, 2, 1), GDN((2,), (), (2,), (0, 1), (1, 0)),
     (1, 1, 3)),
    ("offsets_around_batch", (4, 6, 5), (2, 3, 2), GDN((0, 3), (1,), (2, 1)), (4, 1, 2)),
    ("swapped_start_map", (6, 7), (4, 2), GDN((0, 1), (), (1, 0)), (2, 3)),
]

# (name, operand shape, indices shape, updates shape, dimension numbers)
SCATTER_CASES = [
    ("testScatter_0", (5,), (2, 1), (2,), SDN((), (0,), (0,))),
    ("testScatter_1", (10,), (3, 1), (3, 2), SDN((1,), (), (0,))),
    ("testScatter_2", (10, 5), (3, 1), (3, 3), SDN((1,), (0,), (0,))),
    ("testScatter_3_batching", (2, 5), (2, 2, 1), (2, 2), SDN((), (1,), (1,), (0,), (0,))),
    ("testScatter_4_batching", (2, 3, 10), (3, 2, 1), (3, 2, 3),
     SDN((2,), (), (2,), (0, 1), (1, 0))),
    ("windows_around_batch", (6, 7), (4, 2), (2, 4, 3), SDN((0, 2), (), (1, 0))),
]

SCATTERS = {"scatter": (lax.scatter, lambda a, b: b),
            "scatter_add": (lax.scatter_add, lambda a, b: a + b),
            "scatter_sub": (lax.scatter_sub, lambda a, b: a - b),
            "scatter_mul": (lax.scatter_mul, lambda a, b: a * b),
            "scatter_min": (lax.scatter_min, min),
            "scatter_max": (lax.scatter_max, max)}
MODES = [None, "clip", "fill", "promise_in_bounds"]


def _indices(rng, shape, hi):
  """Indices that reach past both ends, so every mode's out-of-bounds rule is exercised."""
  return rng.integers(-2, hi + 2, shape).astype(np.int32)


@pytest.mark.parametrize("case", GATHER_CASES, ids=[c[0] for c in GATHER_CASES])
@pytest.mark.parametrize("mode", MODES)
def test_gather_matches_oracle(case, mode, rng):
  _, shape, ishape, dn, sizes = case
  for dtype in (np.float32, np.int32):
    op = (rng.standard_normal(shape) * 10).astype(dtype)
    idx = _indices(rng, ishape, max(shape))
    got = lax.gather(op, idx, dn, sizes, mode=mode)
    fill = np.nan if dtype == np.float32 else np.iinfo(np.int32).min
    want = np_gather(op, idx, dn, sizes, mode="fill" if mode == "fill" else None, fill=fill)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


def test_gather_jax_values():
  """Checked against JAX 0.10.2: windows of 2 starting at 5, -1 and 1 in arange(6.)."""
  x = np.arange(6.0, dtype=np.float32)
  idx = np.array([[5], [-1], [1]], np.int32)
  dn = GDN(offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,))
  clamped = [[4, 5], [0, 1], [1, 2]]
  for mode in (None, "clip", "promise_in_bounds", lax.GatherScatterMode.CLIP,
               lax.GatherScatterMode.PROMISE_IN_BOUNDS):
    np.testing.assert_array_equal(lax.gather(x, idx, dn, (2,), mode=mode), clamped)
  for mode in ("fill", "drop", lax.GatherScatterMode.FILL_OR_DROP):
    np.testing.assert_array_equal(lax.gather(x, idx, dn, (2,), mode=mode),
                                  [[np.nan] * 2, [np.nan] * 2, [1, 2]])
  np.testing.assert_array_equal(lax.gather(x, idx, dn, (2,), mode="fill", fill_value=-3),
                                [[-3, -3], [-3, -3], [1, 2]])


def test_gather_fill_defaults():
  """JAX 0.10.2's fill values: NaN, the signed minimum, the unsigned maximum, True."""
  dn, nine = GDN((), (0,), (0,)), np.array([[9]], np.int32)
  for x, want in [(np.arange(6, dtype=np.uint8), 255), (np.arange(6, dtype=np.int32), -2 ** 31),
                  (np.arange(6) > 2, True), (np.arange(6.0, dtype=np.float32), np.nan)]:
    got = lax.gather(x, nine, dn, (1,), mode="fill")
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, [want])


def test_gather_empty_and_narrow_indices():
  """JAX's testGather base case: slice sizes that would not fit are allowed with no indices."""
  got = lax.gather(np.zeros((0,), np.float32), np.zeros((0, 1), np.int32),
                   GDN((), (0,), (0,)), (1,))
  assert got.shape == (0,)
  x = np.arange(12.0, dtype=np.float32).reshape(4, 3)
  for dt in (np.int8, np.uint8, np.int16):
    got = lax.gather(x, np.array([[3], [1]], dt), GDN((1,), (0,), (0,)), (1, 3))
    np.testing.assert_array_equal(got, x[[3, 1]])


@pytest.mark.parametrize("case", SCATTER_CASES, ids=[c[0] for c in SCATTER_CASES])
@pytest.mark.parametrize("op", list(SCATTERS))
def test_scatter_matches_oracle(case, op, rng):
  _, shape, ishape, ushape, dn = case
  f, combine = SCATTERS[op]
  for mode in MODES:
    x = rng.standard_normal(shape).astype(np.float32)
    idx = _indices(rng, ishape, max(shape))
    upd = rng.standard_normal(ushape).astype(np.float32)
    got = f(x, idx, upd, dn, mode=mode)
    assert got.dtype == np.float32 and got.shape == shape
    close(got, np_scatter(x, idx, upd, dn, combine, mode=mode))


def test_scatter_jax_values():
  """Checked against JAX 0.10.2."""
  x = np.zeros(6, np.float32)
  wide = SDN(update_window_dims=(1,), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,))
  idx = np.array([[5], [-1], [1]], np.int32)
  upd = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
  for mode in (None, "fill", "drop", "promise_in_bounds"):  # a window past an end is dropped
    np.testing.assert_array_equal(lax.scatter_add(x, idx, upd, wide, mode=mode),
                                  [0, 5, 6, 0, 0, 0])
  np.testing.assert_array_equal(lax.scatter_add(x, idx, upd, wide, mode="clip"),
                                [3, 9, 6, 0, 1, 2])
  one = SDN((), (0,), (0,))
  rep = np.array([[1], [1], [3]], np.int32)
  u = np.array([2, 3, 4], np.float32)
  np.testing.assert_array_equal(lax.scatter(x, rep, u - 1, one), [0, 2, 0, 3, 0, 0])
  np.testing.assert_array_equal(lax.scatter_mul(np.arange(1.0, 7, dtype=np.float32), rep, u, one),
                                [1, 12, 3, 16, 5, 6])
  np.testing.assert_array_equal(lax.scatter_sub(np.arange(6.0, dtype=np.float32), rep, u, one),
                                [0, -4, 2, -1, 4, 5])
  np.testing.assert_array_equal(
      lax.scatter_max(np.arange(6, dtype=np.int32), rep, np.array([9, 2, -4], np.int32), one),
      [0, 9, 2, 3, 4, 5])


def test_scatter_add_accumulates_repeats(rng):
  x = rng.standard_normal((7, 3)).astype(np.float32)
  idx = rng.integers(0, 7, (40, 1)).astype(np.int32)
  upd = rng.standard_normal((40, 3)).astype(np.float32)
  want = x.copy()
  np.add.at(want, idx[:, 0], upd)
  close(lax.scatter_add(x, idx, upd, SDN((1,), (0,), (0,))), want)
  close(lax.scatter_sub(x, idx, upd, SDN((1,), (0,), (0,))), 2 * x - want)


def test_scatter_integer_and_bool(rng):
  dn = SDN((), (0,), (0,))
  idx = np.array([[0], [2], [2], [4], [9]], np.int32)
  x = rng.integers(-50, 50, 6).astype(np.int32)
  u = rng.integers(-50, 50, 5).astype(np.int32)
  for name in ("scatter_add", "scatter_mul", "scatter_min", "scatter_max"):
    f, combine = SCATTERS[name]
    got = f(x, idx, u, dn)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np_scatter(x, idx, u, dn, combine))
  b = np.array([True, False, True, False, True, False])
  ub = np.array([False, True, True, True, False])
  np.testing.assert_array_equal(lax.scatter_max(b, idx, ub, dn),
                                np_scatter(b, idx, ub, dn, max))
  np.testing.assert_array_equal(lax.scatter_min(b, idx, ub, dn),
                                np_scatter(b, idx, ub, dn, min))
  np.testing.assert_array_equal(lax.scatter(b, idx, ub, dn), np_scatter(b, idx, ub, dn,
                                                                        lambda a, c: c))
  want = x.copy()
  want[2] += 3  # one index vector, a Python scalar update of rank 0
  np.testing.assert_array_equal(lax.scatter_add(x, np.array([2], np.int32), 3, dn), want)


@pytest.mark.parametrize("case", SCATTER_CASES, ids=[c[0].replace("testScatter", "testScatterApply")
                                                     for c in SCATTER_CASES])
def test_scatter_apply_matches_oracle(case, rng):
  _, shape, ishape, ushape, dn = case
  x = rng.standard_normal(shape).astype(np.float32)
  idx = rng.integers(0, max(shape), ishape).astype(np.int32)
  want = np_scatter(x, idx, np.zeros(ushape, np.float32), dn, lambda a, _: np.sin(a))
  close(lax.scatter_apply(x, idx, jnp.sin, dn, update_shape=ushape), want)
  f = jax.jit(lambda x, i: lax.scatter_apply(x, i, jnp.sin, dn, update_shape=ushape))
  close(f(x, idx), want)  # traced indices: the applications run in a loop


def test_scatter_apply_jax_values():
  """Checked against JAX 0.10.2: a position named twice is doubled twice."""
  dn, rep = SDN((), (0,), (0,)), np.array([[1], [1], [3]], np.int32)
  x = np.arange(6.0, dtype=np.float32)
  np.testing.assert_array_equal(lax.scatter_apply(x, rep, lambda v: v * 2, dn, update_shape=(3,)),
                                [0, 4, 2, 6, 4, 5])
  far = np.array([[1], [1], [7]], np.int32)
  np.testing.assert_array_equal(
      lax.scatter_apply(x, far, lambda v: v * 2, dn, update_shape=(3,), mode="clip"),
      [0, 4, 2, 3, 4, 10])
  np.testing.assert_array_equal(lax.scatter_apply(x, far, lambda v: v * 2, dn, update_shape=(3,)),
                                [0, 4, 2, 3, 4, 5])
  got = jax.vmap(lambda i: lax.scatter_apply(x, i, lambda v: v + 1, dn, update_shape=(3,)))(
      np.array([[[0], [0], [0]], [[5], [2], [5]]], np.int32))
  np.testing.assert_array_equal(got, [[3, 1, 2, 3, 4, 5], [0, 1, 3, 3, 4, 7]])


@pytest.mark.parametrize("shape,idxs,axes", [
    ((3, 4, 5), (np.array([0, 2, 1]),), (0,)),
    ((3, 4, 5), (np.array([-1, -2]),), (0,)),
    ((3, 4, 5), (np.array([0, 2]), np.array([1, 3])), (0, 1)),
    ((3, 4, 5), (np.array([0, 2]), np.array([1, 3])), [0, 2]),
], ids=["testIndexTake_0", "testIndexTake_1", "testIndexTake_2", "testIndexTake_3"])
def test_index_take(shape, idxs, axes):
  src = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
  want = np.moveaxis(src, list(axes), list(range(len(axes))))
  want = want[tuple(i % shape[a] for i, a in zip(idxs, axes))]
  np.testing.assert_array_equal(lax.index_take(src, idxs, axes), want)


def test_index_take_jax_values():
  """Checked against JAX 0.10.2: indices wrap around (5 % 3, -1 % 4)."""
  got = lax.index_take(np.arange(24, dtype=np.int32).reshape(2, 3, 4),
                       (np.array([0, 1, 5]), np.array([3, -1, 2])), (1, 2))
  np.testing.assert_array_equal(got, [[3, 15], [7, 19], [10, 22]])


# ---- transformations ----

def _fd_grad(f, x, eps=1e-2):
  """Central finite differences of a scalar f at x (float64 host arithmetic on f's values)."""
  x = np.asarray(x, np.float64)
  g = np.zeros_like(x)
  for i in np.ndindex(*x.shape):
    e = np.zeros_like(x)
    e[i] = eps
    g[i] = (float(f((x + e).astype(np.float32))) - float(f((x - e).astype(np.float32)))) / (2 * eps)
  return g


def test_gather_grad_matches_finite_differences(rng):
  _, shape, ishape, dn, sizes = GATHER_CASES[3]
  x = rng.standard_normal(shape).astype(np.float32)
  idx = np.array([[1, 0], [1, 2], [8, 4]], np.int32)[:ishape[0]]  # overlapping, one clamped
  w = rng.standard_normal((ishape[0], 3)).astype(np.float32)
  for mode in (None, "fill"):
    def loss(x):
      return jnp.sum(jnp.sin(lax.gather(x, idx, dn, sizes, mode=mode)) * w)
    close(jax.grad(loss)(x), _fd_grad(loss, x), tol=2e-3)
  # Batching dims: each batch reads its own row.
  _, shape, ishape, dn, sizes = GATHER_CASES[5]
  x = rng.standard_normal(shape).astype(np.float32)
  idx = rng.integers(0, 8, ishape).astype(np.int32)

  def loss(x):
    return jnp.sum(jnp.cos(lax.gather(x, idx, dn, sizes)))
  close(jax.grad(loss)(x), _fd_grad(loss, x), tol=2e-3)


def test_scatter_add_grad_matches_finite_differences(rng):
  _, shape, ishape, ushape, dn = SCATTER_CASES[2]
  x = rng.standard_normal(shape).astype(np.float32)
  idx = np.array([[2], [2], [12]], np.int32)  # a repeat and a dropped window
  u = rng.standard_normal(ushape).astype(np.float32)
  w = rng.standard_normal(shape).astype(np.float32)

  def loss(x, u):
    return jnp.sum(jnp.sin(lax.scatter_add(x, idx, u, dn)) * w)
  gx, gu = jax.grad(loss, argnums=(0, 1))(x, u)
  close(gx, _fd_grad(lambda x: loss(x, u), x), tol=2e-3)
  close(gu, _fd_grad(lambda u: loss(x, u), u), tol=2e-3)
  assert np.all(np.asarray(gu)[2] == 0)  # the dropped window has no effect


def test_scatter_grads_jax_values():
  """Checked against JAX 0.10.2: scatter keeps the last of a repeat, so only it has a
  gradient; scatter_max splits a tie between the operand and the update."""
  dn, rep = SDN((), (0,), (0,)), np.array([[1], [1], [3]], np.int32)
  x, u = np.arange(6.0, dtype=np.float32), np.array([2.0, 3, 4], np.float32)
  gx, gu = jax.grad(lambda o, v: jnp.sum(lax.scatter(o, rep, v, dn)), argnums=(0, 1))(x, u)
  np.testing.assert_array_equal(gx, [1, 0, 1, 0, 1, 1])
  np.testing.assert_array_equal(gu, [0, 1, 1])
  gx, gu = jax.grad(lambda o, v: jnp.sum(lax.scatter_max(o, rep, v, dn) * np.arange(6.0)),
                    argnums=(0, 1))(np.arange(1.0, 7, dtype=np.float32), u)
  close(gx, [0, 0, 2, 1.5, 4, 5])
  close(gu, [0, 1, 1.5])


def test_jit_with_traced_indices(rng):
  for name, shape, ishape, dn, sizes in GATHER_CASES[:6]:
    x = rng.standard_normal(shape).astype(np.float32)
    idx = _indices(rng, ishape, max(shape))
    for mode in (None, "fill"):
      f = jax.jit(lambda x, i: lax.gather(x, i, dn, sizes, mode=mode))
      np.testing.assert_array_equal(f(x, idx), np_gather(x, idx, dn, sizes, mode=mode))
  for name, shape, ishape, ushape, dn in SCATTER_CASES:
    x = rng.standard_normal(shape).astype(np.float32)
    idx = _indices(rng, ishape, max(shape))
    u = rng.standard_normal(ushape).astype(np.float32)
    for op in ("scatter_add", "scatter_max", "scatter"):
      f, combine = SCATTERS[op]
      g = jax.jit(lambda x, i, u: f(x, i, u, dn, mode="clip"))
      close(g(x, idx, u), np_scatter(x, idx, u, dn, combine, mode="clip"))


def test_vmap(rng):
  _, shape, ishape, dn, sizes = GATHER_CASES[2]
  xs = rng.standard_normal((4,) + shape).astype(np.float32)
  idx = rng.integers(0, 10, (4,) + ishape).astype(np.int32)
  got = jax.vmap(lambda x, i: lax.gather(x, i, dn, sizes))(xs, idx)
  np.testing.assert_array_equal(got, np.stack([np_gather(a, i, dn, sizes)
                                               for a, i in zip(xs, idx)]))
  got = jax.vmap(lambda i: lax.gather(xs[0], i, dn, sizes, mode="fill"), in_axes=1)(
      np.swapaxes(idx + 5, 0, 1))  # the batch along another axis, some windows filled
  np.testing.assert_array_equal(got, np.stack([np_gather(xs[0], i + 5, dn, sizes, mode="fill")
                                               for i in idx]))
  _, shape, ishape, ushape, dn = SCATTER_CASES[4]
  xs = rng.standard_normal((3,) + shape).astype(np.float32)
  idx = rng.integers(0, 10, (3,) + ishape).astype(np.int32)
  us = rng.standard_normal((3,) + ushape).astype(np.float32)
  for op in ("scatter_add", "scatter_min", "scatter"):
    f, combine = SCATTERS[op]
    got = jax.vmap(lambda x, i, u: f(x, i, u, dn))(xs, idx, us)
    close(got, np.stack([np_scatter(a, i, u, dn, combine) for a, i, u in zip(xs, idx, us)]))


def test_vmap_of_grad(rng):
  _, shape, ishape, ushape, dn = SCATTER_CASES[1]
  xs = rng.standard_normal((3,) + shape).astype(np.float32)
  idx = rng.integers(0, 9, (3,) + ishape).astype(np.int32)
  u = rng.standard_normal(ushape).astype(np.float32)

  def loss(x, i):
    return jnp.sum(jnp.sin(lax.scatter_add(x, i, u, dn)))
  got = jax.jit(jax.vmap(jax.grad(loss)))(xs, idx)
  want = np.cos(np.stack([np_scatter(x, i, u, dn, lambda a, b: a + b) for x, i in zip(xs, idx)]))
  close(got, want, tol=1e-4)


# ---- a sharded operand (explicit sharding on 8 devices; JAX's rule for the result's type) ----

@pytest.fixture(scope="module")
def mesh():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices (PARTIX_NUM_CPU_DEVICES=8)")
  return jax.make_mesh((8,), ("x",))


def _spec(a):
  s = tuple(jax.typeof(a).sharding.spec)
  return s + (None,) * (a.ndim - len(s))


def test_sharded_operand(mesh):
  """Values and result shardings checked against JAX 0.10.2 on 8 devices."""
  put = lambda a: jax.device_put(a, jax.NamedSharding(mesh, jax.P("x")))  # noqa: E731
  x = np.arange(80.0, dtype=np.float32).reshape(8, 10)
  xs, idx = put(x), np.array([[0], [9], [7]], np.int32)
  columns = GDN(offset_dims=(0,), collapsed_slice_dims=(1,), start_index_map=(1,))
  for f in (lax.gather, jax.jit(lax.gather, static_argnums=(2, 3))):
    got = f(xs, idx, columns, (8, 1))
    np.testing.assert_array_equal(got, x[:, [0, 9, 7]])
    assert _spec(got) == ("x", None)
  upd = np.arange(24.0, dtype=np.float32).reshape(8, 3)
  dn = SDN(update_window_dims=(0,), inserted_window_dims=(1,), scatter_dims_to_operand_dims=(1,))
  for f in (lax.scatter_add, jax.jit(lax.scatter_add, static_argnums=(3,))):
    got = f(xs, idx, put(upd), dn)
    np.testing.assert_array_equal(got, np_scatter(x, idx, upd, dn, lambda a, b: a + b))
    assert _spec(got) == ("x", None)
  got = lax.scatter_max(xs, np.array([[3], [3]], np.int32), put(upd[:, :2]), dn)
  np.testing.assert_array_equal(got, np_scatter(x, np.array([[3], [3]]), upd[:, :2], dn, max))
  assert _spec(got) == ("x", None)
  # Batching dims split along x: each device's rows read their own indices.
  ob = np.arange(48.0, dtype=np.float32).reshape(8, 6)
  ib = (np.arange(16).reshape(8, 2, 1) % 6).astype(np.int32)
  bdn = GDN((), (1,), (1,), (0,), (0,))
  got = lax.gather(put(ob), ib, bdn, (1, 1))
  np.testing.assert_array_equal(got, np_gather(ob, ib, bdn, (1, 1)))
  assert _spec(got) == ("x", None)
  # Split along the dimension the windows slice into: ambiguous, refused as JAX does.
  rows = GDN(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
  with pytest.raises(PartixError, match=r"lax\.gather.*operand float32\[8, 10\] split as "
                                        r"P\('x', None\)"):
    lax.gather(xs, idx, rows, (1, 10))
  with pytest.raises(PartixError, match=r"lax\.scatter_add.*updates float32\[8, 3\]"):
    lax.scatter_add(xs, idx, upd, dn)  # the updates' window is whole, theirs not split


# ---- bad input ----

# JAX's testGatherShapeCheckingRule cases: (name, operand, indices, dnums, slice_sizes, message
# of partix naming the bad value).
GATHER_ERRORS = [
    ("NonAscendingWindowIndices", (10, 9, 8, 7, 6), (5, 4, 3, 2, 1),
     GDN((4, 5, 6, 8, 7), (), (0, 1, 2, 3, 4)), (10, 9, 8, 7, 6),
     r"offset_dims must be sorted; got \(4, 5, 6, 8, 7\)"),
    ("RepeatedWindowIndices", (10, 9, 8, 7, 6), (5, 4, 3, 2, 1),
     GDN((4, 5, 6, 7, 7), (), (0, 1, 2, 3, 4)), (10, 9, 8, 7, 6),
     r"offset_dims must not repeat; got \(4, 5, 6, 7, 7\)"),
    ("WindowIndexOutOfBounds", (10, 9, 8, 7, 6), (5, 4, 3, 2, 1),
     GDN((4, 5, 100, 101, 102), (), (0, 1, 2, 3, 4)), (10, 9, 8, 7, 6),
     r"offset_dims \(4, 5, 100, 101, 102\): 100 is outside \[0, 9\)"),
    ("MismatchingElidedWindowDims", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6, 7, 8), (4,), (0, 1, 2, 3, 4)), (10, 9, 8, 7, 6),
     r"offset dimension or collapsed or batching: slice_sizes \(10, 9, 8, 7, 6\)"),
    ("OutOfBoundsWindowToInputMapping", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6, 7, 8), (0, 1, 2, 3, 19), (0, 1, 2, 3, 4)), (10, 9, 8, 7, 6),
     r"invalid collapsed_slice_dims \(0, 1, 2, 3, 19\): 19 is outside \[0, 5\)"),
    ("MismatchingGatherToInputMapping", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6, 7, 8), (), (0, 1, 2, 3)), (10, 9, 8, 7, 6),
     r"start_index_map \(0, 1, 2, 3\) has 4 entries .* have 5"),
    ("RepeatedGatherToInputMapping", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6, 7, 8), (), (0, 1, 2, 3, 3)), (10, 9, 8, 7, 6),
     r"start_index_map must not repeat; got \(0, 1, 2, 3, 3\)"),
    ("NonAscendingElidedWindowDims", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6, 7, 8), (2, 1), (0, 1, 2, 3, 4)), (10, 9, 8, 7, 6),
     r"collapsed_slice_dims must be sorted; got \(2, 1\)"),
    ("WindowBoundsTooLarge", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6, 7), (2,), (0, 1, 2, 3, 4)), (10, 9, 1, 100, 6),
     r"slice_sizes \(10, 9, 1, 100, 6\): entry 3 is 100, outside \[0, 7\]"),
    ("MismatchingNumberOfWindowBounds", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6, 7), (), (0, 1, 2, 3, 4)), (10, 9, 8, 7),
     r"slice_sizes \(10, 9, 8, 7\) must have one entry per operand dimension \(5"),
    ("WindowBoundsNot1ForElidedDim", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6, 7), (1,), (0, 1, 2, 3, 4)), (10, 9, 8, 7, 6),
     r"collapsed_slice_dims \(1,\) names dimension 1, whose slice size must be 1"),
    ("NonDisjointCollapsedAndBatchingDims", (10, 9, 8, 7, 6), (5, 4, 3, 2, 3),
     GDN((4, 5, 6), (0, 1, 2), (0, 1, 4), (2, 3)), (10, 9, 8, 7, 6),
     r"collapsed_slice_dims \(0, 1, 2\) and operand_batching_dims \(2, 3\) must be disjoint"),
    ("WindowBoundsNot1ForBatchingDim", (10, 9, 8, 7, 6), (9, 4, 3, 2, 4),
     GDN((4, 5, 6, 7), (), (0, 2, 3, 4), (1,), (0,)), (10, 9, 8, 7, 6),
     r"operand_batching_dims \(1,\) names dimension 1, whose slice size must be 0 or 1"),
    ("IndexVectorDimInStartIndicesBatchingDims", (10, 9, 8, 7, 6), (5, 4, 3, 2, 5),
     GDN((4, 5, 6), (0, 1), (0, 1, 2, 3, 4), (), (0, 4)), (10, 9, 8, 7, 6),
     r"start_indices_batching_dims must not repeat|names the index vector dimension 4"),
    ("MismatchingNumberOfBatchingDims", (10, 9, 8, 7, 6), (5, 4, 3, 2, 4),
     GDN((4, 5, 6), (1, 2), (1, 2, 3, 4), (0,), (0, 1)), (10, 9, 8, 7, 6),
     r"operand_batching_dims \(0,\) and start_indices_batching_dims \(0, 1\) must have equal"),
    ("MismatchingBatchingDimSizes", (10, 9, 8, 7, 6), (10, 9, 3, 2, 3),
     GDN((4, 5, 6, 7, 8), (2, 3, 4), (2, 3, 4), (0, 1), (1, 0)), (10, 9, 8, 7, 6),
     r"batching dimensions \(0, 1\) have shape \(10, 9\) but the indices' \(1, 0\) have "
     r"shape \(9, 10\)"),
]


@pytest.mark.parametrize("case", GATHER_ERRORS, ids=[c[0] for c in GATHER_ERRORS])
def test_gather_shape_errors(case):
  _, oshape, ishape, dn, sizes, msg = case
  f = lambda x, i: lax.gather(lax.broadcast(x, oshape), lax.broadcast(i, ishape), dn, sizes)  # noqa
  with pytest.raises(PartixError, match=r"\[lax\.gather\] .*" + msg) as e:
    jax.eval_shape(f, np.float32(1), np.int32(1))
  assert isinstance(e.value, TypeError)  # JAX raises TypeError here


# JAX's testScatterShapeCheckingRule cases: (name, operand, indices, updates, dnums, message).
SCATTER_ERRORS = [
    ("ScatterWithUpdatesBiggerThanInput", (64, 48), (32, 1), (65, 32), SDN((0,), (1,), (1,)),
     r"window dimension 0 has size 65, more than the operand's dimension 0 \(64\)"),
    ("ScatterWithUpdatesNotMatchingIndices", (64, 48), (32, 1), (64, 31), SDN((1,), (0,), (1,)),
     r"scatter dimension 0 has size 64 but the indices' dimension 0 has 32"),
    ("InvalidUpdates", (50, 49, 48, 47, 46), (10, 9, 8, 7, 5), (10, 9, 8, 7, 3, 2, 4, 1),
     SDN((4, 5, 6), (1, 2), (0, 1, 2, 3, 4)),
     r"updates must have rank 7 .*got shape \(10, 9, 8, 7, 3, 2, 4, 1\)"),
    ("NonAscendingUpdateWindowDims", (6, 5, 4, 3, 2), (5, 4, 3, 2, 1),
     (10, 9, 8, 7, 6, 5, 4, 3, 2), SDN((4, 5, 6, 8, 7), (), (0, 1, 2, 3, 4)),
     r"update_window_dims must be sorted; got \(4, 5, 6, 8, 7\)"),
    ("OutOfBoundsInsertedWindowDims", (50, 49, 48, 47, 46), (10, 9, 8, 7, 5),
     (10, 9, 8, 7, 3, 2, 4), SDN((4, 5, 6), (1, 5), (0, 1, 2, 3, 4)),
     r"invalid inserted_window_dims \(1, 5\): 5 is outside \[0, 5\)"),
    ("MismatchingScatterDimsToOperandDims", (50, 49, 48, 47, 46), (10, 9, 8, 7, 5),
     (10, 9, 8, 7, 3, 2, 4), SDN((4, 5, 6), (1, 2), (0, 1, 2, 3)),
     r"scatter_dims_to_operand_dims \(0, 1, 2, 3\) has 4 entries .* have 5"),
    ("RepeatedValuesInScatterDimsToOperandDims", (50, 49, 48, 47, 46), (10, 9, 8, 7, 5),
     (10, 9, 8, 7, 3, 2, 4), SDN((4, 5, 6), (1, 2), (0, 1, 2, 2, 3)),
     r"scatter_dims_to_operand_dims must not repeat; got \(0, 1, 2, 2, 3\)"),
    ("InsufficientWindowDims", (50, 49, 48, 47, 46), (10, 9, 8, 7, 4), (10, 9, 8, 7, 3, 2, 4),
     SDN((4, 5, 6), (1,), (0, 1, 2, 3)), r"window of rank 4; the operand has rank 5"),
    ("NonDisjointScatterDimsToOperandDimsAndBatchingDims", (50, 49, 48, 47, 46),
     (10, 9, 8, 7, 5), (10, 9, 8, 7, 3, 2, 4), SDN((4, 5, 6), (0, 1), (0, 1, 2, 4), (2, 3)),
     r"scatter_dims_to_operand_dims \(0, 1, 2, 4\) and operand_batching_dims \(2, 3\) must be "
     r"disjoint"),
    ("MismatchingBatchingDimSizes", (10, 9, 48, 47, 46, 45), (10, 9, 8, 7, 2),
     (10, 9, 8, 7, 3, 2, 4), SDN((4, 5, 6), (2,), (2, 3), (0, 1), (1, 0)),
     r"have shape \(10, 9\) but the indices' \(1, 0\) have shape \(9, 10\)"),
]


@pytest.mark.parametrize("case", SCATTER_ERRORS, ids=[c[0] for c in SCATTER_ERRORS])
def test_scatter_shape_errors(case):
  _, oshape, ishape, ushape, dn, msg = case
  idx = np.zeros(ishape, np.int32)

  def f(x, y):
    return lax.scatter(lax.broadcast(x, oshape), idx, lax.broadcast(y, ushape), dn)
  with pytest.raises(PartixError, match=r"\[lax\.scatter\] .*" + msg) as e:
    jax.eval_shape(f, np.int32(1), np.int32(1))
  assert isinstance(e.value, TypeError)


def test_other_bad_input():
  x, dn = np.arange(6.0, dtype=np.float32), GDN((), (0,), (0,))
  with pytest.raises(PartixError, match=r"\[lax\.gather\] start_indices must have an integer "
                                        r"type, got float32"):
    lax.gather(x, np.array([[1.0]], np.float32), dn, (1,))
  with pytest.raises(PartixError, match=r"\[lax\.gather\] unknown mode 'bogus'"):
    lax.gather(x, np.array([[1]], np.int32), dn, (1,), mode="bogus")
  with pytest.raises(PartixError, match=r"\[lax\.gather\] mode 'one_hot' is not supported"):
    lax.gather(x, np.array([[1]], np.int32), dn, (1,), mode="one_hot")
  with pytest.raises(PartixError, match=r"\[lax\.gather\] start_indices must have rank >= 1"):
    lax.gather(x, np.int32(1), dn, (1,))
  with pytest.raises(PartixError, match=r"\[lax\.gather\] dimension_numbers must be a "
                                        r"GatherDimensionNumbers, got \(\(\), \(0,\)\)"):
    lax.gather(x, np.array([[1]], np.int32), ((), (0,)), (1,))
  with pytest.raises(PartixError, match=r"\[lax\.gather\] slice_sizes must be a sequence of "
                                        r"ints, got \(1\.5,\)"):
    lax.gather(x, np.array([[1]], np.int32), dn, (1.5,))
  sdn = SDN((), (0,), (0,))
  with pytest.raises(PartixError, match=r"\[lax\.scatter_add\] updates must have the operand's "
                                        r"dtype float32, got int32"):
    lax.scatter_add(x, np.array([[1]], np.int32), np.array([1], np.int32), sdn)
  with pytest.raises(PartixError, match=r"\[lax\.scatter_apply\] updates must have rank 1 .*"
                                        r"got shape \(\)"):
    lax.scatter_apply(x, np.array([[1], [2]], np.int32), jnp.sin, sdn)
  with pytest.raises(PartixError, match=r"\[lax\.scatter_mul\] unknown mode 'wrap'"):
    lax.scatter_mul(x, np.array([[1]], np.int32), np.ones(1, np.float32), sdn, mode="wrap")


def test_large_scatters(rng):
  """A million-element operand and 100k updates with repeats: each combine is a sort and a
  segmented scan, not an updates-by-operand table."""
  n, k = 1_000_000, 100_000
  x = rng.standard_normal(n).astype(np.float32)
  idx = rng.integers(0, n, (k, 1)).astype(np.int32)
  u = rng.standard_normal(k).astype(np.float32)
  dn = SDN((), (0,), (0,))
  for f, ref in [(lax.scatter_max, np.maximum.at), (lax.scatter_min, np.minimum.at),
                 (lax.scatter_mul, np.multiply.at), (lax.scatter_add, np.add.at)]:
    want = x.copy()
    ref(want, idx[:, 0], u)
    close(jax.jit(lambda x, i, u: f(x, i, u, dn))(x, idx, u), want)
  want = x.copy()
  want[idx[:, 0]] = u  # numpy's assignment keeps the last of a repeat too
  np.testing.assert_array_equal(jax.jit(lambda x, i, u: lax.scatter(x, i, u, dn))(x, idx, u),
                                want)
