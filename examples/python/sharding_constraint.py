"""with_sharding_constraint pins an intermediate's sharding inside jit; the output follows it."""
import numpy as np

import partix as jax
import partix.numpy as jnp
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P

# Auto axes: propagation lays out what the shardings leave open (make_mesh's default,
# Explicit, would make the layout part of each array's type instead).
mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
a = np.linspace(-1, 1, 8 * 16, dtype=np.float32).reshape(8, 16)
x = jax.device_put(a, NamedSharding(mesh, P("x", None)))


@jax.jit
def f(x):
  y = jnp.sin(x) * 2
  # Re-shard the intermediate: columns over 'y', rows replicated.
  y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P(None, "y")))
  return y + 1


out = f(x)
print("input: ", x.sharding.spec)
print("output:", out.sharding.spec)
print(f.lower(x).as_text())
np.testing.assert_allclose(np.asarray(out), np.sin(a) * 2 + 1, rtol=1e-5, atol=1e-6)
assert out.sharding.spec == P(None, "y"), out.sharding.spec
print("OK sharding_constraint")
