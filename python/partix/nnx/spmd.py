"""Sharding annotations of Variables (Flax's nnx.spmd): PartitionSpec and NamedSharding trees
read from a state's metadata, initializers with partitioning, abstract models on a mesh; the
logical rules and eager placement live in nnx.partitioning, re-exported here."""
import partix
from partix import tree_util as _tu
from partix._src.sharding import NamedSharding, PartitionSpec
from partix.nnx import graph, transforms
from partix.nnx import variables as _vars
from partix.nnx.partitioning import (PARTITION_NAME, _check_against_mesh,  # noqa: F401
                                     _current_mesh, composite_rules, get_logical_axis_rules,
                                     logical_axis_rules, resolve, set_logical_axis_rules,
                                     shard_value)


def with_partitioning(initializer, sharding, mesh=None, **metadata):
  """An initializer whose Variables carry out_sharding=sharding (and `mesh`, if given)."""
  if mesh is not None and not isinstance(mesh, partix.sharding.Mesh):
    raise TypeError(f"[nnx.with_partitioning] mesh (the third argument) must be a Mesh, got "
                    f"{type(mesh).__name__} {mesh!r}; pass sharding rules as sharding_rules=")
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
  with partix.set_mesh(mesh):
    abs_model = transforms.eval_shape(init_fn)
    gdef, abs_state = graph.split(abs_model)
    shardings = get_named_sharding(abs_state, mesh)
    abs_state = _tu.tree_map(
        lambda a, s: partix.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abs_state, shardings)
  return gdef, abs_state
