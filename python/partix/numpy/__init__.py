"""partix.numpy: numpy's API over partix arrays (as jax.numpy)."""
import functools as _functools
import re as _re

import numpy as _np

from partix._src.core import Array as ndarray  # noqa: F401
from partix._src.dtypes import (bfloat16, dtype, finfo, iinfo, issubdtype,  # noqa: F401
                                q4_0, q4_1, q4_k, q6_k, q8_0)
from partix._src.numpy_ops import *  # noqa: F401,F403
from partix._src.numpy_more import *  # noqa: F401,F403
from partix._src.numpy_sized import *  # noqa: F401,F403
from partix._src.numpy_helpers import *  # noqa: F401,F403
from partix._src.numpy_extra import *  # noqa: F401,F403
from partix._src.float_steps import nextafter, spacing  # noqa: F401
from partix._src.bitwise import (bitwise_and, bitwise_count, bitwise_invert,  # noqa: F401
                                 bitwise_left_shift, bitwise_not, bitwise_or,
                                 bitwise_right_shift, bitwise_xor, invert, left_shift,
                                 right_shift)
from partix._src.numpy_ops import where as _where3
from partix._src.numpy_sized import nonzero as _nonzero
from partix._src.batching import vmap as _vmap
from partix._src.core import PartixError as _PartixError


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
  """numpy.where: x where condition holds, else y; with condition alone, nonzero(condition)
  (size= and fill_value= as JAX's, for a traced condition)."""
  if x is None and y is None:
    return _nonzero(condition, size=size, fill_value=fill_value)
  return _where3(condition, x, y)
from partix._src.numpy_ops import asarray_ as asarray  # noqa: F401
from partix._src import linalg as _linalg
from partix._src.numpy_ops import (abs, all, any, max, min, pow, round, sum)  # noqa: F401

bool_ = _np.bool_
int32, int64 = _np.int32, _np.int64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
int8, uint8, int16, uint16, uint32 = _np.int8, _np.uint8, _np.int16, _np.uint16, _np.uint32
floating, integer, inexact, number, signedinteger = (_np.floating, _np.integer, _np.inexact,
                                                     _np.number, _np.signedinteger)
complex64 = _np.complex64
complexfloating, unsignedinteger, bool = _np.complexfloating, _np.unsignedinteger, _np.bool_


class linalg:
  """jnp.linalg: norms, solve / inv / det / slogdet (Gauss-Jordan elimination), svd / svdvals
  (one-sided Jacobi), qr (Gram-Schmidt), eigh / eigvalsh (Jacobi), cholesky."""
  norm = staticmethod(_linalg.norm)
  svd = staticmethod(_linalg.svd)
  svdvals = staticmethod(_linalg.svdvals)
  qr = staticmethod(_linalg.qr)
  eigh = staticmethod(_linalg.eigh)
  eigvalsh = staticmethod(_linalg.eigvalsh)
  cholesky = staticmethod(_linalg.cholesky)
  solve = staticmethod(_linalg.solve)
  inv = staticmethod(_linalg.inv)
  det = staticmethod(_linalg.det)
  slogdet = staticmethod(_linalg.slogdet)


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
  """jnp.vectorize: pyfunc mapped (with vmap) over the leading dimensions of its arguments,
  broadcast together; `signature` ('(n),(n)->()') names the core dimensions pyfunc itself
  takes (none: pyfunc takes scalars). Arguments in `excluded` (positions) pass as they are."""

  def core_dims(part):
    return [tuple(d.strip() for d in g.split(",") if d.strip())
            for g in _re.findall(r"\(([^)]*)\)", part)]
  ins = outs = None
  if signature is not None:
    if "->" not in signature:
      raise _PartixError(f"[vectorize] signature {signature!r} is not of the form "
                        "'(n),(n)->()'")
    ins, outs = (core_dims(p) for p in signature.split("->"))

  @_functools.wraps(pyfunc)
  def wrapped(*args):
    dyn = [i for i in range(len(args)) if i not in excluded]
    arrays = [asarray(args[i]) for i in dyn]
    cores = ins if ins is not None else [()] * len(arrays)
    if len(cores) != len(arrays):
      raise _PartixError(f"[vectorize] signature {signature!r} takes {len(cores)} arguments, "
                        f"got {len(arrays)}")
    loops = []
    for a, c in zip(arrays, cores):
      if a.ndim < len(c):
        raise _PartixError(f"[vectorize] an argument of shape {tuple(a.shape)} has fewer "
                          f"dimensions than its core dimensions {c}")
      loops.append(tuple(a.shape[:a.ndim - len(c)]))
    shape = _np.broadcast_shapes(*loops) if loops else ()
    arrays = [broadcast_to(a, shape + tuple(a.shape[len(l):])) for a, l in zip(arrays, loops)]

    def call(*xs):
      full = list(args)
      for i, x in zip(dyn, xs):
        full[i] = x
      return pyfunc(*full)
    f = call
    for _ in shape:
      f = _vmap(f)
    return f(*arrays)
  return wrapped


def isrealobj(x):
  """Whether x's dtype is not complex (numpy.isrealobj)."""
  return not iscomplexobj(x)



# partix holds no complex dtype: every array is real.
def real(val):
  """numpy.real: the array itself (partix's arrays are real)."""
  return asarray(val)


def imag(val):
  """numpy.imag: zeros shaped as val (partix's arrays are real)."""
  return zeros_like(asarray(val))


def conj(x):
  """numpy.conj: the array itself (partix's arrays are real)."""
  return asarray(x)


conjugate = conj



def copy(a, order=None):
  """numpy.copy: a in new buffers (an Array keeps its sharding)."""
  return asarray(a).copy()


def __getattr__(name):
  raise AttributeError(f"module 'partix.numpy' has no attribute {name!r}: partix does not "
                       f"provide jax.numpy.{name}")
