#!/usr/bin/env python3
"""JAX's device layouts of NamedShardings: shard shapes, device index maps and replica ids.

Regenerate (from the repository root; Python is never needed to build or test partix):

    python3 -m venv .venv-jax && .venv-jax/bin/pip install jax numpy
    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        .venv-jax/bin/python tools/golden/sharding_layouts.py
    # writes tests/golden/jax_port/sharding_layouts.json

For each (mesh, spec, global shape) below, JAX's NamedSharding gives shard_shape,
is_fully_replicated and devices_indices_map, and jax.device_put of np.arange(n) gives every
addressable shard's device, index, replica_id and data; tests/jax_port/array_layout_test.cpp
asks partix the same questions. Meshes are built from an explicit device order, so meshes
whose devices are not 0..n-1 in order are covered too. Only evenly divisible shapes appear:
JAX refuses the others (partix's uneven layouts are tested from first principles instead).

The cases follow JAX's tests/array_test.py (JaxArrayTest.test_array_2d_shard,
test_jax_array_value, ShardingTest.test_shard_shape, test_op_sharding_indices,
test_is_fully_replicated_named_sharding, test_mesh_pspec_sharding_interface) on more meshes.

Layout: {"cases": [{"mesh": {"shape", "names", "devices"}, "spec", "shape", "shard_shape",
"fully_replicated", "shards": [{"device", "index": [[start, stop], ...], "replica_id"}]}]};
shards are listed by mesh position (row-major over the mesh); a spec is a list of entries
(null, "axis" or ["a", "b"]).
"""

import json
import math
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

OUT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden",
                                    "jax_port", "sharding_layouts.json"))

ALL = None  # every spec of the list below that fits the mesh's axis names

MESHES = [
    ((8,), ("x",), list(range(8))),
    ((4, 2), ("x", "y"), list(range(8))),
    ((2, 4), ("x", "y"), list(range(8))),
    ((2, 2, 2), ("x", "y", "z"), list(range(8))),
    ((2, 2), ("x", "y"), [0, 1, 2, 3]),
    ((1, 2), ("x", "y"), [0, 1]),
    ((2, 1), ("x", "y"), [0, 1]),
    ((1, 1, 2), ("replica", "data", "mdl"), [0, 1]),
    ((4, 2), ("x", "y"), [7, 6, 5, 4, 3, 2, 1, 0]),
    ((2, 2), ("x", "y"), [3, 1, 2, 0]),
]

SPECS = [
    P(),
    P(None),
    P("x"),
    P("y"),
    P(None, "x"),
    P(None, "y"),
    P("x", "y"),
    P("y", "x"),
    P(("x", "y")),
    P(("y", "x")),
    P(None, ("x", "y")),
    P("z", ("x", "y")),
    P("x", ("y", "z")),
    P(("x", "y", "z")),
    P(None, ("x", "y", "z")),
    P("z", None, "x"),
    P(None, ("mdl",)),
    P(("replica", "data"), "mdl"),
]

SHAPES = [(8, 4), (16, 8, 2)]


def spec_axes(spec):
  out = []
  for e in spec:
    if e is None:
      continue
    out.extend(e if isinstance(e, tuple) else [e])
  return out


def spec_json(spec):
  return [None if e is None else (list(e) if isinstance(e, tuple) else e) for e in spec]


def slices_json(index, shape):
  out = []
  for s, n in zip(index, shape):
    start, stop, _ = s.indices(n)
    out.append([start, stop])
  return out


def main():
  assert jax.device_count() >= 8, "needs XLA_FLAGS=--xla_force_host_platform_device_count=8"
  devs = jax.devices()
  cases = []
  for mshape, names, order in MESHES:
    mesh = Mesh(np.array([devs[i] for i in order]).reshape(mshape), names,
                axis_types=(AxisType.Auto,) * len(mshape))
    for spec in SPECS:
      if not set(spec_axes(spec)) <= set(names):
        continue
      for shape in SHAPES:
        if len(spec) > len(shape):
          continue
        s = NamedSharding(mesh, spec)
        try:
          shard_shape = s.shard_shape(shape)
        except ValueError:
          continue  # not evenly divisible
        data = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
        arr = jax.device_put(data, s)
        by_device = {sh.device.id: sh for sh in arr.addressable_shards}
        shards = []
        for d in mesh.devices.flat:
          sh = by_device[d.id]
          assert np.array_equal(np.asarray(sh.data), data[sh.index])
          assert s.devices_indices_map(shape)[d] == sh.index
          shards.append({"device": d.id, "index": slices_json(sh.index, shape),
                         "replica_id": sh.replica_id})
        cases.append({
            "mesh": {"shape": list(mshape), "names": list(names), "devices": order},
            "spec": spec_json(spec),
            "shape": list(shape),
            "shard_shape": list(shard_shape),
            "fully_replicated": bool(s.is_fully_replicated),
            "shards": shards,
        })
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  with open(OUT, "w") as f:
    json.dump({"jax_version": jax.__version__, "cases": cases}, f, separators=(",", ":"))
    f.write("\n")
  print(f"wrote {len(cases)} cases, {os.path.getsize(OUT)} bytes to {OUT}", file=sys.stderr)


if __name__ == "__main__":
  main()
