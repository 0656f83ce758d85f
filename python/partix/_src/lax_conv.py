"""lax's convolutions (conv_general_dilated and its helpers), written over partix's primitives.

The input is laid out channels-last, dilated (zeros between its elements) and padded; each
window tap is a strided slice of it; the taps are stacked (im2col) and one dot_general
contracts them with the kernel. Autodiff, vmap, jit and sharding come from those ops."""
import enum
import itertools
import math
import operator
from typing import NamedTuple, Sequence, Union

import numpy as np

from partix._src import dtypes
from partix._src import lax_ops
from partix._src import numpy_ops as jnp
from partix._src.core import PartixError, PartixTypeError, asarray
from partix._src.tracing import with_out_sharding as _with_out_sharding

__all__ = ["ConvDimensionNumbers", "ConvGeneralDilatedDimensionNumbers", "conv",
           "conv_dimension_numbers", "conv_general_dilated", "conv_general_dilated_local",
           "conv_general_dilated_patches", "conv_general_permutations",
           "conv_general_shape_tuple", "conv_shape_tuple", "conv_transpose",
           "conv_transpose_shape_tuple", "conv_with_general_padding", "padtype_to_pads"]


class ConvDimensionNumbers(NamedTuple):
  """Dimension numbers of a convolution: lhs_spec and out_spec are (batch, feature,
  spatial...), rhs_spec is (out feature, in feature, spatial...)."""
  lhs_spec: Sequence[int]
  rhs_spec: Sequence[int]
  out_spec: Sequence[int]


ConvGeneralDilatedDimensionNumbers = Union[tuple[str, str, str], ConvDimensionNumbers, None]


def _fail(api, msg, type_error=False):
  return (PartixTypeError if type_error else PartixError)(f"[lax.{api}] {msg}")


def _ints(api, what, value, n, least):
  """value as a tuple of n Python ints each >= least (None: all ones)."""
  if value is None:
    return (1,) * n
  try:
    out = tuple(operator.index(v) for v in value)
  except TypeError:
    raise _fail(api, f"{what} must be a sequence of {n} ints, got {value!r}", True) from None
  if len(out) != n:
    raise _fail(api, f"{what} must have one entry per spatial dimension ({n}), got {value!r}")
  if any(v < least for v in out):
    raise _fail(api, f"{what} must be ints >= {least}, got {value!r}")
  return out


# ---- dimension numbers ----

def _permutations(api, dimension_numbers):
  if (not isinstance(dimension_numbers, (tuple, list)) or len(dimension_numbers) != 3
          or not all(isinstance(s, str) for s in dimension_numbers)):
    raise _fail(api, "dimension_numbers must be three strings (lhs_spec, rhs_spec, out_spec), "
                f"got {dimension_numbers!r}", True)
  pairs = (("N", "C"), ("O", "I"), ("N", "C"))
  for i, (spec, (a, b)) in enumerate(zip(dimension_numbers, pairs)):
    if spec.count(a) != 1 or spec.count(b) != 1:
      raise _fail(api, f"dimension_numbers[{i}] must contain the characters '{a}' and '{b}' "
                  f"exactly once, got {spec!r}", True)
    if len(set(spec)) != len(spec):
      raise _fail(api, f"dimension_numbers[{i}] has a duplicate character: {spec!r}", True)
  spatial = [set(s) - set(p) for s, p in zip(dimension_numbers, pairs)]
  if not spatial[0] == spatial[1] == spatial[2]:
    raise _fail(api, "dimension_numbers must name the same spatial characters in lhs, rhs and "
                f"out, got {tuple(dimension_numbers)!r}", True)
  rhs = dimension_numbers[1]

  def perm(spec, pair):
    # Spatial dimensions are ordered as the rhs spec names them.
    sp = sorted((i for i, c in enumerate(spec) if c not in pair), key=lambda i: rhs.index(spec[i]))
    return (spec.index(pair[0]), spec.index(pair[1])) + tuple(sp)
  return tuple(perm(s, p) for s, p in zip(dimension_numbers, pairs))


def conv_general_permutations(dimension_numbers):
  """The (lhs, rhs, out) permutations that dimension-number strings describe."""
  return _permutations("conv_general_permutations", dimension_numbers)


def _dimension_numbers(api, lhs_shape, rhs_shape, dimension_numbers):
  if isinstance(dimension_numbers, ConvDimensionNumbers):
    return dimension_numbers
  if len(lhs_shape) != len(rhs_shape):
    raise _fail(api, f"lhs and rhs must have the same rank, got shapes {tuple(lhs_shape)} and "
                f"{tuple(rhs_shape)}", True)
  if dimension_numbers is None:
    iota = tuple(range(len(lhs_shape)))
    return ConvDimensionNumbers(iota, iota, iota)
  if not isinstance(dimension_numbers, (tuple, list)):
    raise _fail(api, "dimension_numbers must be None, a ConvDimensionNumbers or three strings, "
                f"got {dimension_numbers!r}", True)
  if len(dimension_numbers) == 3 and all(isinstance(s, str) for s in dimension_numbers):
    for i, spec in enumerate(dimension_numbers):
      if len(spec) != len(lhs_shape):
        raise _fail(api, f"dimension_numbers[{i}] = {spec!r} must have one character per "
                    f"dimension of lhs and rhs (shapes {tuple(lhs_shape)} and "
                    f"{tuple(rhs_shape)})", True)
  return ConvDimensionNumbers(*_permutations(api, dimension_numbers))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers):
  """dimension_numbers (None, three strings or a ConvDimensionNumbers) as ConvDimensionNumbers."""
  return _dimension_numbers("conv_dimension_numbers", lhs_shape, rhs_shape, dimension_numbers)


def _check_specs(api, dn, ndim):
  for name, spec in zip(("lhs_spec", "rhs_spec", "out_spec"), dn):
    if sorted(int(d) for d in spec) != list(range(ndim)):
      raise _fail(api, f"dimension_numbers.{name} = {tuple(spec)} is not a permutation of the "
                  f"{ndim} dimensions")


# ---- shapes and padding ----

def padtype_to_pads(in_shape, window_shape, window_strides, padding):
  """'SAME', 'SAME_LOWER' or 'VALID' as (low, high) pads of each spatial dimension."""
  return _padtype_to_pads("padtype_to_pads", in_shape, window_shape, window_strides, padding)


def _padtype_to_pads(api, in_shape, window_shape, window_strides, padding):
  kind = padding.upper() if isinstance(padding, str) else getattr(padding, "name", None)
  if kind == "VALID":
    return [(0, 0)] * len(in_shape)
  if kind not in ("SAME", "SAME_LOWER"):
    raise _fail(api, f"padding must be 'VALID', 'SAME', 'SAME_LOWER' or (low, high) pairs, got "
                f"{padding!r}")
  pads = []
  for d, k, s in zip(in_shape, window_shape, window_strides):
    total = max((-(-int(d) // int(s)) - 1) * int(s) + int(k) - int(d), 0)
    small, big = total // 2, total - total // 2
    pads.append((small, big) if kind == "SAME" else (big, small))
  return pads


def _dilate_dim(d, r):
  return 0 if d == 0 else (int(d) - 1) * int(r) + 1


def _stride_dim(d, k, s):
  return max(0, (int(d) - int(k)) // int(s) + 1)


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1):
  """The output shape of a convolution of shapes in canonical (N, C, spatial...) order."""
  api = "conv_shape_tuple"
  if isinstance(pads, str):
    pads = _padtype_to_pads(api, lhs_shape[2:], rhs_shape[2:], strides, pads)
  if len(pads) != len(lhs_shape) - 2:
    raise _fail(api, f"expected {len(lhs_shape) - 2} (low, high) pads, got {pads!r}", True)
  padded = [int(d) + int(lo) + int(hi) for d, (lo, hi) in zip(lhs_shape[2:], pads)]
  if any(p < 0 for p in padded):
    raise _fail(api, f"negative padding {pads!r} is larger than the spatial dimensions "
                f"{tuple(lhs_shape[2:])}")
  space = tuple(_stride_dim(p, k, s) for p, k, s in zip(padded, rhs_shape[2:], strides))
  return (int(lhs_shape[0]) // int(batch_group_count), int(rhs_shape[0])) + space


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
  """The output shape of conv_general_dilated (without dilation) for shapes in dimension_numbers'
  layout."""
  lp, rp, op = _permutations("conv_general_shape_tuple", dimension_numbers)
  out = conv_shape_tuple(np.take(lhs_shape, lp), np.take(rhs_shape, rp), window_strides, padding)
  return tuple(int(v) for v in np.take(out, np.argsort(op)))


def _transpose_pads(api, k, s, padding):
  if padding == "SAME":
    total = k + s - 2
    lo = k - 1 if s > k - 1 else -(-total // 2)
  elif padding == "VALID":
    total, lo = k + s - 2 + max(k - s, 0), k - 1
  elif isinstance(padding, (tuple, list)) and len(padding) == 2:
    lo, hi = (k - int(p) - 1 for p in padding)
    total = lo + hi
  else:
    raise _fail(api, f"padding must be 'SAME', 'VALID' or (low, high) pairs, got {padding!r}")
  return lo, total - lo


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
  """The output shape of conv_transpose for shapes in dimension_numbers' layout."""
  api = "conv_transpose_shape_tuple"
  lp, rp, op = _permutations(api, dimension_numbers)
  lhs, rhs = [int(v) for v in np.take(lhs_shape, lp)], [int(v) for v in np.take(rhs_shape, rp)]
  if isinstance(padding, str):
    padding = [_transpose_pads(api, k, s, padding) for k, s in zip(rhs[2:], window_strides)]
  space = [(i - 1) * s - k + 2 + int(sum(p))
           for i, k, s, p in zip(lhs[2:], rhs[2:], window_strides, padding)]
  out = (lhs[0], rhs[0], *space)
  return tuple(int(v) for v in np.take(out, np.argsort(op)))


# ---- the checked plan of one convolution ----

class _Plan(NamedTuple):
  dn: ConvDimensionNumbers
  strides: tuple
  pads: tuple
  lhs_dilation: tuple
  rhs_dilation: tuple
  kernel: tuple      # the kernel's spatial sizes, in canonical order
  out_space: tuple   # the output's spatial sizes, in canonical order
  groups: int        # feature_group_count
  batch_groups: int  # batch_group_count


def _explicit_pads(api, padding, n):
  try:
    pads = tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
  except (TypeError, ValueError):
    raise _fail(api, "padding must be 'SAME', 'SAME_LOWER', 'VALID' or a sequence of (low, "
                f"high) int pairs, got {padding!r}") from None
  if len(pads) != n:
    raise _fail(api, f"padding needs {n} (low, high) pairs, one per spatial dimension, got "
                f"{padding!r}")
  return pads


def _check_groups(api, lhs_shape, rhs_shape, dn, groups, batch_groups):
  for name, g in (("feature_group_count", groups), ("batch_group_count", batch_groups)):
    if not isinstance(g, (int, np.integer)) or isinstance(g, bool) or g < 1:
      raise _fail(api, f"{name} must be a positive int, got {g!r}")
  if groups > 1 and batch_groups > 1:
    raise _fail(api, "at most one of feature_group_count and batch_group_count may be > 1, got "
                f"{groups} and {batch_groups}")
  c, n = lhs_shape[dn.lhs_spec[1]], lhs_shape[dn.lhs_spec[0]]
  o, i = rhs_shape[dn.rhs_spec[0]], rhs_shape[dn.rhs_spec[1]]
  if c % groups or c // groups != i:
    raise _fail(api, f"lhs feature size {c} divided by feature_group_count={groups} must equal "
                f"the rhs input feature size {i} (shapes {tuple(lhs_shape)}, {tuple(rhs_shape)})")
  if o % groups:
    raise _fail(api, f"rhs output feature size {o} is not a multiple of "
                f"feature_group_count={groups}")
  if n % batch_groups:
    raise _fail(api, f"batch_group_count={batch_groups} does not divide the lhs batch size {n}")
  if o % batch_groups:
    raise _fail(api, f"rhs output feature size {o} is not a multiple of "
                f"batch_group_count={batch_groups}")


def _plan(api, lhs_shape, rhs_shape, window_strides, padding, lhs_dilation, rhs_dilation,
          dimension_numbers, groups=1, batch_groups=1):
  """Checks a convolution's arguments (JAX's rules) and resolves its padding and sizes."""
  lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
  if len(lhs_shape) != len(rhs_shape) or len(lhs_shape) < 2:
    raise _fail(api, "lhs and rhs must have the same rank, at least 2, got shapes "
                f"{lhs_shape} and {rhs_shape}", True)
  dn = _dimension_numbers(api, lhs_shape, rhs_shape, dimension_numbers)
  _check_specs(api, dn, len(lhs_shape))
  n = len(lhs_shape) - 2
  strides = _ints(api, "window_strides", window_strides, n, 1)
  ld = _ints(api, "lhs_dilation", lhs_dilation, n, 1)
  rd = _ints(api, "rhs_dilation", rhs_dilation, n, 1)
  _check_groups(api, lhs_shape, rhs_shape, dn, groups, batch_groups)
  space = [lhs_shape[d] for d in dn.lhs_spec[2:]]
  kernel = tuple(rhs_shape[d] for d in dn.rhs_spec[2:])
  eff_kernel = [_dilate_dim(k, r) for k, r in zip(kernel, rd)]
  if isinstance(padding, str):
    if any(d != 1 for d in ld):
      raise _fail(api, f"string padding {padding!r} is not supported with lhs_dilation={ld}: "
                  "give explicit (low, high) pairs or use lax.conv_transpose")
    pads = tuple(_padtype_to_pads(api, space, eff_kernel, strides, padding))
  else:
    pads = _explicit_pads(api, padding, n)
  padded = [_dilate_dim(d, r) + lo + hi for d, r, (lo, hi) in zip(space, ld, pads)]
  if any(p < 0 for p in padded):
    raise _fail(api, f"negative padding {pads} is larger than the (dilated) spatial sizes "
                f"{tuple(_dilate_dim(d, r) for d, r in zip(space, ld))}")
  out_space = tuple(_stride_dim(p, k, s) for p, k, s in zip(padded, eff_kernel, strides))
  return _Plan(dn, strides, pads, ld, rd, kernel, out_space, int(groups), int(batch_groups))


# ---- the computation ----

def _dilate(x, axis, d):
  """Puts d - 1 zeros between neighbouring elements of axis."""
  size = x.shape[axis]
  if d == 1 or size == 0:
    return x
  cfg = [(0, 0, 0)] * (x.ndim + 1)
  cfg[axis + 1] = (0, d - 1, 0)
  y = lax_ops.pad(jnp.expand_dims(x, axis + 1), 0, cfg)
  y = jnp.reshape(y, x.shape[:axis] + (size * d,) + x.shape[axis + 1:])
  return jnp.slice_in_dim(y, 0, (size - 1) * d + 1, axis=axis)


def _pad(x, pads):
  """Pads the spatial axes 1..n (a negative pad crops after the positive ones are applied)."""
  if all(lo == 0 and hi == 0 for lo, hi in pads):
    return x
  cfg = [(0, 0, 0)] + [(max(lo, 0), max(hi, 0), 0) for lo, hi in pads] + [(0, 0, 0)]
  if any(a or b for a, b, _ in cfg):
    x = lax_ops.pad(x, 0, cfg)
  start = [0] + [max(-lo, 0) for lo, _ in pads] + [0]
  limit = list(x.shape)
  for i, (_, hi) in enumerate(pads):
    limit[i + 1] -= max(-hi, 0)
  if start != [0] * x.ndim or limit != list(x.shape):
    x = lax_ops.slice(x, start, limit)
  return x


def _strided_pads(x, plan):
  """plan's pads, each strided axis's high pad changed so that its padded size is a whole
  number of strides covering every window (the extra is never read; a negative pad crops)."""
  pads = []
  for i, ((lo, hi), s, k, r, o) in enumerate(zip(plan.pads, plan.strides, plan.kernel,
                                                  plan.rhs_dilation, plan.out_space)):
    if s > 1:
      size = x.shape[1 + i] + lo + hi
      hi += ((k - 1) * r // s + o) * s - size
    pads.append((lo, hi))
  return pads


def _split_strided(x, strides):
  """x (N, spatial..., C) with each spatial axis of stride s > 1 reshaped to (blocks, s), so a
  strided window is unit-stride slices (a strided slice's gradient is slow in partix). Returns
  x and where each spatial axis starts."""
  shape, where = [x.shape[0]], []
  for i, s in enumerate(strides):
    where.append(len(shape))
    shape += [x.shape[1 + i]] if s == 1 else [x.shape[1 + i] // s, s]
  if len(shape) == x.ndim - 1:
    return x, where
  return jnp.reshape(x, tuple(shape) + (x.shape[-1],)), where


def _taps(x, plan):
  """The window taps of channels-last x (N, spatial..., C): (N, out..., taps, C), the taps in
  row-major order of the kernel's spatial positions."""
  for axis, d in enumerate(plan.lhs_dilation):
    x = _dilate(x, axis + 1, d)
  x = _pad(x, _strided_pads(x, plan))
  x, where = _split_strided(x, plan.strides)
  tap_shape = (x.shape[0], *plan.out_space, 1, x.shape[-1])
  taps = []
  for pos in itertools.product(*[range(k) for k in plan.kernel]):
    start, limit = [0] * x.ndim, list(x.shape)
    for i, (p, r, s, o) in enumerate(zip(pos, plan.rhs_dilation, plan.strides, plan.out_space)):
      b, a = p * r, where[i]
      if s == 1:
        start[a], limit[a] = b, b + o
      else:
        start[a], limit[a] = b // s, b // s + o
        start[a + 1], limit[a + 1] = b % s, b % s + 1
    taps.append(jnp.reshape(lax_ops.slice(x, start, limit), tap_shape))
  return taps[0] if len(taps) == 1 else jnp.concatenate(taps, axis=len(tap_shape) - 2)


def _to_channels_last(x, spec):
  perm = (spec[0], *spec[2:], spec[1])
  return x if tuple(perm) == tuple(range(x.ndim)) else jnp.transpose(x, perm)


def _from_channels_last(y, spec):
  """y (N, spatial..., C) into the layout out_spec names."""
  n = y.ndim - 2
  where = {0: 0, 1: n + 1, **{2 + i: 1 + i for i in range(n)}}
  perm = [0] * y.ndim
  for j, d in enumerate(spec):
    perm[int(d)] = where[j]
  return y if perm == list(range(y.ndim)) else jnp.transpose(y, perm)


def _contract(p, w, plan, preferred):
  """p (N, out..., T, C) with w (T, I, O): (N, out..., O), by feature or batch groups."""
  n, nd = len(plan.out_space), p.ndim
  t, c, o = p.shape[-2], p.shape[-1], w.shape[-1]
  out_sp = p.shape[1:1 + n]
  if plan.groups == 1 and plan.batch_groups == 1:
    return lax_ops.dot_general(p, w, (([nd - 2, nd - 1], [0, 1]), ([], [])),
                               preferred_element_type=preferred)
  if plan.groups > 1:
    g = plan.groups
    p = jnp.reshape(p, p.shape[:-1] + (g, c // g))
    w = jnp.reshape(w, (t, c // g, g, o // g))
    y = lax_ops.dot_general(p, w, (([nd - 2, nd], [0, 1]), ([nd - 1], [2])),
                            preferred_element_type=preferred)   # (G, N, out..., O/G)
    y = jnp.transpose(y, (*range(1, n + 2), 0, n + 2))
    return jnp.reshape(y, y.shape[:n + 1] + (o,))
  b = plan.batch_groups
  p = jnp.reshape(p, (b, p.shape[0] // b) + p.shape[1:])
  w = jnp.reshape(w, (t, c, b, o // b))
  y = lax_ops.dot_general(p, w, (([nd - 1, nd], [0, 1]), ([0], [2])),
                          preferred_element_type=preferred)     # (B, N/B, out..., O/B)
  y = jnp.transpose(y, (*range(1, n + 2), 0, n + 2))
  return jnp.reshape(y, (y.shape[0],) + tuple(out_sp) + (o,))


def _axis_phases(size, k, r, s, ld, lo, out):
  """One spatial axis of an lhs-dilated convolution split by output phase: output y = p*q + phi
  reads only the taps k0, k0 + step, ... of the kernel, at undilated input positions c0 + q*s2
  + j*r2. Returns p and, per phase, None (no tap reads an input element) or the sub-convolution
  (k0, step, taps, r2, s2, pad_lo, pad_hi, outputs)."""
  p, s2 = ld // math.gcd(s, ld), s // math.gcd(s, ld)
  step, r2 = ld // math.gcd(r, ld), r // math.gcd(r, ld)
  phases = []
  for phi in range(p):
    n_phi = -(-(out - phi) // p) if out > phi else 0
    k0 = next((j for j in range(min(step, k)) if (phi * s + j * r - lo) % ld == 0), None)
    if k0 is None or n_phi == 0:
      phases.append(None)
      continue
    taps = len(range(k0, k, step))
    pad_lo = -((phi * s + k0 * r - lo) // ld)
    pad_hi = (n_phi - 1) * s2 + (taps - 1) * r2 + 1 - size - pad_lo
    phases.append((k0, step, taps, r2, s2, pad_lo, pad_hi, n_phi))
  return p, phases


def _conv_phases(xc, wk, plan, preferred):
  """An lhs-dilated convolution without the dilation's zeros: one convolution of the undilated
  input per output phase (with only the taps that meet input elements), interleaved."""
  n = len(plan.out_space)
  axes = [_axis_phases(xc.shape[1 + i], plan.kernel[i], plan.rhs_dilation[i], plan.strides[i],
                       plan.lhs_dilation[i], plan.pads[i][0], plan.out_space[i])
          for i in range(n)]
  periods = [p for p, _ in axes]
  blocks = [-(-o // p) for o, p in zip(plan.out_space, periods)]
  outs = []
  for combo in itertools.product(*[phases for _, phases in axes]):
    if any(c is None for c in combo):
      outs.append(None)
      continue
    sub = plan._replace(strides=tuple(c[4] for c in combo), pads=tuple((c[5], c[6]) for c in combo),
                        lhs_dilation=(1,) * n, rhs_dilation=tuple(c[3] for c in combo),
                        kernel=tuple(c[2] for c in combo), out_space=tuple(c[7] for c in combo))
    w = lax_ops.slice(wk, [c[0] for c in combo] + [0, 0],
                      [c[0] + (c[2] - 1) * c[1] + 1 for c in combo] + list(wk.shape[-2:]),
                      [c[1] for c in combo] + [1, 1])
    y = _contract(_taps(xc, sub), jnp.reshape(w, (-1,) + wk.shape[-2:]), sub, preferred)
    cfg = [(0, 0, 0)] + [(0, b - c[7], 0) for b, c in zip(blocks, combo)] + [(0, 0, 0)]
    outs.append(lax_ops.pad(y, 0, cfg) if any(a[1] for a in cfg) else y)
  ref = next((y for y in outs if y is not None), None)
  if ref is None:   # no output element meets an input element
    return jnp.zeros((xc.shape[0] // plan.batch_groups, *plan.out_space, wk.shape[-1]),
                     preferred if preferred is not None else xc.dtype)
  y = jnp.stack([jnp.zeros_like(ref) if y is None else y for y in outs])
  y = jnp.reshape(y, (*periods, *ref.shape))          # (p..., N, blocks..., O)
  perm = [n] + [a for i in range(n) for a in (n + 1 + i, i)] + [2 * n + 1]
  y = jnp.reshape(jnp.transpose(y, perm),
                  (ref.shape[0], *[b * p for b, p in zip(blocks, periods)], ref.shape[-1]))
  return lax_ops.slice(y, [0] * y.ndim, [y.shape[0], *plan.out_space, y.shape[-1]])


def _conv(x, w, plan, preferred):
  dn = plan.dn
  o = w.shape[dn.rhs_spec[0]]
  n_out = x.shape[dn.lhs_spec[0]] // plan.batch_groups
  if 0 in plan.out_space or 0 in x.shape or 0 in w.shape:
    dt = preferred if preferred is not None else x.dtype
    y = jnp.zeros((n_out, *plan.out_space, o), dt)
    return _from_channels_last(y, dn.out_spec)
  boolean = x.dtype == np.bool_
  if boolean:
    x, w = jnp.astype(x, np.int32), jnp.astype(w, np.int32)
  elif preferred is not None and dtypes.is_int(x.dtype) and not dtypes.is_int(preferred):
    # An integer contraction asked for a float result: contract in that float type.
    x, w, preferred = jnp.astype(x, preferred), jnp.astype(w, preferred), None
  xc = _to_channels_last(x, dn.lhs_spec)
  wk = jnp.transpose(w, (*dn.rhs_spec[2:], dn.rhs_spec[1], dn.rhs_spec[0]))   # (K..., I, O)
  pref = None if boolean else preferred
  if any(d > 1 for d in plan.lhs_dilation):
    y = _conv_phases(xc, wk, plan, pref)
  else:
    y = _contract(_taps(xc, plan), jnp.reshape(wk, (-1,) + wk.shape[-2:]), plan, pref)
  if boolean:
    y = y > 0 if preferred is None else jnp.astype(y > 0, preferred)
  return _from_channels_last(y, dn.out_spec)


_PRECISION_NAMES = ("default", "high", "highest", "bfloat16", "bfloat16_3x", "tensorfloat32",
                    "float32", "fastest")


def _check_precision(api, precision):
  """precision as JAX takes it: None, a Precision (or other enum), one of its names, or a pair
  of those (partix's f32 contractions are exact f32 whatever is asked)."""
  one = (lambda p: p is None or isinstance(p, enum.Enum)
         or isinstance(p, str) and p.lower() in _PRECISION_NAMES)
  if isinstance(precision, (tuple, list)) and len(precision) == 2 and all(map(one, precision)):
    return
  if not one(precision):
    raise _fail(api, f"precision must be None, a lax.Precision, one of {_PRECISION_NAMES} or a "
                f"pair of those, got {precision!r}")


def _check_dtypes(api, x, w):
  if x.dtype != w.dtype:
    raise _fail(api, f"lhs and rhs must have the same dtype, got {x.dtype} and {w.dtype}", True)


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1,
                         precision=None, preferred_element_type=None, out_sharding=None):
  """General n-dimensional convolution with strides, padding, lhs/rhs dilation and groups (JAX's
  lax.conv_general_dilated); precision is accepted (partix's f32 contractions are exact f32)."""
  api = "conv_general_dilated"
  x, w = asarray(lhs, api=f"lax.{api}"), asarray(rhs, api=f"lax.{api}")
  plan = _plan(api, x.shape, w.shape, window_strides, padding, lhs_dilation, rhs_dilation,
               dimension_numbers, feature_group_count, batch_group_count)
  _check_dtypes(api, x, w)
  _check_precision(api, precision)
  if out_sharding is None:
    return _conv(x, w, plan, preferred_element_type)
  return _with_out_sharding(f"lax.{api}", [x, w], out_sharding,
                            lambda: _conv(x, w, plan, preferred_element_type))


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
  """conv_general_dilated in the NCHW / OIHW layout without dilation."""
  return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                              preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              precision=None, preferred_element_type=None):
  """conv_general_dilated in the NCHW / OIHW layout with dilations."""
  return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                              rhs_dilation=rhs_dilation, precision=precision,
                              preferred_element_type=preferred_element_type)


_TRANSPOSE_DEFAULTS = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                       4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel=False, precision=None, preferred_element_type=None,
                   use_consistent_padding=False):
  """The fractionally strided ("transposed") convolution: conv_general_dilated with
  lhs_dilation=strides; 'SAME'/'VALID' (or any padding with use_consistent_padding) name the
  forward convolution's padding. transpose_kernel flips the kernel and swaps I and O."""
  api = "conv_transpose"
  x, w = asarray(lhs, api=f"lax.{api}"), asarray(rhs, api=f"lax.{api}")
  if x.ndim != w.ndim or x.ndim < 2:
    raise _fail(api, "lhs and rhs must have the same rank, at least 2, got shapes "
                f"{x.shape} and {w.shape}", True)
  if dimension_numbers is None:
    if x.ndim not in _TRANSPOSE_DEFAULTS:
      raise _fail(api, f"no default dimension_numbers for rank {x.ndim}: give them")
    dimension_numbers = _TRANSPOSE_DEFAULTS[x.ndim]
  dn = _dimension_numbers(api, x.shape, w.shape, dimension_numbers)
  _check_specs(api, dn, x.ndim)
  n = x.ndim - 2
  strides = _ints(api, "strides", strides, n, 1)
  rd = _ints(api, "rhs_dilation", rhs_dilation, n, 1)
  kernel = [w.shape[d] for d in dn.rhs_spec[2:]]
  if use_consistent_padding or (isinstance(padding, str) and padding in ("SAME", "VALID")):
    per_dim = [padding] * n if isinstance(padding, str) else list(padding)
    if len(per_dim) != n:
      raise _fail(api, f"padding needs {n} (low, high) pairs, got {padding!r}")
    pads = [_transpose_pads(api, _dilate_dim(k, r), s, p)
            for k, r, s, p in zip(kernel, rd, strides, per_dim)]
  else:
    pads = padding
  if transpose_kernel:
    w = jnp.flip(w, tuple(int(d) for d in dn.rhs_spec[2:]))
    w = jnp.swapaxes(w, dn.rhs_spec[0], dn.rhs_spec[1])
  return conv_general_dilated(x, w, (1,) * n, pads, strides, rd, dn, precision=precision,
                              preferred_element_type=preferred_element_type)


def _patches(api, x, filter_shape, window_strides, padding, lhs_dilation, rhs_dilation,
             dimension_numbers):
  """x's patches channels-last, (N, out..., C * taps) with c major, and the plan."""
  try:
    filter_shape = tuple(operator.index(k) for k in filter_shape)
  except TypeError:
    raise _fail(api, f"filter_shape must be a sequence of ints, got {filter_shape!r}",
                True) from None
  if len(filter_shape) != x.ndim - 2 or any(k < 1 for k in filter_shape):
    raise _fail(api, f"filter_shape must be {x.ndim - 2} positive ints (one per spatial "
                f"dimension of lhs {x.shape}), got {filter_shape!r}")
  dn = _dimension_numbers(api, x.shape, (1, 1) + filter_shape, dimension_numbers)
  _check_specs(api, dn, x.ndim)
  c, taps = x.shape[dn.lhs_spec[1]], math.prod(filter_shape)
  rhs_shape = [0] * x.ndim
  rhs_shape[dn.rhs_spec[0]], rhs_shape[dn.rhs_spec[1]] = c * taps, 1
  for d, k in zip(dn.rhs_spec[2:], filter_shape):
    rhs_shape[d] = k
  plan = _plan(api, x.shape, rhs_shape, window_strides, padding, lhs_dilation, rhs_dilation,
               dn, max(c, 1))
  if 0 in plan.out_space or 0 in x.shape:
    n_b = x.shape[dn.lhs_spec[0]]
    return jnp.zeros((n_b, *plan.out_space, c * taps), x.dtype), plan
  p = _taps(_to_channels_last(x, dn.lhs_spec), plan)   # (N, out..., T, C)
  p = jnp.swapaxes(p, -1, -2)
  return jnp.reshape(p, p.shape[:-2] + (c * taps,)), plan


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None,
                                 rhs_dilation=None, dimension_numbers=None, precision=None,
                                 preferred_element_type=None):
  """The receptive-field patches of conv_general_dilated: the output's feature dimension holds
  each window flattened as (C, spatial...) in rhs_spec's spatial order."""
  api = "conv_general_dilated_patches"
  x = asarray(lhs, api=f"lax.{api}")
  p, plan = _patches(api, x, filter_shape, window_strides, padding, lhs_dilation, rhs_dilation,
                     dimension_numbers)
  if preferred_element_type is not None:
    p = jnp.astype(p, preferred_element_type)
  return _from_channels_last(p, plan.dn.out_spec)


def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape,
                               lhs_dilation=None, rhs_dilation=None, dimension_numbers=None,
                               precision=None):
  """An unshared ("locally connected") convolution: rhs holds one kernel per output position
  (its spatial dimensions are the output's; its I dimension is the patch, (C, window...))."""
  api = "conv_general_dilated_local"
  x, w = asarray(lhs, api=f"lax.{api}"), asarray(rhs, api=f"lax.{api}")
  if w.ndim != x.ndim:
    raise _fail(api, f"lhs and rhs must have the same rank, got shapes {x.shape} and "
                f"{w.shape}", True)
  p, plan = _patches(api, x, filter_shape, window_strides, padding, lhs_dilation, rhs_dilation,
                     dimension_numbers)
  dn, n = plan.dn, x.ndim - 2
  want = [0] * x.ndim
  want[dn.rhs_spec[1]] = p.shape[-1]
  want[dn.rhs_spec[0]] = w.shape[dn.rhs_spec[0]]
  for d, o in zip(dn.rhs_spec[2:], plan.out_space):
    want[d] = o
  if tuple(want) != w.shape:
    raise _fail(api, f"rhs must have shape {tuple(want)} (the output's spatial sizes, "
                f"I = C * window size, O), got {w.shape}")
  _check_dtypes(api, x, w)
  wk = jnp.transpose(w, (*dn.rhs_spec[2:], dn.rhs_spec[1], dn.rhs_spec[0]))   # (out..., I, O)
  y = lax_ops.dot_general(p, wk, (([n + 1], [n]), (list(range(1, n + 1)), list(range(n)))))
  y = jnp.moveaxis(y, n, 0)   # (out..., N, O) -> (N, out..., O)
  return _from_channels_last(y, dn.out_spec)
