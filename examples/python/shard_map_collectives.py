"""shard_map with explicit collectives: psum, all_gather and ppermute over a mesh axis."""
from functools import partial

import numpy as np

import partix as jax
from partix import lax
from partix.experimental.shard_map import shard_map
from partix.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((8,), ("i",))
n = 8
a = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
x = jax.device_put(a, NamedSharding(mesh, P("i")))


@jax.jit
@partial(shard_map, mesh=mesh, in_specs=P("i"), out_specs=P())
def total(block):
  return lax.psum(block.sum(axis=0, keepdims=True), "i")


@jax.jit
@partial(shard_map, mesh=mesh, in_specs=P("i"), out_specs=P())
def gather(block):
  # to="invarying": the gathered value is the same on every device, as out_specs=P() says
  # (a plain all_gather's result still counts as varying over "i", as in JAX 0.10).
  return lax.all_gather(block, "i", tiled=True, to="invarying")


@jax.jit
@partial(shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
def shift(block):
  # Each device sends its block to the next one around the ring.
  return lax.ppermute(block, "i", perm=[(j, (j + 1) % n) for j in range(n)])


s = total(x)
g = gather(x)
r = shift(x)
print("psum:", np.asarray(s))
print("all_gather shape:", g.shape)
print("ppermute first rows:", np.asarray(r)[:2])
np.testing.assert_allclose(np.asarray(s), a.sum(axis=0, keepdims=True))
np.testing.assert_array_equal(np.asarray(g), a)
np.testing.assert_array_equal(np.asarray(r), np.roll(a, 1, axis=0))
print("OK shard_map_collectives")
