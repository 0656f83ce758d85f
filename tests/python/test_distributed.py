"""partix.distributed.initialize under mpirun -np 2: each process sees its own devices and the
global ones, and a jit over a process-spanning array gives the same result on both."""
import json
import textwrap

import numpy as np
import pytest

import partix as jax
from mpi_job import needs_mpirun, run_two_processes

_PROG = textwrap.dedent("""
  import numpy as np
  import partix as jax
  jax.distributed.initialize()
  from partix.sharding import NamedSharding, PartitionSpec as P
  assert jax.distributed.is_initialized()
  mesh = jax.make_mesh((jax.device_count(),), ("x",))
  a = np.arange(16 * 4, dtype=np.float32).reshape(16, 4)
  x = jax.device_put(a, NamedSharding(mesh, P("x")))
  local = sorted((s.device.id, s.index[0].start) for s in x.addressable_shards)
  y = jax.jit(lambda x: (x * 2).sum(axis=0))(x)
  # Host data placed straight onto the spanning mesh: by jit's in_shardings, by callback blocks;
  # every process must pass the same values.
  s = NamedSharding(mesh, P("x"))
  total = jax.jit(lambda v: v.sum())
  z = jax.jit(lambda v: v + 1, in_shardings=s)(a)
  cb = jax.make_array_from_callback(a.shape, s, lambda i: a[i])
  try:
    jax.device_put(a + jax.process_index(), s)
    disagree = "no error"
  except jax.PartixError as e:
    disagree = str(e).split(" ")[0]
  sums = [float(total(z)), float(total(cb)), disagree]
  import json, sys
  with open(f"{sys.argv[1]}/out{jax.process_index()}.json", "w") as f:
    json.dump([jax.process_count(), jax.device_count(), jax.local_device_count(),
               [d.id for d in jax.local_devices()], [d.process_index for d in jax.devices()],
               local, [float(v) for v in np.asarray(y)], sums], f)
""")


def test_single_process_initialize_is_a_no_op():
  jax.distributed.initialize()
  assert jax.process_index() == 0 and jax.process_count() == 1
  assert not jax.distributed.is_initialized()


@needs_mpirun
def test_two_processes(tmp_path):
  p = run_two_processes(tmp_path, _PROG)
  assert p.returncode == 0, p.stdout + p.stderr
  want = (np.arange(64, dtype=np.float32).reshape(16, 4) * 2).sum(axis=0).tolist()
  for pi in (0, 1):
    got = json.loads((tmp_path / f"out{pi}.json").read_text())
    local = [2 * pi, 2 * pi + 1]
    shards = [[d, d * 4] for d in local]  # 16 rows over 4 devices
    sums = [float(np.arange(64).sum() + 64), float(np.arange(64).sum()), "[device_put]"]
    assert got == [2, 4, 2, local, [0, 0, 1, 1], shards, want, sums], (pi, got)


_HOST_LOCAL = textwrap.dedent("""
  import json, sys
  import numpy as np
  import partix as jax
  from partix.experimental import multihost_utils as mh
  from partix.sharding import NamedSharding, PartitionSpec as P
  me = jax.process_index()
  mesh = jax.make_mesh((2, 2), ("x", "y"))  # process p holds row p of the mesh
  # Each process's rows 4p .. 4p + 3 of an (8, 6) value, laid out over its own devices.
  local = (np.arange(24, dtype=np.float32).reshape(4, 6) + 100 * me)
  g = mh.host_local_array_to_global_array(local, mesh, P("x", "y"))
  whole = np.asarray(jax.jit(lambda v: v, out_shardings=NamedSharding(mesh, P()))(g))
  back = mh.global_array_to_host_local_array(g, mesh, P("x", "y"))
  out = {"global_shape": list(g.shape), "whole": whole.tolist(),
         "back_shape": list(back.shape), "back": np.asarray(back).tolist(),
         "back_devices": sorted(d.process_index for d in back.sharding.mesh.devices.flat)}
  with open(f"{sys.argv[1]}/hl{me}.json", "w") as f:
    json.dump(out, f)
""")


@needs_mpirun
def test_host_local_and_global_arrays_across_processes(tmp_path):
  p = run_two_processes(tmp_path, _HOST_LOCAL)
  assert p.returncode == 0, p.stdout + p.stderr
  rows = [np.arange(24, dtype=np.float32).reshape(4, 6) + 100 * p for p in (0, 1)]
  for pi in (0, 1):
    got = json.loads((tmp_path / f"hl{pi}.json").read_text())
    assert got["global_shape"] == [8, 6]
    assert got["whole"] == np.concatenate(rows).tolist()
    assert got["back_shape"] == [4, 6] and got["back"] == rows[pi].tolist()
    assert got["back_devices"] == [pi, pi]


def test_host_local_arrays_on_one_process_are_global():
  # One process: the arrays come back as they are (JAX's identity), the same objects.
  from partix.experimental import multihost_utils as mh
  mesh = jax.make_mesh((2,), ("x",))
  x = jax.device_put(np.arange(4.0), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x")))
  assert mh.global_array_to_host_local_array(x, mesh, jax.sharding.PartitionSpec("x")) is x
  assert mh.host_local_array_to_global_array(x, mesh, jax.sharding.PartitionSpec("x")) is x
