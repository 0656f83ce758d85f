"""The Array type over partix._core.Array, and the conversions every module shares."""
import numbers
import os
import re
import threading
import warnings

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src import transfer_guard
from partix._src.sharding import Device, NamedSharding

from partix._src.errors import PartixError, PartixTypeError  # noqa: F401 (re-exported)
from partix._src import config_states
from partix._src import jax_errors

_CONCRETE_ERRORS = {"Array.__bool__": jax_errors.TracerBoolConversionError,
                    "Array.__index__": jax_errors.TracerIntegerConversionError,
                    "Array.__array__": jax_errors.TracerArrayConversionError}


def _init_from_environment():
  """Sets the number of virtual CPU devices the way JAX programs do, before first use:
  PARTIX_NUM_CPU_DEVICES, else XLA_FLAGS' --xla_force_host_platform_device_count, else
  JAX_NUM_CPU_DEVICES (the C++ library reads PARTIX_NUM_CPU_DEVICES itself)."""
  if _core.is_initialized() or os.environ.get("PARTIX_NUM_CPU_DEVICES"):
    return
  m = re.search(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
  n = m.group(1) if m else os.environ.get("JAX_NUM_CPU_DEVICES")
  if n:
    os.environ["PARTIX_NUM_CPU_DEVICES"] = n


# Set while an eager shard_map traces its body (shard_map.py): hook(array, what) answers a
# traced value's Python conversion (what: 'Array.__bool__', ..., or 'str') with its value on
# the devices, or None where it has none (then the usual errors follow).
_eager_values = threading.local()


def _eager_value(x, what):
  hook = getattr(_eager_values, "hook", None)
  return None if hook is None else hook(x, what)


class Array:
  """A global array over the devices of its sharding (jax.Array). Inside jit, grad, shard_map
  and control-flow bodies the same type stands for a traced value."""
  __slots__ = ("_a", "__weakref__")
  __array_priority__ = 100

  def __init__(self, core_array):
    self._a = core_array

  # ---- metadata ----
  @property
  def shape(self):
    return tuple(self._a.shape)

  @property
  def dtype(self):
    return dtypes.from_core(self._a.dtype)

  @property
  def __numpy_dtype__(self):
    # NumPy 2.4's protocol for np.dtype(x) and dtype=x: as JAX's, allowed but deprecated.
    warnings.warn("[Array.__numpy_dtype__] Implicit conversion of an array to a dtype is "
                  f"deprecated: np.dtype(x) (or dtype=x) of a partix Array {self._aval_str()}; "
                  "pass x.dtype instead, as this will become an error",
                  DeprecationWarning, stacklevel=2)
    return self.dtype

  @property
  def ndim(self):
    return self._a.ndim

  @property
  def size(self):
    return self._a.size

  @property
  def nbytes(self):
    return self._a.nbytes

  @property
  def itemsize(self):
    return self.dtype.itemsize

  @property
  def sharding(self):
    return NamedSharding._interned(self._a.sharding())

  @property
  def addressable_shards(self):
    # As JAX: a dimension the device holds whole is slice(None).
    def index(idx):
      return tuple(slice(None) if a == 0 and b == n else slice(a, b)
                   for (a, b), n in zip(idx, self.shape))
    return [Shard(Device._wrap(d), index(idx), r, Array(data))
            for d, idx, r, data in self._a.addressable_shards()]

  def addressable_data(self, index):
    """The block on the index-th addressable device, as a one-device Array."""
    return self.addressable_shards[index].data

  def unsafe_buffer_pointer(self):
    """The address of this one-device array's buffer (JAX's; for checking that two arrays do
    or do not share memory). An array on several devices refuses: ask each shard's data."""
    return int(self._a.buffer_pointer())

  @property
  def global_shards(self):
    return self.addressable_shards

  @property
  def is_fully_addressable(self):
    return self._a.is_fully_addressable()

  @property
  def is_fully_replicated(self):
    return self.sharding.is_fully_replicated

  def devices(self):
    return self.sharding.device_set

  weak_type = False  # partix does not track JAX's weak types

  @property
  def device(self):
    """The device holding the array when it is on one, else its sharding (as JAX's)."""
    devs = self.devices()
    return next(iter(devs)) if len(devs) == 1 else self.sharding

  def is_ready(self):
    return True  # partix's runs are synchronous

  def on_device_size_in_bytes(self):
    """The bytes of every device's block together (replicas counted on each device)."""
    item = np.dtype(self.dtype).itemsize
    return sum(int(np.prod(s.data.shape)) * item for s in self.addressable_shards)

  @property
  def committed(self):
    return self._a.committed()

  def is_deleted(self):
    return self._a.is_deleted()

  def block_until_ready(self):
    return self  # partix's runs are synchronous: results are ready when returned

  def copy_to_host_async(self):
    return None

  def delete(self):
    """Frees this array's buffers (when nothing else holds them); its shape and dtype stay
    readable, any other use raises a PartixError, as for a donated array."""
    if type(self) is not _DeletedArray:
      self._a = _DeletedValue(self._a)
      self.__class__ = _DeletedArray

  # ---- host values ----
  def __array__(self, dtype=None, copy=None):
    if copy is False and (self._a.is_tracer() or self._a.host_view() is None):
      raise PartixError(f"[Array.__array__] copy=False, but {self._aval_str()} has no single "
                        "shard holding the whole value on the host: a copy is needed")
    out = to_numpy(self)
    if copy and out.base is not None:  # a view of device memory: copy=True asks for our own
      out = out.copy()
    return out if dtype is None else out.astype(dtype, copy=False)

  def tolist(self):
    self._concrete("Array.tolist")
    return to_numpy(self).tolist()

  def item(self, *args):
    self._concrete("Array.item")
    return to_numpy(self).item(*args)

  def _concrete(self, what):
    if self._a.is_tracer():
      v = _eager_value(self, what)
      if v is not None:
        return v
      # jax.errors' class for each conversion (each also a PartixError), as JAX raises them.
      error = _CONCRETE_ERRORS.get(what, jax_errors.ConcretizationTypeError)
      raise error(
          f"[{what}] a traced value ({self._aval_str()}) was used as a Python {what.split('.')[-1]}"
          " inside jit/grad/shard_map/a loop body: its value is not known while tracing. Use "
          "lax.cond / jnp.where for data-dependent choices, or static_argnums for Python values")
    return to_numpy(self)

  def _scalar(self, what):
    v = self._concrete(what)
    if v.size != 1:
      raise PartixError(f"[{what}] only arrays of one element convert to a Python scalar, got "
                        f"{self._aval_str()}" + (" (use .any() or .all())" if "bool" in what
                                                 else ""))
    return v.reshape(())

  def __bool__(self):
    return bool(self._scalar("Array.__bool__"))

  def __int__(self):
    return int(self._scalar("Array.__int__"))

  def __float__(self):
    return float(self._scalar("Array.__float__"))

  def __complex__(self):
    return complex(self._scalar("Array.__complex__"))

  def __index__(self):
    if not dtypes.is_int(self.dtype):
      raise PartixError(f"[Array.__index__] only integer scalars are indices, got {self._aval_str()}")
    if self.ndim:
      raise PartixError(f"[Array.__index__] only 0-d integer arrays are indices, got "
                        f"{self._aval_str()}")
    return int(self._concrete("Array.__index__"))

  def __len__(self):
    if self.ndim == 0:
      raise PartixError("[Array.__len__] len() of a 0-d array")
    return self.shape[0]

  def __iter__(self):
    if self.ndim == 0:
      raise PartixError("[Array.__iter__] iteration over a 0-d array")
    return (self[i] for i in range(self.shape[0]))

  def __hash__(self):
    raise TypeError("unhashable type: partix Array")

  def _aval_str(self):
    return f"{self._a.dtype}[{','.join(str(d) for d in self.shape)}]"

  def __repr__(self):
    if self._a.is_tracer():
      return _eager_value(self, "str") or f"Traced<{self._aval_str()}>"
    if self._a.is_abstract():
      return f"ShapeDtypeStruct({self._aval_str()})"
    if self._a.is_deleted():
      return f"Array(<deleted {self._aval_str()}>)"
    if isinstance(self.dtype, dtypes.QuantizedDType):
      return f"Array(<{self._aval_str()}>)"
    if self._a.sharding().unreduced:
      return _unreduced_repr(self)
    body = np.array2string(to_numpy(self), separator=", ", prefix="Array(")
    shape = f", shape={self.shape}" if self.size == 0 else ""  # as JAX: [] alone hides it
    return f"Array({body}{shape}, dtype={self.dtype.name})"

  def __str__(self):
    """As JAX: a concrete array prints as numpy prints its values; others as their repr."""
    a = self._a
    if a.is_tracer():
      return _eager_value(self, "str") or repr(self)
    if (a.is_abstract() or a.is_deleted() or isinstance(self.dtype, dtypes.QuantizedDType) or
        a.sharding().unreduced):
      return repr(self)
    return str(to_numpy(self))

  def __format__(self, spec):
    if self.ndim == 0 and not self._a.is_tracer() and not self._a.sharding().unreduced:
      return format(to_numpy(self).item(), spec)
    return repr(self)

  def __reduce__(self):  # pickling: the host value
    return (asarray, (to_numpy(self),))

  def __dlpack__(self, *a, **k):
    return to_numpy(self).__dlpack__(*a, **k)


class _DeletedValue:
  """What a deleted Array holds in place of its partix._core.Array: the metadata (readable
  after delete(), as in JAX) and nothing else."""
  __slots__ = ("shape", "dtype", "ndim", "size", "nbytes")

  def __init__(self, a):
    self.shape, self.dtype, self.ndim, self.size, self.nbytes = (
        a.shape, a.dtype, a.ndim, a.size, a.nbytes)

  def is_deleted(self):
    return True

  def is_tracer(self):
    return False

  def is_abstract(self):
    return False

  def __getattr__(self, name):
    raise deleted_error(self, "Array")


def deleted_error(a, api):
  """The error for any use of a deleted array (a._a or the _DeletedValue itself)."""
  a = a._a if isinstance(a, Array) else a
  name = np.dtype(dtypes.from_core(a.dtype)).name if a.dtype in dtypes._FROM_CORE else a.dtype
  return PartixError(f"[{api}] Array has been deleted with shape={name}"
                     f"[{','.join(str(d) for d in a.shape)}] (Array.delete, or donated): it is "
                     "gone")


class _DeletedArray(Array):
  """An Array after delete(): the same object, its class switched so that every conversion to
  the C++ array (core(), asarray(), jit arguments) refuses it with a PartixError."""
  __slots__ = ()

  def is_deleted(self):
    return True


class Shard:
  """One device's block of an Array (jax.Shard)."""
  __slots__ = ("device", "index", "replica_id", "data")

  def __init__(self, device, index, replica_id, data):
    self.device, self.index, self.replica_id, self.data = device, index, replica_id, data

  def __repr__(self):
    return f"Shard(device={self.device!r}, index={self.index}, replica_id={self.replica_id}, " \
           f"data={self.data._aval_str()})"


def to_numpy(x, explicit=False):
  """x's values as a numpy array on the host (explicit: device_get's, for the transfer guard)."""
  a = x._a
  if type(x) is _DeletedArray:
    raise deleted_error(x, "Array.__array__")
  if isinstance(x.dtype, dtypes.QuantizedDType):
    raise PartixError(f"[Array.__array__] a quantized array ({x._aval_str()}) has no numpy "
                      "form; astype it to float32 first")
  if a.is_tracer():
    return np.asarray(x._concrete("Array.__array__"))
  if a.sharding().unreduced:  # partial sums on the devices: the value is their sum
    x = _reduced_copy(x)
    a = x._a
  if any(d.platform != "cpu" for d in x.devices()):  # CPU devices' memory is the host's
    transfer_guard.check("device_to_host", explicit, x._aval_str())
  view = a.host_view() if x.size else None
  if view is not None:  # read-only and zero-copy, as JAX's np.asarray of a CPU array
    return view.view(x.dtype).reshape(x.shape)
  out = np.empty(x.shape, dtype=x.dtype)
  if out.size:
    a.copy_to(out.reshape(-1).view(np.uint8))
  return out


def wrap(a):
  return Array(a)


def _reduced_copy(x):
  """An unreduced array summed over its unreduced axes, as its sharding's spec places it."""
  s = x._a.sharding()
  return Array(_core.device_put(x._a, _core.NamedSharding(s.mesh, s.spec)))


def _unreduced_repr(x):
  """JAX's text for an unreduced array: no values (they are partial sums), its sharding."""
  return f"Array(shape={x.shape}, dtype={x.dtype.name}, sharding={x.sharding})"


def _flat_bytes(x, dt):
  """x as C-contiguous dt values (ascontiguousarray makes 0-d arrays 1-d) and their bytes."""
  x = np.asarray(x, dtype=dt, order="C")
  return x, (x.reshape(-1).view(np.uint8) if x.size else np.zeros(0, np.uint8))


# Constructors whose host data is an explicit transfer (the transfer guard's sense).
_EXPLICIT_PUTS = frozenset({"device_put", "make_array_from_callback",
                            "make_array_from_single_device_arrays",
                            "make_array_from_process_local_data"})


def _from_numpy(x, dt, place=None, api="asarray", temporary=False):
  x, flat = _flat_bytes(x, dt)
  transfer_guard.check("host_to_device", api in _EXPLICIT_PUTS,
                       f"{x.dtype.name}{list(x.shape)} (in {api})")
  return _core.from_host(flat, list(x.shape), dtypes.to_core(x.dtype, api), place, api,
                         temporary)


def host_block(x, api):
  """A block of host data for make_array_from_host_callback: (its bytes, shape, core dtype)."""
  if isinstance(x, Array):  # its bytes, whatever the dtype (quantized blocks too)
    a = core(x, api=api)
    if a.is_tracer():
      x._concrete(api)
    buf = np.empty(a.nbytes, np.uint8)
    if buf.size:
      a.copy_to(buf)
    return buf, list(a.shape), a.dtype
  arr, flat = _flat_bytes(*_host_array(x, None, api))
  return flat, list(arr.shape), dtypes.to_core(arr.dtype, api)


def core(x, dtype=None, api="asarray", place=None, temporary=False):
  """x (an Array, numpy array, Python scalar, or nested list) as a partix._core.Array; host
  data is converted as JAX converts it (64-bit types to 32-bit unless dtype says otherwise).
  With `place` (a _core.NamedSharding), host arrays go straight onto it: each device copies
  only its block, none holds the whole (the caller still device_puts other inputs); with
  `temporary`, the placed copy is one call's own (a jit argument: its buffers may be reused)."""
  if isinstance(x, Array):
    if type(x) is _DeletedArray:
      raise deleted_error(x, api)
    if dtype is not None and dtypes.to_core(dtype, api) != x._a.dtype:
      return _core.astype(x._a, dtypes.to_core(dtype, api))
    return x._a
  if isinstance(x, _core.Array):
    return x
  if hasattr(type(x), "__jax_array__"):  # an object standing for an array (JAX's protocol)
    return core(x.__jax_array__(), dtype, api, place, temporary)
  if dtype is None:
    if isinstance(x, bool):
      return _core.scalar_bool(x)
    if isinstance(x, numbers.Integral) and not isinstance(x, np.generic):
      if not -2**31 <= int(x) < 2**31:
        raise PartixError(f"[{api}] Python int {int(x)} does not fit int32, partix's default "
                          "integer type (as JAX's without x64); pass a float dtype, or "
                          "dtype=int64 with x64 on")
      return _core.scalar_i32(int(x))
    if isinstance(x, numbers.Real) and not isinstance(x, np.generic):
      return _core.scalar_f32(float(x))
  if isinstance(x, (list, tuple)) and any(isinstance(e, Array) for e in _walk(x)):
    # A list holding arrays stacks them (as jnp.stack does), in their promoted dtype.
    parts = [core(e, dtype, api) for e in x]
    dt = parts[0].dtype
    for part in parts[1:]:
      dt = _core.promote_types(dt, part.dtype)
    return _core.stack([e if e.dtype == dt else _core.astype(e, dt) for e in parts], 0)
  arr, dt = _host_array(x, dtype, api)
  return _from_numpy(arr, dt, place, api, temporary)


def _host_array(x, dtype, api):
  """Host data as a numpy array and the partix dtype it converts to (JAX's rules)."""
  if isinstance(x, (str, bytes)) or x is None or callable(x) and not hasattr(x, "__array__"):
    raise PartixError(f"[{api}] {x!r} ({type(x).__name__}) is not an array: partix arrays are "
                      "made from Arrays, numpy arrays, Python numbers and nested lists of them")
  try:
    arr = np.asarray(x)
  except (ValueError, TypeError, OverflowError) as e:
    raise PartixError(f"[{api}] {type(x).__name__} cannot be converted to an array: {e}") from None
  if not isinstance(x, (np.ndarray, np.generic)) and (
      arr.dtype == np.uint64 or arr.dtype == object and arr.size and all(
          isinstance(v, numbers.Integral) for v in arr.flat)):
    # Python ints numpy could hold only as uint64 or as objects: floats for a float dtype,
    # else refused.
    if dtype is not None and _is_float_dtype(dtype):
      arr = np.asarray(x, dtype=np.float64)
    else:
      big = max((int(v) for v in arr.flat), key=abs)
      raise PartixError(f"[{api}] Python int {big} is beyond int64, the widest integer type "
                        "partix holds")
  if arr.dtype == object or arr.dtype.kind in "USVOMmc" and not dtypes.is_known(arr.dtype):
    raise PartixError(f"[{api}] {type(x).__name__} of numpy dtype {arr.dtype} is not an array "
                      "partix can hold")
  # Without dtype=, host types partix has no dtype for are refused (never widened silently);
  # an explicit dtype= converts them, as astype does, when the values fit.
  dt = (dtypes.requested(dtype, api) if dtype is not None
        else dtypes.canonicalize(arr.dtype, api))
  if isinstance(dt, dtypes.QuantizedDType):
    raise PartixError(f"[{api}] host data cannot be converted to quantized {dt.name}; load "
                      "quantized weights from a GGUF file")
  dtypes.to_core(dt, api)  # a dtype partix holds, or a PartixError naming the API
  if dt.kind in "iu" and arr.dtype.kind in "iu" and arr.size and not np.can_cast(
      arr.dtype, dt, "safe"):
    info = np.iinfo(dt)
    if arr.min() < info.min or arr.max() > info.max:
      raise PartixError(f"[{api}] integer values beyond {dt} ({arr.min()} .. {arr.max()}): "
                        f"partix holds them as {dt}" + ("; pass float32, or dtype=int64 "
                                                        "with x64 on" if
                                                        dt == np.dtype(np.int32) else ""))
  return arr, dt


def _is_float_dtype(d):
  try:
    return dtypes.is_float(d)
  except PartixError:
    return False


def _walk(x):
  for e in x:
    if isinstance(e, (list, tuple)):
      yield from _walk(e)
    else:
      yield e


def asarray(x, dtype=None, api="asarray"):
  return x if type(x) is Array and dtype is None else Array(core(x, dtype, api))


def is_weak_scalar(x):
  return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic) or (
      isinstance(x, numbers.Number) and not isinstance(x, (np.generic, complex)))


def _weak_scalar(s, api):
  """A Python number as the core's WeakScalar: kind, value, exact int64 value, fits int64,
  text."""
  if isinstance(s, bool):
    return "b", float(s), int(s), True, repr(s)
  if isinstance(s, numbers.Integral):
    v = int(s)
    try:
      f = float(v)
    except OverflowError:
      f = float("inf") if v > 0 else float("-inf")
    fits = -(1 << 63) <= v < (1 << 63)
    return "i", f, v if fits else 0, fits, str(v)
  if isinstance(s, numbers.Real):
    return "f", float(s), 0, True, repr(s)
  raise PartixError(f"[{api}] {s!r} of type {type(s).__name__} is not supported")


def promote_pair(x, y, api):
  """Two operands as _core Arrays of one dtype, by JAX's rules: Python scalars are weakly
  typed (they take the array's dtype, and int arrays become float32 for a float scalar)."""
  xw, yw = is_weak_scalar(x), is_weak_scalar(y)
  for v in (x, y):
    if isinstance(v, Array) and isinstance(v.dtype, dtypes.QuantizedDType):
      raise PartixError(f"[{api}] got a quantized array ({v._aval_str()}): quantized dtypes are "
                        "weight storage for matmul; astype it to a float dtype first")
  if xw and yw:
    return core(x, api=api), core(y, api=api)
  if config_states.PROMOTION_CHECKS[0]:  # jax.numpy_rank_promotion / numpy_dtype_promotion
    config_states.check_promotion(x, y, None if xw else core(x, api=api),
                                  None if yw else core(y, api=api), xw, yw, api)
  if xw or yw:
    # The core decides the types (partix/promotion.h); here the number is only marshalled.
    arr, s = (y, x) if xw else (x, y)
    a, sv = _core.promote_weak(core(arr, api=api), *_weak_scalar(s, api), api)
    return (sv, a) if xw else (a, sv)
  a, b = core(x, api=api), core(y, api=api)
  if a.dtype != b.dtype:
    dt = _core.promote_types(a.dtype, b.dtype)
    if a.dtype != dt:
      a = _core.astype(a, dt)
    if b.dtype != dt:
      b = _core.astype(b, dt)
  return a, b
