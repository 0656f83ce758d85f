"""The graph of a module: split into a static GraphDef and a State (the Variables, each shared
Variable or submodule once, at the first path that reaches it), and merged back. Nodes are
nnx objects (Module, Rngs, ...), lists, tuples and dicts holding them, and Variables; arrays
held as plain attributes are state too."""
import numpy as np

from partix._src.core import Array, PartixError
from partix._src.api import ShapeDtypeStruct
from partix.nnx import statelib
from partix.nnx import variables as _vars


class _Static:
  """A static attribute in a GraphDef, hashed and compared by value when it can be."""
  __slots__ = ("value",)

  def __init__(self, value):
    self.value = value

  def __hash__(self):
    try:
      return hash((type(self.value), self.value))
    except TypeError:
      return hash(type(self.value))

  def __eq__(self, other):
    if not isinstance(other, _Static) or type(other.value) is not type(self.value):
      return False
    if self.value is other.value:
      return True
    try:
      return bool(self.value == other.value)
    except Exception:  # values whose == is not a bool (arrays) are equal only as the same
      return False

  def __repr__(self):
    return repr(self.value)


# The classes whose instances are graph nodes: nnx.Object (and so every Module, Rngs, ...),
# registered by partix.nnx.module, which is built over this module.
_NODE_TYPES = []


def register_node_type(cls):
  _NODE_TYPES.append(cls)


def is_node_object(x):
  return isinstance(x, tuple(_NODE_TYPES))


def _is_data_leaf(x):
  return isinstance(x, (Array, np.ndarray, ShapeDtypeStruct)) or type(x).__name__ == "Tracer"


def _is_seq(x):
  return isinstance(x, (list, tuple))


def _seq_items(x):
  """(key, item) of a list or tuple: a namedtuple's by field name (optax's states), as Flax."""
  fields = getattr(type(x), "_fields", None)
  return zip(fields, x) if isinstance(x, tuple) and fields else enumerate(x)


def _child_of(parent, k):
  if isinstance(parent, tuple) and isinstance(k, str):
    return getattr(parent, k)
  return parent[k] if isinstance(parent, (list, tuple, dict, statelib.State)) else getattr(
      parent, k)


def has_graph_content(x):
  if isinstance(x, _vars.Variable) or is_node_object(x) or _is_data_leaf(x):
    return True
  if _is_seq(x):
    return any(has_graph_content(e) for e in x)
  if isinstance(x, (dict, statelib.State)):
    return any(has_graph_content(e) for e in x.values())
  return False


class GraphDef:
  """The static structure of a module graph: node types, static attributes, where each
  Variable goes. Hashable, so it can be a jit's static argument."""
  __slots__ = ("root", "_hash")

  def __init__(self, root):
    self.root = root
    self._hash = None

  def __hash__(self):
    if self._hash is None:
      self._hash = hash(self.root)
    return self._hash

  def __eq__(self, other):
    return isinstance(other, GraphDef) and (self is other or self.root == other.root)

  def apply(self, state, *states):
    """(graphdef.apply(state))(*args) calls the merged module: (result, (graphdef, state))."""
    def call(*args, **kwargs):
      node = merge(self, state, *states)
      out = node(*args, **kwargs)
      return out, split(node)
    return call

  def merge(self, state, *states):
    return merge(self, state, *states)

  def __repr__(self):
    return f"GraphDef({_show(self.root)})"


def _show(d):
  kind = d[0]
  if kind == "obj":
    return f"{d[1].__name__}(" + ", ".join(f"{k}={_show(c)}" for k, c in d[3]) + ")"
  if kind == "var":
    return d[1].__name__
  if kind in ("seq", "dict"):
    return f"{d[1].__name__}[" + ", ".join(f"{k}: {_show(c)}" for k, c in d[3]) + "]"
  if kind == "ref":
    return f"<ref {d[1]}>"
  if kind == "leaf":
    return "*"
  return repr(d[1])


class _Flattener:
  def __init__(self):
    self.index = {}    # id(object) -> index
    self.objects = []  # index -> object
    self.leaves = []   # (path, leaf)

  def _new_index(self, x):
    i = len(self.objects)
    self.index[id(x)] = i
    self.objects.append(x)
    return i

  def node(self, x, path):
    if id(x) in self.index and (isinstance(x, _vars.Variable) or is_node_object(x)):
      return ("ref", self.index[id(x)])
    if isinstance(x, _vars.Variable):
      i = self._new_index(x)
      self.leaves.append((path, x))
      return ("var", type(x), i)
    if is_node_object(x):
      i = self._new_index(x)
      attrs = tuple((k, self.child(v, path + (k,))) for k, v in sorted(vars(x).items()))
      return ("obj", type(x), i, attrs)
    if _is_data_leaf(x):
      self.leaves.append((path, x))
      return ("leaf",)
    if _is_seq(x) and has_graph_content(x):
      return ("seq", type(x), None, tuple((i, self.child(v, path + (i,)))
                                          for i, v in _seq_items(x)))
    if isinstance(x, (dict, statelib.State)) and has_graph_content(x):
      keys = sorted(x, key=statelib._sort_key)
      return ("dict", type(x), None, tuple((k, self.child(x[k], path + (k,))) for k in keys))
    return ("static", _Static(x))

  def child(self, v, path):
    return self.node(v, path)


def flatten(node):
  """(GraphDef, [(path, leaf)], objects by index)."""
  f = _Flattener()
  root = f.node(node, ())
  return GraphDef(root), f.leaves, f.objects


class _Builder:
  """Builds a graph from a GraphDef and leaves by path. `existing` maps a node index to an
  object to update in place (used when a transformation writes state back)."""

  def __init__(self, leaves, existing=None, copy=False):
    self.leaves = leaves
    self.existing = existing or {}
    self.objects = {}
    self.copy = copy

  def leaf(self, path):
    try:
      return self.leaves[path]
    except KeyError:
      raise PartixError(f"[nnx.merge] the state has no entry at path {'/'.join(map(str, path))}"
                        "; merge needs every state split produced") from None

  def build(self, d, path):
    kind = d[0]
    if kind == "ref":
      return self.objects[d[1]]
    if kind == "static":
      return d[1].value
    if kind == "leaf":
      return self.leaf(path)
    if kind == "var":
      return self._var(d, path)
    if kind == "obj":
      return self._obj(d, path)
    items = [(k, self.build(c, path + (k,))) for k, c in d[3]]
    t = d[1]
    if kind == "dict":
      return t(items)
    values = [v for _, v in items]
    if hasattr(t, "_fields"):
      return t(*values)
    return t(values)

  def _var(self, d, path):
    leaf = self.leaf(path)
    if d[2] in self.existing:
      v = self.existing[d[2]]
      v.update_from_state(leaf)
    elif isinstance(leaf, _vars.Variable):
      v = leaf.copy() if self.copy else leaf
    else:
      v = d[1]._new(leaf, {"eager_sharding": _vars.using_eager_sharding()})
    self.objects[d[2]] = v
    return v

  def _obj(self, d, path):
    obj = self.existing.get(d[2])
    if obj is None:
      obj = object.__new__(d[1])
    self.objects[d[2]] = obj
    keep = set()
    for k, c in d[3]:
      object.__setattr__(obj, k, self.build(c, path + (k,)))
      keep.add(k)
    for k in [k for k in vars(obj) if k not in keep]:
      object.__delattr__(obj, k)
    return obj


def unflatten(graphdef, leaves, existing=None, copy=False):
  if not isinstance(graphdef, GraphDef):
    raise PartixError(f"[nnx.merge] {graphdef!r} is not a GraphDef (the first result of "
                      "nnx.split)")
  b = _Builder(dict(leaves), existing, copy)
  return b.build(graphdef.root, ()), b.objects


def _nested(leaves):
  if len(leaves) == 1 and leaves[0][0] == ():
    return leaves[0][1]
  return statelib.from_flat_state(leaves)


def split(node, *filters, graph=None):
  """(GraphDef, State) or, with filters, (GraphDef, State per filter); every Variable must
  match one filter (end with `...` to catch the rest)."""
  graphdef, leaves, _ = flatten(node)
  if not filters:
    return graphdef, _nested(leaves)
  groups, rest = statelib.split_leaves(leaves, filters)
  if rest:
    raise ValueError(f"Non-exhaustive filters, got a non-empty remainder: paths "
                     f"{['/'.join(map(str, p)) for p in rest[:5]]}; add `...` as the last "
                     "filter to catch the rest")
  return (graphdef,) + tuple(_nested(g) for g in groups)


def state(node, *filters, graph=None):
  """The node's State (the Variables themselves, not copies); with filters, the part each
  filter selects (one State per filter)."""
  _, leaves, _ = flatten(node)
  if not filters:
    return _nested(leaves)
  groups, _ = statelib.split_leaves(leaves, filters)
  states = tuple(_nested(g) for g in groups)
  return states[0] if len(states) == 1 else states


def graphdef(node, *, graph=None):
  return flatten(node)[0]


def _leaves_of(states, api):
  out = {}
  for s in states:
    if isinstance(s, _vars.Variable):
      out[()] = s
      continue
    if not isinstance(s, (statelib.State, dict)):
      raise PartixError(f"[nnx.{api}] {s!r} is not a State (or a dict of one)")
    out.update(dict(statelib.to_flat_state(s)))
  return out


def merge(graphdef, state, *states, copy=False, graph=None):
  """The module graph graphdef describes, holding the Variables of the states."""
  node, _ = unflatten(graphdef, _leaves_of((state,) + states, "merge"), copy=copy)
  return node


def update(node, state, *states):
  """Sets the node's Variables (by path) to the values and metadata of the states."""
  leaves = _leaves_of((state,) + states, "update")
  for path, leaf in leaves.items():
    _update_at(node, path, leaf)


def _update_at(node, path, leaf):
  parent, target = None, node
  for i, k in enumerate(path):
    parent = target
    try:
      target = _child_of(parent, k)
    except (KeyError, IndexError, AttributeError, TypeError):
      raise PartixError(f"[nnx.update] the module has no attribute at path "
                        f"{'/'.join(map(str, path[:i + 1]))}") from None
  if isinstance(target, _vars.Variable):
    target.update_from_state(leaf)
  elif path and is_node_object(parent):
    object.__setattr__(parent, path[-1], leaf.get_raw_value() if isinstance(
        leaf, _vars.Variable) else leaf)
  else:
    raise PartixError(f"[nnx.update] cannot set path {'/'.join(map(str, path))} of {node!r}")


def clone(node, *, graph=None):
  graphdef_, state_ = split(node)
  return merge(graphdef_, state_, copy=True)


def iter_graph(node):
  """(path, value) of every node and Variable reachable from node, each once, children
  first... as Flax orders them: a node after its children."""
  seen = set()

  def walk(x, path):
    if isinstance(x, _vars.Variable) or is_node_object(x):
      if id(x) in seen:
        return
      seen.add(id(x))
    if is_node_object(x):
      for k, v in sorted(vars(x).items()):
        yield from walk(v, path + (k,))
    elif _is_seq(x) and has_graph_content(x):
      for i, v in _seq_items(x):
        yield from walk(v, path + (i,))
    elif isinstance(x, (dict, statelib.State)) and has_graph_content(x):
      for k in sorted(x, key=statelib._sort_key):
        yield from walk(x[k], path + (k,))
    if isinstance(x, _vars.Variable) or is_node_object(x) or _is_data_leaf(x):
      yield path, x
  yield from walk(node, ())


def pop(node, *filters):
  """Removes the Variables the filters select from node and returns them (a State each)."""
  _, leaves, _ = flatten(node)
  groups, _ = statelib.split_leaves(leaves, filters)
  for g in groups:
    for path, _leaf in g:
      parent = node
      for k in path[:-1]:
        parent = _child_of(parent, k)
      if isinstance(parent, dict):
        del parent[path[-1]]
      else:
        object.__delattr__(parent, path[-1])
  states = tuple(_nested(g) for g in groups)
  return states[0] if len(states) == 1 else states
