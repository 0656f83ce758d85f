"""jax.ops: segment_sum, segment_prod, segment_max and segment_min.

Each writes `data` into an array of num_segments rows through the lax scatter of its
reduction (lax.scatter_add / scatter_mul / scatter_max / scatter_min): row segment_ids[i]
takes data[i]; rows no index names keep the reduction's identity (0, 1, the dtype's lowest or
highest value, -inf/inf). Indices outside [0, num_segments) are dropped by default (mode
'fill'/'drop'/None), clamped with mode 'clip'. With bucket_size the rows are reduced in
buckets of that many consecutive indices first, then the buckets reduced together.

segment_max and segment_min differentiate as JAX's scatter_max/scatter_min do: a segment's
tangent is the mean of the tangents of the elements equal to its extreme value (ties share
it equally)."""
import operator

import numpy as np

from partix._src import custom_derivatives as _cd
from partix._src import dtypes
from partix._src import lax_gather
from partix._src.api import reshard
from partix._src import numpy_ops as jnp
from partix._src.core import Array, PartixError, PartixTypeError, asarray
from partix._src.jax_errors import ConcretizationTypeError
from partix._src.lax_gather import _mode
from partix._src.sharding import PartitionSpec
from partix._src.tracing import with_out_sharding

__all__ = ["segment_sum", "segment_prod", "segment_max", "segment_min"]


def _identity(kind, dtype):
  """The reduction's identity in dtype (what a segment no index names holds)."""
  d = np.dtype(dtype)
  if kind == "sum":
    return 0
  if kind == "prod":
    return 1
  if d == np.bool_:
    return kind == "min"
  if np.issubdtype(d, np.integer):
    info = np.iinfo(d)
    return int(info.max if kind == "min" else info.min)
  return float("inf") if kind == "min" else float("-inf")


def _static_int(api, name, value, least, kind, bound):
  """value as a Python int of at least `least`; errors name the argument, the API and value."""
  try:
    n = operator.index(value)
  except TypeError:
    raise PartixTypeError(f"[{api}] {name} must be {kind}, got {value!r}") from None
  if n < least:
    raise PartixError(f"[{api}] {name} must be {bound}, got {n}")
  return n


def _num_segments(num_segments, ids, api):
  if num_segments is None:
    if ids._a.is_tracer():
      raise ConcretizationTypeError(
          f"[{api}] num_segments=None needs concrete segment_ids (it is max(segment_ids) + 1, "
          f"the size of the result), but segment_ids is a traced {ids._aval_str()}; pass "
          "num_segments (a static int under jit)")
    if ids.size == 0:
      raise PartixError(f"[{api}] num_segments=None with empty segment_ids: there is no "
                        "max(segment_ids) + 1; pass num_segments")
    return int(np.max(np.asarray(ids))) + 1
  if isinstance(num_segments, Array):
    if num_segments._a.is_tracer():
      raise ConcretizationTypeError(
          f"[{api}] num_segments is a traced {num_segments._aval_str()}: it is the size of the "
          "result, so it must be a static int (static_argnums under jit)")
    num_segments = np.asarray(num_segments)
  return _static_int(api, "num_segments", num_segments, 0, "an int", "non-negative")


def _scatter(kind, out, index, updates, mode):
  """out.at[index].<kind>(updates) through lax's scatter of that kind: index has shape
  [..., k] (one k-vector per update, naming out's first k axes), updates index.shape[:-1] +
  out.shape[k:]."""
  k = index.shape[-1]
  batch = index.ndim - 1
  dn = lax_gather.ScatterDimensionNumbers(
      update_window_dims=tuple(range(batch, batch + out.ndim - k)),
      inserted_window_dims=tuple(range(k)), scatter_dims_to_operand_dims=tuple(range(k)))
  op = {"sum": lax_gather.scatter_add, "prod": lax_gather.scatter_mul,
        "max": lax_gather.scatter_max, "min": lax_gather.scatter_min}[kind]
  return op(out, index, updates, dn, mode=mode)


def _reduce(kind, data, ids, num_segments, bucket_size, mode):
  """The segment reduction itself (data and ids arrays, num_segments an int)."""
  dtype = data.dtype
  rest = tuple(data.shape[1:])
  updates = jnp.broadcast_to(data, tuple(ids.shape) + rest)
  if bucket_size is None:
    out = jnp.full((num_segments,) + rest, _identity(kind, dtype), dtype)
    return _scatter(kind, out, jnp.expand_dims(ids, -1), updates, mode)
  nb = -(-ids.size // bucket_size)
  out = jnp.full((nb, num_segments) + rest, _identity(kind, dtype), dtype)
  bucket = jnp.asarray(np.arange(ids.shape[0], dtype=np.int32) // bucket_size)
  index = jnp.stack([bucket, jnp.astype(ids, np.int32)], axis=-1)
  out = _scatter(kind, out, index, updates, mode)
  red = {"sum": jnp.sum, "prod": jnp.prod, "max": jnp.max, "min": jnp.min}[kind]
  return jnp.astype(red(out, axis=0), dtype)


def _extreme_jvp(kind):
  """JAX's derivative of a segment max/min: the tangent of each segment is the mean of the
  tangents of the elements equal to its value (with the identity counted as one more such
  element where it is the value, as JAX's scatter_max rule does)."""
  def reduce(num_segments, bucket_size, mode, data, ids):
    return _reduce(kind, data, ids, num_segments, bucket_size, mode)
  reduce = _cd.custom_jvp(reduce, nondiff_argnums=(0, 1, 2))

  @reduce.defjvp
  def jvp(num_segments, bucket_size, mode, primals, tangents):
    data, ids = primals
    t = tangents[0]
    out = reduce(num_segments, bucket_size, mode, data, ids)
    valid = jnp.logical_and(ids >= 0, ids < num_segments)
    if _mode(mode, None, "ops") is lax_gather.GatherScatterMode.CLIP:
      valid = jnp.ones_like(valid)
    at = jnp.take(out, jnp.clip(ids, 0, max(num_segments - 1, 0)), axis=0)
    valid = jnp.reshape(valid, tuple(ids.shape) + (1,) * (at.ndim - ids.ndim))
    data_b = jnp.broadcast_to(data, at.shape)
    won = jnp.logical_and(valid, data_b == at)
    count = _reduce("sum", jnp.astype(won, t.dtype), ids, num_segments, None, mode)
    kept = out == jnp.asarray(_identity(kind, data.dtype), data.dtype)
    share = jnp.where(kept, count + 1, count)
    share_at = jnp.take(share, jnp.clip(ids, 0, max(num_segments - 1, 0)), axis=0)
    contrib = jnp.where(won, jnp.broadcast_to(t, at.shape) / jnp.where(won, share_at, 1), 0)
    return out, _reduce("sum", jnp.astype(contrib, t.dtype), ids, num_segments, None, mode)
  return reduce


_EXTREME = {}


def _segment(kind, api, data, segment_ids, num_segments, indices_are_sorted, unique_indices,
             bucket_size, mode, out_sharding):
  data = asarray(data, api=api)
  ids = asarray(segment_ids, api=api)
  if not dtypes.is_int(ids.dtype):
    raise PartixTypeError(f"[{api}] segment_ids must be an integer array, got {ids.dtype}"
                          f"{list(ids.shape)}")
  n = _num_segments(num_segments, ids, api)
  m = _mode(mode, None, api)  # checks it (unknown modes are refused by name)
  del m
  if bucket_size is not None:
    bucket_size = _static_int(api, "bucket_size", bucket_size, 1, "an int or None",
                              "positive")
    if ids.ndim != 1:
      raise PartixError(f"[{api}] bucket_size needs 1-D segment_ids, got shape "
                        f"{tuple(ids.shape)}")
  if data.ndim and ids.ndim and data.shape[0] != ids.shape[0] and data.shape[0] != 1:
    raise PartixError(f"[{api}] data has {data.shape[0]} rows (its leading axis) but "
                      f"segment_ids has {ids.shape[0]}: one segment id per row of data")

  def compute(d, i):
    if kind in ("max", "min") and dtypes.is_float(d.dtype):
      if kind not in _EXTREME:
        _EXTREME[kind] = _extreme_jvp(kind)
      return _EXTREME[kind](n, bucket_size, mode, d, i)
    return _reduce(kind, d, i, n, bucket_size, mode)
  if out_sharding is None:
    for what, a in (("data", data), ("segment_ids", ids)):
      spec = lax_gather._explicit_spec(a)
      if any(e is not None for e in spec):
        raise PartixError(
            f"[{api}] {what} {a.dtype}{list(a.shape)} is split as {PartitionSpec(*spec)} over "
            "Explicit mesh axes, so the result's sharding is ambiguous (as in JAX): pass "
            "out_sharding= (e.g. P() under jax.set_mesh, or a NamedSharding)")
    return compute(data, ids)
  # As JAX's: the result typed as out_sharding says; computed from replicated inputs.
  return with_out_sharding(api, [data, ids], out_sharding, lambda: compute(
      reshard(data, PartitionSpec()), reshard(ids, PartitionSpec())))


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
  """jax.ops.segment_sum: out[s] = the sum of data[i] over the i with segment_ids[i] == s,
  out of shape (num_segments,) + data.shape[1:]. num_segments=None takes max(segment_ids)+1
  (concrete ids only: under jit pass it, static). Ids outside [0, num_segments) are dropped
  (mode 'clip' clamps them). indices_are_sorted and unique_indices are hints partix does not
  need; bucket_size sums buckets of that many rows first. Inputs split over Explicit mesh
  axes need out_sharding (a NamedSharding, or a PartitionSpec of the current mesh), the
  result's sharding, as in JAX."""
  return _segment("sum", "ops.segment_sum", data, segment_ids, num_segments,
                  indices_are_sorted, unique_indices, bucket_size, mode, out_sharding)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted=False,
                 unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
  """jax.ops.segment_prod: the product of each segment's rows (1 where a segment is empty);
  arguments as segment_sum's."""
  return _segment("prod", "ops.segment_prod", data, segment_ids, num_segments,
                  indices_are_sorted, unique_indices, bucket_size, mode, out_sharding)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
  """jax.ops.segment_max: the maximum of each segment's rows (-inf, or the integer dtype's
  lowest value, where a segment is empty); arguments as segment_sum's."""
  return _segment("max", "ops.segment_max", data, segment_ids, num_segments,
                  indices_are_sorted, unique_indices, bucket_size, mode, out_sharding)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
  """jax.ops.segment_min: the minimum of each segment's rows (inf, or the integer dtype's
  highest value, where a segment is empty); arguments as segment_sum's."""
  return _segment("min", "ops.segment_min", data, segment_ids, num_segments,
                  indices_are_sorted, unique_indices, bucket_size, mode, out_sharding)
