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


_KEYS_AND_LOOPS = textwrap.dedent("""
  import json, sys
  import numpy as np
  import partix as jax
  import partix.numpy as jnp
  from partix import lax, test_util
  jax.distributed.initialize()
  from partix.sharding import AxisType, NamedSharding, PartitionSpec as P
  mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(AxisType.Auto,))
  # Typed keys split over devices of both processes: each device draws with its own key.
  ks = jax.device_put(jax.random.split(jax.random.key(7), 8), NamedSharding(mesh, P("x")))
  draws = jax.jit(jax.vmap(lambda k: jax.random.normal(k, ())))(ks)
  total = float(jax.jit(jnp.sum)(draws))
  # jit wrappers of one function share their trace in every process.
  def f(v):
    return v * 3
  with test_util.count_jit_traces() as traces:
    for _ in range(3):
      jax.jit(f)(draws)
  # A shard_map loop whose carry is made varying first (JAX 0.10's rule), and the error
  # without it.
  def body(x):
    acc = lax.pcast(jnp.zeros(x.shape[1:]), "x", to="varying")
    return lax.fori_loop(0, 3, lambda i, c: c + x[0], acc)[None]
  ok = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(
      jax.device_put(np.ones((8, 2), np.float32), NamedSharding(mesh, P("x"))))
  bad = jax.shard_map(lambda x: lax.fori_loop(0, 2, lambda i, c: c + x, jnp.zeros(x.shape)),
                      mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  try:
    bad(jax.device_put(np.ones(8, np.float32), NamedSharding(mesh, P("x"))))
    err = "no error"
  except jax.PartixError as e:
    err = str(e)
  with open(f"{sys.argv[1]}/keys{jax.process_index()}.json", "w") as fh:
    json.dump({"total": total, "traces": traces(), "ok": float(jax.jit(jnp.sum)(ok)),
               "devices": jax.device_count(), "err": err}, fh)
""")


@needs_mpirun
def test_typed_keys_jit_cache_and_loop_rules_across_processes(tmp_path):
  p = run_two_processes(tmp_path, _KEYS_AND_LOOPS)
  assert p.returncode == 0, p.stdout + p.stderr
  ks = jax.random.split(jax.random.key(7), 8)
  want = sum(float(jax.random.normal(k, ())) for k in ks)
  for pi in (0, 1):
    got = json.loads((tmp_path / f"keys{pi}.json").read_text())
    assert abs(got["total"] - want) < 1e-4
    assert got["traces"] == 1
    assert got["devices"] == 4 and got["ok"] == 4 * 2 * 3.0  # each device: 3 x its first row
    assert "carry input and carry output must have equal types" in got["err"]


_CALLBACKS = textwrap.dedent("""
  import json, sys, threading
  import numpy as np
  import partix as jax
  import partix.numpy as jnp
  from partix import lax
  from partix.experimental import io_callback
  jax.distributed.initialize()
  from partix.sharding import AxisType, NamedSharding, PartitionSpec as P
  mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(AxisType.Auto,))
  x = jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, P("x")))
  seen, blocks, lock = [], [], threading.Lock()
  def read(v):
    seen.append(v.tolist())
    return np.float32(v.sum() + 100 * jax.process_index())
  # Outside shard_map an effect runs once in the job (on the mesh's first device) and every
  # device gets its result.
  r = jax.jit(lambda x: io_callback(read, jax.ShapeDtypeStruct((), jnp.float32), x) + 0 * x)(x)
  local = [float(np.asarray(s.data)[0]) for s in r.addressable_shards]
  # Inside shard_map each device calls with its own block.
  def body(b):
    def keep(i, v):
      with lock:
        blocks.append((int(i), v.tolist()))
    jax.debug.callback(keep, lax.axis_index("x"), b)
    return b
  jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)
  # A constraint with an unconstrained dimension keeps the split across both processes.
  u = jax.jit(lambda v: jax.lax.with_sharding_constraint(
      v * 2, NamedSharding(mesh, P(P.UNCONSTRAINED))))(x)
  with open(f"{sys.argv[1]}/cb{jax.process_index()}.json", "w") as fh:
    json.dump({"seen": seen, "local": local, "blocks": sorted(blocks),
               "devices": jax.device_count(), "u_spec": str(u.sharding.spec),
               "u_total": float(jax.jit(jnp.sum)(u))}, fh)
""")


@needs_mpirun
def test_host_callbacks_across_processes(tmp_path):
  p = run_two_processes(tmp_path, _CALLBACKS)
  assert p.returncode == 0, p.stdout + p.stderr
  got = [json.loads((tmp_path / f"cb{pi}.json").read_text()) for pi in (0, 1)]
  assert got[0]["seen"] == [list(range(8))] and got[1]["seen"] == []
  n = got[0]["devices"]
  for g in got:
    assert g["u_spec"] == "P('x',)" and g["u_total"] == 56.0
    assert g["local"] == [28.0] * (n // 2)  # process 0's result, on every local device
  k = 8 // n
  blocks = got[0]["blocks"] + got[1]["blocks"]
  assert sorted(blocks) == [[i, [float(v) for v in range(i * k, (i + 1) * k)]]
                            for i in range(n)]


_REV = textwrap.dedent("""
  import json, sys
  import numpy as np
  import partix as jax
  import partix.numpy as jnp
  from partix.sharding import NamedSharding, PartitionSpec as P
  me = jax.process_index()
  mesh = jax.make_mesh((2, 2), ("x", "y"))  # process p holds row p of the mesh
  a = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
  x = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
  r = jax.jit(lambda v: jnp.flip(v, (0, 1)))(x)  # blocks trade places across the processes
  whole = jax.jit(lambda v: v, out_shardings=NamedSharding(mesh, P()))(r)
  out = {"spec": str(r.sharding.spec), "whole": np.asarray(whole).tolist()}
  with open(f"{sys.argv[1]}/rev{me}.json", "w") as f:
    json.dump(out, f)
""")


@needs_mpirun
def test_rev_of_split_dimensions_across_processes(tmp_path):
  p = run_two_processes(tmp_path, _REV)
  assert p.returncode == 0, p.stdout + p.stderr
  want = np.flip(np.arange(8 * 6, dtype=np.float32).reshape(8, 6)).tolist()
  for pi in (0, 1):
    got = json.loads((tmp_path / f"rev{pi}.json").read_text())
    assert got["whole"] == want
    assert got["spec"] == "P('x', 'y')"


_UNREDUCED = textwrap.dedent("""
  import json, sys
  import numpy as np
  import partix as jax
  import partix.numpy as jnp
  from partix import lax
  from partix.sharding import AxisType, NamedSharding, PartitionSpec as P
  me = jax.process_index()
  E = AxisType.Explicit
  mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(E, E))  # process p: row p of the mesh
  a = np.arange(4 * 8, dtype=np.float32).reshape(4, 8) / 3
  b = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) / 5
  x = jax.device_put(a, NamedSharding(mesh, P("y", "x")))
  w = jax.device_put(b, NamedSharding(mesh, P("x", None)))
  # The contraction is split across the processes: each holds its partial sums.
  u = jax.jit(lambda p, q: jnp.dot(p, q, out_sharding=P("y", None, unreduced={"x"})))(x, w)
  mine = sum(float(np.asarray(s.data).sum()) for s in u.addressable_shards)
  with jax.sharding.use_mesh(mesh):
    scatter = jax.shard_map(lambda v: lax.psum_scatter(v, "x", scatter_dimension=1, tiled=True),
                            out_specs=P("y", "x"))
    s = jax.jit(scatter)(u)
    whole = jax.jit(lambda v: v, out_shardings=NamedSharding(mesh, P()))(s)
  out = {"spec": str(u.sharding.spec), "mine": mine, "sum": np.asarray(u).tolist(),
         "scattered": np.asarray(whole).tolist()}
  with open(f"{sys.argv[1]}/unreduced{me}.json", "w") as f:
    json.dump(out, f)
""")


@needs_mpirun
def test_unreduced_arrays_across_processes(tmp_path):
  p = run_two_processes(tmp_path, _UNREDUCED)
  assert p.returncode == 0, p.stdout + p.stderr
  a = np.arange(4 * 8, dtype=np.float32).reshape(4, 8) / 3
  b = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) / 5
  got = [json.loads((tmp_path / f"unreduced{pi}.json").read_text()) for pi in (0, 1)]
  for pi, g in enumerate(got):
    assert g["spec"] == "P('y', None, unreduced={'x'})"
    np.testing.assert_allclose(g["sum"], a @ b, rtol=1e-5)
    np.testing.assert_allclose(g["scattered"], a @ b, rtol=1e-5)
    # Process p's devices hold the products of its half of the contraction.
    half = slice(4 * pi, 4 * pi + 4)
    np.testing.assert_allclose(g["mine"], (a[:, half] @ b[half]).sum(), rtol=1e-4)
