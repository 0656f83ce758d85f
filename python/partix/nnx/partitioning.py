"""Logical axis names resolved to mesh axes through sharding rules (the context's and a
Variable's own), and the placement of an annotated value on its sharding when it is created:
the part of nnx.spmd that Variables use (nnx.spmd re-exports it)."""
import contextlib
import threading

import partix
from partix._src.core import PartixError
from partix._src.sharding import (AxisType, NamedSharding, PartitionSpec, concrete_context_mesh,
                                  get_abstract_mesh)

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
  # The concrete mesh in context where there is one (values are placed on it), else the
  # abstract one (shapes only, as under set_mesh(AbstractMesh) for planning).
  m = concrete_context_mesh() or get_abstract_mesh()
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
