"""lax's XLA-style gather and scatter with their dimension-number types, written over partix's
indexing.

Every element of a gather's result (or of a scatter's updates) is given its row-major position
in the operand, an integer array computed from the start indices and the window offsets
(clamped or masked by the mode); then one take reads the operand, or one update of the
flattened operand writes it."""
import operator
from typing import NamedTuple, Sequence

import numpy as np

from partix._src import array_methods as _array_methods  # noqa: F401 (installs Array.at)
from partix._src import dtypes
from partix._src import lax_more as _lax_more
from partix._src import lax_ops
from partix._src import numpy_ops as jnp
from partix._src.core import PartixError, PartixTypeError, asarray, is_weak_scalar
from partix._src.api import typeof
from partix._src.lax_more import GatherScatterMode
from partix._src.sharding import PartitionSpec
from partix._src.tracing import with_out_sharding

__all__ = ["GatherDimensionNumbers", "ScatterDimensionNumbers", "gather", "scatter",
           "scatter_add", "scatter_sub", "scatter_mul", "scatter_min", "scatter_max",
           "scatter_apply", "index_take"]


class GatherDimensionNumbers(NamedTuple):
  """How the operand, start_indices and result of lax.gather relate (XLA's Gather; the index
  vector is always the last axis of start_indices)."""
  offset_dims: tuple
  collapsed_slice_dims: tuple
  start_index_map: tuple
  operand_batching_dims: tuple = ()
  start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
  """How the operand, scatter_indices and updates of lax.scatter* relate (XLA's Scatter; the
  index vector is always the last axis of scatter_indices)."""
  update_window_dims: Sequence[int]
  inserted_window_dims: Sequence[int]
  scatter_dims_to_operand_dims: Sequence[int]
  operand_batching_dims: Sequence[int] = ()
  scatter_indices_batching_dims: Sequence[int] = ()


_MODES = {"clip": GatherScatterMode.CLIP, "fill": GatherScatterMode.FILL_OR_DROP,
          "drop": GatherScatterMode.FILL_OR_DROP,
          "promise_in_bounds": GatherScatterMode.PROMISE_IN_BOUNDS,
          "CLIP": GatherScatterMode.CLIP, "FILL_OR_DROP": GatherScatterMode.FILL_OR_DROP,
          "PROMISE_IN_BOUNDS": GatherScatterMode.PROMISE_IN_BOUNDS}


def _mode(mode, default, api):
  """mode (None, a string or a GatherScatterMode-like member) as a GatherScatterMode."""
  if mode is None:
    return default
  key = mode if isinstance(mode, str) else getattr(mode, "name", None)
  if key in _MODES:
    return _MODES[key]
  if key in ("one_hot", "ONE_HOT"):
    raise PartixError(f"[{api}] mode {mode!r} is not supported (clip, fill/drop, "
                      "promise_in_bounds)")
  raise PartixError(f"[{api}] unknown mode {mode!r} (clip, fill/drop, promise_in_bounds)")


# ---- argument checks (XLA's shape inference rules, in JAX's order) ----

def _ints(v, what, api):
  try:
    return tuple(operator.index(d) for d in v)
  except TypeError:
    raise PartixTypeError(f"[{api}] {what} must be a sequence of ints, got {v!r}") from None


def _dnums(dn, fields, kind, api):
  """The fields of a dimension-number object (ours, JAX's, or any with those attributes)."""
  if not all(hasattr(dn, f) for f in fields[:3]):
    raise PartixTypeError(f"[{api}] dimension_numbers must be a {kind}, got {dn!r}")
  return [_ints(getattr(dn, f, ()), f, api) for f in fields]


def _sorted(dims, name, api):
  if any(b < a for a, b in zip(dims, dims[1:])):
    raise PartixTypeError(f"[{api}] {name} must be sorted; got {dims}")


def _unique(dims, name, api):
  if len(set(dims)) != len(dims):
    raise PartixTypeError(f"[{api}] {name} must not repeat; got {dims}")


def _in_range(dims, rank, name, api):
  for d in dims:
    if not 0 <= d < rank:
      raise PartixTypeError(f"[{api}] invalid {name} {dims}: {d} is outside [0, {rank})")


def _disjoint(a, b, name_a, name_b, api):
  if set(a) & set(b):
    raise PartixTypeError(f"[{api}] {name_a} {a} and {name_b} {b} must be disjoint")


def _check_index_array(idx, name, api):
  if idx.ndim < 1:
    raise PartixTypeError(f"[{api}] {name} must have rank >= 1 (its last axis holds the index "
                          "vectors), got a scalar")
  if not dtypes.is_int(idx.dtype):
    raise PartixError(f"[{api}] {name} must have an integer type, got {idx.dtype}")


def _check_batching(op_bdims, rank, name, api):
  _unique(op_bdims, name, api)
  _sorted(op_bdims, name, api)
  _in_range(op_bdims, rank, name, api)


def _check_index_batching(op_bdims, idx_bdims, op_shape, idx_shape, names, api):
  """The checks gather and scatter share on the indices' batching dimensions."""
  op_name, idx_name = names
  _unique(idx_bdims, idx_name, api)
  _in_range(idx_bdims, len(idx_shape), idx_name, api)
  if len(idx_shape) - 1 in idx_bdims:
    raise PartixTypeError(f"[{api}] {idx_name} {idx_bdims} names the index vector dimension "
                          f"{len(idx_shape) - 1}, which cannot be a batching dimension")
  if len(op_bdims) != len(idx_bdims):
    raise PartixTypeError(f"[{api}] {op_name} {op_bdims} and {idx_name} {idx_bdims} must have "
                          "equal lengths")
  a = tuple(op_shape[d] for d in op_bdims)
  b = tuple(idx_shape[d] for d in idx_bdims)
  if a != b:
    raise PartixTypeError(f"[{api}] the operand's batching dimensions {op_bdims} have shape {a} "
                          f"but the indices' {idx_bdims} have shape {b}; they must be equal")


def _check_gather(op_shape, idx_shape, dn, slice_sizes, api):
  """XLA's gather rules; returns the result's shape."""
  offset, collapsed, smap, op_b, idx_b = dn
  out_rank = len(offset) + len(idx_shape) - 1
  _sorted(offset, "offset_dims", api)
  _unique(offset, "offset_dims", api)
  _in_range(offset, out_rank, "offset_dims", api)
  if len(smap) != idx_shape[-1]:
    raise PartixTypeError(f"[{api}] start_index_map {smap} has {len(smap)} entries but the "
                          f"index vectors (the last axis of start_indices, shape {idx_shape}) "
                          f"have {idx_shape[-1]}; they must be equal")
  _in_range(smap, len(op_shape), "start_index_map", api)
  _unique(smap, "start_index_map", api)
  _sorted(collapsed, "collapsed_slice_dims", api)
  _in_range(collapsed, len(op_shape), "collapsed_slice_dims", api)
  _unique(collapsed, "collapsed_slice_dims", api)
  names = ("operand_batching_dims", "start_indices_batching_dims")
  _check_batching(op_b, len(op_shape), names[0], api)
  _disjoint(collapsed, op_b, "collapsed_slice_dims", "operand_batching_dims", api)
  _disjoint(smap, op_b, "start_index_map", "operand_batching_dims", api)
  _check_index_batching(op_b, idx_b, op_shape, idx_shape, names, api)
  if len(slice_sizes) != len(op_shape):
    raise PartixTypeError(f"[{api}] slice_sizes {slice_sizes} must have one entry per operand "
                          f"dimension ({len(op_shape)}, the operand's shape is {op_shape})")
  if len(slice_sizes) != len(offset) + len(collapsed) + len(op_b):
    raise PartixTypeError(f"[{api}] every operand dimension must be an offset dimension or "
                          f"collapsed or batching: slice_sizes {slice_sizes} has "
                          f"{len(slice_sizes)} entries, offset_dims {offset}, "
                          f"collapsed_slice_dims {collapsed}, operand_batching_dims {op_b}")
  if int(np.prod(idx_shape)) != 0:
    for i, (s, n) in enumerate(zip(slice_sizes, op_shape)):
      if not 0 <= s <= n:
        raise PartixTypeError(f"[{api}] slice_sizes {slice_sizes}: entry {i} is {s}, outside "
                              f"[0, {n}] (the operand's dimension {i})")
  for d in collapsed:
    if slice_sizes[d] != 1:
      raise PartixTypeError(f"[{api}] collapsed_slice_dims {collapsed} names dimension {d}, "
                            f"whose slice size must be 1, got slice_sizes {slice_sizes}")
  for d in op_b:
    if slice_sizes[d] > 1:
      raise PartixTypeError(f"[{api}] operand_batching_dims {op_b} names dimension {d}, whose "
                            f"slice size must be 0 or 1, got slice_sizes {slice_sizes}")
  window = [slice_sizes[d] for d in range(len(op_shape)) if d not in collapsed and d not in op_b]
  batch = iter(idx_shape[:-1])
  win = iter(window)
  return tuple(next(win) if i in offset else next(batch) for i in range(out_rank))


def _check_scatter(op_shape, idx_shape, up_shape, dn, api):
  """XLA's scatter rules; returns the window size along every operand dimension."""
  uwd, inserted, sdims, op_b, idx_b = dn
  want = len(idx_shape) - 1 + len(uwd)
  if len(up_shape) != want:
    raise PartixTypeError(f"[{api}] updates must have rank {want} (the indices' batch rank "
                          f"{len(idx_shape) - 1} + update_window_dims {uwd}); got shape "
                          f"{up_shape}")
  _sorted(uwd, "update_window_dims", api)
  _unique(uwd, "update_window_dims", api)
  _in_range(uwd, len(up_shape), "update_window_dims", api)
  _sorted(inserted, "inserted_window_dims", api)
  _unique(inserted, "inserted_window_dims", api)
  _in_range(inserted, len(op_shape), "inserted_window_dims", api)
  names = ("operand_batching_dims", "scatter_indices_batching_dims")
  _check_batching(op_b, len(op_shape), names[0], api)
  _disjoint(inserted, op_b, "inserted_window_dims", "operand_batching_dims", api)
  _disjoint(sdims, op_b, "scatter_dims_to_operand_dims", "operand_batching_dims", api)
  _check_index_batching(op_b, idx_b, op_shape, idx_shape, names, api)
  scatter_pos = [d for d in range(len(up_shape)) if d not in uwd]
  up_b = tuple(up_shape[scatter_pos[j]] for j in idx_b)
  if up_b != tuple(op_shape[d] for d in op_b):
    raise PartixTypeError(f"[{api}] the updates' batching dimensions have shape {up_b} but the "
                          f"operand's {op_b} have {tuple(op_shape[d] for d in op_b)}")
  if len(uwd) + len(inserted) + len(op_b) != len(op_shape):
    raise PartixTypeError(f"[{api}] update_window_dims {uwd}, inserted_window_dims {inserted} "
                          f"and operand_batching_dims {op_b} make a window of rank "
                          f"{len(uwd) + len(inserted) + len(op_b)}; the operand has rank "
                          f"{len(op_shape)}")
  if len(sdims) != idx_shape[-1]:
    raise PartixTypeError(f"[{api}] scatter_dims_to_operand_dims {sdims} has {len(sdims)} "
                          f"entries but the index vectors (the last axis of scatter_indices, "
                          f"shape {idx_shape}) have {idx_shape[-1]}; they must be equal")
  _in_range(sdims, len(op_shape), "scatter_dims_to_operand_dims", api)
  _unique(sdims, "scatter_dims_to_operand_dims", api)
  win_dims = [d for d in range(len(op_shape)) if d not in inserted and d not in op_b]
  sizes = [1] * len(op_shape)
  for d, u in zip(win_dims, uwd):
    if up_shape[u] > op_shape[d]:
      raise PartixTypeError(f"[{api}] the updates' window dimension {u} has size {up_shape[u]}, "
                            f"more than the operand's dimension {d} ({op_shape[d]})")
    sizes[d] = up_shape[u]
  for j, p in enumerate(scatter_pos):
    if up_shape[p] != idx_shape[j]:
      raise PartixTypeError(f"[{api}] the updates' scatter dimension {p} has size "
                            f"{up_shape[p]} but the indices' dimension {j} has {idx_shape[j]} "
                            f"(updates {up_shape}, scatter_indices {idx_shape})")
  return sizes


# ---- positions in the operand ----

def _as_i32(idx):
  """Integer indices as int32, wide types first limited so that no value wraps around."""
  core_name = dtypes.to_core(idx.dtype)
  if core_name in ("i64", "u32", "u64"):
    lo = 0 if core_name.startswith("u") else -(2 ** 31)
    idx = jnp.clip(idx, lo, 2 ** 31 - 1)
  return jnp.astype(idx, np.int32) if core_name != "i32" else idx


def _along(values, pos, rank):
  """A 1-D numpy array placed along axis pos of a rank-`rank` shape of 1s."""
  shape = [1] * rank
  shape[pos] = len(values)
  return np.asarray(values, np.int32).reshape(shape)


def _positions(op_shape, idx, res_shape, layout, sizes, mode, api):
  """(lin, valid): for every element of a result (gather) or updates (scatter) of shape
  res_shape, its row-major position in the operand, and whether its index vector starts a
  window in bounds (None unless the mode asks). layout: (batch_pos, window, batching, smap),
  batch_pos the result axes of start_indices' batch axes, window {operand dim: result axis},
  batching {operand dim: indices batch axis}, smap the operand dim of each index component."""
  batch_pos, window, batching, smap = layout
  if int(np.prod(op_shape, dtype=np.int64)) >= 2 ** 31:
    raise PartixError(f"[{api}] the operand of shape {op_shape} has 2**31 elements or more; "
                      "partix's gather and scatter index it with int32 positions")
  rank = len(res_shape)
  batch_shape = [1] * rank
  for j, p in enumerate(batch_pos):
    batch_shape[p] = idx.shape[j]
  strides = [int(np.prod(op_shape[d + 1:], dtype=np.int64)) for d in range(len(op_shape))]
  const = np.zeros([1] * rank, np.int32)
  lin, valid = None, None
  ints = _as_i32(idx)
  for k, d in enumerate(smap):
    s = ints[..., k]
    hi = op_shape[d] - sizes[d]
    if mode is not GatherScatterMode.CLIP and mode is not None:
      ok = jnp.logical_and(s >= 0, s <= hi)
      valid = ok if valid is None else jnp.logical_and(valid, ok)
    s = jnp.reshape(jnp.clip(s, 0, max(hi, 0)), batch_shape) * strides[d]
    lin = s if lin is None else lin + s
  for d, j in batching.items():
    const = const + _along(np.arange(idx.shape[j]), batch_pos[j], rank) * strides[d]
  for d, p in window.items():
    const = const + _along(np.arange(res_shape[p]), p, rank) * strides[d]
  lin = asarray(const) if lin is None else lin + const
  lin = jnp.broadcast_to(lin, res_shape)
  if valid is not None:
    valid = jnp.broadcast_to(jnp.reshape(valid, batch_shape), res_shape)
  return lin, valid


# ---- explicit sharding (JAX's rules for the result's type) ----

def _explicit_spec(x):
  """x's spec along Explicit mesh axes, one entry per dimension (None: not split)."""
  s = typeof(x).sharding
  spec = list(s.spec) if s is not None and s.spec is not None else []
  explicit = set(s.mesh.explicit_axes) if s is not None else set()
  out = []
  for e in spec + [None] * (x.ndim - len(spec)):
    names = () if e is None else (e,) if isinstance(e, str) else tuple(e)
    names = tuple(n for n in names if n in explicit)
    out.append(None if not names else names[0] if len(names) == 1 else names)
  return out


def _ambiguous(api, arrays, use):
  parts = ", ".join(f"{name} {a.dtype}{list(a.shape)} split as {PartitionSpec(*sp)}"
                    for name, a, sp in arrays)
  return PartixError(f"[{api}] the result's sharding cannot be resolved unambiguously (or it "
                     f"would need collectives on the inputs): {parts}. Reshard the inputs "
                     f"(replicate the dimensions sliced into) or use {use}(out_sharding=)")


def _gather_out_spec(x, idx, dn, sizes, out_rank, api):
  """The gather result's spec by JAX's rule, or None when nothing is split."""
  op_spec, idx_spec = _explicit_spec(x), _explicit_spec(idx)
  if all(s is None for s in op_spec + idx_spec):
    return None
  offset, collapsed, smap, op_b, idx_b = dn
  ok = all(sizes[d] == x.shape[d] or op_spec[d] is None for d in smap)
  ok = ok and all(op_spec[o] is None or idx_spec[i] is None or op_spec[o] == idx_spec[i]
                  for o, i in zip(op_b, idx_b))
  ok = ok and all(sp is None for i, sp in enumerate(idx_spec) if i not in idx_b)
  if not ok:
    raise _ambiguous(api, [("operand", x, op_spec), ("start_indices", idx, idx_spec)],
                     "x.at[...].get")
  for o, i in zip(op_b, idx_b):
    idx_spec[i] = idx_spec[i] or op_spec[o]
  win = iter(d for d in range(x.ndim) if d not in collapsed and d not in op_b)
  batch = iter(idx_spec)
  return [op_spec[next(win)] if i in offset else next(batch) for i in range(out_rank)]


def _scatter_out_spec(x, idx, u, dn, api):
  """The scatter result's spec by JAX's rule, or None when nothing is split."""
  op_spec, idx_spec, up_spec = _explicit_spec(x), _explicit_spec(idx), _explicit_spec(u)
  if all(s is None for s in op_spec + idx_spec + up_spec):
    return None
  uwd, inserted, sdims, op_b, idx_b = dn
  scatter_pos = [d for d in range(u.ndim) if d not in uwd]
  up_b = [scatter_pos[j] for j in idx_b]
  win = [d for d in range(x.ndim) if d not in inserted and d not in op_b]
  ok = all(len({op_spec[o], idx_spec[i], up_spec[p]} - {None}) <= 1
           for o, i, p in zip(op_b, idx_b, up_b))
  ok = ok and all((u.shape[p] == x.shape[d] and up_spec[p] == op_spec[d]) or
                  (up_spec[p] is None and op_spec[d] is None) for p, d in zip(uwd, win))
  ok = ok and all(op_spec[d] is None for d in inserted)
  ok = ok and all(up_spec[p] is None for p in scatter_pos if p not in up_b)
  ok = ok and all(idx_spec[i] is None for i in range(idx.ndim) if i not in idx_b)
  if not ok:
    raise _ambiguous(api, [("operand", x, op_spec), ("scatter_indices", idx, idx_spec),
                           ("updates", u, up_spec)], "x.at[...].set/add/mul/...")
  out = list(op_spec)
  for o, i, p in zip(op_b, idx_b, up_b):
    out[o] = out[o] or idx_spec[i] or up_spec[p]
  for p, d in zip(uwd, win):
    out[d] = out[d] or up_spec[p]
  return out


def _with_spec(api, operands, spec, make):
  """make() typed with spec (a list of entries) when the inputs are split, else as is."""
  if spec is None:
    return make()
  return with_out_sharding(api, operands, PartitionSpec(*spec), make)


def _fill_default(dtype):
  if dtypes.is_float(dtype):
    return np.nan
  if dtype == np.bool_:
    return True
  info = dtypes.iinfo(dtype)
  return int(info.max) if int(info.min) == 0 else int(info.min)


def gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
           indices_are_sorted=False, mode=None, fill_value=None):
  """lax.gather: slices of operand at start_indices (XLA's Gather). mode None is
  PROMISE_IN_BOUNDS (starts clamped, as CLIP); FILL_OR_DROP fills a window that is not wholly
  in bounds with fill_value (NaN, the integer minimum (maximum if unsigned), or True)."""
  api = "lax.gather"
  x = asarray(operand, api=api)
  idx = asarray(start_indices, api=api)
  _check_index_array(idx, "start_indices", api)
  md = _mode(mode, GatherScatterMode.PROMISE_IN_BOUNDS, api)
  fields = ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
            "start_indices_batching_dims")
  dn = _dnums(dimension_numbers, fields, "GatherDimensionNumbers", api)
  sizes = _ints(slice_sizes, "slice_sizes", api)
  out_shape = _check_gather(tuple(x.shape), tuple(idx.shape), dn, sizes, api)
  spec = _gather_out_spec(x, idx, dn, sizes, len(out_shape), api)
  if int(np.prod(out_shape)) == 0:
    return jnp.zeros(out_shape, x.dtype)
  offset, collapsed, smap, op_b, idx_b = dn
  batch_pos = [i for i in range(len(out_shape)) if i not in offset]
  win_dims = [d for d in range(x.ndim) if d not in collapsed and d not in op_b]
  layout = (batch_pos, dict(zip(win_dims, offset)), dict(zip(op_b, idx_b)), smap)
  check = md if md is GatherScatterMode.FILL_OR_DROP else GatherScatterMode.CLIP
  fill = None
  if md is GatherScatterMode.FILL_OR_DROP:
    fill = asarray(_fill_default(x.dtype) if fill_value is None else fill_value, x.dtype, api)

  def compute():
    lin, valid = _positions(tuple(x.shape), idx, out_shape, layout, sizes, check, api)
    out = jnp.take(jnp.reshape(x, (-1,)), lin, mode="clip")
    return out if valid is None else jnp.where(valid, out, fill)
  return _with_spec(api, [x, idx], spec, compute)


# ---- scatters ----

_SCATTER_FIELDS = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                   "operand_batching_dims", "scatter_indices_batching_dims")


def _scatter_plan(x, indices, up_shape, dimension_numbers, mode, api):
  """Checks a scatter's arguments; (idx, dn, positions, total): positions() gives the flat
  operand position of every update (total, the operand's size, where it is dropped)."""
  idx = asarray(indices, api=api)
  _check_index_array(idx, "scatter_indices", api)
  md = _mode(mode, GatherScatterMode.FILL_OR_DROP, api)
  dn = _dnums(dimension_numbers, _SCATTER_FIELDS, "ScatterDimensionNumbers", api)
  sizes = _check_scatter(tuple(x.shape), tuple(idx.shape), tuple(up_shape), dn, api)
  uwd, inserted, sdims, op_b, idx_b = dn
  batch_pos = [i for i in range(len(up_shape)) if i not in uwd]
  win_dims = [d for d in range(x.ndim) if d not in inserted and d not in op_b]
  layout = (batch_pos, dict(zip(win_dims, uwd)), dict(zip(op_b, idx_b)), sdims)
  total = int(np.prod(x.shape, dtype=np.int64))

  def positions():
    # PROMISE_IN_BOUNDS drops what is out of bounds, as XLA's scatter does.
    lin, valid = _positions(tuple(x.shape), idx, tuple(up_shape), layout, sizes, md, api)
    if valid is not None:
      lin = jnp.where(valid, lin, total)
    return jnp.reshape(lin, (-1,))
  return idx, dn, positions, total


def _updates(x, updates, api):
  if is_weak_scalar(updates):
    return asarray(updates, x.dtype, api)
  u = asarray(updates, api=api)
  if u.dtype != x.dtype:
    raise PartixTypeError(f"[{api}] updates must have the operand's dtype {x.dtype}, got "
                          f"{u.dtype}")
  return u


_COMBINE = {"mul": jnp.multiply, "min": jnp.minimum, "max": jnp.maximum}


def _combine_sorted(flat, lin, upd, kind):
  """flat with the updates combined into their positions lin (flat's size: dropped) by kind:
  set (the last update naming a position wins), mul, min or max (all of them combine). The
  updates are sorted by position, each run of one position reduced by a segmented scan, and
  each run's last element found from the position through an exact integer scatter-add."""
  n, k = flat.shape[0], lin.shape[0]
  order = jnp.argsort(lin)
  ls = jnp.take(lin, order)
  if kind == "set":
    vals, op = order, jnp.maximum  # the latest of a run's updates
  else:
    op = _COMBINE[kind]
    if flat.dtype == np.bool_:
      op = jnp.logical_and if kind in ("mul", "min") else jnp.logical_or
    vals = jnp.take(upd, order)
  first = jnp.concatenate([asarray(np.ones(1, np.bool_)), ls[1:] != ls[:-1]])

  def seg(a, b):
    return jnp.logical_or(a[0], b[0]), jnp.where(b[0], b[1], op(a[1], b[1]))
  _, red = _lax_more.associative_scan(seg, (first, vals))
  last = jnp.concatenate([ls[1:] != ls[:-1], asarray(np.ones(1, np.bool_))])
  ranks = asarray(np.arange(1, k + 1, dtype=np.int32))
  slot = jnp.zeros((n,), np.int32).at[jnp.where(last, ls, n)].add(ranks)
  run = jnp.take(red, jnp.clip(slot - 1, 0, k - 1))
  new = jnp.take(upd, run) if kind == "set" else jnp.astype(op(flat, run), flat.dtype)
  return jnp.where(slot > 0, new, flat)


def _scatter(kind, api, operand, scatter_indices, updates, dimension_numbers, mode):
  x = asarray(operand, api=api)
  u = _updates(x, updates, api)
  idx, dn, positions, total = _scatter_plan(x, scatter_indices, u.shape, dimension_numbers,
                                            mode, api)
  spec = _scatter_out_spec(x, idx, u, dn, api)
  if u.size == 0 or total == 0:
    return x

  def compute():
    lin = positions()
    flat, upd = jnp.reshape(x, (total,)), jnp.reshape(u, (-1,))
    if kind == "add":
      out = flat.at[lin].add(upd)
    elif kind == "sub":
      out = flat.at[lin].subtract(upd)
    else:
      out = _combine_sorted(flat, lin, upd, kind)
    return jnp.reshape(out, x.shape)
  return _with_spec(api, [x, idx, u], spec, compute)


def scatter(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
            unique_indices=False, mode=None):
  """lax.scatter: operand with updates written at scatter_indices (XLA's Scatter); a
  position named twice keeps the last update. mode None is FILL_OR_DROP: a window not wholly
  in bounds is dropped (also PROMISE_IN_BOUNDS); CLIP clamps its start."""
  return _scatter("set", "lax.scatter", operand, scatter_indices, updates, dimension_numbers,
                  mode)


def scatter_add(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
  """lax.scatter_add: lax.scatter adding the updates (repeated positions add up)."""
  return _scatter("add", "lax.scatter_add", operand, scatter_indices, updates,
                  dimension_numbers, mode)


def scatter_sub(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
  """lax.scatter_sub: lax.scatter subtracting the updates."""
  return _scatter("sub", "lax.scatter_sub", operand, scatter_indices, updates,
                  dimension_numbers, mode)


def scatter_mul(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
  """lax.scatter_mul: lax.scatter multiplying by the updates."""
  return _scatter("mul", "lax.scatter_mul", operand, scatter_indices, updates,
                  dimension_numbers, mode)


def scatter_min(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
  """lax.scatter_min: lax.scatter keeping the minimum of the operand and the updates."""
  return _scatter("min", "lax.scatter_min", operand, scatter_indices, updates,
                  dimension_numbers, mode)


def scatter_max(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
  """lax.scatter_max: lax.scatter keeping the maximum of the operand and the updates."""
  return _scatter("max", "lax.scatter_max", operand, scatter_indices, updates,
                  dimension_numbers, mode)


def scatter_apply(operand, scatter_indices, func, dimension_numbers, *, update_shape=(),
                  indices_are_sorted=False, unique_indices=False, mode=None):
  """lax.scatter_apply: operand with the elementwise func applied at the positions
  scatter_indices names (update_shape: the updates' shape), once per time it is named."""
  api = "lax.scatter_apply"
  if not callable(func):
    raise PartixTypeError(f"[{api}] func must be callable, got {func!r}")
  x = asarray(operand, api=api)
  u = jnp.zeros(_ints(update_shape, "update_shape", api), x.dtype)
  idx, dn, positions, total = _scatter_plan(x, scatter_indices, u.shape, dimension_numbers,
                                            mode, api)
  spec = _scatter_out_spec(x, idx, u, dn, api)
  if u.size == 0 or total == 0:
    return x
  return _with_spec(api, [x, idx], spec, lambda: _apply_counted(x, positions(), func, total))


def _apply_counted(x, lin, func, total):
  """x with func applied at each flat position as many times as lin names it."""
  counts = jnp.zeros((total,), np.int32).at[lin].add(1)
  flat = jnp.reshape(x, (total,))

  def step(j, v):
    return jnp.where(counts > j, jnp.astype(func(v), x.dtype), v)
  if not counts._a.is_tracer():
    for j in range(int(np.max(np.asarray(counts)))):
      flat = step(j, flat)
  else:
    most = jnp.max(counts)
    _, flat = lax_ops.lib_while_loop(lambda c: c[0] < most,
                                 lambda c: (c[0] + 1, step(c[0], c[1])),
                                 (asarray(np.int32(0)), flat))
  return jnp.reshape(flat, x.shape)


def index_take(src, idxs, axes):
  """lax.index_take: src[idxs[0], idxs[1], ...] along axes (each index taken modulo its
  axis's size), the remaining axes after the indexed one."""
  api = "lax.index_take"
  x = asarray(src, api=api)
  axes = _ints(axes, "axes", api)
  idxs = [asarray(i, api=api) for i in idxs]
  if len(idxs) != len(axes):
    raise PartixTypeError(f"[{api}] {len(idxs)} index arrays for axes {axes}; give one per axis")
  for i in idxs:
    if i.ndim != 1 or not dtypes.is_int(i.dtype):
      raise PartixTypeError(f"[{api}] each index must be a 1-D integer array, got "
                            f"{i.dtype}{list(i.shape)}")
  cols = [jnp.remainder(_as_i32(i), x.shape[a]) for i, a in zip(idxs, axes)]
  indices = jnp.stack(cols, axis=1)
  sizes = [1 if d in axes else n for d, n in enumerate(x.shape)]
  dn = GatherDimensionNumbers(offset_dims=tuple(range(1, x.ndim - len(axes) + 1)),
                              collapsed_slice_dims=axes, start_index_map=axes)
  return gather(x, indices, dn, tuple(sizes))
