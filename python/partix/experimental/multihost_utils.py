"""jax.experimental.multihost_utils: host data moved between the job's processes, through
partix's own arrays (a global array with one block per process, made replicated), so it runs
over the same communicator as every other collective."""
import numpy as np

from partix import _core
from partix._src import tree_util as tu
from partix._src.api import device_put, make_array_from_process_local_data
from partix._src.core import Array, PartixError
from partix._src.sharding import AxisType, Device, Mesh, NamedSharding, PartitionSpec as P

__all__ = ["process_allgather", "broadcast_one_to_all", "sync_global_devices",
           "host_local_array_to_global_array", "global_array_to_host_local_array"]


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


def _local_mesh(mesh):
  """The sub-mesh of this process's devices: a box of `mesh`'s device grid (JAX's
  mesh.local_mesh)."""
  me = _core.process_index()
  devs = mesh.devices
  mine = np.vectorize(lambda d: d.process_index == me, otypes=[bool])(devs)
  where = np.nonzero(mine)
  box = tuple(slice(int(w.min()), int(w.max()) + 1) for w in where)
  if not where[0].size or not mine[box].all():
    raise PartixError(f"[multihost_utils] process {me}'s devices do not form a box of the mesh "
                      f"{mesh}: no host-local mesh")
  return Mesh(devs[box], mesh.axis_names, axis_types=mesh.axis_types)


def _spec_tree(pspecs, tree, api):
  """One PartitionSpec per leaf of tree (pspecs a spec, or a tree prefix of specs)."""
  leaves, treedef = tu.tree_flatten(tree)
  if isinstance(pspecs, P):
    return leaves, treedef, [pspecs] * len(leaves)
  specs = tu.tree_leaves(pspecs, is_leaf=lambda x: isinstance(x, P) or x is None)
  if len(specs) != len(leaves):
    raise PartixError(f"[{api}] {len(specs)} PartitionSpecs for {len(leaves)} arrays")
  return leaves, treedef, [P() if sp is None else sp for sp in specs]


def _scale(shape, spec, num, den, api):
  """shape with each dimension split over spec's axes scaled by num's sizes over den's."""
  out = list(shape)
  for d, e in enumerate(spec):
    for a in (() if e is None else (e,) if isinstance(e, str) else e):
      if out[d] * num.shape[a] % den.shape[a]:
        raise PartixError(f"[{api}] dimension {d} of {tuple(shape)} does not split evenly over "
                          f"'{a}' ({den.shape[a]} blocks)")
      out[d] = out[d] * num.shape[a] // den.shape[a]
  return tuple(out)


def host_local_array_to_global_array(local_inputs, global_mesh, pspecs):
  """Each process's local arrays (its part of the global value, laid out by pspecs over its own
  devices) as global arrays over global_mesh. On one process they already are global: the same
  objects come back, as in JAX."""
  if _core.process_count() == 1:
    return local_inputs
  local = _local_mesh(global_mesh)
  leaves, treedef, specs = _spec_tree(pspecs, local_inputs, "host_local_array_to_global_array")
  out = []
  for x, sp in zip(leaves, specs):
    data = np.asarray(x)
    shape = _scale(data.shape, sp, global_mesh, local, "host_local_array_to_global_array")
    out.append(make_array_from_process_local_data(NamedSharding(global_mesh, sp), data, shape))
  return tu.tree_unflatten(treedef, out)


def global_array_to_host_local_array(global_inputs, global_mesh, pspecs):
  """Each global array's part on this process, as an array over this process's devices laid out
  by pspecs (the inverse of host_local_array_to_global_array). On one process the global arrays
  are host-local already: the same objects come back, as in JAX."""
  if _core.process_count() == 1:
    return global_inputs
  local = _local_mesh(global_mesh)
  leaves, treedef, specs = _spec_tree(pspecs, global_inputs, "global_array_to_host_local_array")
  out = []
  for x, sp in zip(leaves, specs):
    shape = _scale(x.shape, sp, local, global_mesh, "global_array_to_host_local_array")
    shards = x.addressable_shards
    starts = [min(s.index[d].start or 0 for s in shards) for d in range(x.ndim)]
    data = np.empty(shape, dtype=np.dtype(x.dtype))
    for s in shards:  # each block at its place in this process's box
      at = tuple(slice((ix.start or 0) - st, (ix.start or 0) - st + n)
                 for ix, st, n in zip(s.index, starts, s.data.shape))
      data[at] = np.asarray(s.data)
    out.append(device_put(data, NamedSharding(local, sp)))
  return tu.tree_unflatten(treedef, out)
