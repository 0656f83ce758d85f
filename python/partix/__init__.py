"""partix: SPMD array programming over a mesh of devices, with JAX's names.

  import partix as jax
  import partix.numpy as jnp
  from partix.sharding import Mesh, PartitionSpec as P, NamedSharding

Devices are virtual CPU devices: PARTIX_NUM_CPU_DEVICES=8 (or XLA_FLAGS'
--xla_force_host_platform_device_count=8, as JAX programs set it) before the first use.
"""
from partix._src.core import _init_from_environment as _init_env

_init_env()

from partix import _core  # noqa: E402

# Errors about the user's program (explicit sharding) cite the innermost frame outside this
# package.
_core.set_location_skip(__import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from partix._src import array_methods as _array_methods  # noqa: E402,F401
from partix._src.api import (ShapeDtypeStruct, block_until_ready, checkpoint,  # noqa: E402,F401
                             device_get, device_put, eval_shape, grad, jit,
                             make_array_from_callback, make_array_from_process_local_data,
                             make_array_from_single_device_arrays, disable_jit,
                             remat, reshard, typeof, value_and_grad)
from partix._src.core import Array, PartixError, Shard  # noqa: E402,F401
from partix._src.batching import vmap  # noqa: E402,F401
from partix._src.custom_derivatives import (custom_gradient, custom_jvp,  # noqa: E402,F401
                                            custom_vjp)
from partix._src.forward import (hessian, jacfwd, jacobian, jacrev, jvp,  # noqa: E402,F401
                                 linear_transpose, linearize, make_jaxpr, vjp)
from partix._src.sharding import (AxisType, Device, NamedSharding, PartitionSpec,  # noqa
                                  get_abstract_mesh, make_mesh, set_mesh, use_mesh)
from partix._src.shard_map import shard_map  # noqa: E402,F401
from partix._src.tree_util import tree_leaves, tree_map, tree_structure  # noqa: E402,F401
from partix import (ad_checkpoint, checkpoint_policies, ckpt, custom_derivatives,  # noqa: E402
                    debug, distributed, experimental, lax, nn, numpy, profiler, random,
                    sharding, tree, tree_util)
from partix.dtypes import float0  # noqa: E402,F401

# Under mpirun a process that fails tells the others even without distributed.initialize().
if distributed._under_mpirun():
  distributed._install_failure_hook()

P = PartitionSpec
__version__ = "0.1.0"


def devices(backend=None):
  """Every device of the job (all processes), by id."""
  return [Device(d) for d in _core.devices()]


def local_devices(process_index=None, backend=None):
  return [Device(d) for d in _core.local_devices()]


def device_count(backend=None):
  return _core.device_count()


def local_device_count(backend=None):
  return _core.local_device_count()


def process_index(backend=None):
  return _core.process_index()


def process_count(backend=None):
  return _core.process_count()


def host_count(backend=None):
  """jax.host_count: process_count (JAX's older name)."""
  return process_count(backend)


def host_id(backend=None):
  """jax.host_id: process_index (JAX's older name)."""
  return process_index(backend)


def process_indices(backend=None):
  """The indices of the processes of the job."""
  return list(range(process_count(backend)))


host_ids = process_indices


def default_backend():
  return "cpu"


def init(num_cpu_devices=0, device_memory_bytes=0):
  """Sets the number of virtual CPU devices (and a per-device memory limit) before first use;
  as partix::init in C++."""
  _core.init(int(num_cpu_devices), int(device_memory_bytes))


def named_scope(name):
  """Names the ops traced inside (they show in lowered text and traces)."""
  return _core.NamedScope(str(name))


def pmap(f, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(),
         devices=None, donate_argnums=()):
  """jax.pmap as JAX now implements it: jit over shard_map on a 1-D mesh of the devices, each
  device taking one slice of the leading axis."""
  if in_axes != 0 or out_axes != 0:
    raise PartixError("[pmap] only in_axes=0 and out_axes=0 are supported")
  name = axis_name or "_pmap"
  mapped = {}  # one jit(shard_map) per device list, so f is traced once per signature

  def run(*args):
    n = tree_leaves(args)[0].shape[0] if tree_leaves(args) else 0
    devs = devices if devices is not None else globals()["devices"]()[:n]
    if len(devs) != n:
      raise PartixError(f"[pmap] the leading axis has size {n} but {len(devs)} devices are "
                        "available")
    key = tuple(d.id for d in devs)
    if key not in mapped:
      import numpy as _np
      arr = _np.empty(n, dtype=object)
      arr[:] = list(devs)
      mesh = sharding.Mesh(arr, (name,))
      spec = P(name)

      def body(*xs):
        ys = f(*tree_map(lambda x: numpy.squeeze(x, 0), xs))
        return tree_map(lambda y: numpy.expand_dims(y, 0), ys)
      mapped[key] = jit(shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
    return mapped[key](*args)
  return run


class _Config:
  """jax.config: update() accepts JAX's flag names; the ones partix knows take effect."""

  def __init__(self):
    self.values = {"jax_enable_x64": False}

  def update(self, name, value):
    if name == "jax_num_cpu_devices":
      init(int(value))
    self.values[name] = value

  def __getattr__(self, name):
    try:
      return self.__dict__["values"][name]
    except KeyError:
      raise AttributeError(name) from None


config = _Config()


def __getattr__(name):
  raise AttributeError(f"module 'partix' has no attribute {name!r}: partix does not provide "
                       f"jax.{name}")
