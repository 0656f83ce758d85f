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
