"""dtypes: numpy's dtype objects (ml_dtypes for bfloat16) and partix's names for them."""
import ml_dtypes
import contextlib
import threading
import warnings

import numpy as np

from partix import _core

PartixError = _core.PartixError

bfloat16 = ml_dtypes.bfloat16


class QuantizedDType:
  """A block-quantized storage dtype (GGUF's layouts): q8_0, q4_0, q4_1, q4_k, q6_k."""
  __slots__ = ("name",)

  def __init__(self, name):
    self.name = name

  def __repr__(self):
    return f"dtype({self.name})"

  def __eq__(self, other):
    return isinstance(other, QuantizedDType) and other.name == self.name

  def __hash__(self):
    return hash(("quantized", self.name))

  itemsize = property(lambda self: None)
  kind = "V"


q8_0, q4_0, q4_1, q4_k, q6_k = (QuantizedDType(n) for n in ("q8_0", "q4_0", "q4_1", "q4_k", "q6_k"))

_TO_CORE = {
    np.dtype(np.bool_): "bool", np.dtype(np.int8): "i8", np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8",
    np.dtype(np.uint16): "u16", np.dtype(np.uint32): "u32", np.dtype(np.float16): "f16",
    np.dtype(bfloat16): "bf16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
}
_FROM_CORE = {v: k for k, v in _TO_CORE.items()}
for _q in (q8_0, q4_0, q4_1, q4_k, q6_k):
  _FROM_CORE[_q.name] = _q
# What JAX does without x64: host data of these types becomes 32-bit.
_CANONICAL = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32)}
# partix's names of its integer dtypes, and of those with bool.
INT_CORE = frozenset(("i8", "i16", "i32", "i64", "u8", "u16", "u32"))
INT_OR_BOOL_CORE = INT_CORE | {"bool"}
_HELD = ("bool, int8, int16, int32, int64, uint8, uint16, uint32, float16, bfloat16, float32 "
         "and float64")


def dtype(x, api="dtype"):
  """The dtype of x (an Array, numpy array, dtype, type or name) as a numpy dtype."""
  if isinstance(x, QuantizedDType):
    return x
  if isinstance(x, str) and x in _FROM_CORE:
    return _FROM_CORE[x]
  if hasattr(x, "dtype") and not isinstance(x, type):
    return dtype(x.dtype)
  if isinstance(x, bool):
    return np.dtype(np.bool_)
  if isinstance(x, int):
    return np.dtype(np.int32)
  if isinstance(x, float):
    return np.dtype(np.float32)
  try:
    return np.dtype(x)
  except TypeError as e:
    raise PartixError(f"[{api}] {x!r} is not a dtype") from e


def to_core(d, api="dtype"):
  """partix's name for dtype d ('f32', 'bf16', ...)."""
  if d is None:
    return None
  if isinstance(d, QuantizedDType):
    return d.name
  nd = requested(d, api)
  name = _TO_CORE.get(nd)
  if name is None:
    raise PartixError(f"[{api}] dtype {nd} is not supported by partix (it holds {_HELD})")
  return name


# jax_enable_x64 (set by jax.config.update): with it, uint64 is a type of its own, which partix
# does not hold; without it, JAX holds uint64 as uint32, and so does partix.
_X64 = [False]


def set_x64(enabled):
  _X64[0] = bool(enabled)


class _Wide(threading.local):
  depth = 0


_wide = _Wide()


@contextlib.contextmanager
def wide():
  """partix's own computations that need 64-bit dtypes without x64 (the rejection loops of
  random.poisson and binomial run in float64) ask for them inside this."""
  _wide.depth += 1
  try:
    yield
  finally:
    _wide.depth -= 1


def requested(d, api="dtype"):
  """The numpy dtype partix holds for dtype d asked for by name: as JAX without x64, a 64-bit
  one is its 32-bit one, with JAX's warning (jax.config.update("jax_enable_x64", True) keeps
  it, and so does partix's own code inside wide())."""
  nd = held(dtype(d, api))
  if not _X64[0] and not _wide.depth and nd in _CANONICAL:
    if d in (float, int):  # Python's types name the default dtypes: no warning, as JAX
      return _CANONICAL[nd]
    warnings.warn(f"Explicitly requested dtype {nd} requested in {api} is not available, and "
                  f"will be truncated to dtype {_CANONICAL[nd]}. To enable more dtypes, set the "
                  "jax_enable_x64 configuration option or the JAX_ENABLE_X64 shell environment "
                  "variable.", UserWarning, stacklevel=4)
    nd = _CANONICAL[nd]
  return nd


def held(d):
  """The dtype partix holds for numpy dtype d: d itself, or uint32 for uint64 without x64."""
  if d == np.dtype(np.uint64) and not _X64[0]:
    return np.dtype(np.uint32)
  return d


def is_known(d):
  """Whether numpy dtype d is one partix holds (bfloat16's numpy kind is 'V')."""
  return d in _TO_CORE


def int_range(core_name):
  """(lowest, highest) of partix's integer dtype `core_name`, or None for other dtypes."""
  if core_name not in INT_CORE:
    return None
  i = np.iinfo(_FROM_CORE[core_name])
  return int(i.min), int(i.max)


def from_core(name):
  return _FROM_CORE[name]


def canonicalize(d, api="asarray"):
  """The dtype host data of dtype d becomes (JAX's rules without x64: 64-bit types become
  32-bit)."""
  d = dtype(d, api)
  return held(_CANONICAL.get(d, d))


class extended(np.generic):  # noqa: N801 (JAX's name)
  """The abstract dtype of keys and other extended types (issubdtype(x, extended))."""


class prng_key(extended):  # noqa: N801
  """The dtype family of typed PRNG keys."""


class KeyDtype:
  """key<fry>: the dtype of typed threefry keys (jax.random.key), under jax.dtypes.prng_key."""
  name = "key<fry>"
  type = prng_key
  kind = "V"
  itemsize = 8  # two uint32 words

  def __repr__(self):
    return self.name

  __str__ = __repr__

  def __eq__(self, other):
    return isinstance(other, KeyDtype) or other == self.name

  def __hash__(self):
    return hash(self.name)


KEY = KeyDtype()


def issubdtype(a, b):
  if isinstance(a, QuantizedDType):
    return False
  if isinstance(a, KeyDtype) or a in (prng_key, extended):
    return isinstance(b, KeyDtype) or (isinstance(b, type) and issubclass(
        prng_key if isinstance(a, KeyDtype) else a, b))
  if isinstance(b, KeyDtype) or b in (prng_key, extended):
    return False
  if b is bfloat16 or (isinstance(b, np.dtype) and b == np.dtype(bfloat16)):
    return dtype(a) == np.dtype(bfloat16)
  if dtype(a) == np.dtype(bfloat16):
    return b in (np.floating, np.inexact, np.number, np.generic)
  return np.issubdtype(dtype(a), b)


FLOAT_CORE = frozenset(("f16", "bf16", "f32", "f64"))

# The tangent dtype of integer and boolean values (JAX's float0): a zero-size void scalar.
float0 = np.dtype([("float0", np.void, 0)])


def _kind_name(d):
  """partix's name for dtype d, for classifying it only (no x64 truncation, no warning)."""
  if isinstance(d, str) and d in _FROM_CORE:
    return d
  if isinstance(d, QuantizedDType):
    return d.name
  return _TO_CORE.get(held(dtype(d)))


def is_float(d):
  return _kind_name(d) in FLOAT_CORE


def is_int(d):
  return _kind_name(d) in INT_CORE


def differentiable(d):
  """Whether values of dtype d (a numpy dtype, partix's name, or anything with .dtype) have
  tangents: the floating dtypes; integers and bools have float0 ones."""
  return _kind_name(getattr(d, "dtype", d)) in FLOAT_CORE


class finfo:
  def __init__(self, d):
    nd = dtype(d)
    f = ml_dtypes.finfo(nd) if nd == np.dtype(bfloat16) else np.finfo(nd)
    self.dtype, self.bits, self.eps, self.max, self.min, self.tiny = (
        nd, f.bits, f.eps, f.max, f.min, f.tiny)
    self.smallest_normal = f.tiny


class iinfo:
  def __init__(self, d):
    f = np.iinfo(dtype(d))
    self.dtype, self.bits, self.max, self.min = dtype(d), f.bits, f.max, f.min
