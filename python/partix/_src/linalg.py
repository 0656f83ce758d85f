"""jnp.linalg in partix's ops, traced like any program (jit, vmap, grad, shard_map bodies,
loops) and differentiated through its steps: solve, inv, det and slogdet of square matrices by
Gauss-Jordan elimination with partial pivoting (one step per column), and singular values (svd,
svdvals, the spectral and nuclear norms) by one-sided Jacobi rotations (a fixed number of sweeps
over every column pair), qr by modified Gram-Schmidt run twice, and eigh / eigvalsh of symmetric
matrices by cyclic Jacobi rotations, and cholesky column by column. Both suit the small and medium matrices programs invert and measure;
they are batched over leading dimensions."""
import numpy as np

from partix._src import dtypes
from partix._src import numpy_ops as jnp
from partix._src.core import PartixError

__all__ = ["solve", "inv", "det", "slogdet", "svd", "svdvals", "norm", "qr", "eigh", "eigvalsh", "cholesky"]


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


# ---- singular values: one-sided Jacobi (Hestenes) ----

_SWEEPS = 10  # rotations over every column pair; f32 converges in fewer for small matrices


def _rotate(x, p, q, c, s, axis):
  """x with its slices p and q along axis (-1: columns, -2: rows) rotated by (c, s)."""
  if axis == -1:
    xp, xq = x[..., :, p], x[..., :, q]
    return x.at[..., :, p].set(c * xp - s * xq).at[..., :, q].set(s * xp + c * xq)
  xp, xq = x[..., p, :], x[..., q, :]
  return x.at[..., p, :].set(c * xp - s * xq).at[..., q, :].set(s * xp + c * xq)


def _rotation(diff, off, scale):
  """cos and sin of the Jacobi rotation that zeroes `off` between two entries differing by
  `diff` (no rotation once |off| is negligible against `scale`), as trailing-axis vectors."""
  done = jnp.abs(off) <= 1e-30 + 1e-7 * scale
  zeta = diff / jnp.where(done, 1.0, 2.0 * off)
  t = jnp.where(zeta >= 0, 1.0, -1.0) / (jnp.abs(zeta) + jnp.sqrt(1.0 + zeta * zeta))
  t = jnp.where(done, 0.0, t)
  c = 1.0 / jnp.sqrt(1.0 + t * t)
  return jnp.expand_dims(c, -1), jnp.expand_dims(c * t, -1)


def _orthogonalize(a, v=None):
  """Rotates the columns of a [..., m, n] (m >= n) pairwise until they are orthogonal: then
  a = U diag(s) with s the column norms, and a_original = a V^T for the rotations V (kept when
  v is given)."""
  n = a.shape[-1]
  for _ in range(_SWEEPS if n > 1 else 0):
    for p in range(n - 1):
      for q in range(p + 1, n):
        ap, aq = a[..., :, p], a[..., :, q]
        alpha, beta = jnp.sum(ap * ap, axis=-1), jnp.sum(aq * aq, axis=-1)
        c, s = _rotation(beta - alpha, jnp.sum(ap * aq, axis=-1), jnp.sqrt(alpha * beta))
        a = _rotate(a, p, q, c, s, -1)
        if v is not None:
          v = _rotate(v, p, q, c, s, -1)
  return a, v


def _matrix(a, api):
  a = jnp.asarray(a, api=f"linalg.{api}")
  if a.ndim < 2:
    raise PartixError(f"[linalg.{api}] needs matrices [..., m, n], got shape {a.shape}")
  return a if dtypes.is_float(a.dtype) else jnp.astype(a, np.float32)


def svdvals(x):
  """The singular values of each matrix [..., m, n], descending (jnp.linalg.svdvals)."""
  a = _matrix(x, "svdvals")
  if a.shape[-2] < a.shape[-1]:
    a = jnp.swapaxes(a, -1, -2)
  a, _ = _orthogonalize(a)
  s = jnp.sqrt(jnp.sum(a * a, axis=-2))
  return -jnp.sort(-s, axis=-1)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
  """a = U diag(S) Vh for each matrix [..., m, n] (S descending). With compute_uv, only the
  reduced factors (full_matrices=False) are computed."""
  if not compute_uv:
    return svdvals(a)
  x = _matrix(a, "svd")
  m, n = x.shape[-2], x.shape[-1]
  if full_matrices and m != n:
    raise PartixError(f"[linalg.svd] full_matrices=True for a {m}x{n} matrix needs the full "
                      "U or V, which partix does not compute: pass full_matrices=False")
  wide = m < n
  if wide:
    x = jnp.swapaxes(x, -1, -2)
  k = x.shape[-1]
  v0 = jnp.broadcast_to(jnp.eye(k, dtype=x.dtype), x.shape[:-2] + (k, k))
  b, v = _orthogonalize(x, v0)
  s = jnp.sqrt(jnp.sum(b * b, axis=-2))
  order = jnp.argsort(-s, axis=-1)
  s = jnp.take_along_axis(s, order, axis=-1)
  pick = jnp.broadcast_to(jnp.expand_dims(order, -2), b.shape)
  u = jnp.take_along_axis(b, pick, axis=-1) / jnp.expand_dims(jnp.where(s > 0, s, 1.0), -2)
  v = jnp.take_along_axis(v, jnp.broadcast_to(jnp.expand_dims(order, -2), v.shape), axis=-1)
  if wide:  # a^T = u s v^T, so a = v s u^T
    return v, s, jnp.swapaxes(u, -1, -2)
  return u, s, jnp.swapaxes(v, -1, -2)


def norm(x, ord=None, axis=None, keepdims=False):
  """numpy.linalg.norm; the spectral (2, -2) and nuclear ('nuc') norms over two axes from the
  singular values."""
  a = jnp.asarray(x, api="linalg.norm")
  two = (axis is None and a.ndim == 2) or (isinstance(axis, (tuple, list)) and len(axis) == 2)
  if not (two and ord in (2, -2, "nuc")):
    return jnp.linalg_norm(a, ord=ord, axis=axis, keepdims=keepdims)
  rows, cols = ((0, 1) if axis is None else tuple(d % a.ndim for d in axis))
  if rows == cols:
    raise PartixError(f"[linalg.norm] axis={axis!r} must name two different axes")
  m = jnp.moveaxis(a, (rows, cols), (-2, -1))
  s = svdvals(m)
  r = jnp.max(s, axis=-1) if ord == 2 else jnp.min(s, axis=-1) if ord == -2 else jnp.sum(
      s, axis=-1)
  if keepdims:
    for d in sorted((rows, cols)):
      r = jnp.expand_dims(r, d)
  return r


# ---- QR: modified Gram-Schmidt, run twice ----

def _mgs(a):
  """Q [..., m, n], R [..., n, n] with a = Q R for tall a (m >= n), column by column."""
  n = a.shape[-1]
  cols = jnp.arange(n)
  qs, rows = [], []
  v = a
  for k in range(n):
    vk = v[..., :, k]
    rkk = jnp.sqrt(jnp.sum(vk * vk, axis=-1))
    qk = vk / jnp.expand_dims(jnp.where(rkk > 0, rkk, 1.0), -1)
    proj = jnp.sum(jnp.expand_dims(qk, -1) * v, axis=-2)  # q_k . v_j for every column j
    later = jnp.where(cols > k, proj, 0.0)
    v = v - jnp.expand_dims(qk, -1) * jnp.expand_dims(later, -2)
    qs.append(qk)
    rows.append(jnp.where(cols == k, jnp.expand_dims(rkk, -1), later))
  return jnp.stack(qs, axis=-1), jnp.stack(rows, axis=-2)


def qr(a, mode="reduced"):
  """a = Q R for each matrix [..., m, n] (jnp.linalg.qr): mode 'reduced' (Q [m, k], R [k, n],
  k = min(m, n)) or 'r' (R alone); 'complete' only where it equals 'reduced' (m <= n). Gram-Schmidt
  is run twice, which keeps Q orthogonal to float precision for the matrices it suits."""
  x = _matrix(a, "qr")
  m, n = x.shape[-2], x.shape[-1]
  if mode not in ("reduced", "r", "complete"):
    raise PartixError(f"[linalg.qr] mode={mode!r}: expected 'reduced', 'complete' or 'r'")
  if mode == "complete" and m > n:
    raise PartixError(f"[linalg.qr] mode='complete' for a {m}x{n} matrix needs the full Q, which "
                      "partix does not compute: use mode='reduced'")
  k = min(m, n)
  q1, r1 = _mgs(x[..., :, :k])
  q, r2 = _mgs(q1)  # a second pass restores the orthogonality the first lost
  r = jnp.matmul(r2, r1)
  if n > k:
    r = jnp.concatenate([r, jnp.matmul(jnp.swapaxes(q, -1, -2), x[..., :, k:])], axis=-1)
  return r if mode == "r" else (q, r)


# ---- symmetric eigendecomposition: cyclic Jacobi ----

def eigh(a, UPLO=None, symmetrize_input=True):  # noqa: N803 (numpy's argument name)
  """Eigenvalues (ascending) and eigenvectors (columns) of each symmetric matrix [..., n, n]
  (jnp.linalg.eigh), by cyclic Jacobi rotations. UPLO='L'/'U' reads one triangle; otherwise
  the matrix is symmetrized first, as JAX's."""
  x = _square(a, "eigh")
  if UPLO in ("L", "U"):
    tri = jnp.tril(x) if UPLO == "L" else jnp.triu(x)
    x = tri + jnp.swapaxes(tri, -1, -2) - jnp.eye(x.shape[-1], dtype=x.dtype) * x
  elif UPLO is not None:
    raise PartixError(f"[linalg.eigh] UPLO={UPLO!r}: expected 'L', 'U' or None")
  elif symmetrize_input:
    x = (x + jnp.swapaxes(x, -1, -2)) / 2
  n = x.shape[-1]
  v = jnp.broadcast_to(jnp.eye(n, dtype=x.dtype), x.shape)
  for _ in range(_SWEEPS if n > 1 else 0):
    for p in range(n - 1):
      for q in range(p + 1, n):
        app, aqq = x[..., p, p], x[..., q, q]
        c, s = _rotation(aqq - app, x[..., p, q], jnp.sqrt(jnp.abs(app * aqq)))
        x = _rotate(_rotate(x, p, q, c, s, -1), p, q, c, s, -2)
        v = _rotate(v, p, q, c, s, -1)
  w = jnp.diagonal(x, axis1=-2, axis2=-1)
  order = jnp.argsort(w, axis=-1)
  w = jnp.take_along_axis(w, order, axis=-1)
  v = jnp.take_along_axis(v, jnp.broadcast_to(jnp.expand_dims(order, -2), v.shape), axis=-1)
  return w, v


def eigvalsh(a, UPLO="L", symmetrize_input=True):  # noqa: N803
  """The eigenvalues (ascending) of each symmetric matrix."""
  return eigh(a, UPLO=UPLO, symmetrize_input=symmetrize_input)[0]


def cholesky(a, *, upper=False, symmetrize_input=True):
  """L with a = L L^T for each symmetric positive definite matrix [..., n, n] (lower; upper=True
  gives L^T), column by column; a matrix that is not positive definite gives NaN, as JAX's."""
  x = _square(a, "cholesky")
  if symmetrize_input:
    x = (x + jnp.swapaxes(x, -1, -2)) / 2
  n = x.shape[-1]
  rows = jnp.arange(n)
  low = jnp.zeros(x.shape, x.dtype)
  for j in range(n):
    # Column j of a minus what the columns already found give there.
    col = x[..., :, j] - jnp.sum(low * jnp.expand_dims(low[..., j, :], -2), axis=-1)
    d = jnp.sqrt(col[..., j])  # NaN where not positive definite
    new = jnp.where(rows > j, col / jnp.expand_dims(d, -1),
                    jnp.where(rows == j, jnp.expand_dims(d, -1), 0.0))
    low = low.at[..., :, j].set(new)
  return jnp.swapaxes(low, -1, -2) if upper else low
