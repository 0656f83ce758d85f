"""jax.flatten_util (partix.flatten_util): ravel_pytree."""
import numpy as _np

from partix._src import tree_util as _tu
from partix import numpy as _jnp
from partix._src.core import PartixError as _PartixError

__all__ = ["ravel_pytree"]


def ravel_pytree(pytree):
  """(flat, unravel): every leaf of pytree raveled and concatenated into one 1-D array (in the
  leaves' common result dtype), and the function that rebuilds the tree from such a vector."""
  leaves, tree = _tu.tree_flatten(pytree)
  if not leaves:
    return _jnp.zeros((0,), _jnp.float32), lambda flat: _tu.tree_unflatten(tree, [])
  arrays = [_jnp.asarray(x) for x in leaves]
  shapes = [tuple(a.shape) for a in arrays]
  dtypes = [a.dtype for a in arrays]
  dtype = _jnp.result_type(*dtypes)
  flat = _jnp.concatenate([_jnp.ravel(a).astype(dtype) for a in arrays])
  sizes = [int(_np.prod(s, dtype=_np.int64)) for s in shapes]
  offsets = _np.cumsum([0] + sizes)

  def unravel(v):
    v = _jnp.asarray(v)
    if tuple(v.shape) != (int(offsets[-1]),):
      raise _PartixError(f"[ravel_pytree] unravel takes a vector of {int(offsets[-1])} values, "
                        f"got shape {tuple(v.shape)}")
    return _tu.tree_unflatten(tree, [v[int(o):int(o) + n].reshape(s).astype(d)
                                     for o, n, s, d in zip(offsets, sizes, shapes, dtypes)])
  return flat, unravel
