"""Mixture-of-experts token routing: each device holds tokens and one expert; tokens go to
their expert with all_to_all, are processed there, and come back with a second all_to_all."""
from functools import partial

import numpy as np

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.experimental.shard_map import shard_map
from partix.sharding import NamedSharding, PartitionSpec as P

E = 8  # experts = devices
C = 2  # tokens each device sends to each expert (capacity)
D = 4
mesh = jax.make_mesh((E,), ("expert",))
rng = np.random.default_rng(0)
# tokens[d, e, c]: the c-th token device d routes to expert e (already dispatched by the router).
tokens = rng.standard_normal((E, E, C, D)).astype(np.float32)
scales = np.arange(1, E + 1, dtype=np.float32)  # expert e multiplies by e + 1

x = jax.device_put(tokens.reshape(E * E, C, D), NamedSharding(mesh, P("expert")))
s = jax.device_put(scales, NamedSharding(mesh, P("expert")))


@jax.jit
@partial(shard_map, mesh=mesh, in_specs=(P("expert"), P("expert")), out_specs=P("expert"))
def moe(x, scale):
  # x: [E, C, D] on each device, row e for expert e. After all_to_all row d holds the tokens
  # device d sent to this device's expert.
  routed = lax.all_to_all(x, "expert", split_axis=0, concat_axis=0, tiled=True)
  processed = jnp.tanh(routed) * scale[0]
  return lax.all_to_all(processed, "expert", split_axis=0, concat_axis=0, tiled=True)


y = np.asarray(moe(x, s)).reshape(E, E, C, D)
expected = np.tanh(tokens) * scales[None, :, None, None]
np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
print("routed", E * E * C, "tokens through", E, "experts")
print("OK moe_all_to_all")
