"""A GPT-2 training step driven from Python against the same step driven from C++
(bench/gpt2_train_bench.cpp), alternating in one run.

  cmake --build build --target partix_bench_gpt2_train
  PYTHONPATH=build/python python bench/py_gpt2_step.py [--model small] [--mesh 8x1] \\
      [--batch 8] [--seq 128] [--steps 5] [--rounds 3]

Both sides take the step the C++ bench takes: byte vocabulary, value_and_grad of the loss with
dropout, clipping to global norm 1, AdamW (0.9, 0.95, weight decay 0.1), parameters and optimizer
state donated; each timed step builds its batch, runs and reads the loss. Each round runs the
C++ bench once and the Python loop once (each a fresh process with its own devices); printed:
median step seconds of each side over all rounds and Python/C++ (target: within 3%).
Needs partix.models.gpt2 (gpt2.init, gpt2.train_step, partix.optim.adamw_init).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def token(step, row, pos):  # as gpt2_train_bench.cpp
  return (row * 131 + pos * 31 + step * 17 + (row * pos) % 7) % 256


def python_side(a):
  import functools
  import numpy as np
  data, model = (int(v) for v in a.mesh.split("x"))
  os.environ["PARTIX_NUM_CPU_DEVICES"] = str(data * model)
  import partix as jax
  from partix import optim
  from partix.models import gpt2
  from partix.sharding import NamedSharding, PartitionSpec as P
  cfg = gpt2.tiny() if a.model == "tiny" else gpt2.small()
  cfg.vocab_size = 256
  cfg.dropout = a.dropout
  mesh = gpt2.make_mesh(data, model)
  params = gpt2.init(cfg, jax.random.key(0), mesh, fsdp=a.fsdp)
  opt = optim.adamw_init(params)
  step = jax.jit(functools.partial(gpt2.train_step, config=cfg), donate_argnums=(0, 1))
  bs, rep = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  import partix.numpy as jnp
  lr = jax.device_put(jnp.full((), a.lr, jnp.float32), rep)
  fold = lambda k, n: jax.random.fold_in(k, jnp.full((), n, jnp.int32))
  base_key = jax.device_put(fold(jax.random.key(0), 7), rep)
  rows, pos = np.arange(a.batch)[:, None], np.arange(a.seq)[None, :]

  def batch(s, shift):
    return jax.device_put(token(s, rows, pos + shift).astype(np.int32), bs)

  times, losses = [], []
  for s in range(a.warmup + a.steps):
    t0 = time.perf_counter()
    ids, targets = batch(s, 0), batch(s, 1)
    key = jax.device_put(fold(base_key, s), rep)
    params, opt, loss = step(params, opt, ids, targets, lr, key)
    losses.append(float(loss))  # waits for the step
    if s >= a.warmup:
      times.append(time.perf_counter() - t0)
  print(json.dumps({"system": "partix-python", "step_s": times, "loss": losses}))


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model", default="small", choices=["small", "tiny"])
  ap.add_argument("--mesh", default="8x1")
  ap.add_argument("--fsdp", action="store_true")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=128)
  ap.add_argument("--warmup", type=int, default=2)
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--dropout", type=float, default=0.1)
  ap.add_argument("--lr", type=float, default=1e-3)
  ap.add_argument("--cpp-bench", default=os.path.join(HERE, "..", "build", "bin",
                                                      "partix_bench_gpt2_train"))
  ap.add_argument("--python-side", action="store_true", help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.python_side:
    return python_side(a)
  try:
    import partix.models.gpt2 as g  # noqa: F401
    g.train_step  # noqa: B018
  except (ImportError, AttributeError):
    print("partix.models.gpt2 (with train_step) is not in this build; nothing to compare")
    return 0
  if not os.path.exists(a.cpp_bench):
    print(f"{a.cpp_bench} is missing: cmake --build build --target partix_bench_gpt2_train")
    return 0
  common = ["--model", a.model, "--mesh", a.mesh, "--batch", str(a.batch), "--seq", str(a.seq),
            "--warmup", str(a.warmup), "--steps", str(a.steps), "--dropout", str(a.dropout),
            "--lr", str(a.lr)] + (["--fsdp"] if a.fsdp else [])
  cmds = {"C++": [a.cpp_bench] + common,
          "Python": [sys.executable, os.path.abspath(__file__), "--python-side"] + common}
  times = {k: [] for k in cmds}
  losses = {}
  for r in range(a.rounds):
    for k, cmd in cmds.items():  # in turn, each round
      p = subprocess.run(cmd, capture_output=True, text=True)
      if p.returncode != 0:
        print(f"{k} side failed:\n{p.stderr}")
        return 1
      out = json.loads(p.stdout.strip().splitlines()[-1])
      times[k] += out["step_s"]
      losses[k] = out["loss"]
      print(f"round {r} {k:<6} steps (s): " + " ".join(f"{t:.3f}" for t in out["step_s"]),
            flush=True)
  c, py = statistics.median(times["C++"]), statistics.median(times["Python"])
  print(f"GPT-2 {a.model}, mesh {a.mesh}{' fsdp' if a.fsdp else ''}, batch {a.batch} x "
        f"{a.seq}: median step C++ {c:.3f} s, Python {py:.3f} s, Python/C++ {py / c:.3f}")
  print("losses C++:    " + " ".join(f"{v:.4f}" for v in losses["C++"]))
  print("losses Python: " + " ".join(f"{v:.4f}" for v in losses["Python"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
