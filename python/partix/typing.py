"""jax.typing (partix.typing): the annotations JAX programs and libraries use."""
from typing import Any, Union

import numpy as _np

from partix._src.core import Array

ArrayLike = Union[Array, _np.ndarray, _np.bool_, _np.number, bool, int, float, complex]
DTypeLike = Union[str, type, _np.dtype, Any]

__all__ = ["ArrayLike", "DTypeLike"]
