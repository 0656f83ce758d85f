# devices: 1
"""The transforms on a single device (no mesh given anywhere): jit, grad, control flow,
shard_map on a 1-device mesh, random, with default placement."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax, random
from partix.sharding import NamedSharding, PartitionSpec as P


def test_one_device_end_to_end(rng):
  w = rng.standard_normal((3, 2)).astype(np.float32)
  x = rng.standard_normal((5, 3)).astype(np.float32)
  calls = []

  def loss(w, x):
    calls.append(1)
    return jnp.tanh(x @ w).sum()
  step = jax.jit(jax.value_and_grad(loss))
  v, g = step(w, x)
  v, g = step(w, x)
  assert len(calls) == 1
  np.testing.assert_allclose(float(v), np.tanh(x @ w).sum(), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(g), x.T @ (1 - np.tanh(x @ w) ** 2), rtol=1e-4,
                             atol=1e-5)
  c, ys = lax.scan(lambda c, r: (c + r, c), jnp.zeros(3), x)
  np.testing.assert_allclose(np.asarray(c), x.sum(0), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(ys), np.cumsum(x, 0) - x, rtol=1e-5, atol=1e-6)
  mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
  out = jax.shard_map(lambda a: lax.psum(a, "x"), mesh=mesh, in_specs=P("x"),
                      out_specs=P())(x)
  np.testing.assert_allclose(np.asarray(out), x)
  k = random.key(0)
  np.testing.assert_array_equal(
      np.asarray(random.normal(k, (4, 2), out_sharding=NamedSharding(mesh, P("x")))),
      np.asarray(random.normal(k, (4, 2))))
  with pytest.raises(jax.PartixError):
    jax.make_mesh((jax.device_count() + 1,), ("x",))
