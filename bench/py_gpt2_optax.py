#!/usr/bin/env python3
"""GPT-2 trained from Python with optax's AdamW (optax unmodified, on partix through
partix.as_jax) against partix's own training step (gpt2.train_step: clipping and AdamW in the
C++ core): the same losses, and the step time of each, measured alternating in one process.

  PYTHONPATH=build/python ~/.cache/partix/venv/bin/python bench/py_gpt2_optax.py \\
      [--model tiny|small] [--data 8] [--steps 10] [--rounds 3]

Both run GPT-2 (partix.models.gpt2) on a (data, model) mesh with batch over 'data', from the
same initial parameters, on the same fixed batch, lr 1e-3, clip 1.0, b1 0.9, b2 0.95, eps 1e-8,
weight decay 0.1 on every parameter. Prints each step's two losses, the largest difference,
and the median step times (milliseconds) with their ratio.
"""
import argparse
import functools
import os
import statistics
import sys
import time

import partix.as_jax  # noqa: F401  (optax below imports `jax`: partix)

import numpy as np

import jax  # partix
import optax

from partix.models import gpt2


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", default="tiny", choices=["tiny", "small"])
  ap.add_argument("--data", type=int, default=8)
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--steps", type=int, default=10)
  ap.add_argument("--rounds", type=int, default=3)
  a = ap.parse_args()
  cfg = gpt2.tiny() if a.model == "tiny" else gpt2.small()
  mesh = gpt2.make_mesh(data=a.data)
  params0 = gpt2.init(cfg, jax.random.key(0), mesh)
  seq = 64
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 256, (a.batch, seq + 1)).astype(np.int32)
  batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  x, y = jax.device_put(ids[:, :-1], batch), jax.device_put(ids[:, 1:], batch)
  lr = 1e-3

  own = jax.jit(functools.partial(gpt2.train_step, config=cfg, clip=1.0, weight_decay=0.1,
                                  b1=0.9, b2=0.95))
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1))

  @jax.jit
  def with_optax(p, s, xb, yb):
    value, g = jax.value_and_grad(lambda q: gpt2.loss(q, xb, yb, cfg))(p)
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s, value

  from partix import optim
  p1, s1 = params0, optim.adamw_init(params0)
  p2, s2 = params0, tx.init(params0)
  worst, t1, t2 = 0.0, [], []
  for step in range(a.steps * a.rounds):
    t = time.perf_counter()
    p1, s1, l1 = own(p1, s1, x, y, lr)
    l1 = float(l1)
    t1.append(time.perf_counter() - t)
    t = time.perf_counter()
    p2, s2, l2 = with_optax(p2, s2, x, y)
    l2 = float(l2)
    t2.append(time.perf_counter() - t)
    if step < a.steps:
      print(f"step {step}: partix {l1:.6f}  optax {l2:.6f}")
    worst = max(worst, abs(l1 - l2))
  m1, m2 = statistics.median(t1[2:]), statistics.median(t2[2:])
  print(f"largest loss difference {worst:.2e}")
  print(f"median step: partix {m1 * 1e3:.1f} ms, optax {m2 * 1e3:.1f} ms, optax/partix "
        f"{m2 / m1:.2f}")
  return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
  sys.exit(main())
