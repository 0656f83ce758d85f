"""Sharding annotations of Variables (Flax's nnx.spmd): logical axis names resolved through
sharding rules, PartitionSpec and NamedSharding trees read from a state's metadata, and eager
placement of annotated values when they are created."""
import contextlib
import threading

import partix
from partix import tree_util as _tu
from partix._src.core import PartixError
from partix._src.sharding import AxisType, NamedSharding, PartitionSpec, get_abstract_mesh
from partix.nnx import variables as _vars

PARTITION_NAME = "partition_name"
_rules = threading.local()


def get_logical_axis_rules():
  return getattr(_rules, "rules", ())


def set_logical_axis_rules(rules):
  _rules.rules = _check_rules(rules, "set_logical_axis_rules")


@contextlib.contextmanager
def logical_axis_rules(rules):
  """Inside the block, logical axis names resolve through `rules`: pairs (logical name, mesh
  axis or None or a tuple of mesh axes)."""
  old = get_logical_axis_rules()
  _rules.rules = _check_rules(rules, "logical_axis_rules")
  try:
    yield
  finally:
    _rules.rules = old


def _check_rules(rules, api):
  rules = tuple(tuple(r) if isinstance(r, list) else r for r in (rules or ()))
  for r in rules:
    if not (isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], str)):
      raise PartixError(f"[nnx.{api}] each rule is a pair (logical name, mesh axes), got {r!r}")
  return rules


def composite_rules(outer, inner):
  """The context's rules and a variable's own, merged; a name bound differently by the two is
  an error (as Flax's)."""
  if not outer or not inner:
    return tuple(outer or inner or ())
  merged = dict(outer)
  for name, axes in inner:
    if name in merged and merged[name] != axes:
      raise ValueError(f"Inconsistent logical axis annotations for {name}: "
                       f"{merged[name]} vs {axes}")
    merged[name] = axes
  return tuple(merged.items())


def _entries(sharding):
  if isinstance(sharding, NamedSharding):
    return tuple(sharding.spec)
  if isinstance(sharding, PartitionSpec):
    return tuple(sharding)
  if isinstance(sharding, (tuple, list)):
    return tuple(sharding)
  raise PartixError(f"[nnx] sharding annotation {sharding!r} is not a tuple of axis names, a "
                    "PartitionSpec or a NamedSharding")


def resolve(sharding, sharding_rules=None):
  """A sharding annotation with its logical names replaced by mesh axes (names without a rule
  stand for themselves, as in Flax), as a PartitionSpec."""
  rules = composite_rules(get_logical_axis_rules(), _check_rules(sharding_rules, "resolve"))
  table = dict(rules)

  def one(a):
    if isinstance(a, tuple):
      out = []
      for b in a:
        r = one(b)
        out.extend(r if isinstance(r, tuple) else ([] if r is None else [r]))
      return tuple(out) if out else None
    return table.get(a, a) if isinstance(a, str) else a
  return PartitionSpec(*[one(a) for a in _entries(sharding)])


def _check_against_mesh(spec, mesh, what, shape=None):
  names = set(mesh.axis_names)
  for e in spec:
    for a in (e if isinstance(e, tuple) else (e,)):
      if a is not None and a not in names:
        raise PartixError(f"[{what}] sharding {spec} names {a!r}, which is neither an axis of "
                          f"the mesh {tuple(mesh.axis_names)} nor a logical name with a rule "
                          "(give sharding_rules= or use nnx.logical_axis_rules)")
  if shape is not None and len(spec) > len(shape):
    raise PartixError(f"[{what}] sharding {spec} has {len(spec)} entries for a value of shape "
                      f"{tuple(shape)}")


def _current_mesh():
  m = get_abstract_mesh()
  return None if m is None or getattr(m, "empty", False) or not m.axis_names else m


def shard_value(value, out_sharding, sharding_rules, mesh, what="nnx.Variable"):
  """value placed on (or, while tracing, constrained to) its annotated sharding."""
  if not out_sharding:
    return value
  spec = resolve(out_sharding, sharding_rules)
  if isinstance(out_sharding, NamedSharding):
    mesh = out_sharding.mesh
  if mesh is None:
    mesh = _current_mesh()
  if mesh is None:
    raise ValueError(f"[{what}] An auto mesh context or metadata is required if creating a "
                     f"variable with annotation out_sharding={spec}: use "
                     "`with partix.set_mesh(mesh):`, or nnx.use_eager_sharding(False)")
  _check_against_mesh(spec, mesh, what, getattr(value, "shape", None))
  if not hasattr(value, "shape"):
    return value
  sharding = NamedSharding(mesh, spec)
  types = set(mesh.axis_types)
  if types == {AxisType.Explicit}:
    return partix.reshard(value, sharding)
  if len(types) > 1:
    raise ValueError("Mesh must have all axes as Explicit or all axes as Auto. "
                     f"Got mixed axis types: {mesh.axis_types}")
  return partix.lax.with_sharding_constraint(value, sharding)


def with_partitioning(initializer, sharding, mesh=None, **metadata):
  """An initializer whose Variables carry out_sharding=sharding (and `mesh`, if given)."""
  return _vars.with_metadata(initializer, out_sharding=sharding, mesh=mesh, **metadata)


def get_var_pspec(v):
  """The PartitionSpec a Variable's metadata gives (P() for an unannotated array)."""
  meta = v.get_metadata()
  if meta.get("out_sharding"):
    return resolve(meta["out_sharding"], meta.get("sharding_rules"))
  if hasattr(v.get_raw_value(), "shape"):
    return PartitionSpec()
  return None


def _is_var(x):
  return isinstance(x, _vars.Variable)


def get_partition_spec(tree):
  """The tree with each Variable's value replaced by its PartitionSpec (metadata kept), and
  each bare array by P(). With a current mesh, a spec naming an axis the mesh lacks (a logical
  name without a rule) is an error naming the variable's path."""
  mesh = _current_mesh()

  def spec(path, x):
    if _is_var(x):
      p = get_var_pspec(x)
      if p is not None and mesh is not None:
        _check_against_mesh(p, mesh, f"nnx.spmd.get_partition_spec at {_tu.keystr(path)}",
                            getattr(x.get_raw_value(), "shape", None))
      return x.replace(p)
    return PartitionSpec() if hasattr(x, "shape") else None
  return _tu.tree_map_with_path(spec, tree, is_leaf=_is_var)


def get_named_sharding(tree, mesh):
  """get_partition_spec's tree with every spec a NamedSharding on `mesh`; each spec is checked
  against the mesh, the error naming the variable's path."""
  specs = get_partition_spec(tree)

  def named(path, p):
    if p is None:
      return None
    _check_against_mesh(p, mesh, f"nnx.spmd.get_named_sharding at {_tu.keystr(path)}")
    return NamedSharding(mesh, p)
  return _tu.tree_map_with_path(named, specs,
                                is_leaf=lambda x: isinstance(x, PartitionSpec) or x is None)


def get_abstract_model(init_fn, mesh):
  """(graphdef, abstract state) of the model init_fn builds, every leaf a ShapeDtypeStruct
  with the NamedSharding its annotation gives on `mesh`."""
  from partix.nnx import graph, transforms
  with partix.set_mesh(mesh):
    abs_model = transforms.eval_shape(init_fn)
    gdef, abs_state = graph.split(abs_model)
    shardings = get_named_sharding(abs_state, mesh)
    abs_state = _tu.tree_map(
        lambda a, s: partix.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abs_state, shardings)
  return gdef, abs_state
