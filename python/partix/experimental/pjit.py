"""jax.experimental.pjit (deprecated in JAX, still everywhere): pjit is jit, with in_shardings
and out_shardings given as PartitionSpecs under `with mesh:` or as shardings."""
from partix._src.api import jit

__all__ = ["pjit"]


def pjit(fun, in_shardings=None, out_shardings=None, static_argnums=None, static_argnames=None,
         donate_argnums=None, donate_argnames=None, **kwargs):
  """jax.experimental.pjit.pjit: jit under its older name."""
  options = dict(in_shardings=in_shardings, out_shardings=out_shardings,
                 static_argnums=static_argnums, static_argnames=static_argnames,
                 donate_argnums=donate_argnums, donate_argnames=donate_argnames, **kwargs)
  return jit(fun, **{k: v for k, v in options.items() if v is not None})
