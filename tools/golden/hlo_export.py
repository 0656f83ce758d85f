#!/usr/bin/env python3
"""Checks partix's HLO text with XLA itself and writes tests/golden/hlo_export.json (read by
tests/python/test_hlo_export.py). For each program of tests/python/hlo_programs.py: partix's
text of jit(f).lower(...).compiler_ir(dialect='hlo'), parsed by XLA's HLO parser (a text XLA
cannot read fails here), and for the unsharded programs XLA's results of running that text on
the program's arguments (checked here against partix's own results).

  python3 -m venv /tmp/jax-venv && /tmp/jax-venv/bin/pip install jax==0.10.2
  PARTIX_NUM_CPU_DEVICES=8 PYTHONPATH=build/python /tmp/jax-venv/bin/python \
      tools/golden/hlo_export.py
"""
import json
import os
import sys

import jax
import jax.extend
import numpy as np
from jax._src.lib import _jax
from jax._src.lib import xla_client as xc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import hlo_programs  # noqa: E402  (partix, from PYTHONPATH)


def run_with_xla(text, args):
  """XLA's results of the HLO module `text` on host arguments, as numpy arrays."""
  module = xc.hlo.hlo_module_from_text(text)
  mlir = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
  backend = jax.extend.backend.get_backend("cpu")
  devices = backend.local_devices()[:1]
  exe = backend.compile_and_load(mlir, xc.DeviceList(tuple(devices)), xc.CompileOptions())
  outs = exe.execute_sharded([jax.device_put(np.asarray(a), devices[0]) for a in args])
  return [np.asarray(o[0]) for o in outs.disassemble_into_single_device_arrays()]


def main():
  golden = {"jax_version": jax.__version__, "programs": {}}
  for name, (fn, args, mesh) in hlo_programs.programs().items():
    text = hlo_programs.hlo_text(fn, args, mesh)
    xc.hlo.hlo_module_from_text(text)  # XLA reads it, or this raises
    entry = {"text": text}
    if mesh is None:
      got = run_with_xla(text, args)
      ours = jax.tree_util.tree_leaves(fn(*[hlo_programs.partix.numpy.asarray(a)
                                             for a in args]))
      assert len(got) == len(ours), name
      for g, o in zip(got, ours):
        o = np.asarray(o)
        assert g.shape == o.shape and g.dtype == o.dtype, (name, g.dtype, o.dtype, g.shape)
        np.testing.assert_allclose(g.astype(np.float64), o.astype(np.float64), rtol=2e-6,
                                   atol=1e-6, err_msg=name)
      entry["xla_results"] = [{"dtype": str(g.dtype), "shape": list(g.shape),
                               "values": g.astype(np.float64).ravel().tolist()} for g in got]
    golden["programs"][name] = entry
    print(name, "ok")
  with open(os.path.join(ROOT, "tests", "golden", "hlo_export.json"), "w") as f:
    json.dump(golden, f, indent=1)
    f.write("\n")


if __name__ == "__main__":
  main()
