"""partix: SPMD array programming over a mesh of devices, with JAX's names.

  import partix as jax
  import partix.numpy as jnp
  from partix.sharding import Mesh, PartitionSpec as P, NamedSharding

Devices are virtual CPU devices: PARTIX_NUM_CPU_DEVICES=8 (or XLA_FLAGS'
--xla_force_host_platform_device_count=8, as JAX programs set it) before the first use.
"""
import contextlib as _contextlib
import functools as _functools
import platform as _platform
import sys as _sys

import numpy as _numpy

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
                             remat, reshard, typeof, value_and_grad, explain_cache_misses)
from partix._src import api as _api  # noqa: E402
from partix._src.core import Array, PartixError, Shard  # noqa: E402,F401
from partix._src.batching import vmap  # noqa: E402,F401
from partix._src.callbacks import pure_callback  # noqa: E402,F401
from partix._src.custom_derivatives import (custom_gradient, custom_jvp,  # noqa: E402,F401
                                            custom_vjp)
from partix._src.forward import (hessian, jacfwd, jacobian, jacrev, jvp,  # noqa: E402,F401
                                 linear_transpose, linearize, make_jaxpr, vjp)
from partix._src.sharding import (AxisType, Device, NamedSharding, PartitionSpec,  # noqa
                                  get_abstract_mesh, make_mesh, set_mesh, use_mesh)
from partix._src.shard_map import shard_map, smap  # noqa: E402,F401
from partix._src.refs import Ref, empty_ref, free_ref, freeze, new_ref  # noqa: E402,F401
from partix._src.tree_util import tree_leaves, tree_map, tree_structure  # noqa: E402,F401
from partix._src.api_extra import (clear_caches, closure_convert,  # noqa: E402,F401
                                   ensure_compile_time_eval, live_arrays)
from partix._src import config_states as _config_states  # noqa: E402
from partix._src.config_states import (  # noqa: E402,F401
    allow_f16_reductions, array_garbage_collection_guard, auto_pcast, check_tracer_leaks,
    checking_leaks, debug_infs, debug_key_reuse, debug_nans, default_matmul_precision,
    default_prng_impl, enable_checks, enable_x64, jax2tf_associative_scan_reductions,
    legacy_prng_key, log_compiles, no_execution, no_tracing, numpy_dtype_promotion,
    numpy_rank_promotion, remove_size_one_mesh_axis_from_type, softmax_custom_jvp,
    thread_guard)
from partix._src import default_device as _default_device  # noqa: E402
from partix._src import dtypes as _dtypes  # noqa: E402
from partix._src.default_device import default_device  # noqa: E402,F401
from partix._src.transfer_guard import (transfer_guard,  # noqa: E402,F401
                                        transfer_guard_device_to_device,
                                        transfer_guard_device_to_host,
                                        transfer_guard_host_to_device)
from partix import (ad_checkpoint, checkpoint_policies, ckpt, core, extend,  # noqa: E402
                    custom_derivatives, debug, distributed, experimental, lax, nn, numpy,
                    profiler, random, scipy, sharding, stages, tree, tree_util, typing)
from partix import custom_batching, errors, image, ops, ref, version  # noqa: E402
from partix.dtypes import float0  # noqa: E402,F401
from partix import random as _random  # noqa: E402

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


def named_call(fun, *, name=None):
  """jax.named_call: fun, its operations recorded under `name` (its own name by default) in
  the programs and profiles, as named_scope does."""
  scope = name or getattr(fun, "__name__", "named_call")

  @_functools.wraps(fun)
  def call(*args, **kwargs):
    with named_scope(scope):
      return fun(*args, **kwargs)
  return call


def copy_to_host_async(x):
  """jax.copy_to_host_async: partix's arrays are ready on return, so there is nothing to
  start early."""


def print_environment_info(return_string=False):
  """The versions partix runs with (as jax.print_environment_info)."""
  text = (f"partix {__version__} (JAX 0.10 semantics)\nnumpy: {_numpy.__version__}\n"
          f"python: {_sys.version}\nprocess_count: {process_count()}\n"
          f"devices: {device_count()} {default_backend()}\nplatform: {_platform.platform()}")
  if return_string:
    return text
  print(text)


def effects_barrier():
  """jax.effects_barrier: waits for pending side effects; partix runs synchronously, so when
  this is called they have all happened."""


def default_backend():
  return "cpu"


def init(num_cpu_devices=0, device_memory_bytes=0):
  """Sets the number of virtual CPU devices (and a per-device memory limit) before first use;
  as partix::init in C++."""
  _core.init(int(num_cpu_devices), int(device_memory_bytes))


@_contextlib.contextmanager
def enable_custom_prng(enabled=True):
  """jax.enable_custom_prng: inside, random.PRNGKey returns typed keys (dtype key<fry>), as
  random.key does."""
  previous = _random._custom_prng[0]
  _random._custom_prng[0] = bool(enabled)
  try:
    yield
  finally:
    _random._custom_prng[0] = previous


def threefry_partitionable(enabled=True):
  """jax.threefry_partitionable: partix's threefry draws are always partitionable (each
  element's bits depend only on the key and its global index), so this context changes
  nothing; it exists so that programs written for JAX run."""
  return _contextlib.nullcontext()


def named_scope(name):
  """Names the ops traced inside (they show in lowered text and traces)."""
  return _core.NamedScope(str(name))


def pmap(f, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(),
         devices=None, donate_argnums=()):
  """jax.pmap as JAX now implements it: jit over shard_map on a 1-D mesh of the devices, each
  device taking one slice of every mapped argument's in_axes dimension (None: the argument
  whole on every device); results stack along out_axes (None: the value of one device, which
  must be the same on all). in_axes / out_axes: an int or None for all, or one per argument /
  result."""
  if static_broadcasted_argnums not in ((), None) or donate_argnums not in ((), None):
    raise PartixError("[pmap] static_broadcasted_argnums and donate_argnums are not supported; "
                      "use jit(shard_map(...)) for those")
  name = axis_name or "_pmap"
  mapped = {}  # one jit(shard_map) per device list and in_axes: f is traced once per signature

  def per_item(spec, n, what):
    if spec is None or isinstance(spec, int):
      return [spec] * n
    if isinstance(spec, (tuple, list)) and len(spec) == n and all(
        a is None or isinstance(a, int) for a in spec):
      return list(spec)
    raise PartixError(f"[pmap] {what}={spec!r} must be an int, None, or one of them per "
                      f"{'argument' if what == 'in_axes' else 'result'} (here {n})")

  def to_spec(ax):
    return P() if ax is None else P(name)

  def run(*args):
    ins = per_item(in_axes, len(args), "in_axes")
    moved = [a if ax is None else tree_map(lambda x, ax=ax: numpy.moveaxis(x, ax, 0), a)
             for a, ax in zip(args, ins)]
    sized = [x for a, ax in zip(moved, ins) if ax is not None for x in tree_leaves(a)]
    if not sized:
      raise PartixError("[pmap] no argument is mapped (every in_axes is None)")
    n = sized[0].shape[0]
    devs = devices if devices is not None else globals()["devices"]()[:n]
    if len(devs) != n:
      raise PartixError(f"[pmap] the mapped axis has size {n} but {len(devs)} devices are "
                        "available")
    key = (tuple(d.id for d in devs), tuple(ins))
    if key not in mapped:
      arr = _numpy.empty(n, dtype=object)
      arr[:] = list(devs)
      mesh = sharding.Mesh(arr, (name,))
      tupled = isinstance(out_axes, (tuple, list))

      def body(*xs):
        ys = f(*[x if ax is None else tree_map(lambda y: numpy.squeeze(y, 0), x)
                 for x, ax in zip(xs, ins)])
        if not tupled:
          return ys if out_axes is None else tree_map(lambda v: numpy.expand_dims(v, 0), ys)
        outs = per_item(out_axes, len(ys) if isinstance(ys, (tuple, list)) else -1, "out_axes")
        return type(ys)(y if ax is None else tree_map(lambda v: numpy.expand_dims(v, 0), y)
                        for y, ax in zip(ys, outs))
      out_specs = tuple(to_spec(ax) for ax in out_axes) if tupled else to_spec(out_axes)
      unmapped_out = out_axes is None or (tupled and None in out_axes)
      mapped[key] = jit(shard_map(body, mesh=mesh, in_specs=tuple(to_spec(ax) for ax in ins),
                                  out_specs=out_specs, check_vma=not unmapped_out))
    res = mapped[key](*moved)
    if not isinstance(out_axes, (tuple, list)):
      return res if out_axes in (None, 0) else tree_map(
          lambda v: numpy.moveaxis(v, 0, out_axes), res)
    return type(res)(y if ax in (None, 0) else tree_map(lambda v, ax=ax: numpy.moveaxis(v, 0, ax), y)
                     for y, ax in zip(res, out_axes))
  return run


class _Config:
  """jax.config: update() accepts JAX's flag names; the ones partix knows take effect."""

  def __init__(self):
    self.values = {"jax_enable_x64": False}

  def update(self, name, value):
    _config_states.set_global(name, value)  # the option's context manager reads it (checked)
    if name == "jax_num_cpu_devices":
      init(int(value))
    if name == "jax_default_device":
      _default_device.set_default_device(value)
    if name == "jax_enable_x64":
      _dtypes.set_x64(value)
    if name == "jax_enable_custom_prng":
      _random._custom_prng[0] = bool(value)
    if name == "jax_explain_cache_misses":
      _api._explain[0] = bool(value)
    if name == "jax_remove_size_one_mesh_axis_from_type":
      _core.set_drop_one_device_axes(bool(value))
      _api._trace_options[0] = (bool(value), _api._trace_options[0][1])
    if name == "jax_disable_vmap_shmap_error":
      _core.set_vmap_shmap_error_disabled(bool(value))
    if name == "jax_auto_pcast":
      _core.set_auto_pcast(bool(value))
      _api._trace_options[0] = (_api._trace_options[0][0], bool(value))
    self.values[name] = value

  def __getattr__(self, name):
    if name in _config_states.STATES:  # its value in this thread (inside `with` blocks too)
      return _config_states.STATES[name].value
    try:
      return self.__dict__["values"][name]
    except KeyError:
      raise AttributeError(name) from None


config = _Config()
_config_states.CONFIG_UPDATE[0] = config.update


def __getattr__(name):
  raise AttributeError(f"module 'partix' has no attribute {name!r}: partix does not provide "
                       f"jax.{name}")
