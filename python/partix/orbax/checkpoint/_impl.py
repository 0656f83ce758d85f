"""Saving and restoring one pytree through partix.ckpt, as Orbax's StandardCheckpointHandler
does: arrays keep their dtype and sharding, Python and numpy scalars and numpy arrays come back
as such, and the tree's structure is recorded so that a restore without a target rebuilds it
(as nested dicts and lists) in the shardings it was saved with."""

import functools
import json
import numbers
import os
import shutil

import numpy as np

import partix
from partix import ckpt
from partix._src import dtypes as _dtypes
from partix._src import tree_util as tu
from partix._src.core import Array, PartixError
from partix._src.sharding import Mesh, NamedSharding, PartitionSpec

_META_KEY = "orbax.tree"
_FORMAT = 1


def _exact(fn):
  """fn with 64-bit dtypes held as they are: Python ints and floats and numpy 64-bit arrays are
  saved and restored exactly, x64 or not (dtypes.wide)."""
  @functools.wraps(fn)
  def run(*args, **kwargs):
    with _dtypes.wide():
      return fn(*args, **kwargs)
  return run


def _path_tuple(path):
  """A key path as the tuple Orbax prints in its errors: ('params', 0, 'w')."""
  out = []
  for k in path:
    if isinstance(k, tu.DictKey):
      out.append(k.key)
    elif isinstance(k, tu.SequenceKey):
      out.append(k.idx)
    elif isinstance(k, tu.GetAttrKey):
      out.append(k.name)
    else:
      out.append(getattr(k, "key", k))
  return tuple(out)


def _path_json(path):
  out = []
  for k in path:
    if isinstance(k, tu.DictKey):
      key = k.key
      out.append(["d", key if isinstance(key, (str, int)) and not isinstance(key, bool)
                  else str(key)])
    elif isinstance(k, tu.SequenceKey):
      out.append(["s", int(k.idx)])
    elif isinstance(k, tu.GetAttrKey):
      out.append(["a", k.name])
    else:
      key = getattr(k, "key", k)
      out.append(["k", key if isinstance(key, (str, int)) and not isinstance(key, bool)
                  else str(key)])
  return out


def _dtype_name(dt):
  return np.dtype(dt).name if not hasattr(dt, "name") else dt.name


def _dtype(name):
  try:
    return np.dtype(name)
  except TypeError:
    d = getattr(partix.numpy, name, None)
    if d is None:
      raise PartixError(f"[orbax.checkpoint] unknown saved dtype {name!r}") from None
    return np.dtype(d)


def _replicated():
  """A sharding every process holds whole: scalars and numpy arrays are saved from it."""
  return NamedSharding(Mesh(np.array(partix.devices()), ("_all",)), PartitionSpec())


def _local():
  """One local device: leaves restored as numpy values are read onto it."""
  return NamedSharding(Mesh(np.array(partix.local_devices()[:1]), ("_one",)), PartitionSpec())


def _sharding_json(s, meshes):
  """The sharding as JSON, its mesh (axes, shape, device ids, axis types) an index into
  `meshes`, which collects each mesh once."""
  if not isinstance(s, NamedSharding):
    return None
  mesh = s.mesh
  m = {"axes": list(mesh.axis_names), "shape": [int(n) for n in mesh.devices.shape],
       "devices": [int(d.id) for d in mesh.devices.flat],
       "types": [t.name for t in (mesh.axis_types or ())]}
  if m not in meshes:
    meshes.append(m)
  spec = [list(e) if isinstance(e, tuple) else e for e in tuple(s.spec)]
  return {"mesh": meshes.index(m), "spec": spec}


def _sharding_from_json(j, meshes, what, api):
  if j is None:
    return NamedSharding(Mesh(np.array(partix.devices()[:1]), ()), PartitionSpec())
  m = meshes[j["mesh"]]
  by_id = {d.id: d for d in partix.devices()}
  missing = [i for i in m["devices"] if i not in by_id]
  if missing:
    raise ValueError(
        f"[{api}] Topology mismatch: {what} was saved on devices "
        f"{m['devices']} (mesh {dict(zip(m['axes'], m['shape']))}); devices {missing} do not "
        f"exist here ({len(by_id)} devices). Give a target tree "
        "(args=StandardRestore(abstract_state)) with the shardings to restore onto.")
  devs = np.array([by_id[i] for i in m["devices"]], dtype=object).reshape(m["shape"])
  types = tuple(getattr(partix.sharding.AxisType, t) for t in m["types"])
  mesh = Mesh(devs, tuple(m["axes"]), axis_types=types) if types else Mesh(devs, tuple(m["axes"]))
  spec = PartitionSpec(*[tuple(e) if isinstance(e, list) else e for e in j["spec"]])
  return NamedSharding(mesh, spec)


def _leaf_kind(x):
  """What a state leaf is saved as, or None if Orbax's StandardSave refuses it."""
  if isinstance(x, Array):
    return "array"
  if isinstance(x, (bool, np.bool_)):
    return "bool"
  if isinstance(x, numbers.Integral):
    return "int"
  if isinstance(x, numbers.Real):
    return "float"
  if isinstance(x, np.ndarray):
    return "ndarray"
  if isinstance(x, np.generic):
    return "scalar"
  return None


def _is_empty(x):
  """None and empty dicts, lists and tuples: pytree nodes without leaves."""
  return x is None or (type(x) in (dict, list, tuple) and not x)


def _to_array(x, kind):
  if kind == "array":
    return x
  if kind == "bool":
    host = np.asarray(bool(x))
  elif kind == "int":
    host = np.asarray(int(x), np.int64)
  elif kind == "float":
    host = np.asarray(float(x), np.float64)
  else:
    host = np.asarray(x)
  return partix.device_put(partix.numpy.asarray(host, dtype=host.dtype), _replicated())


def _scalar_item(v):
  """json.dumps's fallback: numpy and partix scalars as Python numbers."""
  if hasattr(v, "item") and getattr(v, "shape", None) == ():
    return v.item()
  raise TypeError(f"{type(v).__name__} is not a JSON value")


def _json(value, what, api):
  try:
    return json.dumps(value, default=_scalar_item)
  except (TypeError, ValueError) as e:
    raise ValueError(f"[{api}] {what} must be JSON-serializable (dicts, lists, strings, "
                     f"numbers): {e}") from None


@_exact
def save_tree(directory, step, tree, *, overwrite, api, custom_metadata=None, metrics=None,
              items=None, json_items=None):
  """Saves `tree` as step `step` of `directory` through partix.ckpt (asynchronously)."""
  for t in (tree.values() if items is not None else [tree]):
    if t is None:
      raise ValueError(f"[{api}] Must provide item to save.")
    if _leaf_kind(t) is not None:
      raise ValueError(f"[{api}] StandardSave does not support single arrays or scalars "
                       f"(got {type(t).__name__}); save a pytree such as {{'x': value}}.")
  pairs, _ = tu.tree_flatten_with_path(tree, is_leaf=_is_empty)
  leaves, record, meshes = [], [], []
  for path, x in pairs:
    if _is_empty(x):  # kept in the record so that a restore as saved has the node
      record.append({"path": _path_json(path), "kind": "empty",
                     "value": None if x is None else "list" if isinstance(x, (list, tuple))
                     else "dict"})
      continue
    kind = _leaf_kind(x)
    if kind is None:
      raise ValueError(f"[{api}] Unsupported type: {type(x)} for key: {_path_tuple(path)}. "
                       "Leaves may be partix Arrays, numpy arrays, numpy scalars, int, float "
                       "or bool.")
    try:
      a = _to_array(x, kind)
    except (PartixError, OverflowError, TypeError) as e:
      raise ValueError(f"[{api}] key {_path_tuple(path)}: {type(x).__name__} {x!r:.80} cannot "
                       f"be saved: {e}") from None
    leaves.append(a)
    record.append({"path": _path_json(path), "kind": kind, "shape": [int(n) for n in a.shape],
                   "dtype": _dtype_name(a.dtype),
                   "sharding": _sharding_json(a.sharding, meshes) if kind == "array" else None})
  meta = {_META_KEY: json.dumps({"format": _FORMAT, "leaves": record, "meshes": meshes})}
  if custom_metadata is not None:
    meta["orbax.custom_metadata"] = _json(custom_metadata, "custom_metadata", api)
  if metrics is not None:
    meta["orbax.metrics"] = _json(metrics, "metrics", api)
  if items is not None:
    meta["orbax.items"] = json.dumps(items)
    meta["orbax.json"] = _json(json_items or {}, "a JsonSave item", api)
  ckpt.save(directory, step, tu.tree_unflatten(tu.tree_structure(tree), leaves),
            metadata=meta, overwrite=overwrite)


def saved_json(directory, step, key, api):
  """A JSON value saved with the step (custom_metadata, metrics), or None."""
  try:
    text = ckpt.metadata(str(directory), step).get(key)
  except PartixError as e:
    raise FileNotFoundError(f"[{api}] cannot read step {step} of {str(directory)!r}: {e}") from e
  return None if text is None else json.loads(text)


def _saved_record(directory, step, api):
  try:
    meta = ckpt.metadata(directory, step)
  except PartixError as e:
    raise FileNotFoundError(f"[{api}] cannot read step {step} of {str(directory)!r}: {e}") from e
  text = meta.get(_META_KEY)
  if text is None:
    return None
  saved = json.loads(text)
  if saved.get("format") != _FORMAT:
    raise ValueError(f"[{api}] step {step} of {str(directory)!r}: tree record format "
                     f"{saved.get('format')!r}, this partix reads {_FORMAT}")
  for r in saved["leaves"]:  # each leaf carries its mesh table (shared, not copied)
    r["meshes"] = saved["meshes"]
  return saved["leaves"]


class _Node(dict):
  """An inner node while a tree is rebuilt from its recorded paths."""


def _rebuild(record, values):
  """Nested dicts and lists from the recorded paths (Orbax's restore without a target:
  sequences come back as lists, every other node as a dict)."""
  if len(record) == 1 and not record[0]["path"]:
    r = record[0]
    return {"dict": {}, "list": [], None: None}[r["value"]] if r["kind"] == "empty" else values[0]
  root, sequences = _Node(), set()
  values = iter(values)
  for r in record:
    v = ({"dict": {}, "list": [], None: None}[r["value"]] if r["kind"] == "empty"
         else next(values))
    node, path = root, r["path"]
    for i, (kind, key) in enumerate(path):
      if kind == "s":
        sequences.add(id(node))
      if i == len(path) - 1:
        node[key] = v
      else:
        node = node.setdefault(key, _Node())

  def finish(node):
    if not isinstance(node, _Node):
      return node
    if id(node) in sequences:
      return [finish(node[k]) for k in sorted(node)]
    return {k: finish(v) for k, v in node.items()}

  return finish(root)


def _from_array(a, kind, dtype=None):
  host = np.asarray(a)
  if kind == "int":
    return int(host)
  if kind == "float":
    return float(host)
  if kind == "bool":
    return bool(host)
  if kind == "scalar":
    return host[()]
  return host


def _plan_target(target, api):
  """For each leaf of a restore target: its name, the ShapeDtypeStruct to read it as, and
  what to make of it afterwards (None: the array; else the Python or numpy kind)."""
  pairs, treedef = tu.tree_flatten_with_path(target)
  names, abstract, post = [], [], []
  for path, x in pairs:
    where = _path_tuple(path)
    if isinstance(x, partix.sharding.Sharding):
      raise ValueError(
          f"[{api}] Unsupported type: {type(x)} for key: {where}. A restore target's leaves "
          "are arrays or ShapeDtypeStruct(shape, dtype, sharding=...), as in Orbax; for a tree "
          "of shardings, pair it with the abstract state: partix.tree.map(lambda a, s: "
          "partix.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_state, shardings)")
    if isinstance(x, Array):
      abstract.append(partix.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding))
      post.append(None)
    elif isinstance(x, partix.ShapeDtypeStruct):
      if getattr(x, "sharding", None) is None:
        abstract.append(partix.ShapeDtypeStruct(x.shape, x.dtype, sharding=_local()))
        post.append("ndarray")
      else:
        abstract.append(x)
        post.append(None)
    else:
      kind = _leaf_kind(x)
      if kind is None:
        raise ValueError(f"[{api}] Unsupported type: {type(x)} for key: {where}. A restore "
                         "target's leaves are arrays, ShapeDtypeStructs or Python scalars.")
      if kind == "int":
        host = np.asarray(0, np.int64)
      elif kind == "float":
        host = np.asarray(0.0, np.float64)
      elif kind == "bool":
        host = np.asarray(False)
      else:
        host = np.asarray(x)
      abstract.append(partix.ShapeDtypeStruct(host.shape, host.dtype, sharding=_local()))
      post.append(kind)
    names.append(_flat_name(_path_json(path)))
  return names, abstract, post, treedef


def _plan_saved(record, api):
  """The ShapeDtypeStructs (in the saved shardings) of recorded leaves."""
  abstract = []
  for r in record:
    name = "/".join(str(k) for _, k in r["path"]) or "the tree"
    sharding = (_sharding_from_json(r["sharding"], r["meshes"], f"leaf {name!r}", api)
                if r["kind"] == "array" else _local())
    abstract.append(partix.ShapeDtypeStruct(tuple(r["shape"]), _dtype(r["dtype"]),
                                            sharding=sharding))
  return abstract


def _no_record(directory, step, api):
  return ValueError(
      f"[{api}] step {step} of {directory!r} was not written by partix.orbax.checkpoint "
      "(no tree record); restore it with a target: args=StandardRestore(abstract_state)")


@_exact
def restore_items(directory, step, requests, *, api):
  """Restores several items of one step at once: requests maps an item name (None: the whole
  step is one item) to (target or None, partial). Returns {name: tree}."""
  directory = str(directory)
  record = _saved_record(directory, step, api)
  names, abstract, finish = [], [], []
  for item, (target, partial) in requests.items():
    prefix = "" if item is None else f"{item}."
    if target is None:
      if record is None:
        raise _no_record(directory, step, api)
      sub = [r for r in record if item is None or (r["path"] and r["path"][0][1] == item)]
      if item is not None:
        if not sub:
          raise ValueError(f"[{api}] step {step} of {directory!r} has no item {item!r}")
        sub = [dict(r, path=r["path"][1:]) for r in sub]
      leaf_recs = [r for r in sub if r["kind"] != "empty"]
      begin = len(names)
      names += [prefix + _flat_name(r["path"]) for r in leaf_recs]
      abstract += _plan_saved(leaf_recs, api)
      finish.append((item, begin, lambda vals, sub=sub, leaf_recs=leaf_recs: _rebuild(sub, [
          v if r["kind"] == "array" else _from_array(v, r["kind"])
          for r, v in zip(leaf_recs, vals)])))
      continue
    rel, ab, post, treedef = _plan_target(target, api)
    if item is not None and record is not None and not partial:
      wanted = {prefix + n for n in rel}
      extra = sorted(n for n in (prefix + _flat_name(r["path"][1:]) for r in record
                                 if r["kind"] != "empty" and r["path"]
                                 and r["path"][0][1] == item)
                     if n not in wanted)
      if extra:
        raise ValueError(f"[{api}] step {step} of {directory!r}: item {item!r} holds leaves the "
                         f"target lacks: {extra[:5]} (a checkpoint of another model? give "
                         "partial_restore=True to restore only the target's leaves)")
    begin = len(names)
    names += [prefix + n for n in rel]
    abstract += ab
    finish.append((item, begin, lambda vals, post=post, treedef=treedef: tu.tree_unflatten(
        treedef, [v if k is None else _from_array(v, k) for v, k in zip(vals, post)])))
  whole = list(requests) == [None]
  values = _restore_named(directory, step, names, abstract, api,
                          partial=requests[None][1] if whole else True)
  out = {}
  for i, (item, begin, make) in enumerate(finish):
    end = finish[i + 1][1] if i + 1 < len(finish) else len(values)
    out[item] = make(values[begin:end])
  return out


@_exact
def restore_tree(directory, step, target, *, partial=False, api):
  """The tree of step `step`: shaped like `target` if given (leaves: Arrays, ShapeDtypeStructs,
  numpy arrays or Python scalars), else as saved (nested dicts and lists, arrays in their
  saved shardings)."""
  return restore_items(directory, step, {None: (target, partial)}, api=api)[None]


def _abstract_leaves(directory, step, api):
  record = _saved_record(directory, step, api)
  if record is None:
    raise _no_record(directory, step, api)
  return record, _plan_saved([r for r in record if r["kind"] != "empty"], api)


@_exact
def abstract_tree(directory, step, api):
  """The saved tree (nested dicts and lists) of ShapeDtypeStructs in their saved shardings."""
  record, abstract = _abstract_leaves(str(directory), step, api)
  return _rebuild(record, abstract)


def _flat_name(path_json):
  return ".".join(str(k) for _, k in path_json) or "array"


def _restore_named(directory, step, names, abstract, api, partial=False):
  if len(set(names)) != len(names):
    raise ValueError(f"[{api}] two leaves have the same name in {names}")
  flat = {n: a for n, a in zip(names, abstract)}
  try:
    out = ckpt.restore(directory, step, flat, partial=partial)
  except PartixError as e:
    raise type(e)(f"[{api}] step {step} of {directory!r}: {e}") from e
  return [out[n] for n in names]


def delete_step(directory, step):
  """Removes step_<step>/ as partix's C++ CheckpointManager does: renamed out of the committed
  names first (to step_<step>.tmp-<pid>, which listings ignore and a later manager removes if
  this process dies), the rename made durable, then deleted; a crash never leaves a
  half-deleted step that still looks committed."""
  directory = str(directory)
  path = os.path.join(directory, f"step_{step}")
  if not os.path.isdir(path):
    return
  doomed = f"{path}.tmp-{os.getpid()}"
  shutil.rmtree(doomed, ignore_errors=True)
  try:
    os.rename(path, doomed)
  except OSError as e:
    raise PartixError(f"[CheckpointManager] cannot remove the old step {path!r}: {e}") from None
  fd = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(fd)
  except OSError:
    pass  # file systems that cannot fsync a folder
  finally:
    os.close(fd)
  shutil.rmtree(doomed, ignore_errors=True)
