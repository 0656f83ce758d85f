"""nnx.Optimizer(model, tx, wrt=nnx.Param): an optax GradientTransformation's state kept as
Variables (so it lives through nnx.jit and is written back), and update(model, grads) applying
one step to the model's wrt Variables. The moments of each parameter are OptVariables carrying
its metadata, so they take the parameter's sharding."""
from partix import numpy as jnp
from partix import tree_util as _tu
from partix._src.core import PartixError
from partix.nnx import graph, statelib
from partix.nnx.module import Object
from partix.nnx import variables as _vars


class OptState(_vars.Variable):
  __slots__ = ()


class OptArray(OptState):
  __slots__ = ()


class OptVariable(OptState):
  __slots__ = ()


def _is_var(x):
  return isinstance(x, _vars.Variable)


def _to_opt_state(tree):
  """optax's state with each array a Variable: the moments of a parameter (Variables there
  after tx.init) become OptVariables with its metadata (placed like it), the rest OptArrays."""
  def wrap(x):
    if _is_var(x):
      meta = x.get_metadata()
      eager = meta.pop("eager_sharding", True)
      return OptVariable(x.get_raw_value(), eager_sharding=eager, source_type=x.type, **meta)
    if hasattr(x, "shape"):
      return OptArray(x)
    return x
  return _tu.tree_map(wrap, tree, is_leaf=_is_var)


def _pure(tree):
  return _tu.tree_map(lambda x: x.get_raw_value() if _is_var(x) else x, tree, is_leaf=_is_var)


class Optimizer(Object):
  def __init__(self, model, tx, *, wrt):
    for name in ("init", "update"):
      if not callable(getattr(tx, name, None)):
        raise PartixError(f"[nnx.Optimizer] tx {tx!r} is not an optax GradientTransformation "
                          "(it needs init and update)")
    self.step = OptState(jnp.array(0, dtype=jnp.int32))
    self.tx = tx
    self.wrt = wrt
    self.opt_state = _to_opt_state(tx.init(graph.state(model, wrt)))

  def update(self, model, grads, /, **kwargs):
    """One optimizer step: the model's wrt Variables move by tx's update of grads (a State
    of the same paths, as nnx.grad returns)."""
    params = graph.state(model, self.wrt)
    p_flat = dict(statelib.to_flat_state(params))
    g_flat = dict(statelib.to_flat_state(grads)) if isinstance(
        grads, (statelib.State, dict)) else None
    if g_flat is None or set(p_flat) != set(g_flat):
      missing = sorted(set(p_flat) - set(g_flat or {}))[:3]
      extra = sorted(set(g_flat or {}) - set(p_flat))[:3]
      raise PartixError(f"[nnx.Optimizer.update] grads do not match the model's {self.wrt} "
                        f"state: missing paths {missing}, unexpected paths {extra}")
    pure_params, pure_grads = _pure(params), _pure(grads)
    updates, new_state = self.tx.update(pure_grads, _pure(self.opt_state), pure_params,
                                        **kwargs)
    new_params = _tu.tree_map(lambda p, u: p if u is None else p + u, pure_params, updates)
    graph.update(model, new_params)
    self._set_opt_state(new_state)
    self.step[...] = self.step[...] + 1

  def _set_opt_state(self, new_state):
    olds = _tu.tree_leaves(self.opt_state, is_leaf=_is_var)
    news = _tu.tree_leaves(new_state)
    if len(olds) != len(news):
      raise PartixError("[nnx.Optimizer.update] tx.update returned a state of another "
                        "structure than tx.init")
    for v, x in zip(olds, news):
      if _is_var(v):
        v.set_raw_value(x)


class ModelAndOptimizer(Optimizer):
  """An Optimizer that holds its model: update(grads) steps it (Flax's ModelAndOptimizer)."""

  def __init__(self, model, tx, *, wrt=_vars.Param):
    super().__init__(model, tx, wrt=wrt)
    self.model = model

  def update(self, grads, /, **kwargs):
    super().update(self.model, grads, **kwargs)
