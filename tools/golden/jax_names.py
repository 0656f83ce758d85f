#!/usr/bin/env python3
"""Writes the public names of JAX's modules (the release given by the installed jax) to
tests/golden/jax_names.json, the yardstick of the compatibility table in docs/python.md
(tests/python/test_compat_table.py computes partix's coverage from it).

  python3 -m venv /tmp/jax-venv && /tmp/jax-venv/bin/pip install jax==0.10.2
  /tmp/jax-venv/bin/python tools/golden/jax_names.py

Public: not starting with '_'; jax.lax's primitives (names ending in '_p') are left out.
"""
import importlib
import json
import os

import jax

MODULES = ["jax", "jax.numpy", "jax.lax", "jax.random", "jax.nn", "jax.nn.initializers",
           "jax.tree_util", "jax.sharding", "jax.scipy.special"]


def main():
  out = {"jax_version": jax.__version__, "modules": {}}
  for name in MODULES:
    m = importlib.import_module(name)
    out["modules"][name] = sorted(n for n in dir(m) if not n.startswith("_") and not (
        name == "jax.lax" and n.endswith("_p")))
  path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "jax_names.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=0, sort_keys=True)
    f.write("\n")
  print({k: len(v) for k, v in out["modules"].items()})


if __name__ == "__main__":
  main()
