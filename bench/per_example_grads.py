#!/usr/bin/env python3
"""Per-example gradients of GPT-2 tiny on 8 virtual CPU devices: partix's vmap(grad) against
the same loop over the examples written by hand (partix), and against JAX's vmap(grad).

Commands (from the repository root; JAX lives in a venv outside the repo):

  ~/.cache/partix-jax-venv/bin/pip install jax numpy
  scripts/build.sh
  PYTHONPATH=build/python ~/.cache/partix/venv/bin/python bench/per_example_grads.py \\
      --system partix --variant vmap            # one timing line (examples/s)
  ~/.cache/partix-jax-venv/bin/python bench/per_example_grads.py --system jax
  (--check compares vmap with the loop on either system; bench/README.md has the figures)

The model is written once, in plain jax.numpy (only the import differs between the systems):
GPT-2 tiny (byte vocabulary 256, 64 positions, C 64, 2 layers, 4 heads, tanh GELU, tied
embeddings), f32; the loss of one example is the mean next-token cross entropy of its 64
tokens. The batch of --batch examples is split over the 8 devices; parameters are replicated.
Each variant is jitted once, run --warmup times, then timed over --steps calls (each call
blocks on its result); the line printed is examples/s of the median call.
"""
import argparse
import os
import statistics
import sys
import time

V, T, C, L, H = 256, 64, 64, 2, 4


def model(jax, jnp):
  def layer_norm(x, g, b):
    mu = jnp.mean(x, -1, keepdims=True)
    d = x - mu
    return d / jnp.sqrt(jnp.mean(d * d, -1, keepdims=True) + 1e-5) * g + b

  def gelu(x):
    return 0.5 * x * (1 + jnp.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

  def loss(p, ids):  # one example: ids [T + 1]
    x = p["wte"][ids[:-1]] + p["wpe"]
    causal = jnp.arange(T)[:, None] >= jnp.arange(T)[None, :]
    for i in range(L):
      h = layer_norm(x, p[f"ln1_g{i}"], p[f"ln1_b{i}"])
      q, k, v = jnp.split(h @ p[f"attn_w{i}"] + p[f"attn_b{i}"], 3, axis=-1)
      q, k, v = (a.reshape(T, H, C // H) for a in (q, k, v))
      s = jnp.einsum("thd,shd->hts", q, k) / jnp.sqrt(C // H)
      a = jax.nn.softmax(jnp.where(causal, s, -1e9), axis=-1)
      o = jnp.einsum("hts,shd->thd", a, v).reshape(T, C)
      x = x + o @ p[f"proj_w{i}"] + p[f"proj_b{i}"]
      h = layer_norm(x, p[f"ln2_g{i}"], p[f"ln2_b{i}"])
      x = x + gelu(h @ p[f"fc_w{i}"] + p[f"fc_b{i}"]) @ p[f"mlp_w{i}"] + p[f"mlp_b{i}"]
    logits = layer_norm(x, p["lnf_g"], p["lnf_b"]) @ p["wte"].T
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, ids[1:, None], axis=-1))
  return loss


def params(np):
  rng = np.random.default_rng(0)
  n = lambda *s: (rng.standard_normal(s) * 0.02).astype(np.float32)
  z = lambda *s: np.zeros(s, np.float32)
  o = lambda *s: np.ones(s, np.float32)
  p = {"wte": n(V, C), "wpe": n(T, C), "lnf_g": o(C), "lnf_b": z(C)}
  for i in range(L):
    p.update({f"ln1_g{i}": o(C), f"ln1_b{i}": z(C), f"attn_w{i}": n(C, 3 * C),
              f"attn_b{i}": z(3 * C), f"proj_w{i}": n(C, C), f"proj_b{i}": z(C),
              f"ln2_g{i}": o(C), f"ln2_b{i}": z(C), f"fc_w{i}": n(C, 4 * C),
              f"fc_b{i}": z(4 * C), f"mlp_w{i}": n(4 * C, C), f"mlp_b{i}": z(C)})
  return p


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--system", choices=["partix", "jax"], required=True)
  ap.add_argument("--variant", choices=["vmap", "loop"], default="vmap")
  ap.add_argument("--batch", type=int, default=32)
  ap.add_argument("--steps", type=int, default=10)
  ap.add_argument("--warmup", type=int, default=2)
  ap.add_argument("--check", action="store_true", help="compare vmap with the loop and exit")
  a = ap.parse_args()
  if a.system == "jax":
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
  else:
    os.environ.setdefault("PARTIX_NUM_CPU_DEVICES", "8")
    import partix as jax
    import partix.numpy as jnp
    from partix.sharding import AxisType, NamedSharding, PartitionSpec as P
  import numpy as np
  mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
  loss = model(jax, jnp)
  p = jax.device_put(params(np), NamedSharding(mesh, P()))
  ids_host = np.random.default_rng(1).integers(0, V, (a.batch, T + 1)).astype(np.int32)
  ids = jax.device_put(ids_host, NamedSharding(mesh, P("data")))
  vmapped = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0)))

  @jax.jit
  def looped(pv, batch):  # the loop over the examples written by hand
    gs = [jax.grad(loss)(pv, batch[i]) for i in range(a.batch)]
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *gs)
  if a.check:
    gv, gl = vmapped(p, ids), looped(p, ids)
    worst = max(float(np.max(np.abs(np.asarray(gv[k]) - np.asarray(gl[k])))) for k in gv)
    print(f"{a.system}: vmap against the loop, largest difference {worst:.2e}")
    return 0 if worst < 1e-5 else 1
  f = vmapped if a.variant == "vmap" else looped
  for _ in range(a.warmup):
    jax.block_until_ready(f(p, ids))
  times = []
  for _ in range(a.steps):
    t0 = time.perf_counter()
    jax.block_until_ready(f(p, ids))
    times.append(time.perf_counter() - t0)
  med = statistics.median(times)
  print(f"{a.system} {a.variant}: {a.batch / med:.1f} examples/s (median call {med * 1e3:.1f} ms)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
