"""Typed PRNG keys (jax.random.key): an array of keys of dtype key<fry>. Each key is the two
32-bit words of threefry state, held as partix's int32[..., 2] key data (random.key_data). A
key array is a pytree node over that data, so jit, vmap, scan, shard_map, device_put and
sharding constraints carry it as they carry arrays; its shape, indexing, reshapes, transposes
and sharding leave the trailing 2 out, as JAX's do. (One difference from JAX, whose key arrays
are leaves: tree_leaves of a key array is its data.)"""
import numpy as np

from partix._src import dtypes as _dt
from partix._src import numpy_ops as jnp
from partix._src import tree_util as tu
from partix._src.core import Array, PartixError, PartixTypeError, asarray
from partix._src.sharding import NamedSharding, PartitionSpec


class KeyArray:
  """An array of typed keys (what jax.random.key, split and fold_in of typed keys return)."""
  __slots__ = ("_data",)
  __hash__ = None

  def __init__(self, data):
    self._data = data

  @property
  def dtype(self):
    return _dt.KEY

  @property
  def shape(self):
    return tuple(self._data.shape[:-1])

  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: int(np.prod(self.shape)))
  T = property(lambda self: self.transpose())

  def __len__(self):
    if not self.shape:
      raise PartixTypeError("len() of an unsized key array (shape ())")
    return self.shape[0]

  def __iter__(self):
    return (self[i] for i in range(len(self)))

  def __getitem__(self, idx):
    idx = idx if isinstance(idx, tuple) else (idx,)
    if any(i is Ellipsis for i in idx):  # the data's last axis stays after the ellipsis
      return KeyArray(self._data[idx + (slice(None),)])
    return KeyArray(self._data[idx + (Ellipsis, slice(None))])

  def reshape(self, *shape, order="C"):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    return KeyArray(jnp.reshape(self._data, tuple(shape) + (2,), order=order))

  def transpose(self, *axes):
    axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
    n = self.ndim
    perm = tuple(range(n))[::-1] if not axes else tuple(int(a) % max(n, 1) for a in axes)
    return KeyArray(jnp.transpose(self._data, perm + (n,)))

  def swapaxes(self, a, b):
    perm = list(range(self.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return self.transpose(perm)

  def squeeze(self, axis=None):
    if axis is None:
      axis = tuple(i for i, d in enumerate(self.shape) if d == 1)
    return KeyArray(jnp.squeeze(self._data, axis))

  def ravel(self):
    return self.reshape(-1)

  flatten = ravel

  @property
  def sharding(self):
    """The data's sharding without its key-word dimension."""
    s = self._data.sharding
    if isinstance(s, NamedSharding) and len(s.spec) > self.ndim:
      entries = tuple(s.spec)[:self.ndim]
      return NamedSharding(s.mesh, PartitionSpec(*entries), memory_kind=s.memory_kind)
    return s

  @property
  def committed(self):
    return self._data.committed

  def devices(self):
    return self._data.devices()

  @property
  def is_fully_replicated(self):
    return self._data.is_fully_replicated

  def block_until_ready(self):
    self._data.block_until_ready()
    return self

  def is_deleted(self):
    return self._data.is_deleted()

  def delete(self):
    self._data.delete()

  def copy(self):
    return KeyArray(self._data.copy())

  def __array__(self, dtype=None, copy=None):
    raise PartixTypeError("[KeyArray] an array of typed keys (key<fry>) cannot be converted "
                          "to a NumPy array; use jax.random.key_data(keys)")

  def __eq__(self, other):
    if not isinstance(other, KeyArray):
      return NotImplemented
    return jnp.all(self._data == other._data, axis=-1)

  def __ne__(self, other):
    if not isinstance(other, KeyArray):
      return NotImplemented
    return jnp.any(self._data != other._data, axis=-1)

  def __repr__(self):
    data = self._data
    shown = np.asarray(data).view(np.uint32) if isinstance(data, Array) and not (
        data._a.is_tracer() or data._a.is_abstract()) else data
    return f"Array({self.shape}, dtype=key<fry>) overlaying:\n{shown}"

  __str__ = __repr__


tu.register_pytree_node(KeyArray, lambda k: ((k._data,), None), lambda _, c: KeyArray(c[0]))


def is_typed(key):
  return isinstance(key, KeyArray)


def key_data(key):
  """The int32[..., 2] key data of a typed key array (a raw key passes through)."""
  return key._data if isinstance(key, KeyArray) else key


def from_seed(seed):
  """Typed keys from an integer array of seeds (traced or concrete), as JAX's threefry seeds:
  the high word is the seed's upper 32 bits (0 for 32-bit seeds), the low its lower 32."""
  s = asarray(seed)
  if not _dt.is_int(s.dtype):
    raise PartixTypeError(f"[random.key] seed must be an integer, got {s._aval_str()}")
  if s.ndim:
    raise PartixTypeError(f"[random.key] key accepts a scalar seed, but was given an array of "
                          f"shape {s.shape} != (). Use jax.vmap for batching")
  # Each word's 32 bits, held as int32 (the integer converts keep the bits).
  bits = lambda x: jnp.astype(jnp.astype(x, np.uint32), np.int32)  # noqa: E731
  hi = bits(s >> 32) if np.dtype(s.dtype).itemsize == 8 else jnp.zeros(s.shape, np.int32)
  return KeyArray(jnp.stack([hi, bits(s)], axis=-1))
