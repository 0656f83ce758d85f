"""The neighbours of floating-point values: jnp.nextafter / lax.nextafter and jnp.spacing.
Computed exactly with float arithmetic: every step is a power of two taken from a table (no
exp2, whose fast kernels approximate), added to or subtracted from the value."""
import numpy as np

from partix._src import dtypes as _dtypes
from partix._src import numpy_ops as jnp
from partix._src.core import PartixError, PartixTypeError

__all__ = ["nextafter", "spacing"]

# Per dtype: (mantissa bits, smallest subnormal's exponent, largest exponent, the dtype the
# arithmetic runs in). bf16 and f16 run in f32, which holds all their values and steps exactly.
_FORMATS = {np.dtype(np.float32): (23, -149, 128, np.float32),
            np.dtype(_dtypes.bfloat16): (7, -133, 128, np.float32),
            np.dtype(np.float16): (10, -24, 16, np.float32),
            np.dtype(np.float64): (52, -1074, 1024, np.float64)}


def _format(dtype, api):
  f = _FORMATS.get(np.dtype(dtype))
  if f is None:
    raise PartixTypeError(f"[{api}] needs a floating-point array, got {np.dtype(dtype)}")
  return f


def _step_away_and_toward(a, fmt):
  """For |x| = a > 0 finite: the step to the next value away from zero and toward it."""
  nmant, lo, hi, work = fmt
  with np.errstate(over="ignore"):  # 2**hi itself is inf: above every finite value
    table = np.ldexp(np.ones(hi - lo + 1, work), np.arange(lo, hi + 1)).astype(work)
  pow2 = jnp.asarray(table)
  # e with 2**(e-1) <= a < 2**e: log2 guesses it, the exact table comparisons settle it.
  safe = jnp.where(a > 0, a, 1.0)
  e = jnp.clip(jnp.floor(jnp.log2(safe)).astype(np.int32) + 1, lo + 1, hi)
  e = jnp.where(jnp.take(pow2, jnp.clip(e - 1 - lo, 0, hi - lo)) > a, e - 1, e)
  e = jnp.where(jnp.take(pow2, jnp.clip(e - lo, 0, hi - lo)) <= a, e + 1, e)
  away = jnp.take(pow2, jnp.clip(e - 1 - nmant - lo, 0, hi - lo))
  # At a power of two the values below are twice as dense (down to the subnormals).
  at_pow2 = jnp.take(pow2, jnp.clip(e - 1 - lo, 0, hi - lo)) == a
  toward = jnp.where(at_pow2 & (e - 2 - nmant >= lo),
                     jnp.take(pow2, jnp.clip(e - 2 - nmant - lo, 0, hi - lo)), away)
  return away, toward


def nextafter(x1, x2, /):
  """The next representable value after x1 in the direction of x2 (numpy's nextafter)."""
  a, b = jnp.asarray(x1), jnp.asarray(x2)
  if not (_dtypes.is_float(a.dtype) or _dtypes.is_float(b.dtype)):
    a, b = a.astype(np.float32), b.astype(np.float32)
  dt = np.result_type(a.dtype, b.dtype)
  fmt = _format(dt, "nextafter")
  work = fmt[3]
  x, y = a.astype(work), b.astype(work)
  mag = jnp.abs(x)
  away, toward = _step_away_and_toward(jnp.where(jnp.isinf(mag), 1.0, mag), fmt)
  finite_max = np.asarray(np.finfo(dt).max, work)
  up = y > x
  away_from_zero = up == (x > 0)
  step = jnp.where(away_from_zero, away, -toward)
  out = jnp.where(x > 0, x + step, x - step)
  out = jnp.where(out == 0, x * 0, out)  # reaching zero keeps x's sign, as numpy's
  tiny = np.asarray(np.ldexp(1.0, fmt[1]), work)
  out = jnp.where(x == 0, jnp.where(up, tiny, -tiny), out)
  out = jnp.where(jnp.isinf(x), jnp.where(x > 0, finite_max, -finite_max), out)
  out = jnp.where(x == y, y, out)
  out = jnp.where(jnp.isnan(x) | jnp.isnan(y), np.asarray(np.nan, work), out)
  return out.astype(dt)


def spacing(x, /):
  """The distance from x to its neighbour away from zero (numpy's spacing; for float16,
  toward +inf, as numpy and JAX compute it)."""
  a = jnp.asarray(x)
  if not _dtypes.is_float(a.dtype):
    a = a.astype(np.float32)
  if np.dtype(a.dtype) not in _FORMATS:
    raise PartixError(f"[spacing] needs a floating-point array, got {a.dtype}")
  inf = jnp.full_like(a, np.inf)
  if np.dtype(a.dtype) == np.float16:
    return nextafter(a, inf) - a
  r = nextafter(a, jnp.where(jnp.signbit(a), -inf, inf)) - a
  tiny = np.ldexp(1.0, _FORMATS[np.dtype(a.dtype)][1])
  return jnp.where(r == 0, jnp.where(jnp.signbit(a), -tiny, tiny).astype(a.dtype), r)
