"""jnp.linalg's solves: solve, inv, det and slogdet of square matrices (batched over leading
dimensions), by Gauss-Jordan elimination with partial pivoting written in partix's ops. It is
traced like any program (jit, vmap, grad, shard_map bodies, loops) and differentiated through
its steps; one step per column, so it suits the small and medium matrices programs invert."""
import numpy as np

from partix._src import dtypes
from partix._src import numpy_ops as jnp
from partix._src.core import PartixError

__all__ = ["solve", "inv", "det", "slogdet"]


def _square(a, api):
  a = jnp.asarray(a, api=api)
  if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
    raise PartixError(f"[linalg.{api}] needs square matrices [..., n, n], got shape {a.shape}")
  if not dtypes.is_float(a.dtype):
    a = jnp.astype(a, np.float32)
  return a


def _eliminate(aug, n):
  """Gauss-Jordan over the first n columns of aug [..., n, n + m]: returns the reduced matrix
  (identity in the first n columns, the solution after them), the pivots [..., n] and the
  permutation's sign [...]."""
  rows = jnp.arange(n)
  pivots, sign = [], jnp.ones(aug.shape[:-2], aug.dtype)
  for k in range(n):
    col = jnp.where(rows >= k, jnp.abs(aug[..., :, k]), -1.0)
    p = jnp.argmax(col, axis=-1)  # [...]
    pe = jnp.expand_dims(p, -1)
    perm = jnp.where(rows == k, pe, jnp.where(rows == pe, k, rows))  # swap rows k and p
    aug = jnp.take_along_axis(aug, jnp.broadcast_to(jnp.expand_dims(perm, -1), aug.shape),
                              axis=-2)
    sign = jnp.where(p == k, sign, -sign)
    pivot = aug[..., k, k]
    pivots.append(pivot)
    row_k = aug[..., k, :] / jnp.expand_dims(pivot, -1)
    factor = aug[..., :, k]
    aug = aug - jnp.expand_dims(factor, -1) * jnp.expand_dims(row_k, -2)
    aug = jnp.where(jnp.expand_dims(rows == k, -1), jnp.expand_dims(row_k, -2), aug)
  return aug, jnp.stack(pivots, axis=-1), sign


def solve(a, b):
  """x with a @ x = b: b is [n] (one vector, for every matrix) or [..., n, m] (numpy 2's and
  JAX's rule: a batch of vectors is b[..., None])."""
  a = _square(a, "solve")
  b = jnp.asarray(b, api="linalg.solve")
  n = a.shape[-1]
  if (b.ndim > 1 and a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1] and
      a.shape[-1] != b.shape[-2]):
    raise PartixError(f"[linalg.solve] Invalid shapes for solve: {a.shape}, {b.shape}: a batch "
                      "of vectors is solve(a, b[..., None])[..., 0], as in JAX and numpy 2")
  vector = b.ndim == 1
  bm = jnp.expand_dims(b, -1) if vector else b
  if bm.shape[-2] != n:
    raise PartixError(f"[linalg.solve] b of shape {b.shape} does not match a of shape {a.shape}")
  dt = jnp.result_type(a.dtype, bm.dtype)
  batch = np.broadcast_shapes(a.shape[:-2], bm.shape[:-2])
  a = jnp.broadcast_to(jnp.astype(a, dt), batch + a.shape[-2:])
  bm = jnp.broadcast_to(jnp.astype(bm, dt), batch + bm.shape[-2:])
  out, _, _ = _eliminate(jnp.concatenate([a, bm], axis=-1), n)
  x = out[..., :, n:]
  return x[..., 0] if vector else x


def inv(a):
  """The inverse of each square matrix (a singular one gives inf/nan entries, as JAX)."""
  a = _square(a, "inv")
  n = a.shape[-1]
  eye = jnp.broadcast_to(jnp.eye(n, dtype=a.dtype), a.shape)
  return solve(a, eye)


def slogdet(a):
  """(sign, log|det|) of each square matrix."""
  a = _square(a, "slogdet")
  n = a.shape[-1]
  if n == 0:
    return jnp.ones(a.shape[:-2], a.dtype), jnp.zeros(a.shape[:-2], a.dtype)
  _, pivots, sign = _eliminate(a, n)
  sign = sign * jnp.prod(jnp.sign(pivots), axis=-1)
  return sign, jnp.sum(jnp.log(jnp.abs(pivots)), axis=-1)


def det(a):
  """The determinant of each square matrix."""
  a = _square(a, "det")
  n = a.shape[-1]
  if n == 0:
    return jnp.ones(a.shape[:-2], a.dtype)
  _, pivots, sign = _eliminate(a, n)
  return sign * jnp.prod(pivots, axis=-1)
