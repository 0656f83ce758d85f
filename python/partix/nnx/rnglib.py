"""nnx.Rngs: named streams of random keys. Each stream holds a key and a counter (both state,
so a stream advances inside nnx.jit and the count is written back); calling it folds the
counter into the key and increments the counter."""
import functools

import numpy as np

from partix import numpy as jnp
from partix import random
from partix import tree_util as tu
from partix._src.core import Array, PartixError
from partix._src.prng import KeyArray
from partix.nnx import filterlib, graph
from partix.nnx.module import Object
from partix.nnx.variables import Variable


class RngState(Variable):
  __slots__ = ()


class RngKey(RngState):
  __slots__ = ()


class RngCount(RngState):
  __slots__ = ()


def _as_key(key, api):
  """A typed key (array) for a seed, a typed key, or raw key data [..., 2]."""
  if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
    return random.key(int(key))
  if isinstance(key, KeyArray):
    return key
  if isinstance(key, (Array, np.ndarray)) and key.shape[-1:] == (2,):
    return random.wrap_key_data(key)
  raise PartixError(f"[nnx.{api}] {key!r} is not a seed (an int) or a key (random.key(seed))")


class RngStream(Object):
  """One stream: stream() returns a new key each call."""

  def __init__(self, key, *, tag):
    key = _as_key(key, "RngStream")
    self.tag = tag
    self.key = RngKey(key, tag=tag)
    self.count = RngCount(jnp.zeros(key.shape, dtype=jnp.int32), tag=tag)

  def __call__(self):
    key = random.fold_in(self.key[...], self.count[...])
    self.count[...] = self.count[...] + 1
    return key

  def split(self, k):
    return type(self)(random.split(self(), k), tag=self.tag)

  def fork(self, *, split=None):
    key = self()
    if split is not None:
      key = random.split(key, split)
    return type(self)(key, tag=self.tag)

  def broadcast(self, k):
    key = self()
    shape = (k,) if isinstance(k, int) else tuple(k)
    data = random.key_data(key)
    return type(self)(random.wrap_key_data(jnp.broadcast_to(data, shape + data.shape)),
                      tag=self.tag)

  def normal(self, shape=(), dtype=None):
    return random.normal(self(), shape, dtype)

  def uniform(self, shape=(), dtype=None, minval=0.0, maxval=1.0):
    return random.uniform(self(), shape, dtype, minval, maxval)

  def bernoulli(self, p=0.5, shape=None):
    return random.bernoulli(self(), p, shape)


class Rngs(Object):
  """Rngs(0) (a 'default' stream) or Rngs(params=0, dropout=1): rngs.params() draws from the
  'params' stream, or from 'default' when there is no such stream."""

  def __init__(self, default=None, **rngs):
    if default is not None:
      if isinstance(default, dict):
        rngs = {**default, **rngs}
      else:
        rngs["default"] = default
    for tag, key in rngs.items():
      if isinstance(key, RngStream):
        key = key.key.get_value()
      object.__setattr__(self, tag, RngStream(key, tag=tag))

  def _stream(self, name, error):
    streams = vars(self)
    if name in streams:
      return streams[name]
    if "default" in streams:
      return streams["default"]
    raise error(f"No RngStream named '{name}' found in Rngs (streams: {sorted(streams)}), and "
                "no 'default' stream to fall back on.")

  def __getitem__(self, name):
    return self._stream(name, KeyError)

  def __getattr__(self, name):
    if name.startswith("__") and name.endswith("__"):
      raise AttributeError(name)
    return self._stream(name, AttributeError)

  def __call__(self):
    return self.default()

  def __iter__(self):
    return iter([k for k, v in vars(self).items() if isinstance(v, RngStream)])

  def __len__(self):
    return sum(isinstance(v, RngStream) for v in vars(self).values())

  def __contains__(self, name):
    return name in vars(self)

  def items(self):
    return [(k, v) for k, v in vars(self).items() if isinstance(v, RngStream)]

  def fork(self, *, split=None):
    out = {}
    for name, stream in self.items():
      n = split if not isinstance(split, dict) else None
      out[name] = stream.fork(split=n) if n is not None else stream.fork()
    return Rngs(**out)

  def split(self, k):
    return Rngs(**{name: stream.split(k) for name, stream in self.items()})


def reseed(node, **seeds):
  """Resets the named streams found in node to new keys (counts to 0)."""
  for _, x in graph.iter_graph(node):
    if isinstance(x, RngStream) and x.tag in seeds:
      key = _as_key(seeds[x.tag], "reseed")
      x.key[...] = key
      x.count[...] = jnp.zeros(key.shape, dtype=jnp.int32)


def _streams(tree, only):
  pred = filterlib.to_predicate(only)
  seen, out = set(), []
  roots = tu.tree_leaves(tree, is_leaf=lambda x: isinstance(x, Object))
  for root in roots:
    if not isinstance(root, Object):
      continue
    for path, x in graph.iter_graph(root):
      if isinstance(x, RngStream) and id(x) not in seen and pred(path, x):
        seen.add(id(x))
        out.append(x)
  return out


class _SplitBackups:
  """The streams split in place by split_rngs(node, ...); restored on exit (or restore())."""

  def __init__(self, backups):
    self.backups = backups

  def restore(self):
    for stream, key, count in self.backups:
      stream.key[...] = key
      stream.count[...] = count

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.restore()


def _split_in_place(tree, splits, only, squeeze):
  backups = []
  for stream in _streams(tree, only):
    key = stream()
    backups.append((stream, stream.key[...], stream.count[...]))
    new = random.split(key, splits)
    if squeeze and splits == 1:
      new = new[0]
    stream.key[...] = new
    stream.count[...] = jnp.zeros(new.shape, dtype=jnp.int32)
  return _SplitBackups(backups)


def split_rngs(node=None, *, splits, only=..., squeeze=False):
  """Splits the random streams of the Rngs found in node (or in a decorated function's
  arguments) into `splits` keys each, for nnx.vmap / nnx.scan over them; the streams are
  restored afterwards (advanced by one draw)."""
  if not isinstance(splits, int) or splits < 1:
    raise PartixError(f"[nnx.split_rngs] splits must be a positive int, got {splits!r}")
  if node is None:
    def decorator(f):
      @functools.wraps(f)
      def wrapper(*args, **kwargs):
        with _split_in_place((args, kwargs), splits, only, squeeze):
          return f(*args, **kwargs)
      return wrapper
    return decorator
  if callable(node) and not isinstance(node, Object):
    return split_rngs(splits=splits, only=only, squeeze=squeeze)(node)
  return _split_in_place(node, splits, only, squeeze)
