"""nnx.Module: a plain Python object whose attributes hold Variables, submodules, lists and
dicts of them and static values. Modules (and the other nnx objects: Rngs, Optimizer,
metrics) are graph nodes for split/merge and pytree nodes for partix's own transformations."""
from partix import tree_util as _tu
from partix._src.core import PartixError
from partix.nnx import filterlib, graph
from partix.nnx import variables as _vars


def _flatten_with_keys(x):
  items = sorted(vars(x).items())
  kids = [(k, v) for k, v in items if graph.has_graph_content(v)]
  statics = tuple((k, graph._Static(v)) for k, v in items if not graph.has_graph_content(v))
  return tuple((_tu.GetAttrKey(k), v) for k, v in kids), (tuple(k for k, _ in kids), statics)


def _unflatten(cls, aux, children):
  obj = object.__new__(cls)
  names, statics = aux
  for k, v in zip(names, children):
    object.__setattr__(obj, k, v)
  for k, s in statics:
    object.__setattr__(obj, k, s.value)
  return obj


class Object:
  """The base of nnx's graph nodes (Flax's nnx.Pytree)."""

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    _tu.register_pytree_with_keys(
        cls, _flatten_with_keys, lambda aux, ch, cls=cls: _unflatten(cls, aux, ch),
        lambda x: ([c for _, c in _flatten_with_keys(x)[0]], _flatten_with_keys(x)[1]))

  def __repr__(self):
    inner = ", ".join(f"{k}={_short(v)}" for k, v in sorted(vars(self).items()))
    return f"{type(self).__name__}({inner})"


graph.register_node_type(Object)


def _short(v):
  if isinstance(v, Object) or isinstance(v, _vars.Variable):
    return repr(v)
  if isinstance(v, (list, tuple)) and graph.has_graph_content(v):
    return repr(v)
  r = repr(v)
  return r if len(r) < 60 else r[:57] + "..."


Pytree = Object


class Module(Object):
  """The base class of layers and models: assign Variables and submodules as attributes in
  __init__, compute in __call__."""

  def sow(self, variable_type, name, value, reduce_fn=None, init_fn=None):
    """Keeps `value` in a `variable_type` Variable named `name` (by default a tuple of every
    value sown there)."""
    if isinstance(variable_type, str):
      raise PartixError("[nnx.Module.sow] variable_type is a Variable type (e.g. "
                        "nnx.Intermediate), not a string")
    reduce_fn = reduce_fn or (lambda xs, x: xs + (x,))
    init_fn = init_fn or (lambda: ())
    if hasattr(self, name):
      var = getattr(self, name)
      if not isinstance(var, variable_type):
        raise ValueError(f"Expected '{name}' to be of type '{variable_type.__name__}', got "
                         f"'{type(var).__name__}'")
      var.set_value(reduce_fn(var.get_value(), value))
    else:
      setattr(self, name, variable_type(reduce_fn(init_fn(), value)))

  def iter_modules(self):
    """(path, module) of this module and every submodule, each once."""
    for path, x in graph.iter_graph(self):
      if isinstance(x, Module):
        yield path, x

  def iter_children(self):
    for k, v in sorted(vars(self).items()):
      if isinstance(v, Module):
        yield k, v

  def set_attributes(self, *filters, raise_if_not_found=True, **attributes):
    """Sets `attributes` on every submodule (matching filters, if given) that has them."""
    preds = [filterlib.to_predicate(f) for f in filters] or [filterlib.Everything()]
    remaining = set(attributes)
    for path, m in self.iter_modules():
      if not any(p(path, m) for p in preds):
        continue
      for k, v in attributes.items():
        if hasattr(m, k):
          object.__setattr__(m, k, v)
          remaining.discard(k)
    if remaining and raise_if_not_found:
      raise ValueError(f"Could not find at least one instance of the following attributes: "
                       f"{sorted(remaining)}")

  def train(self, **attributes):
    """Training mode: deterministic=False, use_running_average=False where present."""
    self.set_attributes(deterministic=False, use_running_average=False, **attributes,
                        raise_if_not_found=False)

  def eval(self, **attributes):
    """Evaluation mode: deterministic=True, use_running_average=True where present."""
    self.set_attributes(deterministic=True, use_running_average=True, **attributes,
                        raise_if_not_found=False)


class Sequential(Module):
  """Calls its layers in order, each on the previous one's result (a tuple result is spread
  as the next one's arguments)."""

  def __init__(self, *fns):
    for f in fns:
      if not callable(f):
        raise PartixError(f"[nnx.Sequential] {f!r} is not callable")
    self.layers = list(fns)

  def __call__(self, *args, rngs=None, **kwargs):
    out = None
    for i, f in enumerate(self.layers):
      if i == 0:
        out = f(*args, **kwargs)
      else:
        out = f(*out) if isinstance(out, tuple) else f(out)
    return out


class List(list):
  """A list of modules or Variables kept as state (Flax 0.12's nnx.List)."""


class Dict(dict):
  """A dict of modules or Variables kept as state (Flax 0.12's nnx.Dict)."""


def data(value):
  """Marks an attribute as data (state); partix.nnx treats arrays, Variables and modules as
  data already, so this returns value."""
  return value


def static(value):
  return value


def iter_modules(node):
  for path, x in graph.iter_graph(node):
    if isinstance(x, Module):
      yield path, x


def view(node, **attributes):
  """A copy of the graph sharing its Variables, with `attributes` set where present."""
  copy = graph.merge(*graph.split(node))
  if isinstance(copy, Module):
    copy.set_attributes(**attributes, raise_if_not_found=False)
  return copy
