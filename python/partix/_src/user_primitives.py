"""jax.extend.core.Primitive: a primitive of the user's own, given an implementation (def_impl)
and an abstract evaluation rule (def_abstract_eval).

Outside any trace bind calls the implementation on the arguments. Under a trace (jit,
shard_map, vmap, grad) partix has no place for the user's lowering, batching or
differentiation rules (JAX's jax.interpreters modules), so the abstract evaluation gives the
results' shapes and dtypes and the implementation runs on the host as a pure callback: with
numpy arrays, on every device inside shard_map, once per example under vmap. A pure primitive
whose results go unused is dropped, as JAX drops it; one with no operands and no results is
nothing to run. Differentiating through it is refused."""
import numpy as np

from partix import _core
from partix._src import callbacks
from partix._src import tree_util as tu
from partix._src.api import ShapedArray, typeof
from partix._src.core import Array, PartixError

_API = "jax.extend.core.Primitive"


def _operand(prim, i, x):
  """x as bind takes it: an array (partix or numpy) or a Python / numpy scalar."""
  if isinstance(x, (Array, np.ndarray, np.generic, bool, int, float, complex)):
    return x
  raise PartixError(f"[{_API}] {prim.name}.bind: operand {i} is {x!r:.80} of type "
                    f"{type(x).__name__}, not an array")


def _aval(x):
  if isinstance(x, Array):
    return typeof(x)
  a = np.asarray(x)
  return ShapedArray(a.shape, a.dtype)


class Primitive:
  """jax.extend.core.Primitive(name): `multiple_results` (results are a list), `def_impl(fn)`,
  `def_abstract_eval(fn)` (avals in, avals out: ShapedArray or anything with shape and
  dtype), `def_effectful_abstract_eval(fn)` (returns (avals, effects)) and
  `bind(*args, **params)`."""
  multiple_results = False
  call_primitive = False
  ref_primitive = False
  skip_canonicalization = False
  ref_allocating = False
  is_effectful = None

  def __init__(self, name):
    if not isinstance(name, str) or not name:
      raise PartixError(f"[{_API}] the name must be a non-empty str, got {name!r}")
    self.name = name
    self._impl = self._abstract_eval = None
    self._effectful = False

  def __repr__(self):
    return self.name

  def def_impl(self, impl):
    """The implementation: impl(*args, **params), run by bind outside a trace (on partix
    arrays) and, under a trace, on the host (on numpy arrays)."""
    self._impl = self._callable(impl, "def_impl")
    return impl

  def def_abstract_eval(self, abstract_eval):
    """The result types: abstract_eval(*avals, **params) -> an aval (a list of them with
    multiple_results)."""
    self._abstract_eval = self._callable(abstract_eval, "def_abstract_eval")
    self._effectful = False
    return abstract_eval

  def def_effectful_abstract_eval(self, effectful_abstract_eval):
    """As def_abstract_eval, the rule returning (avals, effects): with effects the host call
    is never dropped and runs in program order."""
    self._abstract_eval = self._callable(effectful_abstract_eval, "def_effectful_abstract_eval")
    self._effectful = True
    return effectful_abstract_eval

  @property
  def impl(self):
    return self._impl

  @property
  def abstract_eval(self):
    return self._abstract_eval

  def _callable(self, fn, what):
    if not callable(fn):
      raise PartixError(f"[{_API}] {self.name}.{what} takes a function, got {fn!r:.80}")
    return fn

  def bind(self, *args, **params):
    args = [_operand(self, i, x) for i, x in enumerate(args)]
    if not _core.is_tracing():
      if self._impl is None:
        raise PartixError(f"[{_API}] {self.name} has no implementation: call "
                          f"{self.name}.def_impl(fn) first")
      return self._impl(*args, **params)
    return self._bind_traced(args, params)

  def _result_avals(self, args, params):
    if self._abstract_eval is None:
      raise PartixError(f"[{_API}] {self.name} has no abstract evaluation rule: call "
                        f"{self.name}.def_abstract_eval(fn) first (bind under a trace needs "
                        "the results' shapes and dtypes)")
    out = self._abstract_eval(*[_aval(x) for x in args], **params)
    effects = ()
    if self._effectful:
      if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise PartixError(f"[{_API}] {self.name}'s effectful abstract evaluation rule must "
                          f"return (avals, effects), got {out!r:.80}")
      out, effects = out
    avals = list(out) if self.multiple_results else [out]
    if self.multiple_results and not isinstance(out, (tuple, list)):
      raise PartixError(f"[{_API}] {self.name} has multiple_results: its abstract evaluation "
                        f"rule must return a list of avals, got {out!r:.80}")
    for k, a in enumerate(avals):
      if not (hasattr(a, "shape") and hasattr(a, "dtype")):
        raise PartixError(f"[{_API}] {self.name}'s abstract evaluation rule gave {a!r:.80} "
                          f"as result {k}, which has no shape and dtype")
    return avals, bool(effects)

  def _bind_traced(self, args, params):
    avals, effect = self._result_avals(args, params)
    if self._impl is None:
      raise PartixError(f"[{_API}] {self.name} has no implementation: call "
                        f"{self.name}.def_impl(fn) first")
    if not args and not avals and not effect:
      return [] if self.multiple_results else None  # a pure call of nothing: nothing to run
    impl, multiple = self._impl, self.multiple_results

    def host(*xs):
      out = impl(*xs, **params)
      return [np.asarray(o) for o in out] if multiple else [np.asarray(out)]
    specs, tree = callbacks._result_specs(f"{_API} {self.name}", avals)
    outs = callbacks._call(f"{_API} {self.name}", host, specs, tree, tuple(args), {},
                           effect=effect, vmap_method="sequential")
    outs = tu.tree_leaves(outs)
    return list(outs) if multiple else outs[0]
