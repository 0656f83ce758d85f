"""jax.vmap over the core's batching engine: the function is traced on one example's avals and
evaluated on the whole batch, each primitive through its batching rule (a primitive without
one is refused by name, never unrolled)."""
import functools

from partix import _core
from partix._src import tree_util as tu
from partix._src.tracing import _keep_tree, _leaf_core, _out_leaves, _trees
from partix._src.core import Array, PartixError, wrap

__all__ = ["vmap"]


def _axis_entry(a, api, what):
  if a is None:
    return None
  if isinstance(a, bool) or not isinstance(a, int):
    raise PartixError(f"[{api}] {what} entries must be ints or None, got {a!r}")
  return a


def _per_leaf(prefix, tree, api, what):
  """The axis of every leaf of `tree` from a prefix tree of ints / None (as JAX's in_axes)."""
  if prefix is None or isinstance(prefix, int):
    return [_axis_entry(prefix, api, what)] * tree.num_leaves
  leaves = tu.tree_unflatten(tree, list(range(tree.num_leaves)))
  out = [None] * tree.num_leaves

  def walk(p, t, path):
    if not isinstance(p, (tuple, list, dict)):
      for i in tu.tree_leaves(t):
        out[i] = _axis_entry(p, api, what)
      return
    if isinstance(t, int):
      raise PartixError(f"[{api}] {what} {prefix!r} is not a tree prefix of the arguments: "
                        f"{type(p).__name__} at {path or 'the root'} where an array is")
    if isinstance(p, dict) != isinstance(t, dict):
      raise PartixError(f"[{api}] {what} {prefix!r} does not match the structure of the "
                        f"arguments at {path or 'the root'}")
    keys = sorted(t) if isinstance(t, dict) else range(len(t))
    if isinstance(t, dict):
      if sorted(p) != list(keys):
        raise PartixError(f"[{api}] {what} keys {sorted(p)} differ from {list(keys)} at "
                          f"{path or 'the root'}")
    elif len(p) != len(t):
      raise PartixError(f"[{api}] {what} has {len(p)} entries where the arguments have "
                        f"{len(t)} at {path or 'the root'}")
    for k in keys:
      walk(p[k], t[k], f"{path}[{k!r}]")
  walk(prefix, leaves, "")
  return out


def _spmd_names(spmd_axis_name, api):
  if spmd_axis_name is None:
    return []
  names = [spmd_axis_name] if isinstance(spmd_axis_name, str) else spmd_axis_name
  if not isinstance(names, (tuple, list)) or not names or not all(
      isinstance(n, str) and n for n in names):
    raise PartixError(f"[{api}] spmd_axis_name must be a mesh axis name or a tuple of them, got "
                      f"{spmd_axis_name!r}")
  return list(names)


def _no_refs(fun, leaves, tree, axes, out_axes, remap):
  raise PartixError("[vmap] a jax.Ref argument needs partix's Ref rules (partix._src.refs)")


# How vmap takes jax.Ref arguments: installed by refs.py, which builds on this module.
_ref_rules = [_no_refs]


def set_ref_rules(call):
  """Installs refs.py's vmap of a function with Ref arguments (vmap_with_refs)."""
  _ref_rules[0] = call


def vmap(fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None, spmd_axis_name=None):
  """jax.vmap: fun mapped over an axis of its arguments (in_axes: an int, None, or a tree
  prefix of the arguments), its results stacked along out_axes (likewise over the results).
  Composes with jit, grad (per-example gradients: vmap(grad(f))), loops, cond, shard_map and
  sharded arguments: the mapped axis keeps its sharding. Collectives inside fun may name
  axis_name (psum over the examples, axis_index their position, all_gather, ppermute,
  psum_scatter); spmd_axis_name splits the examples over those mesh axes wherever fun
  constrains a sharding or enters a shard_map."""
  api = "vmap"
  if not callable(fun):
    raise PartixError(f"[{api}] {fun!r} is not callable")
  if axis_name is not None and (not isinstance(axis_name, str) or not axis_name):
    raise PartixError(f"[{api}] axis_name must be a non-empty str, got {axis_name!r}")
  spmd = _spmd_names(spmd_axis_name, api)
  if isinstance(in_axes, list):
    in_axes = tuple(in_axes)
  for what, a in (("in_axes", in_axes), ("out_axes", out_axes)):
    if isinstance(a, bool) or not (a is None or isinstance(a, (int, tuple, list, dict))):
      raise PartixError(f"[{api}] {what} must be an int, None, or a tuple/list/dict of them "
                        f"matching the {'arguments' if what == 'in_axes' else 'results'}, got "
                        f"{a!r}")
  if axis_size is not None and (isinstance(axis_size, bool) or not isinstance(axis_size, int)
                                or axis_size < 1):
    raise PartixError(f"[{api}] axis_size must be a positive int, got {axis_size!r}")

  @functools.wraps(fun)
  def mapped(*args, **kwargs):
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
      raise PartixError(f"[{api}] in_axes has {len(in_axes)} entries for {len(args)} positional "
                        "arguments")
    custom = getattr(type(fun), "_partix_custom_vmap", None)
    if custom is not None:  # custom_batching.custom_vmap: its own rule batches the call
      return custom(fun, args, kwargs, in_axes, out_axes, axis_size)
    leaves, tree = tu.tree_flatten((args, kwargs))
    arg_tree = tu.tree_structure(args)
    axes = _per_leaf(in_axes, arg_tree, api, "in_axes") + [0] * (len(leaves) - arg_tree.num_leaves)
    if any(getattr(type(x), "_partix_ref", False) for x in leaves):  # jax.Ref arguments
      return _ref_rules[0](fun, leaves, tree, axes, out_axes, lambda body, outs: vmap(
          body, in_axes, outs, axis_name, axis_size, spmd_axis_name))
    cores = [_leaf_core(x, api) for x in leaves]
    norm = []
    for i, (c, a) in enumerate(zip(cores, axes)):
      if a is None:
        norm.append(-1)
        continue
      n = len(c.shape)
      if not -n <= a < n:
        raise PartixError(f"[{api}] in_axes {a} is out of range for an argument of shape "
                          f"{tuple(c.shape)}")
      norm.append(a % n)

    def traced(tracers):
      targs, tkw = tu.tree_unflatten(tree, [wrap(t) for t in tracers])
      c, t = _out_leaves(fun(*targs, **tkw), api)
      return c, _keep_tree(t)
    values, bdims, tid = _core.vmap(cores, norm, axis_size, axis_name or "", spmd, traced)
    out_tree = _trees.pop(tid)
    size = axis_size
    if size is None:
      size = next(c.shape[a] for c, a in zip(cores, norm) if a >= 0)
    outs = []
    for v, b, a in zip(values, bdims, _per_leaf(out_axes, out_tree, api, "out_axes")):
      rank = len(v.shape) - (1 if b >= 0 else 0) + 1
      if a is not None and not -rank <= a < rank:
        raise PartixError(f"[{api}] out_axes {a} is out of range for an output of rank "
                          f"{rank - 1}")
      outs.append(Array(_core.place_batched(v, b, size, -1 if a is None else a % rank)))
    return tu.tree_unflatten(out_tree, outs)
  return mapped
