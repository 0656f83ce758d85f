"""The collective matmul: x's rows are split over a ring of devices, w's columns too; instead of
all-gathering x first, each device multiplies the block it holds while passing it on with
ppermute, so communication overlaps compute. Checked against the plain matmul."""
from functools import partial

import numpy as np

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.experimental.shard_map import shard_map
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P

n = 8
mesh = jax.make_mesh((n,), ("i",), axis_types=(AxisType.Auto,))
rng = np.random.default_rng(0)
a = rng.standard_normal((n * 4, 16)).astype(np.float32)
b = rng.standard_normal((16, n * 2)).astype(np.float32)
x = jax.device_put(a, NamedSharding(mesh, P("i", None)))
w = jax.device_put(b, NamedSharding(mesh, P(None, "i")))


@jax.jit
@partial(shard_map, mesh=mesh, in_specs=(P("i", None), P(None, "i")), out_specs=P(None, "i"))
def collective_matmul(x_block, w_block):
  idx = lax.axis_index("i")
  rows = x_block.shape[0]
  perm = [(j, (j - 1) % n) for j in range(n)]  # receive the next device's block
  # The output block starts equal on every device and the loop fills each device's own: it
  # varies over "i" from the start (a loop carry keeps its varying axes).
  out = lax.pcast(jnp.zeros((rows * n, w_block.shape[1]), dtype=x_block.dtype), "i",
                  to="varying")

  def step(k, carry):
    out, blk = carry
    nxt = lax.ppermute(blk, "i", perm)  # in flight while this block is multiplied
    src = (idx + k) % n
    out = lax.dynamic_update_slice_in_dim(out, jnp.dot(blk, w_block), src * rows, 0)
    return out, nxt

  out, _ = lax.fori_loop(0, n, step, (out, x_block))
  return out


@jax.jit
def plain(x, w):
  return x @ w


y = collective_matmul(x, w)
ref = plain(x, w)
print("collective matmul", y.shape, y.sharding.spec)
np.testing.assert_allclose(np.asarray(y), np.asarray(ref), rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(np.asarray(y), a @ b, rtol=1e-4, atol=1e-4)
print("OK collective_matmul")
