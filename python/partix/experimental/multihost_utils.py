"""jax.experimental.multihost_utils: host data moved between the job's processes, through
partix's own arrays (a global array with one block per process, made replicated), so it runs
over the same communicator as every other collective."""
import numpy as np

from partix import _core
from partix._src import tree_util as tu
from partix._src.api import device_put, make_array_from_process_local_data
from partix._src.core import Array, PartixError
from partix._src.sharding import AxisType, Device, Mesh, NamedSharding, PartitionSpec as P

__all__ = ["process_allgather", "broadcast_one_to_all", "sync_global_devices"]


def _process_mesh():
  """A mesh (processes, local devices): row p holds process p's devices."""
  n = _core.process_count()
  devs = [Device(d) for d in _core.devices()]
  per = len(devs) // n
  rows = [[d for d in devs if d.process_index == p][:per] for p in range(n)]
  return Mesh(np.array(rows, dtype=object), ("processes", "local"),
              axis_types=(AxisType.Auto,) * 2)


def _gather_host(x):
  """[process_count, *x.shape]: every process's x, on every process."""
  x = np.asarray(x)
  if _core.process_count() == 1:
    return x[None]
  mesh = _process_mesh()
  g = make_array_from_process_local_data(NamedSharding(mesh, P("processes")), x[None],
                                         (_core.process_count(),) + x.shape)
  return np.asarray(device_put(g, NamedSharding(mesh, P())))


def process_allgather(in_tree, tiled=False):
  """Every leaf gathered onto every process as numpy data: an array spanning processes as its
  global value; this process's data (host data, or an array on its own devices) stacked over
  processes (a new leading axis), or concatenated along axis 0 with tiled=True."""
  def one(x):
    if isinstance(x, Array):
      if x._a.is_tracer():
        raise PartixError("[process_allgather] takes concrete values, not traced ones (call it "
                          "outside jit)")
      if not x.is_fully_addressable:  # a global array: its value, on every process
        return np.asarray(device_put(x, NamedSharding(x.sharding.mesh, P())))
      x = np.asarray(x)  # this process's own data, as host data is
    g = _gather_host(x)
    return np.concatenate(list(g), axis=0) if tiled else g
  return tu.tree_map(one, in_tree)


def broadcast_one_to_all(in_tree, is_source=None):
  """Every process gets the source process's leaves (the first process by default; else the
  first whose is_source is True)."""
  me = _core.process_index()
  src = (me == 0) if is_source is None else bool(is_source)
  flags = _gather_host(np.array(src))
  if not flags.any():
    raise PartixError("[broadcast_one_to_all] no process is the source (is_source is False on "
                      "every process)")
  first = int(np.argmax(flags))
  return tu.tree_map(lambda x: _gather_host(np.asarray(x))[first], in_tree)


def sync_global_devices(name):
  """A barrier: returns once every process has called it (with the same name)."""
  if not isinstance(name, str):
    raise PartixError(f"[sync_global_devices] name must be a string, got {name!r}")
  _gather_host(np.zeros((), np.int32))
