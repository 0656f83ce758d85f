"""partix.numpy: numpy's API over partix arrays (as jax.numpy)."""
import numpy as _np

from partix._src.core import Array as ndarray  # noqa: F401
from partix._src.dtypes import (bfloat16, dtype, finfo, iinfo, issubdtype,  # noqa: F401
                                q4_0, q4_1, q4_k, q6_k, q8_0)
from partix._src.numpy_ops import *  # noqa: F401,F403
from partix._src.numpy_ops import asarray_ as asarray  # noqa: F401
from partix._src.numpy_ops import linalg_norm as _linalg_norm
from partix._src.numpy_ops import (abs, all, any, max, min, pow, round, sum)  # noqa: F401

# Helpers the star import brings along are not numpy names.
for _n in ("is_weak_scalar", "to_sharding", "promote_pair", "builtins", "math", "numbers"):
  globals().pop(_n, None)
del _n

bool_ = _np.bool_
int32, int64 = _np.int32, _np.int64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
int8, uint8, int16, uint32 = _np.int8, _np.uint8, _np.int16, _np.uint32
floating, integer, inexact, number, signedinteger = (_np.floating, _np.integer, _np.inexact,
                                                     _np.number, _np.signedinteger)
complex64 = _np.complex64


class linalg:
  """jnp.linalg: the norms partix provides."""
  norm = staticmethod(_linalg_norm)
