"""orbax.checkpoint.CheckpointManager over partix.ckpt: steps of one run under one folder
(<directory>/step_<N>/, partix's sharded, atomically committed format), saved asynchronously
every `save_interval_steps`, the newest `max_to_keep` kept. Older steps are deleted only once
a newer step is committed, so a crash at any moment loses nothing that was committed."""

import atexit
import dataclasses
import os
import weakref
from typing import Any, Callable, Container, Optional

import partix
from partix import ckpt
from partix._src.core import PartixError
from partix.orbax.checkpoint import _impl
from partix.orbax.checkpoint import args as args_lib


@dataclasses.dataclass
class StepMetadata:
  """What CheckpointManager.metadata(step) returns (Orbax's StepMetadata, in part)."""
  item_metadata: Any = None
  custom_metadata: dict = dataclasses.field(default_factory=dict)
  metrics: Any = None


class StepAlreadyExistsError(ValueError):
  """Raised when saving a step that is already in the folder."""


_UNSUPPORTED_DEFAULTS = {
    "keep_time_interval": None, "best_fn": None, "step_prefix": None,
    "step_format_fixed_length": None, "step_name_format": None, "todelete_subdir": None,
    "todelete_full_path": None, "save_decision_policy": None, "preservation_policy": None,
}


@dataclasses.dataclass
class CheckpointManagerOptions:
  """Orbax's CheckpointManagerOptions. Used: save_interval_steps, max_to_keep, keep_period,
  save_on_steps, should_save_fn, create, read_only, enable_async_checkpointing. The options
  partix does not implement must keep their defaults (a set one is refused, naming it); the
  rest (logging, threads, file options) are accepted and have no effect."""
  save_interval_steps: int = 1
  max_to_keep: Optional[int] = None
  keep_time_interval: Optional[Any] = None
  keep_period: Optional[int] = None
  best_fn: Optional[Callable] = None
  best_mode: str = "max"
  keep_checkpoints_without_metrics: bool = True
  step_prefix: Optional[str] = None
  step_format_fixed_length: Optional[int] = None
  step_name_format: Optional[Any] = None
  create: bool = True
  cleanup_tmp_directories: bool = False
  save_on_steps: Optional[Container[int]] = None
  single_host_load_and_broadcast: bool = False
  todelete_subdir: Optional[str] = None
  todelete_full_path: Optional[str] = None
  enable_background_delete: bool = False
  num_deletion_threads: Optional[int] = None
  read_only: bool = False
  enable_async_checkpointing: bool = True
  async_options: Optional[Any] = None
  multiprocessing_options: Optional[Any] = None
  should_save_fn: Optional[Callable[[int, Optional[int]], bool]] = None
  file_options: Optional[Any] = None
  atomicity_options: Optional[Any] = None
  save_root_metadata: bool = True
  temporary_path_class: Optional[Any] = None
  save_decision_policy: Optional[Any] = None
  preservation_policy: Optional[Any] = None
  prevent_write_metrics: bool = False
  enable_should_save_is_saving_in_progress_check: bool = True
  enable_per_process_directory_creation: bool = False
  lightweight_initialize: bool = False

  def __post_init__(self):
    api = "orbax.checkpoint.CheckpointManagerOptions"
    for name, default in _UNSUPPORTED_DEFAULTS.items():
      if getattr(self, name) is not default:
        raise ValueError(f"[{api}] {name}={getattr(self, name)!r} is not supported by "
                         "partix's checkpoints (steps are step_<N>/ folders, kept newest "
                         "first); leave it unset")
    for name in ("save_interval_steps", "max_to_keep", "keep_period"):
      v = getattr(self, name)
      if v is None and name != "save_interval_steps":
        continue
      if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "max_to_keep"
                                                               else 1):
        raise ValueError(f"[{api}] {name}={v!r}: give a whole number >= "
                         f"{0 if name == 'max_to_keep' else 1}")


_live = weakref.WeakSet()  # managers with a save in flight, finished at exit


@atexit.register
def _finish_at_exit():
  for mngr in list(_live):
    mngr._finish()


def _check_step(step, api):
  """Steps as Orbax takes them: whole numbers >= 0 (numpy integers too)."""
  try:
    return ckpt._step(step, api)
  except PartixError as e:
    raise type(e)(str(e).replace("[ckpt.", "[orbax.checkpoint.", 1)) from None


class CheckpointManager:
  """Orbax's CheckpointManager for one item (a pytree) per step:

    mngr = ocp.CheckpointManager(dir, options=ocp.CheckpointManagerOptions(max_to_keep=3))
    mngr.save(step, args=ocp.args.StandardSave(state))
    state = mngr.restore(mngr.latest_step(), args=ocp.args.StandardRestore(abstract_state))
  """

  def __init__(self, directory, checkpointers=None, options=None, metadata=None,
               item_names=None, item_handlers=None, logger=None, handler_registry=None):
    api = "orbax.checkpoint.CheckpointManager"
    if checkpointers is not None or item_handlers is not None or handler_registry is not None:
      raise ValueError(f"[{api}] checkpointers, item_handlers and handler_registry are not "
                       "supported: partix saves and restores pytrees (args=StandardSave / "
                       "StandardRestore) with its own checkpoints")
    if item_names is not None and (isinstance(item_names, str) or not all(
        isinstance(n, str) for n in item_names)):
      raise ValueError(f"[{api}] item_names={item_names!r}: give a sequence of names")
    self._item_names = None if item_names is None else tuple(item_names)
    self._directory = os.fspath(directory)
    self._options = options if options is not None else CheckpointManagerOptions()
    if not isinstance(self._options, CheckpointManagerOptions):
      raise ValueError(f"[{api}] options must be a CheckpointManagerOptions, not "
                       f"{type(self._options).__name__}")
    if metadata is not None:
      raise ValueError(f"[{api}] metadata= (the folder's root metadata) is not supported; give "
                       "custom_metadata= to save() to store metadata with a step")
    if not os.path.isdir(self._directory):
      if self._options.create and not self._options.read_only and partix.process_index() == 0:
        os.makedirs(self._directory, exist_ok=True)
    self._steps = list(ckpt.all_steps(self._directory))
    self._pending = None  # (step, steps to delete once it is committed)
    self._closed = False

  @property
  def directory(self):
    return self._directory

  def reload(self):
    """Rereads the committed steps from the folder."""
    self._finish()
    self._steps = list(ckpt.all_steps(self._directory))

  def all_steps(self, read=False):
    if read:
      self.reload()
    return list(self._steps)

  def latest_step(self):
    return self._steps[-1] if self._steps else None

  def best_step(self):
    return self.latest_step()

  def should_save(self, step):
    step = _check_step(step, "CheckpointManager.should_save")
    o = self._options
    if o.read_only:
      return False
    last = self.latest_step()
    if last is not None and last >= step:
      return False
    if o.should_save_fn is not None:
      return bool(o.should_save_fn(step, last))
    if last is None:
      return True  # the first save of a run, as Orbax's InitialSavePolicy
    if o.save_interval_steps and step % o.save_interval_steps == 0:
      return True
    return o.save_on_steps is not None and step in o.save_on_steps

  def save(self, step, items=None, save_kwargs=None, metrics=None, force=False, args=None,
           custom_metadata=None):
    """Saves `args` (StandardSave or PyTreeSave) as step `step` if should_save(step) or force;
    returns whether it saved. Asynchronous: the arrays are copied to host memory and written
    in the background (wait_until_finished() joins)."""
    api = "CheckpointManager.save"
    if items is not None or save_kwargs is not None:
      raise ValueError(f"[{api}] items/save_kwargs are Orbax's deprecated API; use "
                       "args=ocp.args.StandardSave(state)")
    if args is None:
      raise ValueError(f"[{api}] Must provide `args` for `save`.")
    step = _check_step(step, api)
    if self._options.read_only:
      return False
    items = json_items = None
    if isinstance(args, args_lib.Composite):
      tree, items, json_items = {}, {}, {}
      for name, a in args.items():
        if self._item_names is not None and name not in self._item_names:
          raise ValueError(f"[{api}] item {name!r} is not one of the manager's item_names "
                           f"{self._item_names}")
        if a is None:
          continue
        if isinstance(a, args_lib.JsonSave):
          items[name], json_items[name] = "json", a.item
        else:
          items[name], tree[name] = "pytree", args_lib._save_item(a, f"{api} (item {name!r})")
    elif self._item_names is not None:
      raise ValueError(f"[{api}] this manager has item_names {self._item_names}: give "
                       "args=ocp.args.Composite(name=ocp.args.StandardSave(...), ...)")
    else:
      tree = args_lib._save_item(args, api)
    if not force and not self.should_save(step):
      return False
    self._finish()
    if step in self._steps:
      raise StepAlreadyExistsError(f"[{api}] Checkpoint for step {step} already exists in "
                                   f"{self._directory!r}.")
    _impl.save_tree(self._directory, step, tree, overwrite=False, api=api, items=items,
                    json_items=json_items,
                    custom_metadata=(custom_metadata if custom_metadata is not None
                                     else getattr(args, "custom_metadata", None)),
                    metrics=metrics)
    steps = sorted(self._steps + [step])
    self._steps = steps
    self._pending = (step, [s for s in self._steps_to_delete(steps) if s != step])
    _live.add(self)
    if self._pending[1]:
      self._steps = [s for s in steps if s not in self._pending[1]]
    if not self._options.enable_async_checkpointing:
      self._finish()
    return True

  def _steps_to_delete(self, steps):
    n = self._options.max_to_keep
    if n is None:
      return []
    old = steps[:-n] if n else []
    period = self._options.keep_period
    return [s for s in old if not (period and s % period == 0)]

  def _finish(self):
    """Joins the save in flight; once it is committed, deletes the steps it made old."""
    if self._pending is None:
      return
    _, doomed = self._pending
    self._pending = None
    _live.discard(self)
    try:
      ckpt.wait()
    except Exception:
      self._steps = list(ckpt.all_steps(self._directory))  # the failed step is not there
      raise
    if doomed and partix.process_index() == 0:
      for s in doomed:
        _impl.delete_step(self._directory, s)

  def restore(self, step, items=None, restore_kwargs=None, directory=None, args=None):
    """Step `step` (None: the latest) shaped like args.item (StandardRestore(abstract_state):
    a pytree of ShapeDtypeStruct(shape, dtype, sharding=...) or arrays; each leaf is placed on
    its sharding, any mesh), or as saved when args is None."""
    api = "CheckpointManager.restore"
    if items is not None or restore_kwargs is not None:
      raise ValueError(f"[{api}] items/restore_kwargs are Orbax's deprecated API; use "
                       "args=ocp.args.StandardRestore(abstract_state)")
    self._finish()
    where = self._directory if directory is None else os.fspath(directory)
    steps = self._steps if directory is None else list(ckpt.all_steps(where))
    if step is None:
      if not steps:
        raise FileNotFoundError(f"[{api}] No steps found in {where!r}.")
      step = steps[-1]
    step = _check_step(step, api)
    if step not in steps and step not in ckpt.all_steps(where):
      raise FileNotFoundError(f"[{api}] no step {step} in {where!r}; its steps are {steps}")
    saved_items = _impl.saved_json(where, step, "orbax.items", api)
    if saved_items is None:
      if isinstance(args, args_lib.Composite):
        raise ValueError(f"[{api}] step {step} of {where!r} holds one item (saved with "
                         "args=StandardSave); restore it with args=StandardRestore(...), "
                         "not a Composite")
      target, partial = args_lib._restore_item(args, api)
      return _impl.restore_tree(where, step, target, partial=partial, api=api)
    if args is None:
      args = args_lib.Composite(**{n: None for n in saved_items})
    if not isinstance(args, args_lib.Composite):
      raise ValueError(f"[{api}] step {step} of {where!r} holds items {sorted(saved_items)}: "
                       "give args=ocp.args.Composite(name=ocp.args.StandardRestore(...), ...)")
    saved_json = _impl.saved_json(where, step, "orbax.json", api) or {}
    requests, out = {}, {}
    for name, a in args.items():
      if name not in saved_items:
        raise ValueError(f"[{api}] step {step} of {where!r} has no item {name!r}; its items "
                         f"are {sorted(saved_items)}")
      if saved_items[name] == "json":
        if a is not None and not isinstance(a, args_lib.JsonRestore):
          raise ValueError(f"[{api}] item {name!r} was saved with JsonSave: restore it with "
                           f"JsonRestore() or None, not {type(a).__name__}")
        out[name] = saved_json[name]
      else:
        if isinstance(a, args_lib.JsonRestore):
          raise ValueError(f"[{api}] item {name!r} is a pytree: restore it with "
                           "StandardRestore(...) or None, not JsonRestore")
        requests[name] = args_lib._restore_item(a, f"{api} (item {name!r})")
    if requests:
      out.update(_impl.restore_items(where, step, requests, api=api))
    return args_lib.Composite(**{n: out[n] for n in args.keys()})

  def item_metadata(self, step):
    """The saved tree as ShapeDtypeStructs (with the shardings it was saved with)."""
    self._finish()
    return _impl.abstract_tree(self._directory, _check_step(step, "item_metadata"),
                               "CheckpointManager.item_metadata")

  def delete(self, step):
    step = _check_step(step, "CheckpointManager.delete")
    self._finish()
    if step not in self._steps:
      raise FileNotFoundError(f"[CheckpointManager.delete] no step {step} in "
                              f"{self._directory!r}")
    if partix.process_index() == 0:
      _impl.delete_step(self._directory, step)
    self._steps.remove(step)

  def metrics(self, step):
    """The metrics saved with step `step` (save(..., metrics=)), or None."""
    self._finish()
    return _impl.saved_json(self._directory, _check_step(step, "metrics"), "orbax.metrics",
                            "CheckpointManager.metrics")

  def metadata(self, step=None):
    """StepMetadata of step `step` (its custom_metadata, metrics and item_metadata)."""
    if step is None:
      raise ValueError("[CheckpointManager.metadata] give a step: the folder's root metadata "
                       "is not supported")
    step = _check_step(step, "metadata")
    self._finish()
    return StepMetadata(
        item_metadata=_impl.abstract_tree(self._directory, step, "CheckpointManager.metadata"),
        custom_metadata=_impl.saved_json(self._directory, step, "orbax.custom_metadata",
                                         "CheckpointManager.metadata") or {},
        metrics=_impl.saved_json(self._directory, step, "orbax.metrics",
                                 "CheckpointManager.metadata"))

  def is_saving_in_progress(self):
    return self._pending is not None

  def wait_until_finished(self):
    self._finish()

  def check_for_errors(self):
    self._finish()

  def close(self):
    if not self._closed:
      self._finish()
      self._closed = True

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False
