"""partix.tree_util: pytrees (as jax.tree_util)."""
from partix._src.tree_util import (DictKey, FlattenedIndexKey, GetAttrKey, KeyEntry,  # noqa
                                   KeyPath, Partial, all_leaves, flatten_one_level,
                                   flatten_one_level_with_keys, is_tree_node,
                                   register_pytree_with_keys_class, tree_broadcast,
                                   tree_reduce_associative, tree_transpose, treedef_children,
                                   treedef_tuple,
                                   PyTreeDef, SequenceKey, keystr, register_dataclass,
                                   register_pytree_node, register_pytree_node_class,
                                   register_pytree_with_keys, register_static,
                                   tree_all, tree_flatten,
                                   tree_flatten_with_path, tree_leaves, tree_leaves_with_path,
                                   tree_map, tree_map_with_path, tree_reduce, tree_structure,
                                   tree_unflatten, treedef_is_leaf)


def __getattr__(name):
  raise AttributeError(f"module 'partix.tree_util' has no attribute {name!r}: partix does not "
                       f"provide jax.tree_util.{name}")
