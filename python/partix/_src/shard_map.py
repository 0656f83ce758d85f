"""shard_map: f traced once on per-device blocks; in_specs / out_specs are pytree prefixes of
the arguments and results (one PartitionSpec may stand for a whole subtree). As JAX 0.10:
in_specs defaults to Infer (the specs the arguments' Explicit types carry), and a None entry
passes its arguments through untouched (static, the same Python objects in the body)."""
import functools

import numpy as np

from partix import _core
from partix._src import eager_values
from partix._src import refs
from partix._src import tree_util as tu
from partix._src.api import (Jitted, _keep_tree, _leaf_core, _out_leaves, _trees,
                             eager_shard_map_body, jit_trace_mesh)
from partix._src.core import Array, PartixError, PartixTypeError, wrap
from partix._src.errors import PartixNotImplementedError
from partix._src.sharding import (AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec,
                                  SingleDeviceSharding, concrete_context_mesh, context_mesh)


class InferFromArgs:
  """jax.sharding.Infer: shard_map's in_specs taken from the arguments' Explicit types."""

  def __repr__(self):
    return "jax.sharding.Infer"

  def __reduce__(self):
    return (_infer, ())


Infer = InferFromArgs()


def _infer():
  return Infer


_REQUIRED = object()  # out_specs not given


def _is_spec(x):
  return x is None or isinstance(x, PartitionSpec)


def _expand_specs(specs, treedef, api, what):
  """One entry per leaf of treedef from a prefix tree of specs: a PartitionSpec, or None for
  a leaf passed through untouched (in_specs) / a subtree with no arrays (out_specs)."""
  out = []

  def walk(p, t, path):
    if isinstance(p, PartitionSpec) or p is None:
      out.extend([p] * t.num_leaves)
      return
    if t is tu._LEAF:
      raise PartixError(f"[{api}] {what}{path}: {p!r} is not a PartitionSpec where the tree has "
                        "one array")
    if isinstance(p, dict) and t.kind is dict:
      if sorted(p) != list(t.data):
        raise PartixError(f"[{api}] {what}{path} keys {sorted(p)} do not match {list(t.data)}")
      kids = [(p[k], f"[{k!r}]") for k in t.data]
    elif isinstance(p, (tuple, list)) and not isinstance(p, PartitionSpec):
      kids = [(k, f"[{i}]") for i, k in enumerate(p)]
    else:
      raise PartixError(f"[{api}] {what}{path} {p!r} does not match the structure {t}")
    if len(kids) != len(t.children):
      raise PartixError(f"[{api}] {api} {what}{path} specification must be a tree prefix of "
                        f"the corresponding value: it has {len(kids)} entries where the value's "
                        f"tree {t} has {len(t.children)}")
    for (k, sub), c in zip(kids, t.children):
      walk(k, c, path + sub)
  walk(specs, treedef, "")
  return out


def _check_axes(mesh, specs, api, what, manual=()):
  names = set(mesh.axis_names)
  for s in specs:
    if s is None:
      continue
    if s.unreduced or s.reduced:
      if set(manual) != set(mesh.axis_names) - set(mesh.manual_axes):
        raise PartixNotImplementedError(
            f"[{api}] unreduced/reduced can only be passed to {what} when shard_map is in "
            f"full manual mode. Got mesh axis names {mesh.axis_names}, manual_axes: "
            f"{set(sorted(manual))}, specs: {s}")
      types = dict(zip(mesh.axis_names, mesh.axis_types))
      for kind, axes in (("unreduced", s.unreduced), ("reduced", s.reduced)):
        if not all(types.get(u) is AxisType.Explicit for u in axes):
          raise PartixError(f"[{api}] {kind} in {what} {s} can only be used when the mesh "
                            "passed to shard_map contains axis names all of type `Explicit`. "
                            f"Got mesh {mesh}")
    for entry in s:
      for a in (() if entry is None else (entry,) if isinstance(entry, str) else entry):
        if a not in names:
          raise PartixError(f"[{api}] {what}: mesh axis {a!r} in {s} is not an axis of {mesh}")


def _check_spec_tree(specs, api, what):
  for s in tu.tree_leaves(specs, is_leaf=_is_spec):
    if s is not None and not isinstance(s, PartitionSpec):
      raise PartixError(f"[{api}] {what} entry {s!r} is not a PartitionSpec")


def _context_mesh():
  """The mesh a shard_map without mesh= runs on: inside another shard_map's body the mesh in
  context there (its manual axes typed Manual), else the one set_mesh / use_mesh set."""
  if _core.has_current_mesh():
    inner = Mesh._wrap(_core.current_mesh())
    if inner.manual_axes:
      return inner
  return context_mesh()


def _single_device(s):
  return isinstance(s, SingleDeviceSharding) or (isinstance(s, NamedSharding) and
                                                 not s.mesh.axis_names)


def _resolved_mesh(m, leaves, api):
  """The concrete mesh a shard_map given an AbstractMesh runs on, as JAX finds it: under a
  trace the mesh the traced program runs on (in context, or its arguments'); called eagerly the
  concrete mesh in context, else the mesh of the arguments placed with a NamedSharding (whose
  shapes must be the abstract mesh's). An AbstractMesh still where nothing gives devices (a
  program traced on abstract meshes only)."""
  if _core.is_tracing():
    ctx = concrete_context_mesh() or jit_trace_mesh()
    if ctx is None:
      return m
    if ctx.shape_tuple != m.shape_tuple:
      raise PartixError(f"[{api}] the mesh passed to shard_map, {m}, does not match the shape of "
                        f"the mesh the program runs on, {ctx}: give an AbstractMesh of shape "
                        f"{dict(ctx.shape_tuple)}")
    return ctx
  ctx = concrete_context_mesh()
  if ctx is not None and ctx.shape_tuple == m.shape_tuple:
    m = ctx
  for x in leaves:
    if not isinstance(x, Array) or x._a.is_deleted() or not x.committed:
      continue
    s = x.sharding
    if not isinstance(s, NamedSharding) or _single_device(s):
      continue
    if s.mesh.shape_tuple != m.shape_tuple:
      raise PartixError(f"[{api}] Mesh shape of the input {s.mesh.shape_tuple} does not match "
                        f"the mesh shape passed to shard_map {m.shape_tuple} for shape "
                        f"{x._aval_str()}")
    m = s.mesh
  if isinstance(m, AbstractMesh):
    raise PartixError(f"[{api}] Please pass `jax.Array`s with a `NamedSharding` as input to "
                      "`shard_map` when passing `AbstractMesh` to the mesh argument (or call it "
                      f"under jax.set_mesh with a mesh of that shape): got {m} and none of the "
                      "arguments is placed on a mesh")
  return m


def _manual_axes(m, axis_names, api):
  """The axes the body is manual over (axis_names=, JAX's partial manual; by default all those
  not already manual in an enclosing shard_map)."""
  if axis_names is None or not axis_names:
    return frozenset(a for a in m.axis_names if a not in m.manual_axes)
  if not isinstance(axis_names, (set, frozenset)):
    raise PartixError(f"[{api}] `axis_names` argument of shard_map should be of type "
                      f"`frozenset` or `set`. Got type: {type(axis_names).__name__}")
  extra = set(axis_names) - set(m.axis_names)
  if extra:
    raise PartixError(f"[{api}] jax.shard_map requires axis_names={set(axis_names)} to be a "
                      f"subset of mesh.axis_names={m.axis_names}")
  return frozenset(axis_names)


def _inferred_spec(x, m, manual):
  """The spec the argument's type carries over m's manual axes (P() for host data and for an
  array placed elsewhere: it enters replicated)."""
  if isinstance(x, Array) and not x._a.is_deleted():
    if x._a.is_tracer():  # under jit: the sharding its Explicit type carries
      t = _core.type_of(x._a).sharding
      s = NamedSharding._wrap(t) if t is not None else None
    else:
      s = x.sharding
    if isinstance(s, NamedSharding) and s.mesh is not None and s.mesh.axis_names == m.axis_names:
      def keep(e):
        names = tuple(n for n in ((e,) if isinstance(e, str) else e or ()) if n in manual)
        return names or None
      # An unreduced argument enters as each device's partial sum (JAX's inferred spec).
      unreduced = set(getattr(s.spec, "unreduced", ()) or ()) & set(manual)
      reduced = set(getattr(s.spec, "reduced", ()) or ()) & set(manual)
      return PartitionSpec(*[keep(e) for e in s.spec], unreduced=unreduced or None,
                           reduced=reduced or None)
  return PartitionSpec()


def _leaf_specs(m, manual, in_specs, args, leaves, treedef, api, smap=False):
  types = dict(zip(m.axis_names, m.axis_types))
  if in_specs is Infer:
    if not all(types[a] is AxisType.Explicit for a in manual):
      if smap:
        raise PartixTypeError(f"[smap] in_axes was not specified when axis_name="
                              f"{set(sorted(manual))} was of type "
                              f"{', '.join(types[a].name for a in sorted(manual))} (in_axes is "
                              "inferred from the arguments only over Explicit axes)")
      raise PartixError(f"[{api}] shard_map in_specs argument must be a pytree of "
                        "`jax.sharding.PartitionSpec` instances, but it was not given when "
                        f"axis_names={set(sorted(manual))} are of type "
                        f"{', '.join(types[a].name for a in sorted(manual))} (in_specs is "
                        "inferred from the arguments only over Explicit axes)")
    return [_inferred_spec(x, m, manual) for x in leaves]
  if in_specs is None:
    return [None] * len(leaves)
  ins = in_specs
  if isinstance(ins, PartitionSpec):
    ins = (ins,) * len(args)
  if isinstance(ins, list):
    ins = tuple(ins)
  if not isinstance(ins, tuple) or len(ins) != len(args):
    raise PartixError(f"[{api}] in_specs {ins!r} must be a tuple with one entry per argument "
                      f"({len(args)})")
  per = _expand_specs(ins, treedef, api, "in_specs")
  if manual == set(m.axis_names) and all(t is AxisType.Explicit for t in m.axis_types):
    # As JAX: on an Explicit mesh the arguments' types already say how they are split, and
    # in_specs must agree (host data is replicated, P()).
    for x, s in zip(leaves, per):
      if s is None:
        continue
      have = _inferred_spec(x, m, manual)
      for kind in ("unreduced", "reduced"):  # partial sums enter only as such
        if set(getattr(s, kind)) != set(getattr(have, kind)):
          raise PartixError(
              f"[{api}] in_specs containing {kind} {s} passed to shard_map should be equal "
              f"to the {kind} present on the input: {have} for arg of shape "
              f"{tuple(np.shape(x))}")
      if not (isinstance(x, Array) and x._a.is_tracer()):
        pad = max(len(s), len(have), np.ndim(x))
        if tuple(have) + (None,) * (pad - len(have)) != tuple(s) + (None,) * (pad - len(s)):
          raise PartixError(
              f"[{api}] in_specs passed to shard_map: {s} does not match the specs of the "
              f"input: {have} for arg of shape {tuple(np.shape(x))}. `in_specs` is optional on "
              "an Explicit mesh: leave it out and shard_map infers it from the arguments, or "
              "reshard the arguments first (jax.reshard)")
  return per


class _Rebuild:
  """The body's arguments from the traced values: the pytree, with the leaves passed through
  (in_specs None) put back in place. Hashable when nothing is passed through, so the eager
  path's cache keys on it."""

  def __init__(self, treedef, which=None, statics=()):
    self.treedef, self.which, self.statics = treedef, which, tuple(statics)

  def __call__(self, dyn):
    if self.which is None:
      return tu.tree_unflatten(self.treedef, dyn)
    d, s = iter(dyn), iter(self.statics)
    return tu.tree_unflatten(self.treedef, [next(d) if w else next(s) for w in self.which])

  def __hash__(self):
    return hash(self.treedef)

  def __eq__(self, other):
    return isinstance(other, _Rebuild) and self.which is None and other.which is None and (
        self.treedef == other.treedef)


def shard_map(f=None, mesh=None, in_specs=Infer, out_specs=_REQUIRED, check_rep=None,
              auto=None, *, check_vma=None, axis_names=None, _smap=False, _plain=False):
  """jax.shard_map / jax.experimental.shard_map.shard_map: f runs on every device of mesh on
  its blocks (in_specs), and its per-device results assemble into global arrays (out_specs).
  Inside, the collectives of partix.lax name mesh axes."""
  if f is None:
    return lambda g: shard_map(g, mesh, in_specs, out_specs, check_rep, auto,
                               check_vma=check_vma, axis_names=axis_names, _smap=_smap,
                               _plain=_plain)
  api = "shard_map"
  if not callable(f):
    raise PartixError(f"[{api}] {f!r} is not callable")
  if out_specs is _REQUIRED:
    raise PartixError(f"[{api}] out_specs is required")
  check = True
  if check_vma is not None:
    check = bool(check_vma)
  elif check_rep is not None:
    check = bool(check_rep)
  if in_specs is not Infer:
    _check_spec_tree(in_specs, api, "in_specs")
  _check_spec_tree(out_specs, api, "out_specs")

  def impl(m, leaf_specs, rebuild, manual, *dyn):
    _check_axes(m, leaf_specs, api, "in_specs", manual)
    cores = [_leaf_core(x, api) for x in dyn]
    shapes = {}

    def out_fn(tid, n):
      per = _expand_specs(out_specs, _trees[tid], api, "out_specs")
      if any(s is None for s in per):
        raise PartixError(f"[{api}] out_specs {out_specs!r} has None where the result has "
                          "arrays; give a PartitionSpec (P() for replicated)")
      _check_axes(m, per, api, "out_specs", manual)
      for i, (spec, shape) in enumerate(zip(per, shapes.get(tid, ()))):
        if len(spec) > len(shape):
          raise PartixError(f"[{api}] out_specs entry {spec}, which has length {len(spec)}, "
                            f"does not fit result {i}, whose per-device shape {shape} has rank "
                            f"{len(shape)}")
      return [s._core() for s in per]
    outs_list = []
    every = frozenset(a for a in m.axis_names if a not in m.manual_axes)
    sm = _core.ShardMap(m._m, [s._core() for s in leaf_specs], outs_list, check, out_fn,
                        set() if manual == every else set(manual))
    sm.set_function_name(getattr(f, "__name__", ""))

    # The specs' unreduced and reduced axes: per argument, and per result once traced (after
    # out_fn, which checked the specs).
    for kind, setter in (("unreduced", sm.set_unreduced), ("reduced", sm.set_reduced)):
      def per_result(tid, n, kind=kind):
        return [set(getattr(s, kind))
                for s in _expand_specs(out_specs, _trees[tid], api, "out_specs")]
      setter([set(getattr(s, kind)) if s is not None else set() for s in leaf_specs], per_result)

    def trace(tracers):
      c, t = _out_leaves(f(*rebuild([wrap(t) for t in tracers])), api)
      tid = _keep_tree(t)
      shapes[tid] = [tuple(x.shape) for x in c]
      return c, tid
    outs, tid = sm.call(cores, [1] * len(cores), trace)
    shapes.clear()
    return tu.tree_unflatten(_trees.pop(tid), [Array(o) for o in outs])

  # Eager calls go through a jit keyed on the mesh, the specs and the tree (static) and the
  # arguments' signature, so f is traced once per signature as in JAX; under a trace the map
  # is inlined.
  cached = Jitted(impl, None, None, (0, 1, 2, 3), None, None, None, api, api=api)

  @functools.wraps(f)
  def mapped(*args, **kwargs):
    if kwargs:
      raise PartixError(f"[{api}] the mapped function takes positional arguments only, got "
                        f"keywords {sorted(kwargs)}")
    m = mesh if mesh is not None else _context_mesh()
    if m is None:
      raise PartixError(f"[{api}] no mesh: pass mesh=, or call it under `with set_mesh(mesh):`")
    if not isinstance(m, Mesh):
      raise PartixError(f"[{api}] mesh {m!r} is not a partix Mesh")
    if m.empty:
      raise PartixError(f"[{api}] shard_map requires a non-empty mesh: got {m}, which has no "
                        "axes and no devices to map over")
    if isinstance(m, AbstractMesh):
      m = _resolved_mesh(m, tu.tree_leaves(args), api)
    manual = _manual_axes(m, axis_names, api)
    if auto:  # the experimental API's complement of axis_names
      manual = manual - frozenset(auto)
    leaves, treedef = tu.tree_flatten(args)
    if refs.any_ref(leaves):  # jax.Ref arguments: values in, blocks' last values back out
      return refs.map_with_refs(
          f, leaves, treedef, out_specs,
          lambda vals: _leaf_specs(m, manual, in_specs, tu.tree_unflatten(treedef, vals), vals,
                                   treedef, api, _smap),
          lambda body, ins, outs: shard_map(body, m, ins, outs, check_vma=check,
                                            axis_names=set(manual)), (m, manual, check))
    per = _leaf_specs(m, manual, in_specs, args, leaves, treedef, api, _smap)
    which = [s is not None for s in per]
    dyn = [x for x, w in zip(leaves, which) if w]
    specs = tuple(s for s in per if s is not None)
    if all(which):
      rebuild = _Rebuild(treedef)
    else:  # leaves passed through: not hashable in general, so traced per call
      rebuild = _Rebuild(treedef, which, [x for x, w in zip(leaves, which) if not w])
    if _core.is_tracing():
      return impl(m, specs, rebuild, manual, *dyn)
    fresh = lambda: Jitted(impl, None, None, (0, 1, 2, 3), None, None, None, api, api=api)  # noqa: E731

    def run_with(jitted):  # called eagerly: its body is traced for this call
      with eager_shard_map_body(), eager_values.active(oracle):
        return jitted(m, specs, rebuild, manual, *dyn)

    def probe():
      body = oracle.probe_body(f)
      return shard_map(body, m, tu.tree_unflatten(treedef, per), PartitionSpec(oracle.axes),
                       check_vma=check, axis_names=set(manual), _plain=True)(*args)
    oracle = None if _plain else eager_values.Oracle(m, manual, check)
    first = cached if all(which) else fresh()
    if oracle is None:
      return run_with(first)
    return eager_values.run(oracle, run_with, first, fresh, probe)
  return mapped


def _axes_to_spec(axis_name, axis):
  if axis is None:
    return PartitionSpec()
  if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
    raise PartixError(f"[smap] axis {axis!r} must be a non-negative int or None")
  return PartitionSpec(*([None] * axis + [axis_name]))


def smap(f=None, /, *, in_axes=Infer, out_axes, axis_name):
  """jax.smap: shard_map over the one mesh axis axis_name (the current mesh's), with the
  mapped dimension of each argument (in_axes; inferred from Explicit types by default) and
  result (out_axes) named by position, as vmap names them; the other axes stay automatic."""
  if f is None:
    return lambda g: smap(g, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name)
  if isinstance(axis_name, (list, tuple)):
    raise PartixError(f"[smap] axis_name should be a `str` or a `Hashable`, but got {axis_name}")
  if in_axes is not Infer and in_axes is not None and not isinstance(in_axes, (int, tuple)):
    raise PartixError("[smap] in_axes must be an int, None, jax.sharding.Infer, or a tuple of "
                      "entries corresponding to the positional arguments passed to the "
                      f"function, but got {in_axes}")
  is_none = lambda x: x is None  # noqa: E731
  in_specs = Infer if in_axes is Infer else tu.tree_map(
      functools.partial(_axes_to_spec, axis_name), in_axes, is_leaf=is_none)
  out_specs = tu.tree_map(functools.partial(_axes_to_spec, axis_name), out_axes,
                          is_leaf=is_none)
  return shard_map(f, in_specs=in_specs, out_specs=out_specs, axis_names={axis_name},
                   _smap=True)
