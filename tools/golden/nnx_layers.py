"""Golden outputs of Flax NNX layers for tests/python/nnx/test_golden.py.

Run with real JAX and Flax (not partix), 8 CPU devices, from the repository root:

  python3 -m venv /tmp/flax-venv
  /tmp/flax-venv/bin/pip install jax==0.10.2 flax==0.12.8
  /tmp/flax-venv/bin/python tools/golden/nnx_layers.py

It writes tests/golden/nnx/layers.npz (inputs, the weights each layer holds and its outputs,
keyed "<case>/<name>") and tests/golden/nnx/structure.json (each layer's parameter paths and
shapes, and the flat state paths of the seed's models). The tests load the same weights into
partix.nnx layers and compare outputs, so the two random number generators need not agree.
"""
import json
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "nnx")


def flat_params(module):
  return {"/".join(map(str, p)): np.asarray(v[...])
          for p, v in nnx.to_flat_state(nnx.state(module))}


def shapes(module):
  return {"/".join(map(str, p)): [type(v).__name__, list(np.shape(v[...]))]
          for p, v in nnx.to_flat_state(nnx.state(module))}


def cases():
  rng = np.random.default_rng(7)
  x3 = rng.normal(size=(2, 5, 8)).astype(np.float32)
  ids = rng.integers(0, 11, size=(2, 5)).astype(np.int32)
  mask = np.tril(np.ones((5, 5), np.float32))
  out = {}
  layers = {
      "linear": (nnx.Linear(8, 6, rngs=nnx.Rngs(1)), lambda m: m(jnp.asarray(x3))),
      "linear_nobias": (nnx.Linear(8, 3, use_bias=False, rngs=nnx.Rngs(2)),
                        lambda m: m(jnp.asarray(x3))),
      "layernorm": (nnx.LayerNorm(8, rngs=nnx.Rngs(3)), lambda m: m(jnp.asarray(x3 * 3 + 1))),
      "rmsnorm": (nnx.RMSNorm(8, rngs=nnx.Rngs(4)), lambda m: m(jnp.asarray(x3 * 2 - 1))),
      "embed": (nnx.Embed(11, 8, rngs=nnx.Rngs(5)), lambda m: m(jnp.asarray(ids))),
      "batchnorm": (nnx.BatchNorm(8, momentum=0.9, rngs=nnx.Rngs(8)),
                    lambda m: (m(jnp.asarray(x3 * 2 + 1)), m.mean[...], m.var[...],
                               m(jnp.asarray(x3), use_running_average=True))),
      "embed_attend": (nnx.Embed(11, 8, rngs=nnx.Rngs(5)),
                       lambda m: m.attend(jnp.asarray(x3))),
      "mha": (nnx.MultiHeadAttention(num_heads=2, in_features=8, qkv_features=12,
                                     out_features=4, rngs=nnx.Rngs(6), decode=False),
              lambda m: m(jnp.asarray(x3), mask=jnp.asarray(mask))),
  }
  structure = {}
  for name, (m, call) in layers.items():
    # Non-trivial scales and biases, so the comparison covers them.
    for path, v in nnx.to_flat_state(nnx.state(m)):
      if path[-1] in ("scale", "bias"):
        v[...] = jnp.asarray(rng.normal(size=v[...].shape).astype(np.float32))
    for k, v in flat_params(m).items():
      out[f"{name}/param/{k}"] = v
    res = call(m)
    if isinstance(res, tuple):  # BatchNorm: output, running mean and var, inference output
      for i, r in enumerate(res):
        out[f"{name}/output{i}"] = np.asarray(r)
    else:
      out[f"{name}/output"] = np.asarray(res)
    structure[name] = shapes(m)
  out["x3"], out["ids"], out["mask"] = x3, ids, mask
  return out, structure


def init_stats():
  """Mean and std of default-initialized kernels (large layers)."""
  lin = nnx.Linear(512, 512, rngs=nnx.Rngs(0))
  emb = nnx.Embed(512, 256, rngs=nnx.Rngs(0))
  k, e = np.asarray(lin.kernel[...]), np.asarray(emb.embedding[...])
  return {"linear_kernel": [float(k.mean()), float(k.std())],
          "embed": [float(e.mean()), float(e.std())]}


def seed_models():
  mesh = jax.make_mesh((4, 2), ("data", "model"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  rules = (("batch", "data"), ("hidden", "model"), ("embed", None))

  class LogicalDotReluDot(nnx.Module):
    def __init__(self, depth, rngs):
      init_fn = nnx.initializers.lecun_normal()
      self.dot1 = nnx.Linear(depth, depth, kernel_init=nnx.with_metadata(
          init_fn, sharding=("embed", "hidden"), sharding_rules=rules), use_bias=False,
          rngs=rngs)
      self.w2 = nnx.Param(init_fn(rngs.params(), (depth, depth)), sharding=("hidden", "embed"),
                          sharding_rules=rules)

  class Block(nnx.Module):
    def __init__(self, rngs):
      self.layer_norm1 = nnx.LayerNorm(epsilon=1e-6, num_features=8, rngs=rngs)
      self.mha = nnx.MultiHeadAttention(num_heads=2, in_features=8, rngs=rngs)
      self.dropout1 = nnx.Dropout(rate=0.1)
      self.linear1 = nnx.Linear(8, 16, rngs=rngs)
      self.dropout2 = nnx.Dropout(0.1, rngs=rngs)

  with jax.set_mesh(mesh):
    m = LogicalDotReluDot(16, nnx.Rngs(0))
    specs = nnx.spmd.get_partition_spec(nnx.state(m))
    spec_out = {"/".join(map(str, p)): [list(s) if isinstance(s, tuple) else s
                                        for s in v.get_value()]
                for p, v in nnx.to_flat_state(specs)}
  b = Block(nnx.Rngs(0))
  return {"logical_specs_4x2": spec_out, "block_paths": shapes(b)}


def main():
  os.makedirs(OUT, exist_ok=True)
  arrays, structure = cases()
  np.savez_compressed(os.path.join(OUT, "layers.npz"), **arrays)
  structure["init_stats"] = init_stats()
  structure["seed"] = seed_models()
  with open(os.path.join(OUT, "structure.json"), "w") as f:
    json.dump(structure, f, indent=1, sort_keys=True)
  print("wrote", OUT)


if __name__ == "__main__":
  main()
