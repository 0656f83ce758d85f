"""jax.ref: mutable array references (see partix/_src/refs.py for how partix runs them)."""
from partix._src.refs import AbstractRef, Ref, empty_ref, free_ref, freeze, new_ref  # noqa: F401
from partix._src.refs import ref_addupdate as addupdate  # noqa: F401
from partix._src.refs import ref_get as get  # noqa: F401
from partix._src.refs import ref_set as set  # noqa: F401,A004
from partix._src.refs import ref_swap as swap  # noqa: F401

__all__ = ["AbstractRef", "Ref", "addupdate", "free_ref", "freeze", "get", "new_ref",
           "empty_ref", "set", "swap"]
