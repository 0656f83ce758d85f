"""jax.dtypes (partix.dtypes): dtype helpers JAX programs and libraries use."""
import numpy as _np

from partix._src.dtypes import (bfloat16, extended, finfo, iinfo, issubdtype,  # noqa: F401
                                 prng_key)
from partix._src import dtypes as _d
from partix._src.jax_errors import TypePromotionError  # noqa: F401
from partix import numpy as _jnp

__all__ = ["bfloat16", "canonicalize_dtype", "finfo", "float0", "iinfo", "issubdtype",
           "result_type", "prng_key", "extended", "TypePromotionError"]

float0 = _d.float0




def canonicalize_dtype(dtype, allow_extended_dtype=False):
  """The dtype values of `dtype` take in partix (64-bit types narrowed unless x64 is on)."""
  return _d.canonicalize(dtype, "dtypes.canonicalize_dtype")


def result_type(*args, return_weak_type_flag=False):
  t = _jnp.result_type(*args)
  return (t, False) if return_weak_type_flag else t
