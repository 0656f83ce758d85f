"""partix.lax: JAX's lax names (dynamic slices, collectives, control flow)."""
from partix._src.api import with_sharding_constraint  # noqa: F401
from partix._src.lax_ops import *  # noqa: F401,F403
from partix._src.lax_more import *  # noqa: F401,F403
from partix._src.lax_conv import *  # noqa: F401,F403
from partix._src.lax_gather import *  # noqa: F401,F403
from partix._src.lax_extra import *  # noqa: F401,F403
from partix._src.float_steps import nextafter  # noqa: F401
from partix._src.tokens import after_all, create_token  # noqa: F401
from partix._src.bitwise import (bitwise_and, bitwise_not, bitwise_or,  # noqa: F401
                                 bitwise_xor, clz, population_count, shift_left,
                                 shift_right_arithmetic, shift_right_logical)
from partix._src.lax_ops import (abs, max, min, pow, round, slice, map)  # noqa: F401


def __getattr__(name):
  raise AttributeError(f"module 'partix.lax' has no attribute {name!r}: partix does not "
                       f"provide jax.lax.{name}")
