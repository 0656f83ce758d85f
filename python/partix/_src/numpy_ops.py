"""partix.numpy: numpy's names, signatures, broadcasting and JAX's promotion rules over the
C++ ops. No numerics here: every function maps to ops of partix._core."""
import builtins
import math
import numbers

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src.core import Array, PartixError, asarray, core, is_weak_scalar, promote_pair
from partix._src.sharding import concrete_sharding, to_sharding
from partix._src.tracing import ShapeDtypeStruct, with_out_sharding as _with_out_sharding
from partix._src.sharding import AxisType, NamedSharding, PartitionSpec

# jax.numpy names defined here (partix.numpy takes them with a star import).
__all__ = ["abs", "absolute", "add", "all", "allclose", "amax", "amin", "any", "arange", "argmax",
           "argmin", "argsort", "around", "array", "array_equal", "array_split",
           "astype", "atleast_1d", "atleast_2d", "atleast_3d", "average",
           "broadcast_arrays", "broadcast_shapes", "broadcast_to", "cbrt", "ceil",
           "clip", "column_stack", "concat", "concatenate", "copysign", "cos", "cosh",
           "count_nonzero", "cumprod", "cumsum", "cumulative_sum", "deg2rad", "degrees",
           "diag", "diagflat", "diagonal", "diff", "divide", "dot", "dstack", "e",
           "ediff1d", "einsum", "einsum_path", "empty", "empty_like", "equal",
           "euler_gamma", "exp", "exp2", "expand_dims", "expm1", "eye", "fix", "flip",
           "fliplr", "flipud", "float_power", "floor", "floor_divide", "fmax", "fmin",
           "fmod", "full", "full_like", "greater", "greater_equal", "heaviside",
           "hstack", "hypot", "identity", "inf", "inner", "isclose", "iscomplexobj",
           "isfinite", "isinf", "isnan", "isneginf", "isposinf", "isscalar", "less",
           "less_equal", "linspace", "log", "log10", "log1p", "log2", "logaddexp",
           "logical_and", "logical_not", "logical_or", "logical_xor", "logspace",
           "matmul", "matrix_transpose", "max", "maximum", "mean", "median", "meshgrid",
           "min", "minimum", "mod", "moveaxis", "multiply", "nan", "nan_to_num",
           "nanmax", "nanmean", "nanmin", "nansum", "ndim", "negative", "newaxis",
           "nonzero", "not_equal", "ones", "ones_like", "outer", "pad", "permute_dims",
           "pi", "positive", "pow", "power", "prod", "promote_types", "ptp", "rad2deg",
           "radians", "ravel", "reciprocal", "remainder", "repeat", "reshape",
           "result_type", "rint", "roll", "round", "shape", "sign", "signbit", "sin",
           "sinh", "size", "slice_in_dim", "sort", "split", "sqrt", "square", "squeeze",
           "stack", "std", "subtract", "sum", "swapaxes", "take", "take_along_axis",
           "tan", "tanh", "tensordot", "tile", "trace", "transpose", "tri", "tril",
           "triu", "true_divide", "trunc", "unique", "unstack", "var", "vdot", "vecdot",
           "vstack", "where", "zeros", "zeros_like"]

newaxis = None
pi, e, inf, nan, euler_gamma = np.pi, np.e, np.inf, np.nan, np.euler_gamma


def _w(a):
  return Array(a)


def _norm_axis(axis, ndim, api):
  if not isinstance(axis, (int, np.integer)):
    raise PartixError(f"[{api}] axis {axis!r} is not an int")
  if axis < -ndim or axis >= builtins.max(ndim, 1) and not (ndim == 0 and axis in (0, -1)):
    raise PartixError(f"[{api}] axis {axis} is out of range for an array of {ndim} dimensions")
  return int(axis) % builtins.max(ndim, 1)


def _norm_axes(axis, ndim, api):
  if axis is None:
    return list(range(ndim))
  if isinstance(axis, (tuple, list)):
    out = [_norm_axis(a, ndim, api) for a in axis]
    if len(set(out)) != len(out):
      raise PartixError(f"[{api}] repeated axis in {axis}")
    return out
  return [_norm_axis(axis, ndim, api)]


# ---- creation ----

def _creation_sharding(out_sharding, device, api):
  s = out_sharding if out_sharding is not None else device
  s = to_sharding(s, api)
  if s is not None and not _core.is_tracing():  # values are made on devices
    s = concrete_sharding(s, api)
  return s._s if s is not None else None


def _shape(shape, api):
  if isinstance(shape, (int, np.integer)):
    shape = (shape,)
  if isinstance(shape, (str, bytes)) or not isinstance(shape, (tuple, list, np.ndarray)) or \
      not builtins.all(
      isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in shape):
    raise PartixError(f"[{api}] shape {shape!r} is not a sequence of ints")
  shape = [int(d) for d in shape]
  for d in shape:
    if d < 0:
      raise PartixError(f"[{api}] negative dimension in shape {tuple(shape)}")
    if d >= 1 << 63:
      raise PartixError(f"[{api}] dimension {d} of shape {tuple(shape)} exceeds int64")
  return shape


def _dt(dtype, default="f32", api="dtype"):
  return default if dtype is None else dtypes.to_core(dtype, api)


def zeros(shape, dtype=None, *, device=None, out_sharding=None):
  return _w(_core.zeros(_shape(shape, "zeros"), _dt(dtype, api="zeros"),
                        _creation_sharding(out_sharding, device, "zeros")))


def ones(shape, dtype=None, *, device=None, out_sharding=None):
  return _w(_core.ones(_shape(shape, "ones"), _dt(dtype, api="ones"),
                       _creation_sharding(out_sharding, device, "ones")))


def full(shape, fill_value, dtype=None, *, device=None, out_sharding=None):
  if isinstance(fill_value, Array) or isinstance(fill_value, np.ndarray) and fill_value.ndim:
    return broadcast_to(asarray(fill_value, dtype, "full"), shape)
  if not isinstance(fill_value, (numbers.Real, np.generic)) or isinstance(fill_value, np.ndarray):
    return broadcast_to(asarray(fill_value, dtype, "full"), shape)
  if dtype is None:
    dtype = dtypes.dtype(fill_value) if not isinstance(fill_value, np.generic) else \
        dtypes.canonicalize(fill_value.dtype, "full")
  dt = _dt(dtype, api="full")
  rng = dtypes.int_range(dt)
  if rng and not rng[0] <= fill_value <= rng[1]:
    raise PartixError(f"[full] fill value {fill_value} does not fit {dtypes.from_core(dt)}")
  return _w(_core.full(_shape(shape, "full"), float(fill_value), dt,
                       _creation_sharding(out_sharding, device, "full")))


def empty(shape, dtype=None, *, device=None, out_sharding=None):
  return zeros(shape, dtype, device=device, out_sharding=out_sharding)


def _like(a, shape, device, out_sharding, api):
  """The shape and placement of a *_like result: a's own sharding for a concrete array of the
  same shape, as JAX's full_like."""
  if isinstance(a, (str, bytes, dict)) or a is None:
    raise PartixError(f"[{api}] {a!r:.40} ({type(a).__name__}) is not an array")
  if shape is None:
    shape = np.shape(a)
    if (device is None and out_sharding is None and isinstance(a, Array) and
        not a._a.is_tracer() and not a._a.is_abstract() and a._a.committed()):
      out_sharding = a.sharding
    # A ShapeDtypeStruct with a sharding places the result there too (as JAX).
    if (device is None and out_sharding is None and isinstance(a, ShapeDtypeStruct) and
        a.sharding is not None and not _core.is_tracing()):
      out_sharding = a.sharding
  return shape, out_sharding


def _varying_like(out, a):
  """Inside shard_map a *_like result varies over the manual axes `a` does (as JAX's, whose
  jnp.zeros_like is lax.full_like): a loop carry or branch result started from it has a's
  type."""
  if isinstance(a, Array) and a._a.is_tracer():
    axes = _core.varying_axes(a._a)
  elif isinstance(a, ShapeDtypeStruct):
    axes = getattr(a, "vma", None) or ()
  else:
    return out
  return Array(_core.pvary(out._a, sorted(axes))) if axes else out


def zeros_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
  shape, out_sharding = _like(a, shape, device, out_sharding, "zeros_like")
  return _varying_like(zeros(shape, dtype or _dtype_of(a), device=device,
                             out_sharding=out_sharding), a)


def ones_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
  shape, out_sharding = _like(a, shape, device, out_sharding, "ones_like")
  return _varying_like(ones(shape, dtype or _dtype_of(a), device=device,
                            out_sharding=out_sharding), a)


def full_like(a, fill_value, dtype=None, shape=None, *, device=None, out_sharding=None):
  shape, out_sharding = _like(a, shape, device, out_sharding, "full_like")
  return _varying_like(full(shape, fill_value, dtype or _dtype_of(a), device=device,
                            out_sharding=out_sharding), a)


empty_like = zeros_like


def _dtype_of(a):
  return a.dtype if hasattr(a, "dtype") else dtypes.dtype(a)


def _concrete_number(v):
  """A concrete 0-d Array's value as a numpy scalar (JAX takes those where a static number is
  needed); anything else as it is, a traced Array included."""
  if isinstance(v, Array) and v.ndim == 0 and not v._a.is_tracer():
    return np.asarray(v)[()]
  return v


def arange(start, stop=None, step=None, dtype=None, *, device=None, out_sharding=None):
  start, stop, step = (_concrete_number(v) for v in (start, stop, step))
  if stop is None and step is None and isinstance(start, (int, np.integer)) and (
      dtype is None or dtypes.is_int(dtype) or dtypes.is_float(dtype)):
    n = builtins.max(int(start), 0)
    dt = _dt(dtype, "i32", "arange")
    if n > (dtypes.int_range(dt) or (0, 2**63))[1] + 1:
      raise PartixError(f"[arange] {n} values do not fit {dtypes.from_core(dt)}" +
                        ("; pass dtype=int64 with x64 on" if dt == "i32" else ""))
    return _w(_core.arange(n, dt,
                           _creation_sharding(out_sharding, device, "arange")))
  if stop is None:
    start, stop = 0, start
  step = 1 if step is None else step
  for v in (start, stop, step):
    if not isinstance(v, (numbers.Real, np.generic)) or isinstance(v, (bool, np.bool_)):
      raise PartixError(f"[arange] start, stop and step must be Python or numpy numbers (they "
                        f"fix the length), got {v!r}")
  if step == 0:
    raise PartixError("[arange] step must not be zero")
  # The length is static metadata; the values are start + i * step on the device.
  n = builtins.max(0, int(math.ceil((stop - start) / step)))
  all_int = builtins.all(isinstance(v, (numbers.Integral, np.integer)) for v in (start, stop, step))
  if dtype is None:
    dtype = np.int32 if all_int else np.float32
  dt = _dt(dtype, api="arange")
  work = dt if all_int and dt in dtypes.INT_CORE else "f32"
  if n >= 1 << 63:
    raise PartixError(f"[arange] {n} values exceed int64")
  if work in dtypes.INT_CORE:
    lo, hi = dtypes.int_range(work)
    for v in (int(start), int(start) + builtins.max(n - 1, 0) * int(step)):
      if not lo <= v <= hi:
        raise PartixError(f"[arange] value {v} does not fit {dtypes.from_core(work)}" +
                          ("; pass dtype=int64 with x64 on" if work == "i32" else ""))
  i = _w(_core.iota([n], 0, work))
  out = astype(i * _scalar_as(step, work) + _scalar_as(start, work), dtype)
  s = _creation_sharding(out_sharding, device, "arange")
  return out if s is None else _w(_core.device_put(out._a, s))


def _scalar_as(v, dt):
  return _w(_core.full([], float(v), dt, None))


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
  if not isinstance(num, (int, np.integer)) or num < 0:
    raise PartixError(f"[linspace] num must be a non-negative int, got {num!r}")
  s = astype(asarray(start, api="linspace"), np.float32)
  e = astype(asarray(stop, api="linspace"), np.float32)
  s, e = broadcast_arrays(s, e)
  div = num - 1 if endpoint else num
  step = (e - s) / float(builtins.max(div, 1))
  i = reshape(_w(_core.iota([int(num)], 0, "f32")), (num,) + (1,) * s.ndim)
  out = s + i * step
  if endpoint and num > 1:  # the last value is exactly stop, as numpy's
    last = reshape(equal(i, float(num - 1)), (num,) + (1,) * s.ndim)
    out = where(last, broadcast_to(e, out.shape), out)
  if dtype is not None and dtypes.is_int(dtype):
    out = floor(out)  # as JAX: integer results round toward -inf
  out = astype(out, dtype or np.float32)
  if s.ndim:
    out = moveaxis(out, 0, _norm_axis(axis, out.ndim, "linspace"))
  if device is not None:
    sh = _creation_sharding(None, device, "linspace")
    out = _w(_core.device_put(out._a, sh))
  if retstep:
    return out, step if s.ndim else (stop - start) / builtins.max(div, 1)
  return out


def eye(N, M=None, k=0, dtype=None):
  M = N if M is None else M
  N, M = _shape((N, M), "eye")
  if not isinstance(k, (int, np.integer)):
    raise PartixError(f"[eye] k must be an int, got {k!r}")
  r = _w(_core.iota([N, M], 0, "i32"))
  c = _w(_core.iota([N, M], 1, "i32"))
  return astype(equal(c - r, k), dtype or np.float32)


def identity(n, dtype=None):
  return eye(n, dtype=dtype)


def tri(N, M=None, k=0, dtype=None):
  M = N if M is None else M
  N, M = _shape((N, M), "tri")
  if not isinstance(k, (int, np.integer)):
    raise PartixError(f"[tri] k must be an int, got {k!r}")
  r = _w(_core.iota([N, M], 0, "i32"))
  c = _w(_core.iota([N, M], 1, "i32"))
  return astype(less_equal(c, r + k), dtype or np.float32)


def tril(m, k=0):
  m = asarray(m, api="tril")
  if m.ndim < 2:
    raise PartixError(f"[tril] needs an array of at least 2 dimensions, got shape {m.shape}")
  mask = tri(m.shape[-2], m.shape[-1], k, dtype=bool)
  return where(mask, m, zeros_like(m))


def triu(m, k=0):
  m = asarray(m, api="triu")
  if m.ndim < 2:
    raise PartixError(f"[triu] needs an array of at least 2 dimensions, got shape {m.shape}")
  mask = tri(m.shape[-2], m.shape[-1], k - 1, dtype=bool)
  return where(mask, zeros_like(m), m)


def array(object, dtype=None, copy=True, order=None, ndmin=0, *, device=None,
          out_sharding=None):
  out = asarray(object, dtype, "array")
  if copy and out is object and not out._a.is_tracer():
    out = _w(_core.copy(out._a))  # as JAX: a new array, never the argument itself
  while out.ndim < ndmin:
    out = expand_dims(out, 0)
  s = _creation_sharding(out_sharding, device, "array")
  if s is not None and device is not None:
    _check_committed_devices(object, s, "array")
  return out if s is None else _w(_core.device_put(out._a, s))


def _check_committed_devices(x, s, api):
  """As JAX: device= does not move an array committed to other devices."""
  if not isinstance(x, Array) or x._a.is_tracer() or not x._a.committed():
    return
  have = sorted(d.id for d in x.sharding.device_set)
  want = sorted(d.id for d in NamedSharding._wrap(s).device_set)
  if have != want:
    raise PartixError(f"[{api}] Received incompatible devices for jitted computation: the array "
                      f"is committed to device ids {have} but device= asks for {want}; "
                      "device_put it there first")


def asarray_(a, dtype=None, order=None, *, copy=None, device=None, out_sharding=None):
  out = asarray(a, dtype, "asarray")
  s = _creation_sharding(out_sharding, device, "asarray")
  if s is not None and device is not None:
    _check_committed_devices(a, s, "asarray")
  return out if s is None else _w(_core.device_put(out._a, s))


# ---- elementwise ----

def _unary(name, f):
  """A function of the core's elementwise table: the core decides the result's dtype (integer
  and bool operands of float functions become f32; floor/ceil keep integers and bools)."""
  def op(x, /):
    return _w(f(core(x, api=name)))
  op.__name__ = name
  op.__doc__ = f"numpy.{name}, elementwise."
  return op


exp = _unary("exp", _core.exp)
log = _unary("log", _core.log)
sin = _unary("sin", _core.sin)
cos = _unary("cos", _core.cos)
tanh = _unary("tanh", _core.tanh)
sqrt = _unary("sqrt", _core.sqrt)
log1p = _unary("log1p", _core.log1p)
expm1 = _unary("expm1", _core.expm1)
abs = _unary("abs", _core.abs)
absolute = abs
sign = _unary("sign", _core.sign)
floor = _unary("floor", _core.floor)
ceil = _unary("ceil", _core.ceil)
square = _unary("square", _core.square)
negative = _unary("negative", _core.neg)
logical_not = _unary("logical_not", _core.logical_not)


def round(a, decimals=0, out=None):
  if not isinstance(decimals, (int, np.integer)) or isinstance(decimals, bool):
    raise PartixError(f"[round] decimals must be an int, got {decimals!r}")
  if out is not None:
    raise PartixError("[round] out= is not supported (arrays are immutable)")
  if decimals:
    x = asarray(a, api="round")
    if x._a.dtype in dtypes.INT_OR_BOOL_CORE:
      if decimals < 0:  # as JAX
        raise PartixError(f"[round] decimals={decimals} < 0 is not supported for integer "
                          f"arrays ({x.dtype})")
      return _unary("round", _core.round)(x)
    s = 10.0 ** decimals
    return _unary("round", _core.round)(x * s) / s
  return _unary("round", _core.round)(a)


around = round


def rint(x, /):
  """numpy.rint: to the nearest integer, halves to even; integers become float32 (as JAX)."""
  a = core(x, api="rint")
  if a.dtype in dtypes.INT_OR_BOOL_CORE:
    a = _core.astype(a, "f32")
  return _w(_core.round(a))


def tan(x):
  return sin(x) / cos(x)


def exp2(x):
  return exp(asarray(x, api="exp2") * math.log(2.0))


def log2(x):
  return log(x) / math.log(2.0)


def log10(x):
  return log(x) / math.log(10.0)


def reciprocal(x):
  return 1.0 / asarray(x, api="reciprocal")


def positive(x):
  return asarray(x, api="positive")


def sinh(x):
  x = asarray(x, api="sinh")
  return (exp(x) - exp(-x)) / 2.0


def cosh(x):
  x = asarray(x, api="cosh")
  return (exp(x) + exp(-x)) / 2.0


def _binary(name, f, scalar_f=None):
  def op(x1, x2, /):
    a, b = promote_pair(x1, x2, name)
    return _w(f(a, b))
  op.__name__ = name
  op.__doc__ = f"numpy.{name}, elementwise with broadcasting."
  return op


add = _binary("add", _core.add)
subtract = _binary("subtract", _core.sub)
multiply = _binary("multiply", _core.mul)
maximum = _binary("maximum", _core.maximum)
minimum = _binary("minimum", _core.minimum)
less = _binary("less", _core.lt)
less_equal = _binary("less_equal", _core.le)
greater = _binary("greater", _core.gt)
greater_equal = _binary("greater_equal", _core.ge)
equal = _binary("equal", _core.eq)
not_equal = _binary("not_equal", _core.ne)
logical_and = _binary("logical_and", _core.logical_and)
logical_or = _binary("logical_or", _core.logical_or)
remainder = _binary("remainder", _core.remainder)
mod = remainder


def floor_divide(x1, x2, /):
  """numpy.floor_divide (//): integers round toward -inf (Python's rule); floats as numpy and
  JAX compute them, (x1 - fmod(x1, x2)) / x2 corrected to the floor (1 // 0.1 is 9)."""
  a, b = promote_pair(x1, x2, "floor_divide")
  if a.dtype not in ("f16", "bf16", "f32", "f64"):
    return _w(_core.floor_divide(a, b))
  a, b = _w(a), _w(b)
  m = _c_fmod(a, b)
  q = (a - m) / b
  fix_ = logical_and(not_equal(m, 0), not_equal(sign(b), sign(m)))
  return round(where(fix_, q - 1, q))


def _c_fmod(a, b):
  """The C remainder of two arrays of one dtype: the sign of the dividend, exact."""
  if a._a.dtype in dtypes.INT_OR_BOOL_CORE:
    # r is the floor remainder: where it took the divisor's sign, move it back.
    r = _w(_core.remainder(a._a, b._a))
    return where(logical_and(not_equal(r, 0), less(a, 0) != less(b, 0)), r - b, r)
  # Of non-negative operands the floor remainder is the C one (no correction to round).
  m = _w(_core.remainder(abs(a)._a, abs(b)._a))
  return where(signbit(a), -m, m)


_float_power = _binary("power", _core.pow)


def power(x1, x2, /):
  """numpy.power; integer bases with integer exponents stay integers, as in JAX."""
  if isinstance(x2, (int, np.integer)) and not isinstance(x2, bool) and not is_weak_scalar(
      x1) and asarray(x1, api="power")._a.dtype in ("i32", "i64", "f16", "bf16", "f32",
                                                      "f64"):
    # A static integer exponent: exact repeated squaring (lax.integer_pow).
    base = asarray(x1, api="power")
    n = int(x2)
    if n < 0:
      if dtypes.is_int(base.dtype):
        raise PartixError(f"[power] integers cannot be raised to negative powers ({n})")
      return 1.0 / power(base, -n)
    out, sq = None, base
    while n:
      if n & 1:
        out = sq if out is None else out * sq
      n >>= 1
      if n:
        sq = sq * sq
    return out if out is not None else ones_like(base)
  a, b = promote_pair(x1, x2, "power")
  if a.dtype in dtypes.INT_CORE:
    # Integer ** integer array: computed in float32 and rounded (exact below 2**24).
    r = _core.round(_core.pow(_core.astype(a, "f32"), _core.astype(b, "f32")))
    return _w(_core.astype(r, a.dtype))
  return _w(_core.pow(a, b))


pow = power


def true_divide(x1, x2, /):
  a, b = promote_pair(x1, x2, "divide")
  if a.dtype in dtypes.INT_OR_BOOL_CORE:
    a, b = _core.astype(a, "f32"), _core.astype(b, "f32")
  return _w(_core.div(a, b))


divide = true_divide


def logical_xor(x1, x2, /):
  return not_equal(astype(x1, bool), astype(x2, bool))


def _nan_ignoring(name, f, x1, x2):
  """numpy.fmax / fmin: f, except that a NaN operand gives the other operand (NaN when both
  are)."""
  a, b = promote_pair(x1, x2, name)
  out = _w(f(a, b))
  if a.dtype not in ("f16", "bf16", "f32", "f64"):
    return out
  a, b = _w(a), _w(b)
  return where(isnan(b), broadcast_to(a, out.shape), where(isnan(a), b, out))


def fmax(x1, x2, /):
  return _nan_ignoring("fmax", _core.maximum, x1, x2)


def fmin(x1, x2, /):
  return _nan_ignoring("fmin", _core.minimum, x1, x2)


def where(condition, x=None, y=None, /):
  if x is None and y is None:
    raise PartixError("[where] the one-argument form (nonzero) has a data-dependent shape; "
                      "pass x and y")
  if x is None or y is None:
    raise PartixError("[where] give both x and y, or neither")
  c = core(condition, api="where")
  if c.dtype != "bool":
    c = _core.ne(c, _core.full([], 0.0, c.dtype, None))
  a, b = promote_pair(x, y, "where")
  return _w(_core.where(c, a, b))


def clip(a, a_min=None, a_max=None, *, min=None, max=None):
  lo = a_min if a_min is not None else min
  hi = a_max if a_max is not None else max
  out = asarray(a, api="clip")
  if lo is not None:
    out = maximum(out, lo)
  if hi is not None:
    out = minimum(out, hi)
  return out


def isnan(x):
  x = asarray(x, api="isnan")
  return not_equal(x, x)


def isinf(x):
  x = asarray(x, api="isinf")
  return equal(abs(x), np.inf) if dtypes.is_float(x.dtype) else zeros(x.shape, bool)


def isfinite(x):
  x = asarray(x, api="isfinite")
  if not dtypes.is_float(x.dtype):
    return ones(x.shape, bool)
  return logical_not(logical_or(isnan(x), isinf(x)))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
  x = asarray(x, api="nan_to_num")
  fi = dtypes.finfo(x.dtype)
  x = where(isnan(x), nan, x)
  x = where(equal(x, np.inf), fi.max if posinf is None else posinf, x)
  return where(equal(x, -np.inf), fi.min if neginf is None else neginf, x)


def astype(x, dtype, /, *, copy=False, device=None):
  if dtype is None:
    raise PartixError("[astype] dtype is None: give the dtype to convert to")
  return _w(_core.astype(core(x, api="astype"), dtypes.to_core(dtype, "astype")))


# Python scalars and their types are weakly typed (JAX's lattice): the kind they stand for.
_WEAK_KIND = {bool: 0, int: 1, float: 2, complex: 3}
_KIND_DEFAULT = {0: "bool", 1: "i32", 2: "f32"}


def _weak_kind(a):
  if isinstance(a, type) and a in _WEAK_KIND:
    return _WEAK_KIND[a]
  if type(a) in _WEAK_KIND:  # a Python scalar (not a numpy one)
    return _WEAK_KIND[type(a)]
  return None


def _kind(core_dtype):
  return 0 if core_dtype == "bool" else 1 if core_dtype in dtypes.INT_CORE else 2


def result_type(*args):
  """jnp.result_type, as JAX's lattice without x64: Python scalars and the types bool, int and
  float are weak (result_type(float, float32) and result_type(2.0, bfloat16) keep the other
  dtype; alone they give bool, int32, float32)."""
  d, weak = None, -1
  for a in args:
    k = _weak_kind(a)
    if k is not None:
      if k == 3:
        raise PartixError("[result_type] complex: partix holds no complex dtypes")
      weak = k if k > weak else weak
      continue
    ad = dtypes.to_core(_dtype_of(a) if not isinstance(a, (type, np.dtype, str)) else a)
    d = ad if d is None else _core.promote_types(d, ad)
  if d is None:
    if weak < 0:
      raise PartixError("[result_type] at least one array or dtype is required")
    return dtypes.from_core(_KIND_DEFAULT[weak])
  if weak > _kind(d):
    d = _KIND_DEFAULT[weak]
  return dtypes.from_core(d)


def promote_types(a, b):
  return dtypes.from_core(_core.promote_types(dtypes.to_core(a), dtypes.to_core(b)))


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
  return all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
  a, b = asarray(a, api="isclose"), asarray(b, api="isclose")
  out = less_equal(abs(a - b), atol + rtol * abs(b))
  if dtypes.is_float(a.dtype) or dtypes.is_float(b.dtype):
    # Infinities are close only to themselves (inf - inf is nan).
    out = logical_or(out, logical_and(equal(a, b), logical_not(isnan(a))))
    if equal_nan:
      out = logical_or(out, logical_and(isnan(a), isnan(b)))
  return out


def array_equal(a1, a2, equal_nan=False):
  a1, a2 = asarray(a1, api="array_equal"), asarray(a2, api="array_equal")
  if a1.shape != a2.shape:
    return asarray(False, api="array_equal")
  return all(equal(a1, a2))


# ---- shapes ----

def reshape(a, shape=None, order="C", *, newshape=None, copy=None, out_sharding=None):
  if shape is None:
    shape = newshape
  if order not in ("C", None):
    raise PartixError(f"[reshape] order={order!r} is not supported (only 'C')")
  a = asarray(a, api="reshape")
  if isinstance(shape, (int, np.integer)):
    shape = (shape,)
  if not isinstance(shape, (tuple, list, np.ndarray)) or not builtins.all(
      isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in shape):
    raise PartixError(f"[reshape] shape {shape!r} is not a sequence of ints")
  shape = [int(d) for d in shape]
  for d in shape:  # the core takes int64 sizes; it checks them and infers the one -1
    if not -(1 << 63) <= d < 1 << 63:
      raise PartixError(f"[reshape] dimension {d} of shape {tuple(shape)} is not a size (0 to "
                        "2**63 - 1, or one -1)")
  if out_sharding is None:
    return _w(_core.reshape(a._a, shape))
  return _with_out_sharding("reshape", [a], out_sharding, lambda: _w(_core.reshape(a._a, shape)))


def ravel(a, order="C"):
  if order not in ("C", None):
    raise PartixError(f"[ravel] order={order!r} is not supported (only 'C')")
  return reshape(a, (-1,))


def transpose(a, axes=None):
  a = asarray(a, api="transpose")
  if axes is not None and not isinstance(axes, (tuple, list)):
    raise PartixError(f"[transpose] axes {axes!r} is not a sequence of ints")
  perm = list(range(a.ndim))[::-1] if axes is None else [_norm_axis(x, a.ndim, "transpose")
                                                          for x in axes]
  if sorted(perm) != list(range(a.ndim)):
    raise PartixError(f"[transpose] axes {axes} are not a permutation of {a.ndim} axes")
  return _w(_core.transpose(a._a, perm))


def permute_dims(a, axes):
  return transpose(a, axes)


def matrix_transpose(x):
  x = asarray(x, api="matrix_transpose")
  return swapaxes(x, -1, -2)


def swapaxes(a, axis1, axis2):
  a = asarray(a, api="swapaxes")
  p = list(range(a.ndim))
  i, j = _norm_axis(axis1, a.ndim, "swapaxes"), _norm_axis(axis2, a.ndim, "swapaxes")
  p[i], p[j] = p[j], p[i]
  return transpose(a, p)


def moveaxis(a, source, destination):
  a = asarray(a, api="moveaxis")
  src = _norm_axes(source, a.ndim, "moveaxis")
  dst = _norm_axes(destination, a.ndim, "moveaxis")
  if len(src) != len(dst):
    raise PartixError("[moveaxis] source and destination need the same number of axes")
  order = [n for n in range(a.ndim) if n not in src]
  for d, s in sorted(zip(dst, src)):
    order.insert(d, s)
  return transpose(a, order)


def expand_dims(a, axis):
  a = asarray(a, api="expand_dims")
  axes = axis if isinstance(axis, (tuple, list)) else (axis,)
  out_nd = a.ndim + len(axes)
  axes = sorted(_norm_axis(x, out_nd, "expand_dims") for x in axes)
  shape = list(a.shape)
  for x in axes:
    shape.insert(x, 1)
  return reshape(a, shape)


def squeeze(a, axis=None):
  a = asarray(a, api="squeeze")
  if axis is None:
    axes = [i for i, d in enumerate(a.shape) if d == 1]
  else:
    axes = _norm_axes(axis, a.ndim, "squeeze")
    for x in axes:
      if a.shape[x] != 1:
        raise PartixError(f"[squeeze] axis {x} has size {a.shape[x]}, not 1")
  return reshape(a, [d for i, d in enumerate(a.shape) if i not in axes])


def broadcast_to(array, shape):
  a = asarray(array, api="broadcast_to")
  shape = _shape(shape, "broadcast_to")
  if list(a.shape) == shape:
    return a
  return _w(_core.broadcast_to(a._a, shape))


def broadcast_shapes(*shapes):
  return tuple(np.broadcast_shapes(*shapes))


def broadcast_arrays(*args):
  arrs = [asarray(a, api="broadcast_arrays") for a in args]
  shape = broadcast_shapes(*[a.shape for a in arrs])
  return [broadcast_to(a, shape) for a in arrs]


def atleast_1d(*arys):
  out = [reshape(asarray(a, api="atleast_1d"), (1,)) if asarray(a, api="atleast_1d").ndim == 0 else asarray(a, api="atleast_1d") for a in arys]
  return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
  out = []
  for a in arys:
    a = asarray(a, api="atleast_2d")
    out.append(reshape(a, (1,) * (2 - a.ndim) + a.shape) if a.ndim < 2 else a)
  return out[0] if len(out) == 1 else out


def _cat_args(arrays, api):
  if isinstance(arrays, Array) or not isinstance(arrays, (list, tuple)) or not arrays:
    raise PartixError(f"[{api}] needs a non-empty sequence of arrays")
  arrs = [asarray(a, api=api) for a in arrays]
  dt = arrs[0]._a.dtype
  for a in arrs[1:]:
    dt = _core.promote_types(dt, a._a.dtype)
  return [a._a if a._a.dtype == dt else _core.astype(a._a, dt) for a in arrs]


def concatenate(arrays, axis=0, dtype=None):
  cs = _cat_args(arrays, "concatenate")
  if axis is None:
    cs = [_core.flatten(c) for c in cs]
    axis = 0
  out = _w(_core.concatenate(cs, _norm_axis(axis, len(cs[0].shape), "concatenate")))
  return out if dtype is None else astype(out, dtype)


concat = concatenate


def stack(arrays, axis=0, dtype=None):
  cs = _cat_args(arrays, "stack")
  out = _w(_core.stack(cs, _norm_axis(axis, len(cs[0].shape) + 1, "stack")))
  return out if dtype is None else astype(out, dtype)


def _seq(tup, api):
  if isinstance(tup, Array) or not isinstance(tup, (list, tuple)) or not tup:
    raise PartixError(f"[{api}] needs a non-empty sequence of arrays, got {type(tup).__name__}")
  return tup


def hstack(tup):
  arrs = [atleast_1d(asarray(a, api="hstack")) for a in _seq(tup, "hstack")]
  return concatenate(arrs, axis=0 if arrs[0].ndim == 1 else 1)


def vstack(tup):
  return concatenate([atleast_2d(asarray(a, api="vstack")) for a in _seq(tup, "vstack")], axis=0)


def split(ary, indices_or_sections, axis=0):
  a = asarray(ary, api="split")
  ax = _norm_axis(axis, a.ndim, "split")
  n = a.shape[ax]
  if isinstance(indices_or_sections, (int, np.integer)):
    k = int(indices_or_sections)
    if k <= 0 or n % k:
      raise PartixError(f"[split] {n} elements of axis {ax} do not split into {k} equal sections")
    return [_w(c) for c in _core.split(a._a, k, ax)]
  bounds = [0] + [int(i) for i in indices_or_sections] + [n]
  return [slice_in_dim(a, builtins.min(b0, n), builtins.min(builtins.max(b1, b0), n), axis=ax)
          for b0, b1 in zip(bounds[:-1], bounds[1:])]


def array_split(ary, indices_or_sections, axis=0):
  a = asarray(ary, api="array_split")
  ax = _norm_axis(axis, a.ndim, "array_split")
  if isinstance(indices_or_sections, (int, np.integer)):
    n, k = a.shape[ax], int(indices_or_sections)
    sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    idx = list(np.cumsum(sizes)[:-1])
    return split(a, idx, ax)
  return split(a, indices_or_sections, ax)


def slice_in_dim(a, start, stop, stride=1, axis=0):
  a = asarray(a, api="slice_in_dim")
  ax = _norm_axis(axis, a.ndim, "slice_in_dim")
  lo = [0] * a.ndim
  hi = list(a.shape)
  st = [1] * a.ndim
  lo[ax], hi[ax], st[ax] = start, stop, stride
  return _w(_core.slice(a._a, lo, hi, st))


def pad(array, pad_width, mode="constant", constant_values=0):
  a = asarray(array, api="pad")
  if mode not in ("constant", "wrap", "edge", "reflect", "symmetric"):
    raise PartixError(f"[pad] mode {mode!r} is not supported ('constant', 'wrap', 'edge', "
                      "'reflect', 'symmetric')")
  try:
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2)) if a.ndim else \
        np.zeros((0, 2), np.int64)
  except (OverflowError, TypeError, ValueError) as e:
    raise PartixError(f"[pad] pad_width {pad_width!r} is not ints of int64 broadcasting to "
                      f"({a.ndim}, 2): {e}") from None
  if mode != "constant":
    # Each axis gathers its own elements: numpy's padding of the indices 0..n-1 in that mode
    # says which element every output position holds.
    for ax in range(a.ndim):
      before, after = int(pw[ax, 0]), int(pw[ax, 1])
      if before or after:
        if a.shape[ax] == 0:
          raise PartixError(f"[pad] mode {mode!r} cannot pad axis {ax} of size 0")
        idx = np.pad(np.arange(a.shape[ax], dtype=np.int32), (before, after), mode=mode)
        a = take(a, asarray(idx), axis=ax)
    return a
  if isinstance(constant_values, Array) and constant_values._a.is_tracer():
    # A traced fill value: pad with zeros, then fill where the padding mask says.
    cv = asarray(constant_values, api="pad")
    if cv.ndim:
      raise PartixError(f"[pad] a traced constant_values must be a scalar, got {cv._aval_str()}")
    lo, hi = [int(x) for x in pw[:, 0]], [int(x) for x in pw[:, 1]]
    inside = _w(_core.pad(ones(a.shape, bool)._a, lo, hi, 0.0))
    return where(inside, _w(_core.pad(a._a, lo, hi, 0.0)), astype(cv, a.dtype))
  try:  # numpy's: a scalar, a (before, after) pair, or one pair per axis
    cv = np.broadcast_to(np.asarray(constant_values, dtype=np.float64), (a.ndim, 2)) if a.ndim \
        else np.zeros((0, 2))
  except (TypeError, ValueError) as e:
    raise PartixError(f"[pad] constant_values {constant_values!r} does not broadcast to "
                      f"({a.ndim}, 2): {e}") from None
  if a.ndim == 0 or (cv == cv.flat[0]).all():
    value = float(cv.flat[0]) if a.ndim else float(np.asarray(constant_values))
    return _w(_core.pad(a._a, [int(x) for x in pw[:, 0]], [int(x) for x in pw[:, 1]], value))
  # Axis by axis, each side with its own value, as numpy (a later axis' padding covers the
  # corners of an earlier one's).
  out = a._a
  for ax in range(a.ndim):
    for side in (0, 1):
      width = int(pw[ax, side])
      if width:
        lo, hi = [0] * a.ndim, [0] * a.ndim
        (lo if side == 0 else hi)[ax] = width
        out = _core.pad(out, lo, hi, float(cv[ax, side]))
  return _w(out)


def roll(a, shift, axis=None):
  a = asarray(a, api="roll")
  if axis is None:
    return reshape(roll(ravel(a), shift, 0), a.shape)
  if isinstance(axis, (tuple, list)):
    shifts = shift if isinstance(shift, (tuple, list)) else [shift] * len(axis)
    for s, ax in zip(shifts, axis):
      a = roll(a, s, ax)
    return a
  if not isinstance(shift, (int, np.integer)):
    raise PartixError(f"[roll] shift {shift!r} is not an int")
  ax = _norm_axis(axis, a.ndim, "roll")
  # Rolling is periodic in the axis' length (any Python int shift is taken modulo it).
  return _w(_core.roll(a._a, int(shift) % builtins.max(a.shape[ax] if a.ndim else 1, 1), ax))


def flip(m, axis=None):
  m = asarray(m, api="flip")
  return _w(_core.flip(m._a, _norm_axes(axis, m.ndim, "flip")))


def fliplr(m):
  return flip(m, 1)


def flipud(m):
  return flip(m, 0)


def repeat(a, repeats, axis=None, *, total_repeat_length=None):
  a = asarray(a, api="repeat")
  if axis is None:
    a, axis = ravel(a), 0
  ax = _norm_axis(axis, a.ndim, "repeat")
  if total_repeat_length is not None and not isinstance(repeats, (int, np.integer)):
    return _repeat_to_length(a, repeats, ax, int(total_repeat_length))
  if not isinstance(repeats, (int, np.integer)):
    reps = np.asarray(repeats)
    if reps.dtype.kind not in "iu" or reps.ndim > 1 or (reps < 0).any() or reps.size not in (
        1, a.shape[ax]):
      raise PartixError(f"[repeat] repeats must be non-negative ints, one or one per element of "
                        f"axis {ax} (size {a.shape[ax]}), got {repeats!r}")
    # The output length depends on the counts, so they are static host data (as in JAX).
    idx = np.repeat(np.arange(a.shape[ax]), reps)
    return take(a, asarray(idx.astype(np.int32)), axis=ax)
  r = int(repeats)
  if r < 0:
    raise PartixError(f"[repeat] repeats must be non-negative, got {r}")
  x = expand_dims(a, ax + 1)
  shape = list(x.shape)
  shape[ax + 1] = r
  x = broadcast_to(x, shape)
  out_shape = list(a.shape)
  out_shape[ax] *= r
  return reshape(x, out_shape)


def _repeat_to_length(a, repeats, ax, total):
  """repeat with per-element counts that may be traced: output position j takes the element
  whose running count first passes j; past the counts' sum the last element repeats, and counts
  beyond `total` are cut (JAX's total_repeat_length)."""
  n = a.shape[ax]
  if total < 0:
    raise PartixError(f"[repeat] total_repeat_length must be non-negative, got {total}")
  reps = asarray(repeats, api="repeat")
  if reps.ndim > 1 or reps.size not in (1, n) or not dtypes.is_int(reps.dtype):
    raise PartixError(f"[repeat] repeats must be ints, one or one per element of axis {ax} "
                      f"(size {n}), got {reps._aval_str()}")
  ends = cumsum(broadcast_to(reshape(reps, (-1,)), (n,)))
  pos = _w(_core.iota([total, 1], 0, ends._a.dtype))
  idx = sum(astype(less_equal(expand_dims(ends, 0), pos), np.int32), axis=1)
  return take(a, minimum(idx, n - 1), axis=ax)


def tile(A, reps):
  a = asarray(A, api="tile")
  reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
  nd = builtins.max(a.ndim, len(reps))
  a = reshape(a, (1,) * (nd - a.ndim) + a.shape)
  reps = (1,) * (nd - len(reps)) + reps
  for ax, r in enumerate(reps):
    if not isinstance(r, (int, np.integer)) or isinstance(r, bool):
      raise PartixError(f"[tile] reps {reps} must be ints")
    if r != 1:  # r copies of the axis one after another: a new axis of r, merged into it
      shape = list(a.shape)
      b = broadcast_to(expand_dims(a, ax), shape[:ax] + [int(r)] + shape[ax:])
      a = reshape(b, shape[:ax] + [int(r) * shape[ax]] + shape[ax + 1:])
  return a


# ---- reductions ----

_SUM_UPCAST = {"bool": "i32", "i8": "i32", "i16": "i32", "u8": "u32", "u16": "u32"}


def _reduce(name, f, int_to_float=False):
  def op(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    if out is not None:
      raise PartixError(f"[{name}] out= is not supported (arrays are immutable)")
    x = asarray(a, api=name)
    if where is not None:
      return _reduce_where(name, op, x, axis, dtype, keepdims, initial, where)
    axes = _norm_axes(axis, x.ndim, name)
    if name in ("max", "min") and initial is None:
      _check_nonempty(name, x, axes)
    c = x._a
    if dtype is not None:
      c = _core.astype(c, dtypes.to_core(dtype, name))
    elif int_to_float and c.dtype in dtypes.INT_OR_BOOL_CORE:
      c = _core.astype(c, "f32")
    elif name == "sum" and c.dtype in _SUM_UPCAST:
      # As JAX: sums of bools and narrow integers are taken in the default integer of their
      # signedness (int32, uint32).
      c = _core.astype(c, _SUM_UPCAST[c.dtype])
    if name in ("sum", "mean") and c.dtype in ("f16", "bf16"):
      # As JAX: 16-bit sums are taken in float32 (a float16 running sum overflows past 65504
      # and, adding ones, stops growing at 2048), the result cast back.
      r = _w(_core.astype(f(_core.astype(c, "f32"), axes, bool(keepdims)), c.dtype))
    else:
      r = _reduce_core(name, f, c, axes, keepdims)
    if initial is not None:
      r = {"sum": add, "max": maximum, "min": minimum}[name](r, initial)
    return r
  op.__name__ = name
  return op


def _reduce_where(name, op, x, axis, dtype, keepdims, initial, taken):
  """A reduction over the elements where `where` (broadcast to x) holds: the others take the
  reduction's identity (max and min need initial=, as in numpy and JAX); mean divides by how
  many are taken."""
  mask = broadcast_to(asarray(taken, api=name), x.shape)
  if mask._a.dtype != "bool":
    mask = not_equal(mask, 0)
  if name in ("max", "min") and initial is None:
    raise PartixError(f"[{name}] where= needs initial= (the value of a reduction over no "
                      "element)")
  if name == "mean":
    total = sum(where(mask, x, zeros_like(x)), axis=axis, dtype=dtype, keepdims=keepdims)
    count = sum(astype(mask, np.float32), axis=axis, keepdims=keepdims)
    out = total / count
    return out if dtypes.is_float(out.dtype) and dtype is None else out.astype(
        dtype or np.float32)
  fill = {"sum": 0, "max": initial, "min": initial}[name]
  return op(where(mask, x, full_like(x, fill)), axis=axis, dtype=dtype, keepdims=keepdims,
            initial=initial)


def _check_nonempty(name, x, axes):
  """max and min have no identity: numpy and JAX refuse to reduce an empty axis."""
  if builtins.any(x.shape[i] == 0 for i in axes):
    raise PartixError(f"[{name}] zero-size array to reduction operation {name} which has no "
                      f"identity: shape {x.shape} reduced over axes {tuple(axes)}" +
                      ("; pass initial=" if name in ("max", "min") else ""))


def _reduce_core(name, f, c, axes, keepdims):
  """The C++ reduction f of core array c over axes; an empty max / min gives the identity
  (-inf / +inf, the integer type's minimum / maximum, False / True), as lax.reduce_max does."""
  if name in ("max", "min") and builtins.any(c.shape[i] == 0 for i in axes):
    shape = [1 if i in axes else d for i, d in enumerate(c.shape) if keepdims or i not in axes]
    if c.dtype == "bool":
      return _w(_core.full(shape, float(name == "min"), "bool", None))
    if c.dtype in ("f16", "bf16", "f32", "f64"):
      return _w(_core.full(shape, np.inf if name == "min" else -np.inf, c.dtype, None))
    # The type's minimum is a double (-2**31, -2**63, 0); its maximum is -(minimum + 1), or
    # for an unsigned type the minimum minus one (which wraps to all ones).
    lo = _w(_core.full(shape, float(dtypes.iinfo(dtypes.from_core(c.dtype)).min), c.dtype, None))
    if name == "max":
      return lo
    return lo - 1 if c.dtype.startswith("u") else negative(lo + 1)
  if name in ("max", "min") and c.dtype == "bool":  # any / all, and bool stays bool (JAX)
    return _w(_core.astype(f(_core.astype(c, "i32"), axes, bool(keepdims)), "bool"))
  return _w(f(c, axes, bool(keepdims)))


sum = _reduce("sum", _core.sum)
mean = _reduce("mean", _core.mean, int_to_float=True)
max = _reduce("max", _core.max)
min = _reduce("min", _core.min)
amax, amin = max, min


def prod(a, axis=None, dtype=None, keepdims=False):
  a = asarray(a, dtype, "prod")
  if a._a.dtype in _SUM_UPCAST:  # as sum: in int32 / uint32
    a = _w(_core.astype(a._a, _SUM_UPCAST[a._a.dtype]))
  if a._a.dtype in ("f16", "bf16"):  # multiplied in float32 and cast back, as JAX
    return astype(_prod(astype(a, np.float32), axis, keepdims), a.dtype)
  return _prod(a, axis, keepdims)


def _whole_along(a, axes):
  """a with the axes it reduces gathered whole where they are split over Explicit mesh axes
  (the pairwise products slice them; explicit sharding refuses slicing a split dimension).
  The result loses those axes' splits as a reduction's result does."""
  t = _core.type_of(a._a)
  if t.sharding is None:
    return a
  s = NamedSharding._wrap(t.sharding)
  mesh = s.mesh
  explicit = {n for n, k in zip(mesh.axis_names, mesh.axis_types) if k is AxisType.Explicit}
  spec = list(s.spec) + [None] * (a.ndim - len(s.spec))
  split = [ax for ax in axes if spec[ax] is not None and builtins.any(
      n in explicit for n in ((spec[ax],) if isinstance(spec[ax], str) else spec[ax]))]
  if not split:
    return a
  for ax in split:
    spec[ax] = None
  return _w(_core.reshard(a._a, NamedSharding(mesh, PartitionSpec(*spec))._s))


def _prod(a, axis, keepdims):
  axes = _norm_axes(axis, a.ndim, "prod")
  if a._a.dtype == "bool":
    a = astype(a, np.int32)
  out = _whole_along(a, axes)
  for ax in sorted(axes, reverse=True):
    # Pairwise halving: log2(n) multiplies (an odd element is carried over).
    while out.shape[ax] > 1:
      n = out.shape[ax]
      h = n // 2
      prod_ = slice_in_dim(out, 0, h, axis=ax) * slice_in_dim(out, h, 2 * h, axis=ax)
      out = prod_ if n % 2 == 0 else concatenate([prod_, slice_in_dim(out, 2 * h, n, axis=ax)],
                                                 axis=ax)
    if out.shape[ax] == 0:
      shape = list(out.shape)
      shape[ax] = 1
      out = ones(shape, out.dtype)
    if not keepdims:
      out = squeeze(out, ax)
  return out


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, correction=None):
  x = asarray(a, dtype, "var")
  if x._a.dtype in dtypes.INT_OR_BOOL_CORE:
    x = astype(x, np.float32)
  ddof = correction if correction is not None else ddof
  axes = _norm_axes(axis, x.ndim, "var")
  out_dt = x._a.dtype
  if out_dt in ("f16", "bf16"):  # computed in float32 and cast back, as JAX
    x = astype(x, np.float32)
  v = _w(_core.var(x._a, axes, bool(keepdims)))
  if ddof:
    n = math.prod(x.shape[i] for i in axes)
    v = v * (n / builtins.max(n - ddof, 0)) if n - ddof > 0 else v * np.inf
  return v if v._a.dtype == out_dt else _w(_core.astype(v._a, out_dt))


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, correction=None):
  return sqrt(var(a, axis, dtype, out, ddof, keepdims, correction=correction))


def average(a, axis=None, weights=None):
  if weights is None:
    return mean(a, axis)
  a, w = asarray(a, api="average"), asarray(weights, api="average")
  if w.shape != a.shape:
    if axis is None or isinstance(axis, (tuple, list)) or w.ndim != 1:
      raise PartixError(f"[average] weights of shape {w.shape} need axis= (an int) for an "
                        f"array of shape {a.shape}")
    ax = _norm_axis(axis, a.ndim, "average")
    if w.shape[0] != a.shape[ax]:
      raise PartixError(f"[average] {w.shape[0]} weights for axis {ax} of size {a.shape[ax]}")
    w = reshape(w, [a.shape[ax] if i == ax else 1 for i in range(a.ndim)])
    return sum(a * w, axis) / sum(w)
  return sum(a * w, axis) / sum(w, axis)


def _truth(a, api):
  a = asarray(a, api=api)
  # x != 0 first: a float 0.5 or nan is true, though it truncates to 0 as an int.
  return astype(a if a._a.dtype == "bool" else not_equal(a, 0), np.int32)


def any(a, axis=None, keepdims=False, *, where=None):
  # initial: an empty any is False (so are the elements where= leaves out).
  return not_equal(max(_truth(a, "any"), axis=axis, keepdims=keepdims, initial=0,
                       where=where), 0)


def all(a, axis=None, keepdims=False, *, where=None):
  # initial: an empty all is True (so are the elements where= leaves out).
  return not_equal(min(_truth(a, "all"), axis=axis, keepdims=keepdims, initial=1,
                       where=where), 0)


def count_nonzero(a, axis=None, keepdims=False):
  return sum(astype(not_equal(a, 0), np.int32), axis=axis, keepdims=keepdims)


def _arg_reduce(name, op, a, axis, keepdims):
  a = asarray(a, api=name)
  n = a.size if axis is None else a.shape[_norm_axis(axis, a.ndim, name)] if a.ndim else a.size
  if n == 0:
    raise PartixError(f"[{name}] attempt to get {name} of an empty sequence: shape {a.shape}, "
                      f"axis {axis}")
  if axis is None:  # over the flattened array
    r = _w(op(ravel(a)._a, 0, False))
    return reshape(r, (1,) * a.ndim) if keepdims else r
  return _w(op(a._a, _norm_axis(axis, a.ndim, name), bool(keepdims)))


def argmax(a, axis=None, keepdims=False):
  return _arg_reduce("argmax", _core.argmax, a, axis, keepdims)


def argmin(a, axis=None, keepdims=False):
  return _arg_reduce("argmin", _core.argmin, a, axis, keepdims)


def cumsum(a, axis=None, dtype=None):
  a = asarray(a, dtype, "cumsum")
  if axis is None:
    a, axis = ravel(a), 0
  if a._a.dtype == "bool":  # as JAX: narrow integers keep their type (and wrap) in cumsum
    a = astype(a, np.int32)
  return _w(_core.cumsum(a._a, _norm_axis(axis, a.ndim, "cumsum"), False))


def sort(a, axis=-1, *, descending=False, stable=True):
  a = asarray(a, api="sort")
  if axis is None:
    a, axis = ravel(a), -1
  ax = _norm_axis(axis, a.ndim, "sort")
  if ax != a.ndim - 1:
    return moveaxis(sort(moveaxis(a, ax, -1), descending=descending), -1, ax)
  if a._a.dtype == "bool":
    return astype(sort(astype(a, np.int32), ax, descending=descending), bool)
  return _w(_core.sort(a._a, bool(descending))[0])


def argsort(a, axis=-1, *, descending=False, stable=True):
  a = asarray(a, api="argsort")
  if axis is None:
    a, axis = ravel(a), -1
  if a._a.dtype == "bool":
    a = astype(a, np.int32)
  ax = _norm_axis(axis, a.ndim, "argsort")
  if ax != a.ndim - 1:
    return moveaxis(argsort(moveaxis(a, ax, -1), descending=descending), -1, ax)
  return _w(_core.sort(a._a, bool(descending))[1])


# ---- contractions ----

def matmul(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
  # The C++ matmul promotes itself: it decodes quantized weights and widens bf16/f16 weights
  # inside the product instead of copying them.
  x, y = _contraction_pair(a, b, "matmul")

  def make():
    out = _w(_core.matmul(x, y))
    return out if preferred_element_type is None else astype(out, preferred_element_type)
  if out_sharding is None:
    return make()
  return _with_out_sharding("matmul", [_w(x), _w(y)], out_sharding, make)


def _contraction_pair(a, b, api):
  if is_weak_scalar(a) or is_weak_scalar(b):
    raise PartixError(f"[{api}] operands must be arrays of rank >= 1, got a Python scalar")
  return core(a, api=api), core(b, api=api)


def dot(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
  a, b = asarray(a, api="dot"), asarray(b, api="dot")
  if a.ndim == 0 or b.ndim == 0:
    return multiply(a, b)
  if b.ndim == 1 or a.ndim <= 2 and b.ndim <= 2:
    return matmul(a, b, preferred_element_type=preferred_element_type, out_sharding=out_sharding)
  return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 2]))


def vdot(a, b):
  return sum(ravel(a) * ravel(b))


def inner(a, b):
  a, b = asarray(a, api="inner"), asarray(b, api="inner")
  return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 1]))


def outer(a, b):
  return multiply(reshape(ravel(a), (-1, 1)), reshape(ravel(b), (1, -1)))


def tensordot(a, b, axes=2):
  a, b = asarray(a, api="tensordot"), asarray(b, api="tensordot")
  if isinstance(axes, (int, np.integer)):
    ac = list(range(a.ndim - axes, a.ndim))
    bc = list(range(axes))
  else:
    ac, bc = axes
    ac = [ac] if isinstance(ac, int) else list(ac)
    bc = [bc] if isinstance(bc, int) else list(bc)
  ac = [_norm_axis(i, a.ndim, "tensordot") for i in ac]
  bc = [_norm_axis(i, b.ndim, "tensordot") for i in bc]
  if len(ac) != len(bc) or [a.shape[i] for i in ac] != [b.shape[i] for i in bc]:
    raise PartixError(f"[tensordot] contracting axes {ac} of {a.shape} and {bc} of {b.shape} "
                      "do not match")
  x, y = _contraction_pair(a, b, "tensordot")
  return _w(_core.dot_general(x, y, ac, bc, [], [], None))


def einsum(subscripts, *operands, out=None, optimize=None, precision=None,
           preferred_element_type=None, out_sharding=None):
  if not isinstance(subscripts, str):
    raise PartixError("[einsum] the first argument must be the subscripts string")
  if not operands:
    raise PartixError(f"[einsum] {subscripts!r} has no operands")
  ops = [asarray(o, api="einsum") for o in operands]
  cs = _cat_args(ops, "einsum") if len(ops) > 1 else [ops[0]._a]

  def make():
    r = _w(_core.einsum(subscripts, cs))
    return r if preferred_element_type is None else astype(r, preferred_element_type)
  if out_sharding is None:
    return make()
  return _with_out_sharding("einsum", ops, out_sharding, make)


# ---- indexing ----

def take(a, indices, axis=None, mode=None, unique_indices=False, indices_are_sorted=False,
         fill_value=None, *, out_sharding=None):
  if out_sharding is not None:
    a, indices = asarray(a, api="take"), asarray(indices, api="take")
    return _with_out_sharding("take", [a, indices], out_sharding, lambda: take(
        a, indices, axis, mode, unique_indices, indices_are_sorted, fill_value))
  a = asarray(a, api="take")
  if axis is None:
    a, axis = ravel(a), 0
  idx = asarray(indices, api="take")
  if idx._a.dtype not in dtypes.INT_CORE:
    raise PartixError(f"[take] indices must be integers, got {idx.dtype}")
  ax = _norm_axis(axis, a.ndim, "take")
  n = a.shape[ax]
  if mode == "clip":
    return _w(_core.take(a._a, idx._a, ax))
  if mode == "wrap":
    return _w(_core.take(a._a, remainder(idx, builtins.max(n, 1))._a, ax))
  if mode not in (None, "fill"):
    raise PartixError(f"[take] mode {mode!r} is not supported ('fill', 'clip', 'wrap')")
  # JAX's default: negative indices count from the end; others out of range give fill_value
  # (nan for floats, the minimum for ints, True for bools).
  idx = where(less(idx, 0), idx + n, idx)
  out = _w(_core.take(a._a, idx._a, ax))
  if fill_value is None:
    fill_value = np.nan if dtypes.is_float(a.dtype) else True if a._a.dtype == "bool" else \
        int(dtypes.iinfo(a.dtype).min)
  ok = logical_and(greater_equal(idx, 0), less(idx, n))
  ok = reshape(ok, (1,) * ax + idx.shape + (1,) * (a.ndim - ax - 1))
  return where(ok, out, asarray(fill_value, a.dtype, "take"))


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
  a = asarray(arr, api="take_along_axis")
  idx = asarray(indices, api="take_along_axis")
  if axis is None:
    return take_along_axis(ravel(a), ravel(idx), 0)
  return _w(_core.take_along_axis(a._a, idx._a, _norm_axis(axis, a.ndim, "take_along_axis")))


def diag(v, k=0):
  """numpy.diag: a 1-D v as the k-th diagonal of a square matrix; a 2-D v's k-th diagonal."""
  v = asarray(v, api="diag")
  if v.ndim == 2:
    return diagonal(v, offset=k)
  if v.ndim != 1:
    raise PartixError(f"[diag] takes a 1-D or 2-D array, got shape {tuple(v.shape)}")
  k = int(k)
  n = v.shape[0] + builtins.abs(k)
  rows = reshape(arange(n, dtype=np.int32), (n, 1))
  cols = reshape(arange(n, dtype=np.int32), (1, n))
  on = equal(cols - rows, k)
  if v.shape[0] == 0:
    return zeros((n, n), v.dtype)
  src = clip(rows if k >= 0 else cols, 0, v.shape[0] - 1)
  return where(on, take(v, src), zeros((), v.dtype))


def diagflat(v, k=0):
  """numpy.diagflat: v flattened, as the k-th diagonal of a square matrix."""
  return diag(ravel(asarray(v, api="diagflat")), k)


def diagonal(a, offset=0, axis1=0, axis2=1):
  a = asarray(a, api="diagonal")
  if a.ndim < 2:
    raise PartixError(f"[diagonal] needs an array of at least 2 dimensions, got {a.shape}")
  ax1, ax2 = _norm_axis(axis1, a.ndim, "diagonal"), _norm_axis(axis2, a.ndim, "diagonal")
  if ax1 == ax2:
    raise PartixError(f"[diagonal] axis1 and axis2 are the same axis ({ax1})")
  x = moveaxis(a, (ax1, ax2), (-2, -1))
  n, m = x.shape[-2], x.shape[-1]
  r0, c0 = builtins.max(-offset, 0), builtins.max(offset, 0)
  k = builtins.max(0, builtins.min(n - r0, m - c0))
  flat = reshape(x, x.shape[:-2] + (n * m,))
  # Element (r0 + i, c0 + i) of each matrix is at r0 * m + c0 + i * (m + 1) of its rows.
  idx = _w(_core.iota([k], 0, "i32")) * (m + 1) + (r0 * m + c0)
  return take(flat, idx, axis=-1)


def trace(a, offset=0, axis1=0, axis2=1):
  return sum(diagonal(a, offset, axis1, axis2), axis=-1)


def meshgrid(*xi, indexing="xy"):
  arrs = [ravel(asarray(x, api="meshgrid")) for x in xi]
  n = len(arrs)
  shape = [a.shape[0] for a in arrs]
  if indexing == "xy" and n >= 2:
    shape[0], shape[1] = shape[1], shape[0]
  out = []
  for i, a in enumerate(arrs):
    pos = i
    if indexing == "xy" and n >= 2 and i < 2:
      pos = 1 - i
    s = [1] * n
    s[pos] = a.shape[0]
    out.append(broadcast_to(reshape(a, s), shape))
  return out


def shape(a):
  return tuple(np.shape(a)) if not isinstance(a, Array) else a.shape


def ndim(a):
  return len(shape(a))


def size(a, axis=None):
  s = shape(a)
  return math.prod(s) if axis is None else s[axis]


def iscomplexobj(x):
  return False


def isscalar(x):
  return isinstance(x, (numbers.Number, np.generic)) or isinstance(x, Array) and x.ndim == 0


def nonzero(a, *, size=None, fill_value=None):
  raise PartixError("[nonzero] has a data-dependent shape; use where(cond, x, y)")


def unique(*a, **k):
  raise PartixError("[unique] has a data-dependent shape and is not supported")


def cumprod(a, axis=None, dtype=None):
  raise PartixError("[cumprod] is not supported yet: use exp(cumsum(log(x)))")


def einsum_path(*a, **k):
  raise PartixError("[einsum_path] is not supported")


def linalg_norm(x, ord=None, axis=None, keepdims=False):
  """numpy.linalg.norm: vector norms over one axis (ord None/2, 1, inf, -inf, 0, any p) and
  matrix norms over two ('fro', 1, -1, inf, -inf); jnp.linalg.norm adds the spectral and
  nuclear norms (2, -2, 'nuc' over two axes) from singular values (_src/linalg.py)."""
  api = "linalg.norm"
  x = asarray(x, api=api)
  if not dtypes.is_float(x.dtype):
    x = astype(x, np.float32)
  if axis is None:
    if ord is None:  # every element, as one vector
      r = sqrt(sum(x * x))
      return reshape(r, (1,) * x.ndim) if keepdims else r
    if x.ndim not in (1, 2):
      raise PartixError(f"[{api}] ord={ord!r} without axis needs a 1-D or 2-D array, got "
                        f"shape {tuple(x.shape)}")
    axis = tuple(range(x.ndim))
  axes = (axis,) if isinstance(axis, int) else tuple(axis)
  axes = tuple(a % x.ndim for a in axes)
  a = abs(x)
  if len(axes) == 1:
    if ord in (None, 2):
      return sqrt(sum(x * x, axis=axes, keepdims=keepdims))
    if isinstance(ord, str):
      raise PartixError(f"[{api}] ord={ord!r} is a matrix norm; a vector norm takes a number")
    if ord == np.inf:
      return max(a, axis=axes, keepdims=keepdims)
    if ord == -np.inf:
      return min(a, axis=axes, keepdims=keepdims)
    if ord == 0:
      return sum(astype(a != 0, x.dtype), axis=axes, keepdims=keepdims)
    if ord == 1:
      return sum(a, axis=axes, keepdims=keepdims)
    return sum(a ** ord, axis=axes, keepdims=keepdims) ** (1.0 / ord)
  if len(axes) != 2 or axes[0] == axes[1]:
    raise PartixError(f"[{api}] axis={axis!r} must name one axis or two different ones")
  rows, cols = axes
  if ord in (None, "fro"):
    return sqrt(sum(x * x, axis=axes, keepdims=keepdims))
  if ord in (1, -1, np.inf, -np.inf):
    inner, outer = (rows, cols) if ord in (1, -1) else (cols, rows)
    r = sum(a, axis=inner, keepdims=True)
    r = (max if ord in (1, np.inf) else min)(r, axis=outer, keepdims=True)
    return r if keepdims else squeeze(r, axis=axes)
  raise PartixError(f"[{api}] ord={ord!r} over two axes needs singular values, which partix "
                    "does not compute (supported: 'fro', 1, -1, inf, -inf)")


# ---- more of numpy's names, composed from the ops above ----

def trunc(x):
  """numpy.trunc: toward zero; integers and bools unchanged, as JAX's."""
  x = asarray(x, api="trunc")
  if not dtypes.is_float(x.dtype):
    return x
  return where(less(x, 0), ceil(x), floor(x))


fix = trunc


def fmod(x1, x2, /):
  """The C remainder: the sign of the dividend (numpy.fmod)."""
  a, b = promote_pair(x1, x2, "fmod")
  return _c_fmod(_w(a), _w(b))


def hypot(x1, x2, /):
  a, b = promote_pair(x1, x2, "hypot")
  a, b = _w(a), _w(b)
  if not dtypes.is_float(a.dtype):
    a, b = astype(a, np.float32), astype(b, np.float32)
  return sqrt(a * a + b * b)


def logaddexp(x1, x2, /):
  a, b = promote_pair(x1, x2, "logaddexp")
  a, b = _w(a), _w(b)
  if not dtypes.is_float(a.dtype):
    a, b = astype(a, np.float32), astype(b, np.float32)
  m = maximum(a, b)
  return m + log1p(exp(-abs(a - b)))


def signbit(x):
  x = asarray(x, api="signbit")
  if not dtypes.is_float(x.dtype):
    return less(x, 0)
  # -0.0 has its sign bit set: 1 / -0.0 is -inf.
  return logical_or(less(x, 0), logical_and(equal(x, 0), less(1.0 / x, 0)))


def copysign(x1, x2, /):
  a, b = promote_pair(x1, x2, "copysign")
  a, b = _w(a), _w(b)
  return where(signbit(b), -abs(a), abs(a))


def heaviside(x1, x2, /):
  a, b = promote_pair(x1, x2, "heaviside")
  a, b = _w(a), _w(b)
  return where(less(a, 0), zeros_like(a), where(greater(a, 0), ones_like(a), b))


def float_power(x1, x2, /):
  a, b = promote_pair(x1, x2, "float_power")
  return power(astype(_w(a), np.float32), astype(_w(b), np.float32))


def cbrt(x):
  x = asarray(x, api="cbrt")
  return sign(x) * power(abs(x), 1.0 / 3.0)


def deg2rad(x):
  return asarray(x, api="deg2rad") * (np.pi / 180.0)


def rad2deg(x):
  return asarray(x, api="rad2deg") * (180.0 / np.pi)


radians, degrees = deg2rad, rad2deg


def isposinf(x):
  x = asarray(x, api="isposinf")
  return equal(x, np.inf) if dtypes.is_float(x.dtype) else zeros(x.shape, bool)


def isneginf(x):
  x = asarray(x, api="isneginf")
  return equal(x, -np.inf) if dtypes.is_float(x.dtype) else zeros(x.shape, bool)


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
  return astype(power(base, linspace(start, stop, num, endpoint, axis=axis)),
                dtype or np.float32)


def diff(a, n=1, axis=-1, prepend=None, append=None):
  a = asarray(a, api="diff")
  ax = _norm_axis(axis, a.ndim, "diff")
  if not isinstance(n, (int, np.integer)) or n < 0:
    raise PartixError(f"[diff] n must be a non-negative int, got {n!r}")
  parts = []
  for extra in (prepend, a, append):
    if extra is None:
      continue
    e = asarray(extra, api="diff")
    if e.ndim == 0:
      shape = list(a.shape)
      shape[ax] = 1
      e = broadcast_to(e, shape)
    parts.append(e)
  if len(parts) > 1:
    a = concatenate(parts, axis=ax)
  for _ in range(n):
    m = a.shape[ax]
    a = subtract(slice_in_dim(a, 1, m, axis=ax), slice_in_dim(a, 0, builtins.max(m - 1, 0),
                                                               axis=ax))
  return a


def ediff1d(ary, to_end=None, to_begin=None):
  d = diff(ravel(ary))
  parts = [ravel(asarray(v, api="ediff1d")) for v in (to_begin,) if v is not None] + [d] + [
      ravel(asarray(v, api="ediff1d")) for v in (to_end,) if v is not None]
  return concatenate(parts) if len(parts) > 1 else d


def ptp(a, axis=None, keepdims=False):
  return max(a, axis=axis, keepdims=keepdims) - min(a, axis=axis, keepdims=keepdims)


def _nan_fill(a, fill, api):
  a = asarray(a, api=api)
  return where(isnan(a), fill, a) if dtypes.is_float(a.dtype) else a


def nansum(a, axis=None, dtype=None, keepdims=False):
  return sum(_nan_fill(a, 0, "nansum"), axis=axis, dtype=dtype, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, keepdims=False):
  a = asarray(a, api="nanmean")
  n = sum(logical_not(isnan(a)), axis=axis, keepdims=keepdims)
  return nansum(a, axis=axis, dtype=dtype, keepdims=keepdims) / n


def _nan_extreme(name, f, fill, a, axis, keepdims):
  """nanmax / nanmin: f ignoring NaNs; NaN where a slice is all NaN (as numpy and JAX)."""
  a = asarray(a, api=name)
  _check_nonempty(name, a, _norm_axes(axis, a.ndim, name))
  out = f(_nan_fill(a, fill, name), axis=axis, keepdims=keepdims)
  if not dtypes.is_float(a.dtype):
    return out
  return where(all(isnan(a), axis=axis, keepdims=keepdims), np.nan, out)


def nanmax(a, axis=None, keepdims=False):
  return _nan_extreme("nanmax", max, -np.inf, a, axis, keepdims)


def nanmin(a, axis=None, keepdims=False):
  return _nan_extreme("nanmin", min, np.inf, a, axis, keepdims)


def median(a, axis=None, keepdims=False):
  a = asarray(a, api="median")
  if not dtypes.is_float(a.dtype):
    a = astype(a, np.float32)
  if axis is None:
    out = median(ravel(a), 0)
    return reshape(out, (1,) * a.ndim) if keepdims else out
  ax = _norm_axis(axis, a.ndim, "median")
  n = a.shape[ax]
  if n == 0:
    raise PartixError(f"[median] axis {ax} has no elements")
  s = sort(a, axis=ax)
  lo = slice_in_dim(s, (n - 1) // 2, (n - 1) // 2 + 1, axis=ax)
  hi = slice_in_dim(s, n // 2, n // 2 + 1, axis=ax)
  m = (lo + hi) / 2.0
  return m if keepdims else squeeze(m, ax)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
  x = asarray(x, api="cumulative_sum")
  if axis is None:
    if x.ndim != 1:
      raise PartixError("[cumulative_sum] axis is required for arrays of more than 1 dimension")
    axis = 0
  out = cumsum(x, axis, dtype)
  if include_initial:
    ax = _norm_axis(axis, x.ndim, "cumulative_sum")
    shape = list(out.shape)
    shape[ax] = 1
    out = concatenate([zeros(shape, out.dtype), out], axis=ax)
  return out


def vecdot(x1, x2, /, *, axis=-1):
  a, b = broadcast_arrays(x1, x2)
  return sum(a * b, axis=axis)


def column_stack(tup):
  arrs = [asarray(a, api="column_stack") for a in _seq(tup, "column_stack")]
  return concatenate([reshape(a, (-1, 1)) if a.ndim < 2 else a for a in arrs], axis=1)


def dstack(tup):
  out = []
  for a in _seq(tup, "dstack"):
    a = asarray(a, api="dstack")
    out.append(reshape(a, (1,) * (a.ndim == 0) + (1,) * (a.ndim < 2) + a.shape + (1,))
               if a.ndim < 3 else a)
  return concatenate(out, axis=2)


def unstack(x, /, *, axis=0):
  x = asarray(x, api="unstack")
  ax = _norm_axis(axis, x.ndim, "unstack")
  return tuple(squeeze(slice_in_dim(x, i, i + 1, axis=ax), ax) for i in range(x.shape[ax]))


def atleast_3d(*arys):
  out = []
  for a in arys:
    a = asarray(a, api="atleast_3d")
    if a.ndim == 0:
      a = reshape(a, (1, 1, 1))
    elif a.ndim == 1:
      a = reshape(a, (1,) + a.shape + (1,))
    elif a.ndim == 2:
      a = reshape(a, a.shape + (1,))
    out.append(a)
  return out[0] if len(out) == 1 else out
