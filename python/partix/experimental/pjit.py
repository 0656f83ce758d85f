"""jax.experimental.pjit (deprecated in JAX, still everywhere): pjit is jit, with in_shardings
and out_shardings given as PartitionSpecs under `with mesh:` or as shardings. As JAX's pjit,
a sharding given as None means replicated (P()) when a mesh is current; not given means left
to propagation."""
import functools

from partix._src import tree_util as tu
from partix._src.api import jit
from partix._src.sharding import NamedSharding, PartitionSpec, get_mesh

__all__ = ["pjit"]

_UNSPECIFIED = object()


def _on_mesh(shardings, mesh):
  """pjit's shardings under `with mesh:`: None is replicated (P()), and PartitionSpecs name
  that mesh's axes (pjit reads the legacy context; jit does not)."""
  if shardings is None:
    return NamedSharding(mesh, PartitionSpec())
  return tu.tree_map(lambda s: NamedSharding(mesh, PartitionSpec() if s is None else s)
                     if s is None or isinstance(s, PartitionSpec) else s, shardings,
                     is_leaf=lambda s: s is None or isinstance(s, PartitionSpec))


class _Pjit:
  """The jitted function per current mesh (None entries resolve against it)."""

  def __init__(self, fun, ins, outs, options):
    self._fun, self._ins, self._outs, self._options = fun, ins, outs, options
    self._by_mesh = {}
    functools.update_wrapper(self, fun)

  def _jit(self):
    mesh = get_mesh()
    j = self._by_mesh.get(mesh)
    if j is None:
      opts = dict(self._options)
      for name, given in (("in_shardings", self._ins), ("out_shardings", self._outs)):
        if given is not _UNSPECIFIED:
          opts[name] = _on_mesh(given, mesh) if mesh is not None else given
      j = self._by_mesh[mesh] = jit(self._fun, **opts)
    return j

  def __call__(self, *args, **kwargs):
    return self._jit()(*args, **kwargs)

  def lower(self, *args, **kwargs):
    return self._jit().lower(*args, **kwargs)

  def trace(self, *args, **kwargs):
    return self._jit().trace(*args, **kwargs)

  def eval_shape(self, *args, **kwargs):
    return self._jit().eval_shape(*args, **kwargs)


def pjit(fun, in_shardings=_UNSPECIFIED, out_shardings=_UNSPECIFIED, static_argnums=None,
         static_argnames=None, donate_argnums=None, donate_argnames=None, **kwargs):
  """jax.experimental.pjit.pjit: jit under its older name."""
  options = dict(static_argnums=static_argnums, static_argnames=static_argnames,
                 donate_argnums=donate_argnums, donate_argnames=donate_argnames, **kwargs)
  given = {k: v for k, v in (("in_shardings", in_shardings), ("out_shardings", out_shardings))
           if v is not _UNSPECIFIED}
  jit(fun, **given, **{k: v for k, v in options.items() if v is not None})  # checks them now
  return _Pjit(fun, in_shardings, out_shardings,
               {k: v for k, v in options.items() if v is not None})
