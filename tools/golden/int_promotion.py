#!/usr/bin/env python3
"""Writes JAX's type promotion over every dtype partix holds, narrow and unsigned integers
included, to tests/golden/int_promotion.json (tests/ops/int_dtypes_test.cpp reads it):
`lattice` is jnp.promote_types(a, b) (JAX's lattice, 64-bit types kept), `x32` the dtype of
a binary op's result with x64 off (jnp.result_type, canonicalized: what a program gets).

  python3 -m venv /tmp/jax-venv && /tmp/jax-venv/bin/pip install jax==0.10.2
  /tmp/jax-venv/bin/python tools/golden/int_promotion.py
"""
import json
import os

import jax.numpy as jnp
import numpy as np

NAMES = {"bool": jnp.bool_, "i8": jnp.int8, "i16": jnp.int16, "i32": jnp.int32,
         "i64": jnp.int64, "u8": jnp.uint8, "u16": jnp.uint16, "u32": jnp.uint32,
         "f16": jnp.float16, "bf16": jnp.bfloat16, "f32": jnp.float32, "f64": jnp.float64}
BY_DTYPE = {np.dtype(t): n for n, t in NAMES.items()}


def main():
  names = list(NAMES)
  lattice = [[BY_DTYPE[np.dtype(jnp.promote_types(NAMES[a], NAMES[b]))] for b in names]
             for a in names]
  x32 = [[BY_DTYPE[np.dtype(jnp.result_type(NAMES[a], NAMES[b]))] for b in names]
         for a in names]
  out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden",
                     "int_promotion.json")
  with open(out, "w") as f:
    json.dump({"dtypes": names, "lattice": lattice, "x32": x32}, f, indent=0)
    f.write("\n")


if __name__ == "__main__":
  main()
