"""partix.lax: JAX's lax names over the C++ ops: dynamic slices, top_k, the collectives of
shard_map bodies, and control flow (scan, fori_loop, while_loop, cond, switch, map)."""
import builtins
import contextlib
import enum
import operator

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src import numpy_ops as jnp
from partix._src import tree_util as tu
from partix._src.api import _keep_tree, _out_leaves, _trees, with_sharding_constraint  # noqa
from partix._src.core import (Array, PartixError, PartixTypeError, asarray, core, promote_pair,
                              wrap)
from partix._src.sharding import get_abstract_mesh as _get_abstract_mesh
from partix._src.tracing import with_out_sharding as _with_out_sharding


def _idx(i, api):
  a = asarray(i)
  if not dtypes.is_int(a.dtype) or a.ndim != 0:
    raise PartixError(f"[{api}] start indices must be integer scalars, got {a._aval_str()}")
  return a._a if a._a.dtype == "i32" else _core.astype(a._a, "i32")


def dynamic_slice(operand, start_indices, slice_sizes):
  x = asarray(operand)
  if len(start_indices) != x.ndim or len(slice_sizes) != x.ndim:
    raise PartixError(f"[dynamic_slice] needs {x.ndim} start indices and slice sizes, got "
                      f"{len(start_indices)} and {len(slice_sizes)}")
  for s, n in zip(slice_sizes, x.shape):
    if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or not 0 <= s <= n:
      raise PartixError(f"[dynamic_slice] slice sizes {tuple(slice_sizes)} must be ints in "
                        f"[0, dimension] for an operand of shape {x.shape}")
  return Array(_core.dynamic_slice(x._a, [_idx(i, "dynamic_slice") for i in start_indices],
                                   [int(s) for s in slice_sizes]))


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0):
  x = asarray(operand)
  axis = jnp._norm_axis(axis, x.ndim, "dynamic_slice_in_dim")
  starts = [0] * x.ndim
  starts[axis] = start_index
  sizes = list(x.shape)
  sizes[axis] = slice_size
  return dynamic_slice(x, starts, sizes)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True):
  out = dynamic_slice_in_dim(operand, index, 1, axis)
  return out if keepdims else jnp.squeeze(out, axis)


def dynamic_update_slice(operand, update, start_indices):
  x, u = asarray(operand), asarray(update)
  if u.dtype != x.dtype:
    u = jnp.astype(u, x.dtype)
  if len(start_indices) != x.ndim:
    raise PartixError(f"[dynamic_update_slice] needs {x.ndim} start indices, got "
                      f"{len(start_indices)}")
  return Array(_core.dynamic_update_slice(
      x._a, u._a, [_idx(i, "dynamic_update_slice") for i in start_indices]))


def dynamic_update_slice_in_dim(operand, update, start_index, axis):
  x = asarray(operand)
  axis = jnp._norm_axis(axis, x.ndim, "dynamic_update_slice_in_dim")
  starts = [0] * x.ndim
  starts[axis] = start_index
  return dynamic_update_slice(x, update, starts)


def dynamic_update_index_in_dim(operand, update, index, axis):
  u = asarray(update)
  x = asarray(operand)
  if u.ndim == x.ndim - 1:
    u = jnp.expand_dims(u, axis)
  return dynamic_update_slice_in_dim(x, u, index, axis)


def slice(operand, start_indices, limit_indices, strides=None):
  x = asarray(operand)
  strides = [1] * x.ndim if strides is None else list(strides)
  return Array(_core.slice(x._a, list(start_indices), list(limit_indices), strides))


slice_in_dim = jnp.slice_in_dim


def index_in_dim(operand, index, axis=0, keepdims=True):
  out = jnp.slice_in_dim(operand, index, index + 1, axis=axis)
  return out if keepdims else jnp.squeeze(out, axis)


def top_k(operand, k):
  x = asarray(operand)
  if not isinstance(k, (int, np.integer)) or k < 0 or k > x.shape[-1]:
    raise PartixError(f"[top_k] k={k!r} must be an int in [0, {x.shape[-1]}]")
  v, i = _core.top_k(x._a, int(k))
  return Array(v), Array(i)


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
  return jnp.sort(operand, dimension)


def broadcast_shapes(*shapes):
  """lax.broadcast_shapes: the shape the given shapes broadcast to (numpy's rules)."""
  try:
    return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
  except ValueError:
    raise PartixError(f"[broadcast_shapes] Incompatible shapes for broadcasting: shapes="
                      f"{[tuple(s) for s in shapes]}") from None


class Precision(enum.Enum):
  """lax.Precision: accepted where JAX takes precision=; partix's CPU contractions of f32
  accumulate in f32 at full precision whatever is asked (HIGHEST's result)."""
  DEFAULT = 0
  HIGH = 1
  HIGHEST = 2

  def __str__(self):
    return self.name


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
  (lc, rc), (lb, rb) = dimension_numbers
  a, b = asarray(lhs), asarray(rhs)
  x, y = promote_pair(a, b, "dot_general")

  def make():
    return Array(_core.dot_general(x, y, list(lc), list(rc), list(lb), list(rb),
                                   dtypes.to_core(preferred_element_type)
                                   if preferred_element_type is not None else None))
  if out_sharding is None:
    return make()
  return _with_out_sharding("dot_general", [Array(x), Array(y)], out_sharding, make)


def dot(lhs, rhs, precision=None, preferred_element_type=None):
  return jnp.dot(lhs, rhs, preferred_element_type=preferred_element_type)


def broadcast_in_dim(operand, shape, broadcast_dimensions, out_sharding=None):
  x = asarray(operand)

  def make():
    return Array(_core.broadcast_in_dim(x._a, list(shape), list(broadcast_dimensions)))
  if out_sharding is None:
    return make()
  return _with_out_sharding("broadcast_in_dim", [x], out_sharding, make)


def broadcast(operand, sizes):
  x = asarray(operand)
  return broadcast_in_dim(x, tuple(sizes) + x.shape,
                          list(range(len(sizes), len(sizes) + x.ndim)))


def iota(dtype, size):
  return Array(_core.iota([int(size)], 0, dtypes.to_core(dtype, "iota")))


def broadcasted_iota(dtype, shape, dimension):
  return Array(_core.iota(list(shape), int(dimension), dtypes.to_core(dtype, "broadcasted_iota")))


def pad(operand, padding_value, padding_config):
  """lax.pad: (low, high, interior) per dimension; interior elements go between neighbours,
  and a negative low or high crops that many from the padded edge (as XLA's pad)."""
  x = asarray(operand)
  config = [tuple(int(v) for v in c) for c in padding_config]
  if len(config) != x.ndim or any(len(c) != 3 for c in config):
    raise PartixError(f"[lax.pad] padding_config {padding_config!r} needs one (low, high, "
                      f"interior) triple per dimension of {x.shape}")
  if any(c[2] < 0 for c in config):
    raise PartixError(f"[lax.pad] interior padding must be >= 0, got {padding_config!r}")
  lo = [builtins.max(a, 0) for a, _, _ in config]
  hi = [builtins.max(b, 0) for _, b, _ in config]
  interior = [c for _, _, c in config]
  v = float(padding_value)
  if builtins.any(interior):
    y = Array(_core.pad_interior(x._a, lo, hi, interior, v))
  else:
    y = Array(_core.pad(x._a, lo, hi, v))
  if builtins.all(a >= 0 and b >= 0 for a, b, _ in config):
    return y
  starts = [-builtins.min(a, 0) for a, _, _ in config]
  stops = [n + builtins.min(b, 0) for n, (_, b, _) in zip(y.shape, config)]
  if builtins.any(s > e for s, e in zip(starts, stops)):
    raise PartixError(f"[lax.pad] padding_config {padding_config!r} crops more than all of "
                      f"{x.shape}")
  return Array(_core.slice(y._a, starts, stops, [1] * x.ndim))


def convert_element_type(operand, new_dtype):
  return jnp.astype(operand, new_dtype)


def reshape(operand, new_sizes, dimensions=None, out_sharding=None):
  x = asarray(operand)
  if dimensions is not None:
    x = jnp.transpose(x, dimensions)
  return jnp.reshape(x, new_sizes, out_sharding=out_sharding)


def transpose(operand, permutation):
  return jnp.transpose(operand, permutation)


def squeeze(array, dimensions):
  return jnp.squeeze(array, tuple(dimensions))


def expand_dims(array, dimensions):
  return jnp.expand_dims(array, tuple(dimensions))


def concatenate(operands, dimension):
  return jnp.concatenate(operands, dimension)


def select(pred, on_true, on_false):
  return jnp.where(pred, on_true, on_false)


def stop_gradient(x):
  return tu.tree_map(lambda a: Array(_core.stop_gradient(core(a))), x)


exp, log, sin, cos, tanh, sqrt, abs, sign = (jnp.exp, jnp.log, jnp.sin, jnp.cos, jnp.tanh,
                                             jnp.sqrt, jnp.abs, jnp.sign)
floor, ceil, square = jnp.floor, jnp.ceil, jnp.square


class RoundingMethod(enum.IntEnum):
  """lax.round's rule for halves: away from zero (lax's default) or to the nearest even."""
  AWAY_FROM_ZERO = 0
  TO_NEAREST_EVEN = 1


def round(x, rounding_method=RoundingMethod.AWAY_FROM_ZERO):
  """lax.round: to the nearest integer, halves away from zero by default (as XLA's round), or
  to even with RoundingMethod.TO_NEAREST_EVEN; floats only, as JAX's."""
  try:
    method = RoundingMethod(rounding_method)
  except ValueError:
    raise PartixError(f"[lax.round] rounding_method={rounding_method!r} is not a "
                      "RoundingMethod (AWAY_FROM_ZERO or TO_NEAREST_EVEN)") from None
  a = jnp.asarray(x)
  if not dtypes.is_float(core(a).dtype):
    raise PartixTypeError(f"[lax.round] round does not accept dtype {a.dtype}: accepted dtypes "
                          "are subtypes of floating")
  if method == RoundingMethod.TO_NEAREST_EVEN:
    return jnp.round(a)
  t = jnp.trunc(a)  # x - trunc(x) is exact: a half is a half
  return jnp.where(jnp.abs(a - t) >= 0.5, t + jnp.sign(a), t)
add, sub, mul, max, min = jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum


def div(x, y):
  """lax.div: integers divide rounding toward zero (C's rule; x / 0 is -1, as XLA's), floats
  divide exactly; the operands keep their dtype."""
  a, b = promote_pair(x, y, "div")
  return Array(_core.div(a, b))


def rem(x, y):
  """lax.rem: the C remainder, x - y * trunc(x / y), with the sign of x (x rem 0 is x for
  integers, as XLA's)."""
  a, b = promote_pair(x, y, "rem")
  r = jnp._c_fmod(Array(a), Array(b))
  if not dtypes.is_float(a.dtype):
    # numpy's fmod takes an integer divisor 0 as 1 (JAX's jnp); XLA's rem gives x.
    r = jnp.where(jnp.equal(Array(b), 0), Array(a), r)
  return r


neg, pow, integer_pow = jnp.negative, jnp.power, jnp.power
eq, ne, lt, le, gt, ge = (jnp.equal, jnp.not_equal, jnp.less, jnp.less_equal, jnp.greater,
                          jnp.greater_equal)


def reduce_sum(operand, axes, *, out_sharding=None):
  """lax.reduce_sum; out_sharding= may keep the sum unreduced over the Explicit axes that
  split the summed dimensions (P(unreduced={'x'})), as JAX's."""
  if out_sharding is None:
    return jnp.sum(operand, axis=tuple(axes))
  x = asarray(operand)
  return _with_out_sharding("reduce_sum", [x], out_sharding,
                            lambda: jnp.sum(x, axis=tuple(axes)))


def reduce_max(operand, axes):
  # lax's reductions have an identity: an empty one gives -inf (the type's minimum).
  x = asarray(operand)
  return jnp._reduce_core("max", _core.max, x._a, jnp._norm_axes(tuple(axes), x.ndim,
                                                                  "reduce_max"), False)


def reduce_min(operand, axes):
  x = asarray(operand)
  return jnp._reduce_core("min", _core.min, x._a, jnp._norm_axes(tuple(axes), x.ndim,
                                                                  "reduce_min"), False)


def cumsum(operand, axis=0, reverse=False):
  x = asarray(operand)
  return Array(_core.cumsum(x._a, jnp._norm_axis(axis, x.ndim, "cumsum"), bool(reverse)))


def argmax(operand, axis, index_dtype=np.int32):
  return jnp.astype(jnp.argmax(operand, axis), index_dtype)


def argmin(operand, axis, index_dtype=np.int32):
  return jnp.astype(jnp.argmin(operand, axis), index_dtype)


# ---- collectives (inside shard_map) ----

def _names(axis_name, api):
  if isinstance(axis_name, str):
    return [axis_name]
  if isinstance(axis_name, (tuple, list)) and axis_name and all(isinstance(a, str)
                                                                for a in axis_name):
    return list(axis_name)
  if isinstance(axis_name, (set, frozenset)):  # unordered: JAX refuses it by type
    raise PartixTypeError(f"[{api}] axis_name must be a tuple or a str, got "
                          f"{type(axis_name).__name__} {axis_name!r}")
  raise PartixError(f"[{api}] axis_name {axis_name!r} is not a mesh axis name or a tuple of names")


def _groups(groups, api):
  """axis_index_groups as lists of ints ([] for None); the core checks they split the axis."""
  if groups is None:
    return []
  try:
    return [[operator.index(i) for i in g] for g in groups]
  except TypeError:
    raise PartixError(f"[{api}] axis_index_groups {groups!r} is not a list of lists of axis "
                      "indices") from None


def _is_constant(leaf):
  return isinstance(leaf, (bool, int, float, complex, np.generic, np.ndarray))


def _times_size(leaf, size):
  """JAX's constant psum: leaf * size, keeping a Python number Python and numpy numpy."""
  if isinstance(leaf, (bool, np.bool_)) or getattr(leaf, "dtype", None) == np.bool_:
    leaf = np.int32(leaf) if np.ndim(leaf) == 0 else np.asarray(leaf, np.int32)
  if isinstance(leaf, (int, float, complex)):
    return type(leaf)(size) * leaf
  return np.asarray(size, leaf.dtype) * leaf


def _constant_psum(api, x, names, groups):
  """psum of Python or numpy numbers: a concrete value, the axis (or group) size times x."""
  size = _core.collective_size(api, names, groups)
  return tu.tree_map(lambda a: _times_size(a, size), x), size


def _tree_collective(api, f, constant=None):
  def op(x, axis_name, *, axis_index_groups=None):
    names, groups = _names(axis_name, api), _groups(axis_index_groups, api)
    leaves = tu.tree_leaves(x)
    if constant is not None and leaves and all(_is_constant(a) for a in leaves):
      return constant(x, names, groups)
    return tu.tree_map(lambda a: Array(f(core(a, api=api), names, groups)), x)
  op.__name__ = api
  return op


def _constant_pmean(x, names, groups):
  total, size = _constant_psum("pmean", x, names, groups)
  return tu.tree_map(lambda v: v / size, total)


psum = _tree_collective("psum", _core.psum,
                        lambda x, n, g: _constant_psum("psum", x, n, g)[0])
pmean = _tree_collective("pmean", _core.pmean, _constant_pmean)
pmax = _tree_collective("pmax", _core.pmax)
pmin = _tree_collective("pmin", _core.pmin)


def pvary(x, axis_name):
  names = _names(axis_name, "pvary")
  return tu.tree_map(lambda a: Array(_core.pvary(core(a, api="pvary"), names)), x)


def pcast(x, axis_name, *, to):
  """lax.pcast: to='varying' marks x as varying over axis_name (as pvary); to='unreduced'
  takes a value varying over axis_name as per-device partial sums (typed unreduced, as JAX's);
  to='reduced' types an invariant value reduced (its cotangent comes back unreduced)."""
  if isinstance(axis_name, (set, frozenset)):
    raise PartixTypeError(f"[pcast] axis_name={axis_name!r} must be a tuple or a str. Got "
                          f"{axis_name}")
  if not axis_name:
    return x
  if to not in ("unreduced", "reduced", "varying"):
    raise PartixError("[pcast] Got unexpected `to` value. Allowed `to` values are: "
                      "{'unreduced', 'reduced', 'varying'}")
  if to == "varying":
    return pvary(x, axis_name)
  axes = tuple(_names(axis_name, "pcast"))

  def one(a):
    a = core(a, api="pcast")
    vary = set(_core.varying_axes(a))
    unreduced, reduced = (set(s) for s in _core.sum_types(a))
    states = {"unreduced" if n in unreduced else "reduced" if n in reduced else
              "varying" if n in vary else "invarying" for n in axes}
    if len(states) > 1:
      raise PartixError(
          "[pcast] jax.lax.pcast can only accept axis_name which corresponds to one of varying, "
          "unreduced, reduced or invarying state of the input. Got input type: "
          f"{_core.type_of(a).to_string()}, axes: {axes} and input state: {states}")
    state, = states
    if (state, to) == ("varying", "unreduced"):
      return Array(_core.with_sum_types(a, unreduced | set(axes), reduced))
    if (state, to) == ("invarying", "reduced"):
      return Array(_core.with_sum_types(a, unreduced, reduced | set(axes)))
    if (state, to) == ("reduced", "varying"):  # JAX's reduced_vary_cast
      return Array(_core.pvary(_core.with_sum_types(a, unreduced, reduced - set(axes)), axes))
    raise PartixError(f"[pcast] Unsupported pcast from={state}, to={to!r}")
  return tu.tree_map(one, x)


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, to="varying"):
  """lax.all_gather. As JAX 0.10, the result still varies over the gathered mesh axes
  (to='varying', so out_specs must name them); to='invarying' gives the replicated value
  (lax.all_gather_invariant)."""
  if to not in ("varying", "invarying", "reduced"):
    raise PartixError(f"[all_gather] to={to!r}: allowed values are 'varying', 'reduced' and "
                      "'invarying'")
  if to == "reduced":  # the gathered value, invariant over the axes and typed reduced
    if axis_index_groups is not None:
      raise PartixError("[all_gather] to='reduced' takes no axis_index_groups")
    names = set(_names(axis_name, "all_gather"))

    def typed(g):
      unreduced, reduced = _core.sum_types(g._a)
      return Array(_core.with_sum_types(g._a, set(unreduced), set(reduced) | names))
    return tu.tree_map(typed, all_gather_invariant(x, axis_name, axis=axis, tiled=tiled))
  names, groups = _names(axis_name, "all_gather"), _groups(axis_index_groups, "all_gather")
  out = tu.tree_map(lambda a: Array(_core.all_gather(
      core(a), names, jnp._norm_axis(axis, asarray(a).ndim + (0 if tiled else 1), "all_gather"),
      bool(tiled), groups)), x)
  if to == "varying":
    manual = set(_get_abstract_mesh().manual_axes)
    vary = tuple(n for n in names if n in manual)
    if vary:
      out = tu.tree_map(lambda a: Array(_core.pvary(a._a, vary)), out)
  return out


def all_gather_invariant(x, axis_name, *, axis=0, tiled=False):
  """lax.all_gather_invariant: the gathered value, the same on every device of the axes."""
  return all_gather(x, axis_name, axis=axis, tiled=tiled, to="invarying")


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
  names, groups = _names(axis_name, "psum_scatter"), _groups(axis_index_groups, "psum_scatter")
  return tu.tree_map(lambda a: Array(_core.psum_scatter(core(a), names, int(scatter_dimension),
                                                        bool(tiled), groups)), x)


reduce_scatter = psum_scatter


def ppermute(x, axis_name, perm):
  names = _names(axis_name, "ppermute")
  try:
    pairs = [(int(a), int(b)) for a, b in perm]
  except (TypeError, ValueError):
    raise PartixError(f"[ppermute] perm {perm!r} is not a list of (source, destination) "
                      "pairs") from None
  return tu.tree_map(lambda a: Array(_core.ppermute(core(a), names, pairs)), x)


def pshuffle(x, axis_name, perm):
  """lax.pshuffle: device i takes the value of device perm[i] along axis_name."""
  try:
    pairs = [(int(src), i) for i, src in enumerate(perm)]
  except (TypeError, ValueError):
    raise PartixError(f"[pshuffle] perm {perm!r} is not a sequence of device indices") from None
  if sorted(s for s, _ in pairs) != list(range(len(pairs))):
    raise PartixError(f"[pshuffle] perm {list(perm)!r} is not a permutation of "
                      f"0..{len(pairs) - 1}")
  names = _names(axis_name, "pshuffle")
  return tu.tree_map(lambda a: Array(_core.ppermute(core(a), names, pairs)), x)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
  names, groups = _names(axis_name, "all_to_all"), _groups(axis_index_groups, "all_to_all")
  return tu.tree_map(lambda a: Array(_core.all_to_all(core(a), names, int(split_axis),
                                                      int(concat_axis), bool(tiled), groups)), x)


def axis_index(axis_name):
  return Array(_core.axis_index(_names(axis_name, "axis_index")))


def axis_size(axis_name):
  return _core.axis_size(_names(axis_name, "axis_size"))


psum_scatter.__doc__ = "Sums over the group and keeps this device's piece of scatter_dimension."


# ---- control flow ----

def _leaves_in(tree, api, what):
  leaves, treedef = tu.tree_flatten(tree)
  cores = []
  for i, x in enumerate(leaves):
    try:
      cores.append(core(x, api=api))
    except PartixError:
      raise PartixError(f"[{api}] {what} leaf {i} is {x!r} ({type(x).__name__}), not an "
                        "array") from None
  return cores, treedef


@contextlib.contextmanager
def library_loops():
  """`with library_loops():` around the package's own loops (random.gamma's rejection loop,
  the special functions' series): inside shard_map their carries may start invariant and
  become varying, widened as the loops autodiff builds are. A user's loop keeps each carry's
  varying axes (JAX's check_vma rule, an error naming the pcast that fixes it)."""
  previous = _core.set_loose_carries(True)
  try:
    yield
  finally:
    _core.set_loose_carries(previous)


def lib_scan(*args, **kwargs):
  with library_loops():
    return scan(*args, **kwargs)


def lib_fori_loop(*args, **kwargs):
  with library_loops():
    return fori_loop(*args, **kwargs)


def lib_while_loop(*args, **kwargs):
  with library_loops():
    return while_loop(*args, **kwargs)


def _check_tree(api, what, got, want):
  if got != want:
    raise PartixError(f"[{api}] {what} has structure {got} but the carry has structure {want}")


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False):
  """lax.scan: carry, ys = f(carry, x) over the leading axis of xs (a pytree)."""
  init_c, init_t = _leaves_in(init, "scan", "init")
  xs_c, xs_t = _leaves_in(xs, "scan", "xs")
  if length is not None:
    try:
      n = operator.index(length)
    except TypeError:
      raise PartixError(f"[scan] length {length!r} is not an integer") from None
    if n < 0:
      raise PartixError(f"[scan] length {length} is negative")
  else:
    n = -1
  if not xs_c and length is None:
    raise PartixError("[scan] with no xs, give length")
  ys_tree = []

  def body(tracers):
    it = iter(wrap(t) for t in tracers)
    carry = tu.tree_unflatten(init_t, [next(it) for _ in range(init_t.num_leaves)])
    x = tu.tree_unflatten(xs_t, [next(it) for _ in range(xs_t.num_leaves)])
    out = f(carry, x)
    if not (isinstance(out, tuple) and len(out) == 2):
      raise PartixError(f"[scan] the body must return a pair (carry, y), got "
                        f"{type(out).__name__}")
    c_cores, ct = _out_leaves(out[0], "scan")
    _check_tree("scan", "the body's carry", ct, init_t)
    y_cores, yt = _out_leaves(out[1], "scan")
    ys_tree[:] = [yt]
    return c_cores + y_cores, _keep_tree((ct, yt))

  outs, tid = _core.scan(init_c, xs_c, n, bool(reverse), body)
  ct, yt = _trees.pop(tid)  # one-shot: the tree is read once
  outs = [Array(o) for o in outs]
  return (tu.tree_unflatten(ct, outs[:ct.num_leaves]),
          tu.tree_unflatten(yt, outs[ct.num_leaves:]))


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
  """lax.fori_loop: body_fun(i, carry) for i in [lower, upper) (static bounds)."""
  if any(isinstance(b, Array) and b._a.is_tracer() for b in (lower, upper)):
    # Traced bounds: a while_loop over (i, carry), as JAX lowers it (not reverse-differentiable).
    lo, hi = asarray(lower), asarray(upper)
    if lo.ndim or hi.ndim or not (dtypes.is_int(lo.dtype) and dtypes.is_int(hi.dtype)):
      raise PartixError(f"[fori_loop] bounds must be integer scalars, got {lo._aval_str()} and "
                        f"{hi._aval_str()}")
    _, out = while_loop(lambda c: c[0] < hi, lambda c: (c[0] + 1, body_fun(c[0], c[1])),
                        (lo, init_val))
    return out
  for b in (lower, upper):
    if not isinstance(b, (int, np.integer)) and not (isinstance(b, Array) and b.ndim == 0
                                                      and dtypes.is_int(b.dtype)):
      raise PartixError(f"[fori_loop] bounds must be integers, got {b!r}")
  lower, upper = int(lower), int(upper)
  if not (-2**31 <= lower < 2**31 and -2**31 <= upper < 2**31):
    raise PartixError(f"[fori_loop] bounds [{lower}, {upper}) do not fit the int32 index")
  init_c, init_t = _leaves_in(init_val, "fori_loop", "init_val")

  def body(tracers):
    i = wrap(tracers[0])
    carry = tu.tree_unflatten(init_t, [wrap(t) for t in tracers[1:]])
    c_cores, ct = _out_leaves(body_fun(i, carry), "fori_loop")
    _check_tree("fori_loop", "the body's result", ct, init_t)
    return c_cores, -1  # the carry's tree is init's

  outs = _core.fori_loop(lower, upper, init_c, body)
  return tu.tree_unflatten(init_t, [Array(o) for o in outs])


def while_loop(cond_fun, body_fun, init_val):
  """lax.while_loop: while cond_fun(carry): carry = body_fun(carry)."""
  init_c, init_t = _leaves_in(init_val, "while_loop", "init_val")

  def cond(tracers):
    carry = tu.tree_unflatten(init_t, [wrap(t) for t in tracers])
    p = cond_fun(carry)
    pc = core(p, api="while_loop")
    if pc.shape or pc.dtype != "bool":
      raise PartixError(f"[while_loop] cond_fun must return a bool scalar, got "
                        f"{pc.dtype}{list(pc.shape)}")
    return [pc], -1

  def body(tracers):
    carry = tu.tree_unflatten(init_t, [wrap(t) for t in tracers])
    c_cores, ct = _out_leaves(body_fun(carry), "while_loop")
    _check_tree("while_loop", "the body's result", ct, init_t)
    return c_cores, -1  # the carry's tree is init's

  outs = _core.while_loop(init_c, cond, body)
  return tu.tree_unflatten(init_t, [Array(o) for o in outs])


def cond(pred, true_fun, false_fun, *operands):
  """lax.cond: true_fun(*operands) if pred else false_fun(*operands)."""
  return _cond(pred, true_fun, false_fun, operands, "cond")


def _cond(pred, true_fun, false_fun, operands, api):
  p = asarray(pred)
  if p.ndim != 0:
    raise PartixError(f"[{api}] pred must be a scalar, got {p._aval_str()}")
  pc = p._a if p._a.dtype == "bool" else _core.ne(p._a, _core.full([], 0.0, p._a.dtype, None))
  ops_c, ops_t = _leaves_in(operands, api, "operand")

  def branch(fn):
    def tr(tracers):
      ops = tu.tree_unflatten(ops_t, [wrap(t) for t in tracers])
      c, t = _out_leaves(fn(*ops), api)
      return c, _keep_tree(t)
    return tr

  outs, tt, ft = _core.cond(pc, ops_c, branch(true_fun), branch(false_fun))
  t_tree, f_tree = _trees.pop(tt), _trees.pop(ft)
  if t_tree != f_tree:
    raise PartixError(f"[{api}] the branches return different structures: {t_tree} and "
                      f"{f_tree}")
  return tu.tree_unflatten(t_tree, [Array(o) for o in outs])


def switch(index, branches, *operands):
  """lax.switch: branches[clamp(index)](*operands), as nested conds."""
  if not branches:
    raise PartixError("[switch] needs at least one branch")
  i = jnp.clip(asarray(index), 0, len(branches) - 1)

  def build(k):
    if k == len(branches) - 1:
      return branches[k]
    return lambda *ops: _cond(i == k, branches[k], build(k + 1), ops, "switch")
  return build(0)(*operands)


def map(f, xs, *, batch_size=None):
  """lax.map: f over the leading axis of xs, as a scan."""
  _, ys = scan(lambda c, x: (c, f(x)), (), xs)
  return ys


def associative_scan(fn, elems, reverse=False, axis=0):
  raise PartixError("[associative_scan] is not supported; use scan")


def _table_unary(name):
  f = getattr(_core, name)

  def op(x):
    return Array(f(core(x)))
  op.__name__ = name
  op.__doc__ = f"lax.{name}, elementwise (integer operands of float functions become f32)."
  return op


# Every other unary function of the C++ elementwise table (rsqrt, logistic, erf, erf_inv,
# log1p, expm1, erfc, ...), as lax names it.
for _name in _core.unary_functions:
  if _name not in globals():
    globals()[_name] = _table_unary(_name)

# jax.lax names defined here and the table's (partix.lax takes them with a star import).
__all__ = ["Precision", "abs", "add", "all_gather", "all_gather_invariant", "all_to_all", "argmax",
           "argmin", "associative_scan", "axis_index", "axis_size", "broadcast",
           "broadcast_in_dim", "broadcast_shapes", "broadcasted_iota", "ceil",
           "concatenate", "cond", "convert_element_type", "cos", "cumsum", "div", "dot",
           "dot_general", "dynamic_index_in_dim", "dynamic_slice",
           "dynamic_slice_in_dim", "dynamic_update_index_in_dim",
           "dynamic_update_slice", "dynamic_update_slice_in_dim", "eq", "exp",
           "expand_dims", "floor", "fori_loop", "ge", "gt", "index_in_dim",
           "integer_pow", "iota", "le", "log", "lt", "map", "max", "min", "mul", "ne",
           "neg", "pad", "pcast", "pmax", "pmean", "pmin", "pow", "ppermute",
           "pshuffle", "psum", "psum_scatter", "pvary", "reduce_max", "reduce_min",
           "reduce_scatter", "reduce_sum", "rem", "reshape", "round", "scan", "select",
           "sign", "sin", "slice", "slice_in_dim", "sort", "sqrt", "square", "squeeze",
           "stop_gradient", "sub", "switch", "tanh", "top_k", "transpose", "while_loop"]
__all__ += ["RoundingMethod"]
__all__ += [_n for _n in _core.unary_functions if _n not in __all__]
