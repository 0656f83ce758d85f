"""Bitwise ops and shifts of integer arrays (bools: logical), under numpy's names (bitwise_and,
left_shift, ...) and lax's (shift_right_logical, population_count, clz). The elementwise ones
are the core's primitives (and, or, xor, not, shift_left, shift_right_arithmetic); counting
bits is composed from them in the unsigned type of the operand's width."""
from partix import _core
from partix._src import dtypes
from partix._src.core import Array, PartixError, asarray
from partix._src.numpy_ops import _binary

__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "invert",
           "bitwise_invert", "left_shift", "bitwise_left_shift", "right_shift",
           "bitwise_right_shift", "bitwise_count", "shift_left", "shift_right_arithmetic",
           "shift_right_logical", "population_count", "clz"]

_UNSIGNED = {8: "u8", 16: "u16", 32: "u32"}
_WIDTH = {"i8": 8, "u8": 8, "i16": 16, "u16": 16, "i32": 32, "u32": 32, "i64": 64}


bitwise_and = _binary("bitwise_and", _core.bitwise_and)
bitwise_or = _binary("bitwise_or", _core.bitwise_or)
bitwise_xor = _binary("bitwise_xor", _core.bitwise_xor)
shift_left = _binary("shift_left", _core.shift_left)
shift_right_arithmetic = _binary("shift_right_arithmetic", _core.shift_right_arithmetic)
shift_right_logical = _binary("shift_right_logical", _core.shift_right_logical)
left_shift = bitwise_left_shift = shift_left
# numpy's right shift: arithmetic for signed types, which for unsigned ones is logical.
right_shift = bitwise_right_shift = shift_right_arithmetic


def bitwise_not(x, /):
  """~x: the bits of an integer flipped; a bool negated."""
  return Array(_core.bitwise_not(asarray(x, api="bitwise_not")._a))


invert = bitwise_invert = bitwise_not


def _unsigned_words(x, api):
  """x's bits as unsigned 32-bit words (one for types up to 32 bits, low and high for i64),
  with the operand's width."""
  a = asarray(x, api=api)._a
  width = _WIDTH.get(a.dtype)
  if width is None:
    raise PartixError(f"[{api}] needs an integer array, got {dtypes.from_core(a.dtype)}")
  if width == 64:
    lo = _core.astype(a, "u32")
    hi = _core.astype(_core.shift_right_logical(a, _core.full([], 32.0, "i64", None)), "u32")
    return [lo, hi], width, a.dtype
  if width < 32:  # zero-extended: the unsigned type of the width keeps exactly its bits
    a = _core.astype(a, _UNSIGNED[width])
  return [_core.astype(a, "u32")], width, a.dtype


def _u32(v):
  return _core.full([], float(v), "u32", None)


def _popcount32(v):
  """Bits set in each u32 element (the classic sums of pairs, nibbles and bytes)."""
  v = _core.sub(v, _core.bitwise_and(_core.shift_right_arithmetic(v, _u32(1)), _u32(0x55555555)))
  v = _core.add(_core.bitwise_and(v, _u32(0x33333333)),
                _core.bitwise_and(_core.shift_right_arithmetic(v, _u32(2)), _u32(0x33333333)))
  v = _core.bitwise_and(_core.add(v, _core.shift_right_arithmetic(v, _u32(4))),
                        _u32(0x0F0F0F0F))
  return _core.shift_right_arithmetic(_core.mul(v, _u32(0x01010101)), _u32(24))


def population_count(x, /):
  """The number of bits set in each element, in the operand's dtype (lax.population_count)."""
  words, _, _ = _unsigned_words(x, "population_count")
  n = _popcount32(words[0])
  for w in words[1:]:
    n = _core.add(n, _popcount32(w))
  return Array(_core.astype(n, asarray(x)._a.dtype))


def bitwise_count(x, /):
  """numpy.bitwise_count: bits set in |x| (uint8, as numpy and JAX)."""
  a = asarray(x, api="bitwise_count")
  if a._a.dtype in ("i8", "i16", "i32", "i64"):
    a = Array(_core.abs(a._a))
  return Array(_core.astype(population_count(a)._a, "u8"))


def clz(x, /):
  """The number of leading zero bits of each element, in its width (lax.clz)."""
  words, width, _ = _unsigned_words(x, "clz")
  if width == 64:
    lo, hi = words
    zeros_hi = _core.sub(_u32(32), _popcount32(_smear(hi)))
    zeros_lo = _core.sub(_u32(32), _popcount32(_smear(lo)))
    n = _core.where(_core.eq(hi, _u32(0)), _core.add(_u32(32), zeros_lo), zeros_hi)
  else:
    n = _core.sub(_u32(width), _popcount32(_smear(words[0])))
  return Array(_core.astype(n, asarray(x)._a.dtype))


def _smear(v):
  """Every bit below the highest set bit set too."""
  for s in (1, 2, 4, 8, 16):
    v = _core.bitwise_or(v, _core.shift_right_arithmetic(v, _u32(s)))
  return v
