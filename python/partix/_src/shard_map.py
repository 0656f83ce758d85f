"""shard_map: f traced once on per-device blocks; in_specs / out_specs are pytree prefixes of
the arguments and results (one PartitionSpec may stand for a whole subtree)."""
import functools

from partix import _core
from partix._src import tree_util as tu
from partix._src.api import Jitted, _keep_tree, _leaf_core, _out_leaves, _trees
from partix._src.core import Array, PartixError, wrap
from partix._src.sharding import Mesh, PartitionSpec, get_mesh


def _is_spec(x):
  return x is None or isinstance(x, PartitionSpec)


def _expand_specs(specs, treedef, api, what):
  """One PartitionSpec per leaf of treedef from a prefix tree of specs."""
  out = []

  def walk(p, t):
    if isinstance(p, PartitionSpec):
      out.extend([p] * t.num_leaves)
      return
    if p is None:
      if t.num_leaves:
        raise PartixError(f"[{api}] {what}: None stands for {t.num_leaves} arrays; give a "
                          "PartitionSpec (P() for replicated)")
      return
    if t is tu._LEAF:
      raise PartixError(f"[{api}] {what}: {p!r} is not a PartitionSpec where the tree has "
                        "one array")
    if isinstance(p, dict) and t.kind is dict:
      if sorted(p) != list(t.data):
        raise PartixError(f"[{api}] {what} keys {sorted(p)} do not match {list(t.data)}")
      kids = [p[k] for k in t.data]
    elif isinstance(p, (tuple, list)) and not isinstance(p, PartitionSpec):
      kids = list(p)
    else:
      raise PartixError(f"[{api}] {what} {p!r} does not match the structure {t}")
    if len(kids) != len(t.children):
      raise PartixError(f"[{api}] {what} has {len(kids)} entries where the tree {t} has "
                        f"{len(t.children)}")
    for k, c in zip(kids, t.children):
      walk(k, c)
  walk(specs, treedef)
  return out


def _check_axes(mesh, specs, api, what):
  names = set(mesh.axis_names)
  for s in specs:
    for entry in s:
      for a in (() if entry is None else (entry,) if isinstance(entry, str) else entry):
        if a not in names:
          raise PartixError(f"[{api}] {what}: mesh axis {a!r} in {s} is not an axis of {mesh}")


def _check_spec_tree(specs, api, what):
  for s in tu.tree_leaves(specs, is_leaf=_is_spec):
    if s is not None and not isinstance(s, PartitionSpec):
      raise PartixError(f"[{api}] {what} entry {s!r} is not a PartitionSpec")


def shard_map(f=None, mesh=None, in_specs=None, out_specs=None, check_rep=None, auto=None, *,
              check_vma=None, axis_names=None):
  """jax.shard_map / jax.experimental.shard_map.shard_map: f runs on every device of mesh on
  its blocks (in_specs), and its per-device results assemble into global arrays (out_specs).
  Inside, the collectives of partix.lax name mesh axes."""
  if f is None:
    return lambda g: shard_map(g, mesh, in_specs, out_specs, check_rep, auto,
                               check_vma=check_vma, axis_names=axis_names)
  api = "shard_map"
  if not callable(f):
    raise PartixError(f"[{api}] {f!r} is not callable")
  if out_specs is None:
    raise PartixError(f"[{api}] out_specs is required")
  check = True
  if check_vma is not None:
    check = bool(check_vma)
  elif check_rep is not None:
    check = bool(check_rep)
  _check_spec_tree(in_specs, api, "in_specs")
  _check_spec_tree(out_specs, api, "out_specs")

  def impl(m, *args):
    leaves, treedef = tu.tree_flatten(args)
    ins = in_specs
    if isinstance(ins, PartitionSpec):
      ins = (ins,) * len(args)
    if ins is None:
      raise PartixError(f"[{api}] in_specs is required")
    if isinstance(ins, list):
      ins = tuple(ins)
    if not isinstance(ins, tuple) or len(ins) != len(args):
      raise PartixError(f"[{api}] in_specs {ins!r} must be a tuple with one entry per argument "
                        f"({len(args)})")
    per_leaf = _expand_specs(ins, treedef, api, "in_specs")
    _check_axes(m, per_leaf, api, "in_specs")
    cores = [_leaf_core(x, api) for x in leaves]
    shapes = {}

    def out_fn(tid, n):
      per = _expand_specs(out_specs, _trees[tid], api, "out_specs")
      _check_axes(m, per, api, "out_specs")
      for i, (spec, shape) in enumerate(zip(per, shapes.get(tid, ()))):
        if len(spec) > len(shape):
          raise PartixError(f"[{api}] out_specs: {spec} has {len(spec)} entries but result {i} "
                            f"has per-device shape {shape}")
      return [s._core() for s in per]
    outs_list = []
    sm = _core.ShardMap(m._m, [s._core() for s in per_leaf], outs_list, check, out_fn)

    def trace(tracers):
      targs = tu.tree_unflatten(treedef, [wrap(t) for t in tracers])
      c, t = _out_leaves(f(*targs), api)
      tid = _keep_tree(t)
      shapes[tid] = [tuple(x.shape) for x in c]
      return c, tid
    outs, tid = sm.call(cores, [1] * len(cores), trace)
    shapes.clear()
    return tu.tree_unflatten(_trees.pop(tid), [Array(o) for o in outs])

  # Eager calls go through a jit keyed on the mesh (static) and the arguments' signature, so
  # f is traced once per signature as in JAX; under a trace the map is inlined.
  cached = Jitted(impl, None, None, 0, None, None, None, api, api=api)

  @functools.wraps(f)
  def mapped(*args, **kwargs):
    if kwargs:
      raise PartixError(f"[{api}] the mapped function takes positional arguments only, got "
                        f"keywords {sorted(kwargs)}")
    m = mesh if mesh is not None else get_mesh()
    if m is None:
      raise PartixError(f"[{api}] no mesh: pass mesh=, or call it under `with set_mesh(mesh):`")
    if not isinstance(m, Mesh):
      raise PartixError(f"[{api}] mesh {m!r} is not a partix Mesh")
    if _core.is_tracing():
      return impl(m, *args)
    return cached(m, *args)
  return mapped


def smap(f, in_axes=0, out_axes=0, *, axis_name):
  raise PartixError("[smap] is not supported; use shard_map")
