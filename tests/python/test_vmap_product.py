"""vmap across the product: DP-SGD (per-example gradients clipped one by one, vmap(grad) inside
a jitted scan over steps) checkpointed on one mesh and resumed on another, against the same run
uninterrupted and against numpy; and vmap on a mesh spanning two processes under mpirun."""
import json
import textwrap

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P
from mpi_job import needs_mpirun, run_two_processes


def example_loss(w, x, y):
  return (jnp.tanh(x @ w) - y) ** 2


def dp_step(w, xs, ys, lr=0.1, clip=0.5):
  g = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(w, xs, ys)  # [B, 4]
  norms = jnp.sqrt(jnp.sum(g * g, axis=1, keepdims=True))
  g = g * jnp.minimum(1.0, clip / norms)
  return w - lr * g.mean(0)


def numpy_dp_step(w, xs, ys, lr=0.1, clip=0.5):
  t = np.tanh(xs @ w)
  g = (2 * (t - ys) * (1 - t * t))[:, None] * xs
  n = np.sqrt((g * g).sum(1, keepdims=True))
  return w - lr * (g * np.minimum(1.0, clip / n)).mean(0)


def data(steps):
  r = np.random.default_rng(0)
  return (r.standard_normal((steps, 16, 4)).astype(np.float32),
          r.standard_normal((steps, 16)).astype(np.float32))


def run(w, xs, ys):
  def body(wc, batch):
    return dp_step(wc, *batch), None
  return jax.jit(lambda w0, a, b: lax.scan(body, w0, (a, b))[0])(w, xs, ys)


def test_dp_sgd_checkpointed_on_one_mesh_resumed_on_another(tmp_path):
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  xs, ys = data(6)
  w0 = np.full(4, 0.1, np.float32)
  want = w0
  for s in range(6):
    want = numpy_dp_step(want, xs[s], ys[s])
  m1 = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
  m2 = jax.make_mesh((2, 4), ("a", "b"), axis_types=(AxisType.Auto,) * 2)
  batch1 = NamedSharding(m1, P(None, "x"))
  whole = run(jax.device_put(w0, NamedSharding(m1, P())), jax.device_put(xs, batch1),
              jax.device_put(ys, batch1))
  np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-6)
  # Three steps on the first mesh, saved; restored split over the second mesh; three more.
  half = run(jax.device_put(w0, NamedSharding(m1, P())), jax.device_put(xs[:3], batch1),
             jax.device_put(ys[:3], batch1))
  jax.ckpt.save(tmp_path, 3, {"w": half})
  jax.ckpt.wait()
  target = {"w": jax.ShapeDtypeStruct((4,), np.float32, sharding=NamedSharding(m2, P("b")))}
  restored = jax.ckpt.restore(tmp_path, 3, target)["w"]
  assert restored.sharding == NamedSharding(m2, P("b"))
  batch2 = NamedSharding(m2, P(None, ("a", "b")))
  resumed = run(restored, jax.device_put(xs[3:], batch2), jax.device_put(ys[3:], batch2))
  np.testing.assert_allclose(resumed, whole, rtol=1e-6, atol=1e-7)


_PROG = textwrap.dedent("""
  import json, sys
  import numpy as np
  import partix as jax
  import partix.numpy as jnp
  from partix import lax
  jax.distributed.initialize()
  from partix.sharding import NamedSharding, PartitionSpec as P
  mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
  r = np.random.default_rng(0)
  x = r.standard_normal((8, 3)).astype(np.float32)
  w = r.standard_normal((3,)).astype(np.float32)
  xs = jax.device_put(x, NamedSharding(mesh, P("x")))
  ws = jax.device_put(w, NamedSharding(mesh, P()))
  loss = lambda wv, xi: jnp.sum(jnp.sin(xi * wv)) ** 2
  g = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0)))(ws, xs)
  c = jax.jit(jax.vmap(lambda v: v - lax.pmean(v, "i"), axis_name="i"))(xs)
  out = {"sharding": str(g.sharding.spec),
         "g": np.asarray(jax.jit(lambda v: v, out_shardings=NamedSharding(mesh, P()))(g)).tolist(),
         "c": np.asarray(jax.jit(lambda v: v, out_shardings=NamedSharding(mesh, P()))(c)).tolist()}
  with open(f"{sys.argv[1]}/out{jax.process_index()}.json", "w") as f:
    json.dump(out, f)
""")


@needs_mpirun
def test_vmap_on_a_mesh_spanning_two_processes(tmp_path):
  p = run_two_processes(tmp_path, _PROG)
  assert p.returncode == 0, p.stdout + p.stderr
  r = np.random.default_rng(0)
  x = r.standard_normal((8, 3)).astype(np.float32)
  w = r.standard_normal((3,)).astype(np.float32)
  s = np.sin(x * w).sum(1, keepdims=True)
  want_g = 2 * s * np.cos(x * w) * x  # d/dw (sum sin(x w))^2 per example
  for pi in (0, 1):
    got = json.loads((tmp_path / f"out{pi}.json").read_text())
    assert got["sharding"] == str(P("x")), got["sharding"]
    np.testing.assert_allclose(got["g"], want_g, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["c"], x - x.mean(0), rtol=1e-5, atol=1e-6)
