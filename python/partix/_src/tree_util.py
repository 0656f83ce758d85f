"""Pytrees as JAX defines them: None, tuple, list, dict (sorted keys), namedtuple, and classes
registered with register_pytree_node / register_pytree_node_class / register_dataclass are
nodes; everything else is a leaf."""
import collections
import dataclasses
import functools
from partix._src.core import PartixError

_registry = {}  # type -> (flatten(x) -> (children, aux), unflatten(aux, children))


class PyTreeDef:
  """The structure of a pytree: its node kinds and their data, without the leaves."""
  __slots__ = ("kind", "data", "children", "num_leaves", "_hash")

  def __init__(self, kind, data, children):
    self.kind = kind          # None: a leaf; else the node type
    self.data = data          # dict keys, namedtuple type, registered aux data
    self.children = children  # tuple of PyTreeDef
    self.num_leaves = 1 if kind is None and data is None and not children else sum(
        c.num_leaves for c in children)
    self._hash = None

  @property
  def num_nodes(self):
    return 1 + sum(c.num_nodes for c in self.children)

  def _key(self):
    return (self.kind, self.data, self.children)

  def __eq__(self, other):
    return isinstance(other, PyTreeDef) and (self is other or self._key() == other._key())

  def __hash__(self):
    if self._hash is None:
      try:
        self._hash = hash(self._key())
      except TypeError:  # unhashable aux data: hash by identity of the structure
        self._hash = hash((self.kind, id(self.data), self.children))
    return self._hash

  def unflatten(self, leaves):
    return tree_unflatten(self, leaves)

  def flatten_up_to(self, xs):
    return _leaves_like(self, xs, "PyTreeDef.flatten_up_to")

  def __repr__(self):
    return f"PyTreeDef({_show(self)})"


_LEAF = PyTreeDef(None, None, ())
_NONE = PyTreeDef(type(None), None, ())
_NONE.num_leaves = 0


def _show(t):
  if t is _LEAF:
    return "*"
  if t.kind is type(None):
    return "None"
  inner = ", ".join(_show(c) for c in t.children)
  if t.kind is tuple:
    return f"({inner}{',' if len(t.children) == 1 else ''})"
  if t.kind is list:
    return f"[{inner}]"
  if t.kind is dict:
    return "{" + ", ".join(f"{k!r}: {_show(c)}" for k, c in zip(t.data, t.children)) + "}"
  if t.kind == "namedtuple":
    return f"CustomNode(namedtuple[{t.data.__name__}], [{inner}])"
  if t.kind is collections.OrderedDict:
    return f"CustomNode(OrderedDict[{list(t.data)}], [{inner}])"
  if t.kind is collections.defaultdict:
    return f"CustomNode(defaultdict[{t.data!r}], [{inner}])"
  return f"CustomNode({t.kind.__name__}[{t.data}], [{inner}])"


def _is_namedtuple(x):
  return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _flatten(x, leaves, is_leaf):
  if is_leaf is not None and is_leaf(x):
    leaves.append(x)
    return _LEAF
  if x is None:
    return _NONE
  t = type(x)
  if t is tuple or t is list:
    return PyTreeDef(t, None, tuple(_flatten(c, leaves, is_leaf) for c in x))
  if t is dict or t is collections.OrderedDict:
    keys = tuple(sorted(x)) if t is dict else tuple(x)
    return PyTreeDef(t, keys, tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
  if t is collections.defaultdict:
    keys = tuple(sorted(x))
    return PyTreeDef(t, (x.default_factory, keys),
                     tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
  reg = _registry.get(t)
  if reg is not None:
    children, aux = reg[0](x)
    return PyTreeDef(t, aux, tuple(_flatten(c, leaves, is_leaf) for c in children))
  if _is_namedtuple(x):
    return PyTreeDef("namedtuple", t, tuple(_flatten(c, leaves, is_leaf) for c in x))
  leaves.append(x)
  return _LEAF


def tree_flatten(tree, is_leaf=None):
  leaves = []
  return leaves, _flatten(tree, leaves, is_leaf)


def _build(t, it):
  if t is _LEAF:
    return next(it)
  if t.kind is type(None):
    return None
  children = [_build(c, it) for c in t.children]
  if t.kind is tuple:
    return tuple(children)
  if t.kind is list:
    return children
  if t.kind is dict:
    return dict(zip(t.data, children))
  if t.kind is collections.OrderedDict:
    return collections.OrderedDict(zip(t.data, children))
  if t.kind is collections.defaultdict:
    return collections.defaultdict(t.data[0], zip(t.data[1], children))
  if t.kind == "namedtuple":
    return t.data(*children)
  return _registry[t.kind][1](t.data, children)


def tree_unflatten(treedef, leaves):
  leaves = list(leaves)
  if len(leaves) != treedef.num_leaves:
    raise PartixError(f"[tree_unflatten] {treedef} takes {treedef.num_leaves} leaves, "
                      f"got {len(leaves)}")
  return _build(treedef, iter(leaves))


def tree_leaves(tree, is_leaf=None):
  return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
  return tree_flatten(tree, is_leaf)[1]


def treedef_is_leaf(treedef):
  return treedef is _LEAF or treedef == _LEAF


def tree_map(f, tree, *rest, is_leaf=None):
  leaves, treedef = tree_flatten(tree, is_leaf)
  others = [_leaves_like(treedef, r, "tree_map") for r in rest]
  return treedef.unflatten(f(*xs) for xs in zip(leaves, *others))


def _leaves_like(treedef, tree, api):
  """The subtrees of tree standing where treedef has leaves (tree has treedef as a prefix)."""
  out = []

  def walk(t, x):
    if t is _LEAF:
      out.append(x)
      return
    if t.kind is type(None):
      if x is not None:
        _mismatch(api, treedef, tree)
      return
    xt = _flatten(x, [], lambda y: y is not x)
    if xt.kind != t.kind or xt.data != t.data or len(xt.children) != len(t.children):
      _mismatch(api, treedef, tree)
    kids = _node_children(x)
    for c, k in zip(t.children, kids):
      walk(c, k)
  walk(treedef, tree)
  return out


def _node_children(x):
  """The direct children of the node x, in flattening order."""
  t = type(x)
  if t is tuple or t is list or _is_namedtuple(x) and t not in _registry:
    return list(x)
  if t is dict or t is collections.defaultdict:
    return [x[k] for k in sorted(x)]
  if t is collections.OrderedDict:
    return list(x.values())
  return list(_registry[t][0](x)[0])


def _mismatch(api, treedef, tree):
  raise PartixError(f"[{api}] tree {tree_structure(tree)} does not have the structure "
                    f"{treedef} as a prefix")


def tree_reduce(f, tree, initializer=None, is_leaf=None):
  leaves = tree_leaves(tree, is_leaf)
  return functools.reduce(f, leaves) if initializer is None else functools.reduce(
      f, leaves, initializer)


def tree_all(tree):
  return all(tree_leaves(tree))


# ---- paths ----

@dataclasses.dataclass(frozen=True)
class DictKey:
  key: object

  def __str__(self):
    return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class SequenceKey:
  idx: int

  def __str__(self):
    return f"[{self.idx}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
  name: str

  def __str__(self):
    return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
  key: int

  def __str__(self):
    return f"[<flat index {self.key}>]"


def _child_keys(t):
  if t.kind in (tuple, list):
    return [SequenceKey(i) for i in range(len(t.children))]
  if t.kind in (dict, collections.OrderedDict):
    return [DictKey(k) for k in t.data]
  if t.kind is collections.defaultdict:
    return [DictKey(k) for k in t.data[1]]
  if t.kind == "namedtuple":
    return [GetAttrKey(n) for n in t.data._fields]
  if t.kind in _registry and len(_registry[t.kind]) > 2 and _registry[t.kind][2]:
    return [GetAttrKey(n) for n in _registry[t.kind][2]]
  return [FlattenedIndexKey(i) for i in range(len(t.children))]


def _paths(t, prefix, out):
  if t is _LEAF:
    out.append(prefix)
    return
  for k, c in zip(_child_keys(t), t.children):
    _paths(c, prefix + (k,), out)


def _value_paths(t, x, prefix, out):
  """Paths found from the value: nodes registered with keys name their own children."""
  if t is _LEAF:
    out.append(prefix)
    return
  reg = _registry.get(t.kind)
  if reg is not None and len(reg) > 3:
    kc, _ = reg[3](x)
    keys, kids = [k for k, _ in kc], [c for _, c in kc]
  elif t.kind is type(None):
    return
  else:
    keys, kids = _child_keys(t), _node_children(x)
  for k, c, v in zip(keys, t.children, kids):
    _value_paths(c, v, prefix + (k,), out)


def tree_flatten_with_path(tree, is_leaf=None):
  leaves, treedef = tree_flatten(tree, is_leaf)
  paths = []
  _value_paths(treedef, tree, (), paths)
  return list(zip(paths, leaves)), treedef


def tree_leaves_with_path(tree, is_leaf=None):
  return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(f, tree, *rest, is_leaf=None):
  pairs, treedef = tree_flatten_with_path(tree, is_leaf)
  others = [_leaves_like(treedef, r, "tree_map_with_path") for r in rest]
  return treedef.unflatten(f(p, x, *xs) for (p, x), *xs in zip(pairs, *others))


def keystr(path, *, simple=False, separator=""):
  """The path as text: "['a'][0].b"; simple=True gives the bare keys joined by separator."""
  if not simple:
    return separator.join(str(k) for k in path)
  bare = {DictKey: lambda k: str(k.key), SequenceKey: lambda k: str(k.idx),
          GetAttrKey: lambda k: k.name, FlattenedIndexKey: lambda k: str(k.key)}
  return separator.join(bare.get(type(k), str)(k) for k in path)


def treedef_paths(treedef, root="args"):
  out = []
  _paths(treedef, (), out)
  return [root + keystr(p) for p in out]


# ---- registration ----

def register_pytree_node(nodetype, flatten_func, unflatten_func):
  _registry[nodetype] = (flatten_func, unflatten_func, None)
  return nodetype


def register_pytree_node_class(cls):
  register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
  return cls


def register_static(cls):
  """jax.tree_util.register_static: instances of cls are pytree nodes with no children, the
  instance itself being the node's static data (hashable, compared by equality)."""
  register_pytree_node(cls, lambda x: ((), x), lambda aux, _: aux)
  return cls


def register_pytree_with_keys(nodetype, flatten_with_keys, unflatten_func, flatten_func=None):
  def flat(x):
    if flatten_func is not None:
      return flatten_func(x)
    kc, aux = flatten_with_keys(x)
    return [c for _, c in kc], aux
  _registry[nodetype] = (flat, unflatten_func, None, flatten_with_keys)
  return nodetype


def register_dataclass(nodetype, data_fields=None, meta_fields=None, drop_fields=()):
  if data_fields is None:
    fields = [f for f in dataclasses.fields(nodetype) if f.init]
    meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    data_fields = [f.name for f in fields if f.name not in meta_fields]
  data_fields, meta_fields = tuple(data_fields), tuple(meta_fields or ())

  def flatten(x):
    return [getattr(x, n) for n in data_fields], tuple(getattr(x, n) for n in meta_fields)

  def unflatten(aux, children):
    return nodetype(**dict(zip(data_fields, children)), **dict(zip(meta_fields, aux)))
  _registry[nodetype] = (flatten, unflatten, data_fields)
  return nodetype


# ---- more of jax.tree_util ----

KeyEntry = object   # a path entry: DictKey, SequenceKey, GetAttrKey or FlattenedIndexKey
KeyPath = tuple     # a tuple of KeyEntry


def treedef_children(treedef):
  """The structures of the root node's children."""
  return list(treedef.children)


def treedef_tuple(treedefs):
  """The structure of a tuple of trees of the given structures."""
  return PyTreeDef(tuple, None, tuple(treedefs))


def is_tree_node(typ):
  """Whether values of type typ are pytree nodes (not leaves)."""
  return (typ in (tuple, list, dict, collections.OrderedDict, collections.defaultdict,
                  type(None)) or typ in _registry or
          (isinstance(typ, type) and issubclass(typ, tuple) and hasattr(typ, "_fields")))


def all_leaves(iterable, is_leaf=None):
  """Whether every element of iterable is a leaf."""
  return all(tree_structure(x, is_leaf) is _LEAF for x in iterable)


def flatten_one_level(tree):
  """(children, node data) of the root node; a leaf is an error, as in JAX."""
  if tree is None:
    return (), None
  if not is_tree_node(type(tree)):
    raise PartixError(f"[flatten_one_level] can't tree-flatten type: {type(tree)}")
  t = tree_structure(tree, is_leaf=lambda x: x is not tree)
  return _node_children(tree), t.data


def flatten_one_level_with_keys(tree):
  children, data = flatten_one_level(tree)
  keys = _child_keys(tree_structure(tree, is_leaf=lambda x: x is not tree))
  return tuple(zip(keys, children)), data


def tree_broadcast(prefix_tree, full_tree, is_leaf=None):
  """prefix_tree with each of its leaves repeated over the subtree of full_tree at its place."""
  prefix_leaves, prefix_def = tree_flatten(prefix_tree, is_leaf)
  subtrees = prefix_def.flatten_up_to(full_tree)
  return tree_unflatten(prefix_def, [tree_map(lambda _: p, sub, is_leaf=is_leaf)
                                     for p, sub in zip(prefix_leaves, subtrees)])


_UNSPECIFIED = object()


def tree_reduce_associative(operation, tree, *, identity=_UNSPECIFIED, is_leaf=None):
  """The leaves combined by an associative operation, pairwise (a balanced tree of calls)."""
  leaves = tree_leaves(tree, is_leaf)
  if not leaves:
    if identity is _UNSPECIFIED:
      raise PartixError("[tree_reduce_associative] an empty tree needs identity=")
    return identity
  while len(leaves) > 1:
    nxt = [operation(leaves[i], leaves[i + 1]) for i in range(0, len(leaves) - 1, 2)]
    if len(leaves) % 2:
      nxt.append(leaves[-1])
    leaves = nxt
  return leaves[0]


def tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose):
  """A tree of structure outer(inner) made one of structure inner(outer)."""
  if inner_treedef is None:
    inner_treedef = tree_structure(outer_treedef.flatten_up_to(pytree_to_transpose)[0])
  flat = [inner_treedef.flatten_up_to(x)
          for x in outer_treedef.flatten_up_to(pytree_to_transpose)]
  columns = [tree_unflatten(outer_treedef, [row[i] for row in flat])
             for i in range(inner_treedef.num_leaves)]
  return tree_unflatten(inner_treedef, columns)


def register_pytree_with_keys_class(cls):
  """As register_pytree_node_class, for a class with tree_flatten_with_keys and
  tree_unflatten (and optionally tree_flatten)."""
  flat = getattr(cls, "tree_flatten", None)
  register_pytree_with_keys(cls, lambda x: x.tree_flatten_with_keys(), cls.tree_unflatten,
                            (lambda x: x.tree_flatten()) if flat is not None else None)
  return cls


class Partial(functools.partial):
  """functools.partial as a pytree: its bound arguments are leaves (as jax.tree_util.Partial)."""


register_pytree_node(
    Partial, lambda p: ((p.args, p.keywords), p.func),
    lambda func, c: Partial(func, *c[0], **c[1]))
