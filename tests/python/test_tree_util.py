"""tree_util against JAX's documented behaviour (leaf order, None, namedtuple, registered
classes, paths, keystr, structure reprs)."""
import collections
import dataclasses

import numpy as np
import pytest

import partix as jax
from partix import tree_util as tu


Point = collections.namedtuple("Point", ["x", "y"])


@tu.register_pytree_node_class
class Box:
  def __init__(self, a, b, tag):
    self.a, self.b, self.tag = a, b, tag

  def tree_flatten(self):
    return (self.a, self.b), self.tag

  @classmethod
  def tree_unflatten(cls, aux, children):
    return cls(*children, aux)


@dataclasses.dataclass
class DC:
  w: object
  n: int = dataclasses.field(metadata=dict(static=True), default=0)


tu.register_dataclass(DC)


class Keyed:
  def __init__(self, u, v):
    self.u, self.v = u, v


tu.register_pytree_with_keys(
    Keyed, lambda k: (((tu.GetAttrKey("u"), k.u), (tu.GetAttrKey("v"), k.v)), None),
    lambda aux, c: Keyed(*c))


def test_flatten_order_and_none():
  tree = {"b": [1, None, (2, 3)], "a": 4, "c": None}
  leaves, td = tu.tree_flatten(tree)
  assert leaves == [4, 1, 2, 3]  # dict keys sorted, None has no leaves
  assert td.num_leaves == 4
  assert repr(td) == "PyTreeDef({'a': *, 'b': [*, None, (*, *)], 'c': None})"
  assert tu.tree_unflatten(td, [10, 11, 12, 13]) == {"b": [11, None, (12, 13)], "a": 10,
                                                      "c": None}
  assert tu.tree_leaves(None) == []
  assert repr(tu.tree_structure(None)) == "PyTreeDef(None)"
  assert repr(tu.tree_structure(5)) == "PyTreeDef(*)"
  assert repr(tu.tree_structure((1,))) == "PyTreeDef((*,))"
  assert tu.tree_leaves([None, 1], is_leaf=lambda x: x is None) == [None, 1]
  assert tu.tree_map(lambda x: x * 2, [None, 1]) == [None, 2]
  with pytest.raises(jax.PartixError, match=r"^\[tree_unflatten\]"):
    tu.tree_unflatten(td, [1, 2])


def test_namedtuple_registered_dataclass():
  p = Point(1, (2, 3))
  leaves, td = tu.tree_flatten(p)
  assert leaves == [1, 2, 3]
  assert repr(td) == "PyTreeDef(CustomNode(namedtuple[Point], [*, (*, *)]))"
  q = tu.tree_map(lambda v: v + 1, p)
  assert isinstance(q, Point) and q == Point(2, (3, 4))
  b = tu.tree_map(lambda v: v * 10, Box(1, [2], "t"))
  assert isinstance(b, Box) and b.a == 10 and b.b == [20] and b.tag == "t"
  assert tu.tree_structure(Box(1, 2, "t")) != tu.tree_structure(Box(1, 2, "u"))
  d = tu.tree_map(lambda v: v + 1, DC(np.float32(1), 5))
  assert isinstance(d, DC) and d.w == 2 and d.n == 5
  assert tu.tree_leaves(DC(1, 5)) == [1]
  od = collections.OrderedDict([("z", 1), ("a", 2)])
  assert tu.tree_leaves(od) == [1, 2]
  assert isinstance(tu.tree_map(lambda v: v, od), collections.OrderedDict)
  dd = collections.defaultdict(list, {"b": 1, "a": 2})
  m = tu.tree_map(lambda v: v * 3, dd)
  assert isinstance(m, collections.defaultdict) and m.default_factory is list
  assert dict(m) == {"a": 6, "b": 3}


def test_paths_and_keystr():
  tree = {"a": [1, Point(2, 3)], "b": Keyed(4, 5), "c": Box(6, 7, None)}
  pl = tu.tree_leaves_with_path(tree)
  got = [(tu.keystr(p), v) for p, v in pl]
  assert got == [("['a'][0]", 1), ("['a'][1].x", 2), ("['a'][1].y", 3), ("['b'].u", 4),
                 ("['b'].v", 5), ("['c'][<flat index 0>]", 6), ("['c'][<flat index 1>]", 7)]
  assert pl[0][0] == (tu.DictKey("a"), tu.SequenceKey(0))
  assert tu.keystr(pl[2][0], simple=True, separator="/") == "a/1/y"
  out = tu.tree_map_with_path(lambda p, v: tu.keystr(p) + str(v), {"k": (1, 2)})
  assert out == {"k": ("['k'][0]1", "['k'][1]2")}
  (paths_leaves, td) = tu.tree_flatten_with_path([5, {"q": 6}])
  assert [tu.keystr(p) for p, _ in paths_leaves] == ["[0]", "[1]['q']"]
  assert td == tu.tree_structure([0, {"q": 0}])


def test_tree_map_multiple_and_prefix():
  assert tu.tree_map(lambda a, b: a + b, {"x": 1, "y": (2, 3)}, {"x": 10, "y": (20, 30)}) == {
      "x": 11, "y": (22, 33)}
  # rest may have the first tree as a prefix: its subtrees are passed whole
  assert tu.tree_map(lambda a, b: (a, b), [1, 2], [(3, 4), {"k": 5}]) == [
      (1, (3, 4)), (2, {"k": 5})]
  with pytest.raises(jax.PartixError, match=r"^\[tree_map\]"):
    tu.tree_map(lambda a, b: a, [1, 2], [1, 2, 3])
  with pytest.raises(jax.PartixError, match=r"^\[tree_map\]"):
    tu.tree_map(lambda a, b: a, {"x": 1}, {"y": 1})
  td = tu.tree_structure([0, (0, 0)])
  assert td.flatten_up_to([1, ([2], 3)]) == [1, [2], 3]
  assert tu.tree_reduce(lambda a, b: a + b, [1, (2, 3)]) == 6
  assert tu.tree_reduce(lambda a, b: a + b, [1, (2, 3)], 10) == 16
  assert tu.tree_all([True, (True, 1)]) and not tu.tree_all([True, (0,)])


def test_jax_tree_short_names():
  t = {"a": 1, "b": [2, 3]}
  assert jax.tree.leaves(t) == [1, 2, 3]
  assert jax.tree.map(lambda v: -v, t) == {"a": -1, "b": [-2, -3]}
  leaves, td = jax.tree.flatten(t)
  assert jax.tree.unflatten(td, leaves) == t
  assert jax.tree.structure(t) == td
  assert jax.tree_util.tree_leaves(t) == jax.tree_leaves(t)


def test_partial_is_a_pytree():
  p = tu.Partial(lambda a, b: a + b, np.float32(1))
  leaves = tu.tree_leaves(p)
  assert leaves == [np.float32(1)]
  q = tu.tree_map(lambda v: v * 5, p)
  assert q(1) == 6


def test_keystr_documented_example():
  params = {"foo": {"bar": {"baz": 1, "bat": [2, 3]}}}
  paths = [p for p, _ in tu.tree_leaves_with_path(params)]
  assert [tu.keystr(p) for p in paths] == ["['foo']['bar']['bat'][0]",
                                           "['foo']['bar']['bat'][1]", "['foo']['bar']['baz']"]
  assert [tu.keystr(p, simple=True, separator="/") for p in paths] == [
      "foo/bar/bat/0", "foo/bar/bat/1", "foo/bar/baz"]


def test_jax_tree_short_names_transpose_broadcast_static():
  import dataclasses
  t = [(1, 2), (3, 4), (5, 6)]
  outer = jax.tree.structure([0, 0, 0])
  # inner_treedef may be None: read from the first inner tree (JAX's pytrees tutorial).
  assert jax.tree.transpose(outer, None, t) == ([1, 3, 5], [2, 4, 6])
  assert jax.tree.transpose(outer, jax.tree.structure((0, 0)), t) == ([1, 3, 5], [2, 4, 6])
  assert jax.tree.broadcast(1, [1, (2, 3)]) == [1, (1, 1)]
  assert jax.tree.reduce_associative(lambda a, b: a + b, [1, 2, 3, 4]) == 10

  @jax.tree_util.register_dataclass
  @dataclasses.dataclass
  class Op:
    x: object
    name: str = jax.tree.static(default="add")

  leaves, tree = jax.tree.flatten(Op(np.ones(2)))
  assert len(leaves) == 1 and jax.tree.unflatten(tree, [np.zeros(2)]).name == "add"
  assert jax.tree.structure(Op(1, "a")) != jax.tree.structure(Op(1, "b"))
