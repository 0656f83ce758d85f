"""jax.image: resize and scale_and_translate, with JAX's kernels and sampling.

Pixels are half-centred: output pixel i of a dimension scaled by s and translated by t samples
the input at (i + 0.5 - t) / s - 0.5. For each resized dimension a weight matrix
[input size, output size] holds the kernel evaluated at the distance between each input pixel
and each sample (the kernel stretched by 1/s when antialiasing a downscale), each column
normalised to sum to 1; samples that fall outside the input get zero weight (repeated edge
pixels for 'cubic-pytorch' without antialiasing). The image is then contracted with each
dimension's matrix in turn. 'nearest' picks pixel floor((i + 0.5) * in / out) instead.

The weights of a static scale are computed on the host in float32, in the order JAX's program
computes them, so the matrices match JAX's; a traced scale or translation
(scale_and_translate under jit or grad) computes them in the program, differentiably."""
import enum
import math
import operator

import numpy as np

from partix._src import dtypes
from partix._src import numpy_ops as jnp
from partix._src.core import Array, PartixError, PartixTypeError, asarray
from partix._src.lax_ops import Precision
from partix._src.segment_ops import segment_sum

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
  """jax.image.ResizeMethod: NEAREST, LINEAR (triangle kernel), LANCZOS3, LANCZOS5, CUBIC (Keys'
  cubic, a = -0.5), CUBIC_PYTORCH (OpenCV's cubic, a = -0.75, edge pixels repeated when not
  antialiasing) and AREA (the overlap of input and output pixels)."""
  NEAREST = 0
  LINEAR = 1
  LANCZOS3 = 2
  LANCZOS5 = 3
  CUBIC = 4
  CUBIC_PYTORCH = 5
  AREA = 6

  @staticmethod
  def from_string(s):
    """The method a name stands for, as JAX's names go."""
    names = {"nearest": ResizeMethod.NEAREST, "linear": ResizeMethod.LINEAR,
             "bilinear": ResizeMethod.LINEAR, "trilinear": ResizeMethod.LINEAR,
             "triangle": ResizeMethod.LINEAR, "lanczos3": ResizeMethod.LANCZOS3,
             "lanczos5": ResizeMethod.LANCZOS5, "cubic": ResizeMethod.CUBIC,
             "bicubic": ResizeMethod.CUBIC, "tricubic": ResizeMethod.CUBIC,
             "cubic-pytorch": ResizeMethod.CUBIC_PYTORCH,
             "bicubic-pytorch": ResizeMethod.CUBIC_PYTORCH, "area": ResizeMethod.AREA}
    if s not in names:
      raise PartixError(f"[image.ResizeMethod] unknown resize method {s!r}: one of "
                        f"{', '.join(repr(n) for n in names)}")
    return names[s]


def _method(method, api):
  if isinstance(method, str):
    try:
      return ResizeMethod.from_string(method)
    except PartixError:
      raise PartixError(f"[{api}] unknown resize method {method!r}: 'nearest', 'linear' "
                        "('bilinear', 'trilinear', 'triangle'), 'cubic' ('bicubic', "
                        "'tricubic'), 'cubic-pytorch', 'lanczos3', 'lanczos5', 'area' or a "
                        "ResizeMethod") from None
  if isinstance(method, ResizeMethod):
    return method
  name = getattr(method, "name", None)  # JAX's own ResizeMethod members
  if isinstance(name, str) and name in ResizeMethod.__members__:
    return ResizeMethod[name]
  raise PartixError(f"[{api}] method must be a ResizeMethod or its name, got {method!r}")


# ---- kernels: xp is numpy (host weights) or partix.numpy (traced weights) ----

def _triangle(xp, x):
  return xp.maximum(0, 1 - xp.abs(x))


def _keys_cubic(xp, x):
  out = ((1.5 * x - 2.5) * x) * x + 1.0
  out = xp.where(x >= 1.0, ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0, out)
  return xp.where(x >= 2.0, 0.0, out)


def _opencv_cubic(xp, x):
  a = -0.75
  out = (((a + 2.0) * x - (a + 3.0)) * x) * x + 1.0
  out = xp.where(x >= 1.0, ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a, out)
  return xp.where(x >= 2.0, 0.0, out)


def _lanczos(radius):
  def kernel(xp, x):
    y = (radius * xp.sin(np.pi * x)) * xp.sin((np.pi * x) / radius)
    out = xp.where(x > 1e-3, y / xp.where(x != 0, np.pi ** 2 * (x * x), 1), 1)
    return xp.where(x > radius, 0.0, out)
  return kernel


_AREA = "area"
# method -> (radius, kernel)
_KERNELS = {ResizeMethod.LINEAR: (1, _triangle), ResizeMethod.LANCZOS3: (3, _lanczos(3.0)),
            ResizeMethod.LANCZOS5: (5, _lanczos(5.0)), ResizeMethod.CUBIC: (2, _keys_cubic),
            ResizeMethod.CUBIC_PYTORCH: (2, _opencv_cubic), ResizeMethod.AREA: (1, _AREA)}


def _weight_matrix(xp, m, n, inv_scale, translation, kernel, antialias, edge_padding, radius,
                   static_scale):
  """The [m, n] weights of one dimension: input size m, output size n. inv_scale and
  translation are float32 (numpy scalars, or partix arrays for xp = partix.numpy);
  static_scale is the scale as a Python float where it is known."""
  f32 = np.float32
  kernel_scale = xp.maximum(inv_scale, f32(1.0)) if antialias else f32(1.0)
  shift = translation * inv_scale
  sample = (xp.arange(n, dtype=f32) + f32(0.5)) * inv_scale - shift - f32(0.5)
  k = 0
  if edge_padding:
    if antialias:
      if static_scale is None:
        raise PartixError("[image.scale_and_translate] antialiasing with edge padding "
                          "('cubic-pytorch') needs a static scale, got a traced one")
      k = math.ceil(radius * max(1.0 / static_scale, 1.0))
    else:
      k = radius
  expanded = xp.arange(-k, m + k, dtype=f32)
  if kernel is _AREA:
    left_out = xp.arange(n, dtype=f32) * inv_scale - shift
    right_out = left_out + inv_scale
    left_in = xp.arange(m, dtype=f32)
    right_in = left_in + f32(1.0)
    weights = xp.maximum(f32(0.0), xp.minimum(right_out[None, :], right_in[:, None]) -
                         xp.maximum(left_out[None, :], left_in[:, None]))
  else:
    x = xp.abs(sample[None, :] - expanded[:, None]) / kernel_scale
    weights = kernel(xp, x)
  if edge_padding:
    rows = np.clip(np.arange(-k, m + k), 0, m - 1)
    if xp is np:
      mat = np.zeros((m, n), f32)
      np.add.at(mat, rows, weights.astype(f32))
    else:
      mat = segment_sum(weights, rows, m)
    weights = mat
  total = xp.sum(weights, axis=0, keepdims=True)
  eps = 1000.0 * float(np.finfo(np.float32).eps)
  weights = xp.where(xp.abs(total) > eps, weights / xp.where(total != 0, total, f32(1.0)),
                     f32(0.0))
  if not edge_padding:
    inside = xp.logical_and(sample >= f32(-0.5), sample <= f32(m - 0.5))
    weights = xp.where(inside[None, :], weights, f32(0.0))
  if xp is np:
    return np.asarray(weights, dtype=f32)
  return weights


def _inexact(x):
  """x promoted to a float dtype, as JAX's promote_dtypes_inexact (integers and bool become
  float32; float dtypes stay)."""
  if dtypes.is_float(x.dtype):
    return x
  return jnp.astype(x, np.float32)


def _contract(x, spatial, mats):
  """x with each dimension d of spatial contracted with its [in, out] matrix."""
  for d, w in zip(spatial, mats):
    w = jnp.astype(asarray(w), x.dtype)
    x = jnp.moveaxis(jnp.tensordot(x, w, axes=([d], [0])), -1, d)
  return x


def _shape_arg(shape, image, api):
  try:
    shape = tuple(operator.index(d) for d in shape)
  except TypeError:
    raise PartixTypeError(f"[{api}] shape must be a sequence of ints, got {shape!r}") from None
  if any(d < 0 for d in shape):
    raise PartixError(f"[{api}] shape {shape} has a negative dimension")
  if len(shape) != image.ndim:
    raise PartixError(f"[{api}] shape {shape} must have one entry per dimension of the image "
                      f"(shape {tuple(image.shape)}, {image.ndim} dimensions)")
  return shape


def _resize_nearest(x, shape):
  for d, (m, n) in enumerate(zip(x.shape, shape)):
    if m == n:
      continue
    pos = (np.arange(n, dtype=np.float32) + np.float32(0.5)) * np.float32(m) / np.float32(n)
    idx = np.floor(pos.astype(np.float32)).astype(np.int32)
    x = jnp.take(x, jnp.asarray(idx), axis=d)
  return x


def resize(image, shape, method, antialias=True, precision=Precision.HIGHEST):
  """jax.image.resize: image resampled to `shape` (one entry per dimension; a dimension whose
  size stays is not resampled, so batch and channel dimensions keep their size). method:
  'nearest', 'linear'/'bilinear'/'trilinear'/'triangle', 'cubic'/'bicubic'/'tricubic',
  'cubic-pytorch', 'lanczos3', 'lanczos5', 'area' or a ResizeMethod. antialias widens the
  kernel when downsampling (no effect when upsampling; 'nearest' ignores it). The result is
  the image's dtype for 'nearest', else the image promoted to a float dtype. precision is
  accepted: partix's CPU contractions are float32 at every precision."""
  api = "image.resize"
  image = asarray(image, api=api)
  shape = _shape_arg(shape, image, api)
  method = _method(method, api)
  if method is ResizeMethod.NEAREST:
    return _resize_nearest(image, shape)
  if image.size == 0 or 0 in shape:
    return jnp.zeros(shape, _inexact(jnp.zeros((), image.dtype)).dtype)
  x = _inexact(image)
  if method is ResizeMethod.CUBIC_PYTORCH and antialias:
    method = ResizeMethod.CUBIC
  radius, kernel = _KERNELS[method]
  edge = method is ResizeMethod.CUBIC_PYTORCH and not antialias
  spatial = [d for d in range(x.ndim) if x.shape[d] != shape[d]]
  mats = []
  for d in spatial:
    m, n = x.shape[d], shape[d]
    scale = n / m  # a Python float, as JAX's resize computes it
    mats.append(_weight_matrix(np, m, n, np.float32(1.0 / scale), 0.0, kernel, antialias,
                               edge, radius, scale))
  return _contract(x, spatial, mats)


def _scalars(v, k, what, api):
  """scale or translation: k numbers (host, float32) or a traced/partix array of k."""
  if isinstance(v, Array):
    v = jnp.reshape(_inexact(v), (-1,))
    if v.shape[0] != k:
      raise PartixError(f"[{api}] {what} has {v.shape[0]} entries for {k} spatial_dims")
    return [v[i] for i in range(k)], True
  try:
    arr = np.asarray(v, dtype=np.float64).reshape(-1)
  except (TypeError, ValueError):
    raise PartixTypeError(f"[{api}] {what} must be numbers, got {v!r}") from None
  if arr.shape[0] != k:
    raise PartixError(f"[{api}] {what} has {arr.shape[0]} entries for {k} spatial_dims")
  return [np.float32(a) for a in arr], False


def scale_and_translate(image, shape, spatial_dims, scale, translation, method,
                        antialias=True, precision=Precision.HIGHEST):
  """jax.image.scale_and_translate: a new image of `shape` whose spatial_dims sample the input
  at (output position - translation) / scale, half-centred pixels (samples outside the input
  give 0). scale and translation hold one number per spatial dim; either may be traced
  (differentiable). method as resize's except 'nearest', which JAX does not support here
  either."""
  api = "image.scale_and_translate"
  image = asarray(image, api=api)
  shape = _shape_arg(shape, image, api)
  method = _method(method, api)
  if method is ResizeMethod.NEAREST:
    raise PartixError(f"[{api}] nearest-neighbour resampling is not supported by "
                      "scale_and_translate (as in JAX); use resize(..., 'nearest')")
  try:
    spatial = [operator.index(d) for d in spatial_dims]
  except TypeError:
    raise PartixTypeError(f"[{api}] spatial_dims must be ints, got {spatial_dims!r}") from None
  for d in spatial:
    if not -image.ndim <= d < image.ndim:
      raise PartixError(f"[{api}] spatial dim {d} is out of range for an image of "
                        f"{image.ndim} dimensions")
  spatial = [d % image.ndim for d in spatial]
  for d in range(image.ndim):
    if d not in spatial and shape[d] != image.shape[d]:
      raise PartixError(f"[{api}] dimension {d} is not in spatial_dims but shape {shape} "
                        f"changes its size {image.shape[d]}")
  scales, traced_s = _scalars(scale, len(spatial), "scale", api)
  shifts, traced_t = _scalars(translation, len(spatial), "translation", api)
  x = _inexact(image)
  if not spatial:
    return x
  if method is ResizeMethod.CUBIC_PYTORCH and antialias:
    method = ResizeMethod.CUBIC
  radius, kernel = _KERNELS[method]
  edge = method is ResizeMethod.CUBIC_PYTORCH and not antialias
  traced = traced_s or traced_t
  mats = []
  for d, s, t in zip(spatial, scales, shifts):
    m, n = image.shape[d], shape[d]
    if traced:
      s = jnp.asarray(s, np.float32)
      t = jnp.asarray(t, np.float32)
      static = None if isinstance(s, Array) and s._a.is_tracer() else float(np.asarray(s))
      mats.append(_weight_matrix(jnp, m, n, np.float32(1.0) / s, t, kernel, antialias, edge,
                                 radius, static))
    else:
      mats.append(_weight_matrix(np, m, n, np.float32(1.0) / s, t, kernel, antialias, edge,
                                 radius, float(s)))
  return _contract(x, spatial, mats)
