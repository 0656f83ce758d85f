"""partix.tree: the short names of jax.tree (map, leaves, structure, flatten, unflatten,
transpose, broadcast, reduce_associative, static, ...)."""
import dataclasses as _dataclasses

from partix._src.tree_util import (tree_all as all, tree_broadcast as broadcast,  # noqa: F401
                                   tree_flatten as flatten,
                                   tree_flatten_with_path as flatten_with_path,
                                   tree_leaves as leaves, tree_leaves_with_path as leaves_with_path,
                                   tree_map as map, tree_map_with_path as map_with_path,
                                   tree_reduce as reduce,
                                   tree_reduce_associative as reduce_associative,
                                   tree_structure as structure, tree_transpose as _transpose,
                                   tree_unflatten as unflatten)


def transpose(outer_treedef, inner_treedef, pytree_to_transpose):
  """jax.tree.transpose: a tree of structure outer(inner) as one of structure inner(outer);
  inner_treedef may be None (read from the first inner tree)."""
  return _transpose(outer_treedef, inner_treedef, pytree_to_transpose)


def static(**kwargs):
  """jax.tree.static: a dataclasses.field marked static (metadata static=True), which
  register_dataclass keeps in the tree's structure instead of its leaves."""
  metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
  return _dataclasses.field(metadata=metadata, **kwargs)
