"""lax's special functions, generic reductions and small names (mulhi, platform_dependent,
custom_root, ...), written over partix's existing ops."""
import functools
import itertools
import types

import numpy as np

from partix import _core
from partix._src import bitwise as _bitwise
from partix._src import dtypes
from partix._src import lax_ops
from partix._src import linalg as _linalg
from partix._src import numpy_ops as jnp
from partix._src import special_fns as _sf
from partix._src import tree_util as tu
from partix._src.core import Array, PartixError, asarray
from partix._src.api import device_put, reshard, typeof
from partix._src.batching import vmap
from partix._src.forward import jvp
from partix._src.lax_conv import _padtype_to_pads
from partix._src.lax_more import _vma_of
from partix._src.sharding import Device, NamedSharding, PartitionSpec

__all__ = ["lgamma", "digamma", "polygamma", "zeta", "igamma", "igammac", "igamma_grad_a",
           "random_gamma_grad", "betainc", "bessel_i0e", "bessel_i1e", "reduce", "reduce_xor",
           "reduce_window", "reduce_window_shape_tuple", "mulhi", "empty", "dtype", "composite",
           "dce_sink", "platform_dependent", "pbroadcast", "pswapaxes", "ragged_dot",
           "broadcast_like", "linalg", "custom_linear_solve", "custom_root"]


# ---- special functions (lax takes floating operands only) ----

def _float_only(name, fn, doc=None):
  def op(*args):
    _sf.check_float(name, *args)
    return fn(*args)
  op.__name__ = name
  op.__doc__ = doc or fn.__doc__
  return op


lgamma = _float_only("lgamma", _sf.lgamma)
digamma = _float_only("digamma", _sf.digamma)
polygamma = _float_only("polygamma", _sf.polygamma)
zeta = _float_only("zeta", _sf.zeta)
igamma = _float_only("igamma", _sf.igamma)
igammac = _float_only("igammac", _sf.igammac)
igamma_grad_a = _float_only("igamma_grad_a", _sf.igamma_grad_a)
betainc = _float_only("betainc", _sf.betainc)
bessel_i0e = _float_only("bessel_i0e", _sf.bessel_i0e)
bessel_i1e = _float_only("bessel_i1e", _sf.bessel_i1e)


def random_gamma_grad(a, x):
  """The derivative in a of a Gamma(a) sample x (jax.random.gamma's reparameterization)."""
  _sf.check_float("random_gamma_grad", a, x)
  return _sf.random_gamma_grad(a, x)


# ---- generic reductions ----

def _fail(api, msg):
  return PartixError(f"[{api}] {msg}")


def _concrete_scalar(v):
  """v's value when it is a concrete scalar (a Python or numpy number, an untraced Array),
  else None."""
  if isinstance(v, Array):
    if v._a.is_tracer() or v.ndim:
      return None
    return np.asarray(v).item()
  if isinstance(v, (bool, int, float, np.number, np.bool_)):
    return np.asarray(v).item()
  return None


def _identity(kind, dt):
  if kind in ("add", "or", "xor"):
    return 0
  if kind == "mul":
    return 1
  if kind == "and":
    return True if dt == np.bool_ else -1
  if dtypes.is_float(dt):
    return -np.inf if kind == "max" else np.inf
  info = np.iinfo(dt) if dt != np.bool_ else None
  if info is None:
    return kind == "min"
  return info.min if kind == "max" else info.max


def _fast_reduce(kind, x, axes):
  if kind == "add":
    return jnp.astype(jnp.sum(x, axis=axes), x.dtype)
  if kind == "mul":
    return jnp.astype(jnp.prod(x, axis=axes), x.dtype)
  if kind == "max":
    return lax_ops.reduce_max(x, axes)
  if kind == "min":
    return lax_ops.reduce_min(x, axes)
  return jnp.all(x, axis=axes) if kind == "and" else jnp.any(x, axis=axes)


def _monoid(computation, x):
  """The fast reduction computation names for x's dtype ('add', 'max', ...), or None."""
  table = [("add", (jnp.add,)), ("mul", (jnp.multiply,)), ("max", (jnp.maximum,)),
           ("min", (jnp.minimum,)), ("and", (_bitwise.bitwise_and, jnp.logical_and)),
           ("or", (_bitwise.bitwise_or, jnp.logical_or))]
  for kind, fns in table:
    if any(computation is f for f in fns):
      if kind in ("and", "or") and x.dtype != np.bool_:
        return None  # integer bitwise folds go the generic way
      if kind in ("add", "mul") and x.dtype == np.bool_:
        return None
      return kind
  return None


def _take(xs, axis, start, stop):
  return [jnp.slice_in_dim(x, start, stop, axis=axis) for x in xs]


def _combine(api, computation, tree, xs, ys):
  out = computation(tu.tree_unflatten(tree, xs), tu.tree_unflatten(tree, ys))
  leaves, out_tree = tu.tree_flatten(out)
  if out_tree != tree:
    raise _fail(api, f"the computation must return the operands' structure {tree}, got "
                f"{out_tree}")
  return [jnp.astype(asarray(o), x.dtype) if asarray(o).dtype != x.dtype else asarray(o)
          for o, x in zip(leaves, xs)]


def _fold_axis(api, computation, tree, xs, axis):
  """xs reduced along axis (kept, size 1) by halving: computation(first half, second half);
  an odd element left over is folded into the first position."""
  n = xs[0].shape[axis]
  while n > 1:
    half = n // 2
    folded = _combine(api, computation, tree, _take(xs, axis, 0, half),
                      _take(xs, axis, half, 2 * half))
    if n % 2:
      first = _combine(api, computation, tree, _take(folded, axis, 0, 1),
                       _take(xs, axis, n - 1, n))
      folded = [jnp.concatenate([f, g], axis) for f, g in
                zip(first, _take(folded, axis, 1, half))]
    xs, n = folded, half
  return xs


def _flat_operands(api, operands, init_values):
  xs, tree = tu.tree_flatten(operands)
  inits, itree = tu.tree_flatten(init_values)
  if tree != itree:
    raise _fail(api, f"operands and init_values must have the same structure, got {tree} and "
                f"{itree}")
  if not xs:
    raise _fail(api, "needs at least one operand")
  xs = [asarray(x) for x in xs]
  shapes = {tuple(x.shape) for x in xs}
  if len(shapes) > 1:
    raise _fail(api, f"operands must have one shape, got {sorted(shapes)}")
  inits = [jnp.astype(asarray(i), x.dtype) for i, x in zip(inits, xs)]
  for i in inits:
    if i.ndim:
      raise _fail(api, f"init values must be scalars, got shape {tuple(i.shape)}")
  return xs, inits, tree


def _axes(api, dimensions, ndim):
  dims = [int(d) for d in dimensions]
  for d in dims:
    if not 0 <= d < ndim:
      raise _fail(api, f"dimensions {tuple(dims)} are out of range for rank {ndim}")
  if len(set(dims)) != len(dims):
    raise _fail(api, f"dimensions {tuple(dims)} repeat a dimension")
  return tuple(sorted(dims))


def _whole_along(xs, axes):
  """xs gathered whole along those of axes that Explicit mesh axes split (the halving fold
  slices there); the other dimensions keep their sharding."""
  sharding = typeof(xs[0]).sharding
  spec = tuple(sharding.spec) if sharding is not None else ()
  if not any(a < len(spec) and spec[a] is not None for a in axes):
    return xs
  whole = PartitionSpec(*[None if i in axes else p for i, p in enumerate(spec)])
  return [reshard(x, NamedSharding(sharding.mesh, whole)) for x in xs]


def reduce(operands, init_values, computation, dimensions, out_sharding=None):  # noqa: A001
  """lax.reduce: operands (an array or a pytree of arrays of one shape) reduced over
  dimensions by computation (a binary function, associative and commutative as XLA assumes),
  each init value taking part once. lax.add/mul/max/min (and the logical and/or of bools)
  with their identity as init use partix's fast reductions; any other computation is applied
  elementwise to halves of the operands, log2(n) times per dimension."""
  if out_sharding is not None:
    raise _fail("reduce", "out_sharding is not supported")
  xs, inits, tree = _flat_operands("reduce", operands, init_values)
  axes = _axes("reduce", dimensions, xs[0].ndim)
  kind = _monoid(computation, xs[0]) if len(xs) == 1 else None
  if kind is not None:
    out = _fast_reduce(kind, xs[0], axes)
    if _concrete_scalar(inits[0]) == _identity(kind, np.dtype(xs[0].dtype)):
      return tu.tree_unflatten(tree, [out])
    return tu.tree_unflatten(tree, _combine("reduce", computation, tree, [jnp.broadcast_to(
        inits[0], out.shape)], [out]))
  if any(xs[0].shape[a] == 0 for a in axes):
    shape = tuple(n for i, n in enumerate(xs[0].shape) if i not in axes)
    return tu.tree_unflatten(tree, [jnp.broadcast_to(i, shape) for i in inits])
  xs = _whole_along(xs, axes)
  for a in axes:
    xs = _fold_axis("reduce", computation, tree, xs, a)
  xs = [jnp.squeeze(x, axes) for x in xs]
  xs = _combine("reduce", computation, tree, [jnp.broadcast_to(i, xs[0].shape) for i in inits],
                xs)
  return tu.tree_unflatten(tree, xs)


def reduce_xor(operand, axes):
  """lax.reduce_xor: bitwise xor over axes (integers and bools)."""
  x = asarray(operand)
  if dtypes.is_float(x.dtype):
    raise _fail("reduce_xor", f"needs an integer or bool operand, got {x._aval_str()}")
  return reduce(x, np.zeros((), x.dtype).item(), _bitwise.bitwise_xor, axes)


def _dilate_fill(x, init, axis, factor):
  """x with factor - 1 copies of init between neighbours along axis."""
  if factor == 1 or x.shape[axis] == 0:
    return x
  n = x.shape[axis]
  fill = jnp.broadcast_to(init, x.shape)
  parts = jnp.stack([x] + [fill] * (factor - 1), axis=axis + 1)
  shape = list(x.shape)
  shape[axis] = n * factor
  return jnp.slice_in_dim(jnp.reshape(parts, tuple(shape)), 0, (n - 1) * factor + 1, axis=axis)


def _pad_fill(x, init, axis, lo, hi):
  if lo < 0:
    x = jnp.slice_in_dim(x, -lo, x.shape[axis], axis=axis)
  if hi < 0:
    x = jnp.slice_in_dim(x, 0, x.shape[axis] + hi, axis=axis)
  parts = []
  for k in (max(lo, 0), max(hi, 0)):
    shape = list(x.shape)
    shape[axis] = k
    parts.append(jnp.broadcast_to(init, tuple(shape)))
  return jnp.concatenate([parts[0], x, parts[1]], axis) if lo > 0 or hi > 0 else x


def _window_args(api, shape, window_dimensions, window_strides, padding, base_dilation,
                 window_dilation):
  nd = len(shape)

  def ints(name, v, default):
    v = (default,) * nd if v is None else tuple(v)
    if len(v) != nd or any(not isinstance(k, (int, np.integer)) or k < 1 for k in v):
      raise _fail(api, f"{name} {v} must be {nd} positive integers")
    return tuple(int(k) for k in v)
  window = ints("window_dimensions", window_dimensions, 1)
  strides = ints("window_strides", window_strides, 1)
  base = ints("base_dilation", base_dilation, 1)
  wdil = ints("window_dilation", window_dilation, 1)
  if isinstance(padding, str):
    eff = tuple((w - 1) * d + 1 for w, d in zip(window, wdil))
    pads = tuple(tuple(p) for p in _padtype_to_pads(api, shape, eff, strides, padding))
  else:
    pads = tuple((int(lo), int(hi)) for lo, hi in padding)
    if len(pads) != nd:
      raise _fail(api, f"padding {pads} must give (low, high) for each of {nd} dimensions")
  return window, strides, pads, base, wdil


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None):
  """The shape reduce_window gives for these window parameters (padding as (low, high) pairs)."""
  window, strides, pads, base, wdil = _window_args(
      "reduce_window_shape_tuple", tuple(operand_shape), window_dimensions, window_strides,
      padding, base_dilation, window_dilation)
  out = []
  for n, w, s, (lo, hi), b, d in zip(operand_shape, window, strides, pads, base, wdil):
    size = (0 if n == 0 else (n - 1) * b + 1) + lo + hi
    eff = (w - 1) * d + 1
    out.append(max(0, (size - eff) // s + 1) if size >= eff else 0)
  return tuple(out)


def reduce_window(operand, init_value, computation, window_dimensions, window_strides=None,
                  padding="VALID", base_dilation=None, window_dilation=None):
  """lax.reduce_window: computation folded over each (strided, dilated) window of the operand
  padded with the init value, which also takes part once per window. The windows are the
  operand's strided slices at each offset inside the window."""
  xs, inits, tree = _flat_operands("reduce_window", operand, init_value)
  shape = tuple(xs[0].shape)
  window, strides, pads, base, wdil = _window_args(
      "reduce_window", shape, window_dimensions, window_strides, padding, base_dilation,
      window_dilation)
  out_shape = reduce_window_shape_tuple(shape, window, strides, pads, base, wdil)
  touched = [w > 1 or s > 1 or p != (0, 0) or b > 1
             for w, s, p, b in zip(window, strides, pads, base)]
  xs, restore = _unsplit_windowed(xs, out_shape, touched)
  for axis in range(len(shape)):
    xs = [_dilate_fill(x, i, axis, base[axis]) for x, i in zip(xs, inits)]
    xs = [_pad_fill(x, i, axis, *pads[axis]) for x, i in zip(xs, inits)]
  acc = [jnp.broadcast_to(i, out_shape) for i in inits]
  if 0 in out_shape:
    return tu.tree_unflatten(tree, acc)
  for offset in itertools.product(*[range(w) for w in window]):
    start = [k * d for k, d in zip(offset, wdil)]
    limit = [s0 + (n - 1) * s + 1 for s0, n, s in zip(start, out_shape, strides)]
    acc = _combine("reduce_window", computation, tree, acc,
                   [lax_ops.slice(x, start, limit, strides) for x in xs])
  return tu.tree_unflatten(tree, [restore(a) for a in acc])


def _unsplit_windowed(xs, out_shape, touched):
  """Operands split over Explicit mesh axes along dimensions the windows change, gathered
  whole there (windows cross the pieces), and the function that splits the result again as
  the operand was (JAX's rule: the output keeps the operand's sharding, which needs the
  changed dimensions to divide by their mesh axes)."""
  sharding = typeof(xs[0]).sharding
  spec = tuple(sharding.spec) if sharding is not None else ()
  spec = spec + (None,) * (len(out_shape) - len(spec))
  changed = [i for i, t in enumerate(touched) if t and spec[i] is not None]
  if not changed:
    return xs, lambda a: a
  sizes = sharding.mesh.shape
  for i in changed:
    names = spec[i] if isinstance(spec[i], tuple) else (spec[i],)
    parts = int(np.prod([sizes[n] for n in names]))
    if out_shape[i] != xs[0].shape[i] and out_shape[i] % parts:
      raise _fail("reduce_window", f"on a dimension split over mesh axes {spec[i]!r}: the "
                  f"output's size {out_shape[i]} (of {tuple(out_shape)}) does not divide by "
                  f"{parts}; reshard the operand first")
  whole = PartitionSpec(*[None if i in changed else p for i, p in enumerate(spec)])
  xs = [reshard(x, NamedSharding(sharding.mesh, whole)) for x in xs]
  return xs, lambda a: reshard(a, NamedSharding(sharding.mesh, PartitionSpec(*spec)))


# ---- small names ----

def _mulhi32(x, y, signed):
  """The high 32 bits of the 64-bit product, from 16-bit halves in uint32 arithmetic."""
  u32 = np.uint32
  a, b = jnp.astype(x, u32), jnp.astype(y, u32)
  lo_mask, sh = u32(0xFFFF), u32(16)
  a0, a1 = _bitwise.bitwise_and(a, lo_mask), _bitwise.shift_right_logical(a, sh)
  b0, b1 = _bitwise.bitwise_and(b, lo_mask), _bitwise.shift_right_logical(b, sh)
  lo_lo, hi_lo, lo_hi, hi_hi = a0 * b0, a1 * b0, a0 * b1, a1 * b1
  cross = (_bitwise.shift_right_logical(lo_lo, sh) + _bitwise.bitwise_and(hi_lo, lo_mask)
           + lo_hi)  # at most 2^32 - 1
  hi = (hi_hi + _bitwise.shift_right_logical(hi_lo, sh)
        + _bitwise.shift_right_logical(cross, sh))
  if signed:
    # The signed product's high word: subtract y where x < 0 and x where y < 0 (mod 2^32).
    hi = hi - jnp.where(x < 0, b, u32(0)) - jnp.where(y < 0, a, u32(0))
  return jnp.astype(hi, x.dtype)


def mulhi(x, y, /):
  """lax.mulhi: the high half of the double-width integer product, elementwise (exact, for
  8-, 16- and 32-bit integers)."""
  if isinstance(y, (int, np.integer)) and not isinstance(y, bool) and isinstance(x, Array):
    y = jnp.astype(asarray(y), x.dtype)
  if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and isinstance(y, Array):
    x = jnp.astype(asarray(x), y.dtype)
  x, y = asarray(x), asarray(y)
  if x.dtype != y.dtype:
    raise _fail("mulhi", f"operands must have one dtype, got {x._aval_str()} and "
                f"{y._aval_str()}")
  dt = np.dtype(x.dtype)
  if dt.kind not in "iu" or dt.itemsize > 4:
    raise _fail("mulhi", f"needs 8-, 16- or 32-bit integer operands, got {x._aval_str()}")
  x, y = jnp.broadcast_arrays(x, y)
  if dt.itemsize == 4:
    return _mulhi32(x, y, dt.kind == "i")
  wide = np.int32 if dt.kind == "i" else np.uint32
  prod = jnp.astype(x, wide) * jnp.astype(y, wide)
  shift = wide(8 * dt.itemsize)
  hi = (_bitwise.shift_right_arithmetic(prod, shift) if dt.kind == "i"
        else _bitwise.shift_right_logical(prod, shift))
  return jnp.astype(hi, dt)


def empty(shape, dtype, *, out_sharding=None):
  """lax.empty: an array of the shape and dtype whose values are unspecified (partix fills
  zeros)."""
  return jnp.zeros(shape, dtype, out_sharding=out_sharding)


def dtype(x):
  """lax.dtype: the canonical dtype of an array, scalar, dtype or type name (Python ints
  int32, floats float32; 64-bit types 32-bit without x64)."""
  return dtypes.canonicalize(x, "dtype")


def composite(decomposition, name, version=0):
  """lax.composite: fn wrapped as a named composite; partix runs the decomposition."""
  if not isinstance(name, str) or not name:
    raise _fail("composite", f"name must be a non-empty str, got {name!r}")

  @functools.wraps(decomposition)
  def call(*args, **kwargs):
    return decomposition(*args, **kwargs)
  return call


def dce_sink(val, *, prevent_mlir_dce=False):
  """lax.dce_sink: marks val as used (keeps its computation alive); returns None, as JAX's."""
  tu.tree_leaves(val)


def platform_dependent(*args, default=None, **per_platform):
  """lax.platform_dependent: the branch for the platform partix runs on (per_platform[name],
  else default) applied to args."""
  platform = _core_platform()
  fn = per_platform.get(platform, default)
  if fn is None:
    raise _fail("platform_dependent", f"no branch for platform {platform!r} and no default "
                f"(branches: {sorted(per_platform)})")
  return fn(*args)


def _core_platform():
  devs = _core.devices()
  return Device(devs[0]).platform if devs else "cpu"


def pbroadcast(x, axis_name, source):
  """lax.pbroadcast: every device of axis_name takes the value that device `source` holds
  (inside shard_map; the result varies as x does)."""
  size = lax_ops.axis_size(axis_name)
  if not isinstance(source, (int, np.integer)) or isinstance(source, bool) or not (
      0 <= source < size):
    raise _fail("pbroadcast", f"source {source!r} must be an int in [0, {size}) (the size of "
                f"axis {axis_name!r})")
  here = lax_ops.axis_index(axis_name) == int(source)

  def leaf(a):
    a = asarray(a)
    vma = sorted(_vma_of(a))
    out = lax_ops.psum(jnp.where(here, a, jnp.zeros_like(a)), axis_name)
    return lax_ops.pvary(out, tuple(vma)) if vma else out
  return tu.tree_map(leaf, x)


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
  """lax.pswapaxes: swaps the mapped axis axis_name with x's axis `axis` (whose size must be
  the axis size): all_to_all(x, axis_name, axis, axis)."""
  size = lax_ops.axis_size(axis_name) if axis_index_groups is None else len(axis_index_groups[0])

  def leaf(a):
    a = asarray(a)
    ax = jnp._norm_axis(axis, a.ndim, "pswapaxes")
    if a.shape[ax] != size:
      raise _fail("pswapaxes", f"axis {axis} of x has size {a.shape[ax]}, but the swapped "
                  f"axis {axis_name!r} has {size} devices; they must be equal")
    return lax_ops.all_to_all(a, axis_name, ax, ax, axis_index_groups=axis_index_groups,
                              tiled=True)
  return tu.tree_map(leaf, x)


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
  """lax.ragged_dot: lhs [m, k] split into consecutive row groups of group_sizes [g]; group i
  is multiplied by rhs[i] ([g, k, n]). Rows past sum(group_sizes) give zeros."""
  lhs, rhs, sizes = asarray(lhs), asarray(rhs), asarray(group_sizes)
  if group_offset is not None or out_sharding is not None:
    raise _fail("ragged_dot", "group_offset and out_sharding are not supported")
  if lhs.ndim != 2 or rhs.ndim != 3 or sizes.ndim != 1:
    raise _fail("ragged_dot", f"needs lhs [m, k], rhs [g, k, n] and group_sizes [g], got "
                f"{lhs._aval_str()}, {rhs._aval_str()} and {sizes._aval_str()}")
  m, k = lhs.shape
  g, k2, n = rhs.shape
  if k2 != k or sizes.shape[0] != g or not dtypes.is_int(sizes.dtype):
    raise _fail("ragged_dot", f"shapes do not fit: lhs {lhs._aval_str()}, rhs "
                f"{rhs._aval_str()}, group_sizes {sizes._aval_str()} (integers, one per group)")
  ends = jnp.cumsum(jnp.astype(sizes, np.int32))
  rows = jnp.arange(m, dtype=np.int32)
  group = jnp.sum(jnp.astype(rows[:, None] >= ends[None, :], np.int32), axis=1)
  onehot = jnp.astype(group[:, None] == jnp.arange(g, dtype=np.int32)[None, :], lhs.dtype)
  spread = jnp.reshape(onehot[:, :, None] * lhs[:, None, :], (m, g * k))
  out_dt = preferred_element_type
  return lax_ops.dot_general(spread, jnp.reshape(rhs, (g * k, n)), (((1,), (0,)), ((), ())),
                             precision=precision, preferred_element_type=out_dt)


def broadcast_like(arr, like_arr):
  """lax.broadcast_like: arr broadcast to like_arr's shape (and placed as like_arr is, for a
  concrete like_arr)."""
  like = asarray(like_arr)
  out = jnp.broadcast_to(arr, tuple(like.shape))
  if not like._a.is_tracer() and not out._a.is_tracer():
    out = device_put(out, like.sharding)
  return out


# ---- lax.linalg ----

def _lower_solve(t, b, unit_diagonal):
  """x with t x = b for lower triangular t [..., m, m] and b [..., m, n], row by row."""
  m = t.shape[-1]

  def body(i, x):
    row = lax_ops.dynamic_index_in_dim(t, i, axis=t.ndim - 2, keepdims=False)
    rhs = lax_ops.dynamic_index_in_dim(b, i, axis=b.ndim - 2, keepdims=False)
    done = jnp.sum(row[..., :, None] * x, axis=-2)  # x is still 0 from row i on
    xi = rhs - done
    if not unit_diagonal:
      xi = xi / lax_ops.dynamic_index_in_dim(row, i, axis=row.ndim - 1)
    return lax_ops.dynamic_update_index_in_dim(x, xi, i, x.ndim - 2)
  return lax_ops.lib_fori_loop(0, m, body, jnp.zeros_like(b))


def triangular_solve(a, b, *, left_side=False, lower=False, transpose_a=False,
                     conjugate_a=False, unit_diagonal=False):
  """lax.linalg.triangular_solve: x with op(a) x = b (left_side) or x op(a) = b, op(a) being
  a or its transpose; only a's lower (lower=True) or upper triangle is read."""
  a, b = asarray(a), asarray(b)
  api = "triangular_solve"
  if a.ndim < 2 or a.shape[-1] != a.shape[-2] or b.ndim != a.ndim:
    raise _fail(api, f"needs square matrices a [..., m, m] and b of a's rank, got "
                f"{a._aval_str()} and {b._aval_str()}")
  m = a.shape[-1]
  if (b.shape[-2] if left_side else b.shape[-1]) != m or b.shape[:-2] != a.shape[:-2]:
    raise _fail(api, f"b {b._aval_str()} does not fit a {a._aval_str()} "
                f"(left_side={left_side})")
  t = jnp.tril(a) if lower else jnp.triu(a)
  low = bool(lower)
  if transpose_a:
    t, low = jnp.swapaxes(t, -1, -2), not low
  if not left_side:  # x op(a) = b  <=>  op(a)^T x^T = b^T
    t, low, b = jnp.swapaxes(t, -1, -2), not low, jnp.swapaxes(b, -1, -2)
  if not low:  # reverse rows and columns: an upper system becomes a lower one
    t, b = jnp.flip(t, (-1, -2)), jnp.flip(b, -2)
  x = _lower_solve(t, b, unit_diagonal)
  if not low:
    x = jnp.flip(x, -2)
  return x if left_side else jnp.swapaxes(x, -1, -2)


def _linalg_cholesky(x, *, symmetrize_input=True):
  """lax.linalg.cholesky: the lower Cholesky factor (NaN where x is not positive definite)."""
  return _linalg.cholesky(x, symmetrize_input=symmetrize_input)


def _linalg_eigh(x, *, lower=True, symmetrize_input=True, sort_eigenvalues=True,
                 subset_by_index=None, implementation=None):
  """lax.linalg.eigh: (eigenvectors as columns, eigenvalues ascending)."""
  if subset_by_index is not None or not sort_eigenvalues:
    raise _fail("eigh", "subset_by_index and sort_eigenvalues=False are not supported")
  w, v = (_linalg.eigh(x, symmetrize_input=True) if symmetrize_input
          else _linalg.eigh(x, UPLO="L" if lower else "U", symmetrize_input=False))
  return v, w


def _linalg_qr(x, *, pivoting=False, full_matrices=True, use_magma=None):
  """lax.linalg.qr: (q, r); full_matrices=True (the default) gives q [m, m], r [m, n]."""
  x = asarray(x)
  if pivoting:
    raise _fail("qr", "pivoting=True is not supported")
  m, n = x.shape[-2], x.shape[-1]
  if full_matrices and m > n:
    raise _fail("qr", f"full_matrices=True for a tall matrix {x._aval_str()} is not supported "
                "(partix computes the reduced factors); pass full_matrices=False")
  return _linalg.qr(x, mode="reduced")


def _linalg_svd(x, *, full_matrices=True, compute_uv=True, subset_by_index=None,
                algorithm=None):
  """lax.linalg.svd: (u, s, vt), or s alone with compute_uv=False."""
  x = asarray(x)
  if subset_by_index is not None:
    raise _fail("svd", "subset_by_index is not supported")
  if not compute_uv:
    return _linalg.svdvals(x)
  if full_matrices and x.shape[-1] != x.shape[-2]:
    raise _fail("svd", f"full_matrices=True for a non-square {x._aval_str()} is not supported "
                "(partix computes the reduced factors); pass full_matrices=False")
  return _linalg.svd(x, full_matrices=False)


linalg = types.SimpleNamespace(cholesky=_linalg_cholesky, eigh=_linalg_eigh, qr=_linalg_qr,
                               svd=_linalg_svd, triangular_solve=triangular_solve)
linalg.__doc__ = "jax.lax.linalg's names that partix computes (over partix.numpy.linalg)."


# ---- implicitly differentiated solves ----

def _ravel(api, tree):
  """tree's leaves as one flat vector, and the function putting such a vector back."""
  leaves, td = tu.tree_flatten(tree)
  if not leaves:
    raise _fail(api, "needs at least one array")
  arrs = [asarray(leaf) for leaf in leaves]
  shapes = [tuple(a.shape) for a in arrs]
  sizes = [int(np.prod(s)) for s in shapes]
  vec = jnp.concatenate([jnp.ravel(a) for a in arrs]) if len(arrs) > 1 else jnp.ravel(arrs[0])
  bounds = np.cumsum([0] + sizes)

  def unravel(v):
    return tu.tree_unflatten(td, [jnp.astype(jnp.reshape(v[int(lo):int(hi)], s), a.dtype)
                                  for lo, hi, s, a in zip(bounds[:-1], bounds[1:], shapes, arrs)])
  return vec, unravel


def _split_aux(api, out, has_aux):
  if not has_aux:
    return out, None
  if not (isinstance(out, (tuple, list)) and len(out) == 2):
    raise _fail(api, f"with has_aux=True the solve must return (solution, aux), got "
                f"{type(out).__name__}")
  return out[0], out[1]


def _implicit(api, x, inverse_columns, residual):
  """x (its value) carrying the derivative -inverse @ d(residual): inverse, the linear
  operator's inverse as a matrix (one solve per column, not differentiated), times the
  residual at the stopped x, whose derivative reaches b and whatever the operator closes
  over. The value stays x exactly: the correction is c - stop_gradient(c)."""
  x_sg = lax_ops.stop_gradient(x)
  xvec, unravel = _ravel(api, x_sg)
  inv = lax_ops.stop_gradient(jnp.swapaxes(inverse_columns, 0, 1))
  c = jnp.matmul(inv, residual(x_sg))
  return unravel(xvec - (c - lax_ops.stop_gradient(c)))


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False, has_aux=False):
  """lax.custom_linear_solve: x = solve(matvec, b), differentiated implicitly: the derivative
  solves the same linear system (with respect to b and to what matvec closes over), never
  differentiating solve itself (which may hold while_loops). partix forms the inverse's
  matrix with one solve per element of b, so derivatives cost n solves; transpose_solve is
  not needed for that."""
  api = "custom_linear_solve"
  x, aux = _split_aux(api, solve(matvec, b), has_aux)
  bvec, unravel_b = _ravel(api, b)
  n = bvec.shape[0]

  def column(e):
    return _ravel(api, _split_aux(api, solve(matvec, unravel_b(e)), has_aux)[0])[0]
  cols = vmap(column)(jnp.eye(n, dtype=bvec.dtype))

  def residual(x_sg):
    return _ravel(api, matvec(x_sg))[0] - _ravel(api, b)[0]
  out = _implicit(api, x, cols, residual)
  return (out, aux) if has_aux else out


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
  """lax.custom_root: the root x = solve(f, initial_guess) of f, differentiated implicitly
  (dx = -J^-1 df, J = df/dx at the root, applied by tangent_solve(g, y), which solves the
  linear g(x) = y), with respect to what f closes over; solve is never differentiated. The
  inverse is formed with one tangent_solve per element of x."""
  api = "custom_root"
  x, aux = _split_aux(api, solve(f, initial_guess), has_aux)
  x_sg = lax_ops.stop_gradient(x)
  xvec, unravel = _ravel(api, x_sg)

  def lin(v):
    return jvp(f, (x_sg,), (v,))[1]

  def column(e):
    return _ravel(api, tangent_solve(lin, unravel(e)))[0]
  cols = vmap(column)(jnp.eye(xvec.shape[0], dtype=xvec.dtype))

  def residual(x_stop):
    return _ravel(api, f(x_stop))[0]
  out = _implicit(api, x, cols, residual)
  return (out, aux) if has_aux else out
