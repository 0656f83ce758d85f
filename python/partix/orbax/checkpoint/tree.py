"""orbax.checkpoint.tree: helpers over pytrees with Orbax's names."""

from partix._src import tree_util as tu
from partix.orbax.checkpoint._impl import _path_tuple
from partix.orbax.checkpoint.utils import to_shape_dtype_struct


def to_flat_dict(tree, sep=None, keep_empty_nodes=False):
  """{path tuple: leaf} (or {'a<sep>b': leaf} when sep is given), as Orbax's."""
  pairs, _ = tu.tree_flatten_with_path(tree)
  flat = {_path_tuple(p): x for p, x in pairs}
  if sep is None:
    return flat
  return {sep.join(str(k) for k in p): x for p, x in flat.items()}


def from_flat_dict(flat_dict, target=None, sep=None):
  """The inverse of to_flat_dict: nested dicts, or the structure of `target`."""
  if sep is not None:
    flat_dict = {tuple(k.split(sep)): v for k, v in flat_dict.items()}
  if target is not None:
    pairs, treedef = tu.tree_flatten_with_path(target)
    keys = [_path_tuple(p) for p, _ in pairs]
    if sep is not None:
      keys = [tuple(str(k) for k in p) for p in keys]
    missing = [k for k in keys if k not in flat_dict]
    if missing:
      raise ValueError(f"[orbax.checkpoint.tree.from_flat_dict] no value for the target's "
                       f"paths {missing}")
    return tu.tree_unflatten(treedef, [flat_dict[k] for k in keys])
  out = {}
  for path, v in flat_dict.items():
    node = out
    for k in path[:-1]:
      node = node.setdefault(k, {})
    node[path[-1]] = v
  return out


__all__ = ["to_flat_dict", "from_flat_dict", "to_shape_dtype_struct"]
