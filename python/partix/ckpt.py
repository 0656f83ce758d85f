"""partix.ckpt: save a pytree of arrays and restore it in any sharding, on any mesh and
any number of processes (the idea of Orbax's save/restore). Leaves are named by
their pytree paths joined with dots ("params.layers.0.w"), as the C++ Params name them, so
checkpoints written by `partix train` restore here too. save() returns once the device shards
are copied to host memory; a background thread writes and commits atomically. One writer per
folder: a save into a folder that another process is saving into is refused, as is a step that
is already committed (unless overwrite=True)."""

import operator

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src import tree_util as tu
from partix._src.core import Array, PartixError
from partix._src.sharding import NamedSharding, to_sharding


def _key_name(k):
  if isinstance(k, tu.DictKey):
    return str(k.key)
  if isinstance(k, tu.SequenceKey):
    return str(k.idx)
  if isinstance(k, tu.GetAttrKey):
    return k.name
  return str(getattr(k, "key", k))


def _names(tree, api):
  pairs, treedef = tu.tree_flatten_with_path(tree)
  names = [".".join(_key_name(k) for k in path) or "array" for path, _ in pairs]
  if len(set(names)) != len(names):
    raise PartixError(f"[ckpt.{api}] two leaves have the same name in {names}")
  return names, [x for _, x in pairs], treedef


_INT64_MAX = 2**63 - 1


def _step(step, api):
  """`step` as an int: ints and numpy integers >= 0 that fit int64; bools, floats (2.7 is not
  step 2) and strings are refused."""
  what = f"[ckpt.{api}] step {step!r}"
  if isinstance(step, (bool, np.bool_)):
    raise PartixError(f"{what} is a bool, not an integer step")
  try:
    n = operator.index(step)
  except TypeError:
    raise PartixError(f"{what} is {type(step).__name__}, not an integer; steps are whole "
                      "numbers >= 0") from None
  if n < 0:
    raise PartixError(f"{what} is negative; steps are whole numbers >= 0")
  if n > _INT64_MAX:
    raise PartixError(f"{what} is past int64 (at most {_INT64_MAX})")
  return n


def save(directory, step, tree, *, metadata=None, overwrite=False):
  """Saves tree's arrays as step `step` of `directory` (step_<step>/), asynchronously. A step
  already committed there is refused unless overwrite=True (then replaced atomically); so is a
  folder that another process (or a save still in flight here) is saving into."""
  step = _step(step, "save")
  names, leaves, _ = _names(tree, "save")
  cores = []
  for n, x in zip(names, leaves):
    if not isinstance(x, Array):
      raise PartixError(f"[ckpt.save] leaf {n!r} is {type(x).__name__}, not a partix Array")
    cores.append(x._a)
  _core.ckpt_save(str(directory), step, names, cores,
                  {str(k): str(v) for k, v in (metadata or {}).items()}, bool(overwrite))


def wait():
  """Blocks until the save in flight is committed; raises its error if it failed."""
  _core.ckpt_wait()


def restore(directory, step=None, target=None, *, partial=False):
  """The arrays of step `step` (default: the latest) shaped like target: a pytree whose leaves
  are Arrays (restored in their sharding) or ShapeDtypeStructs with a sharding (a
  NamedSharding, or a PartitionSpec on the current mesh). Each device reads only its block."""
  directory = str(directory)
  if step is None:
    step = _core.ckpt_latest_step(directory)
    if step is None:
      raise PartixError(f"[ckpt.restore] no committed step in {directory!r}")
  else:
    step = _step(step, "restore")
  if target is None:
    raise PartixError("[ckpt.restore] give target: the tree of arrays or "
                      "ShapeDtypeStructs (with shardings) to restore into")
  names, leaves, treedef = _names(target, "restore")
  shapes, dts, shardings = [], [], []
  for n, x in zip(names, leaves):
    s = getattr(x, "sharding", None)
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
      raise PartixError(f"[ckpt.restore] target leaf {n!r} is {type(x).__name__}; give an "
                        "Array or a ShapeDtypeStruct")
    if s is None:
      raise PartixError(f"[ckpt.restore] target leaf {n!r} has no sharding; give "
                        "ShapeDtypeStruct(shape, dtype, sharding)")
    s = s if isinstance(s, NamedSharding) else to_sharding(s, "ckpt.restore")
    shapes.append([int(d) for d in x.shape])
    dts.append(dtypes.to_core(x.dtype, "ckpt.restore"))
    shardings.append(s._s)
  outs = _core.ckpt_restore(directory, step, names, shapes, dts, shardings, bool(partial))
  return tu.tree_unflatten(treedef, [Array(o) for o in outs])


def latest_step(directory):
  """The newest committed step of directory, or None."""
  return _core.ckpt_latest_step(str(directory))


def all_steps(directory):
  return list(_core.ckpt_all_steps(str(directory)))


def metadata(directory, step):
  return dict(_core.ckpt_metadata(str(directory), _step(step, "metadata")))


