"""A matmul of two sharded arrays under jit: the lowered program shows the collectives that
sharding propagation chose. Run: PARTIX_NUM_CPU_DEVICES=8 python examples/python/sharded_matmul.py"""
import numpy as np

import partix as jax
import partix.numpy as jnp
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P

# Auto axes: propagation lays out what the shardings leave open (make_mesh's default,
# Explicit, would make the layout part of each array's type instead).
mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
a = np.arange(16 * 8, dtype=np.float32).reshape(16, 8) / 100
b = np.arange(8 * 4, dtype=np.float32).reshape(8, 4) / 100

# Rows of x over 'x', its contraction dimension over 'y': the partial products need a sum
# over 'y'.
x = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
w = jax.device_put(b, NamedSharding(mesh, P("y", None)))


@jax.jit
def matmul(x, w):
  return jnp.dot(x, w)


text = matmul.lower(x, w).compile().as_text()  # the per-device program with its collectives
print(text)
y = matmul(x, w)
print("result sharding:", y.sharding)
jax.debug.visualize_array_sharding(y)
np.testing.assert_allclose(np.asarray(y), a @ b, rtol=1e-5)
assert "all_reduce" in text or "reduce_scatter" in text, "expected a collective over 'y'"
print("OK sharded_matmul")
