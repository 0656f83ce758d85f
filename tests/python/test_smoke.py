"""The package imports under JAX's module layout, and a sharded jit runs on 8 devices."""
import numpy as np

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.experimental.shard_map import shard_map
from partix.sharding import Mesh, NamedSharding, PartitionSpec as P


def test_module_layout():
  import partix.debug, partix.distributed, partix.profiler, partix.random, partix.tree_util  # noqa
  from partix.experimental import mesh_utils  # noqa: F401
  assert jax.shard_map is not None and shard_map is not None and lax.psum is not None
  assert jax.P is P and issubclass(jax.PartixError, ValueError)


def test_sharded_matmul_matches_numpy(mesh8):
  x = np.arange(64, dtype=np.float32).reshape(8, 8)
  w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
  a = jax.device_put(x, NamedSharding(mesh8, P("x", "y")))
  b = jax.device_put(w, NamedSharding(mesh8, P("y", None)))
  f = jax.jit(lambda a, b: a @ b)
  np.testing.assert_allclose(np.asarray(f(a, b)), x @ w, rtol=1e-5, atol=1e-4)
  assert "all_reduce" in f.lower(a, b).compile().as_text()
