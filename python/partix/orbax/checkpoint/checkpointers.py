"""orbax.checkpoint's checkpointers for one pytree at one path: StandardCheckpointer,
PyTreeCheckpointer, Checkpointer and AsyncCheckpointer (the last two for the standard and
pytree handlers only). The path holds partix's checkpoint format (one step_0/ inside)."""

import os

from partix import ckpt
from partix.orbax.checkpoint import _impl
from partix.orbax.checkpoint import args as args_lib


class StandardCheckpointHandler:
  pass


class PyTreeCheckpointHandler:
  pass


class _Base:
  _name = "Checkpointer"

  def __init__(self, handler=None, **kwargs):
    if handler is not None and not isinstance(handler, (StandardCheckpointHandler,
                                                        PyTreeCheckpointHandler)):
      raise ValueError(f"[orbax.checkpoint.{self._name}] handler {type(handler).__name__} is "
                       "not supported: partix saves pytrees only (StandardCheckpointHandler, "
                       "PyTreeCheckpointHandler)")
    self._pending = False

  def _save(self, directory, a, force, api, custom_metadata=None):
    tree = args_lib._save_item(a, api)
    if custom_metadata is None:
      custom_metadata = getattr(a, "custom_metadata", None)
    directory = os.fspath(directory)
    if os.path.exists(directory) and not force:
      raise ValueError(f"[{api}] Destination {directory} already exists. Give force=True "
                       "to overwrite it.")
    self.wait_until_finished()
    _impl.save_tree(directory, 0, tree, overwrite=bool(force), api=api,
                    custom_metadata=custom_metadata)
    self._pending = True

  def _restore(self, directory, target, partial, api):
    directory = os.fspath(directory)
    self.wait_until_finished()
    if 0 not in ckpt.all_steps(directory):
      raise FileNotFoundError(f"[{api}] no checkpoint at {directory!r}")
    return _impl.restore_tree(directory, 0, target, partial=partial, api=api)

  def save(self, directory, *args, force=False, custom_metadata=None, **kwargs):
    api = f"{self._name}.save"
    a = kwargs.pop("args", None)
    if kwargs:
      raise ValueError(f"[{api}] unexpected arguments {sorted(kwargs)}")
    if a is None:
      if len(args) != 1:
        raise ValueError(f"[{api}] give args=ocp.args.StandardSave(state)")
      a = args_lib.StandardSave(args[0])
    elif args:
      raise ValueError(f"[{api}] give the state either positionally or as args=, not both")
    self._save(directory, a, force, api, custom_metadata)

  def restore(self, directory, *args, **kwargs):
    api = f"{self._name}.restore"
    a = kwargs.pop("args", None)
    if kwargs:
      raise ValueError(f"[{api}] unexpected arguments {sorted(kwargs)}")
    if a is None:
      a = args_lib.StandardRestore(args[0] if args else None)
    target, partial = args_lib._restore_item(a, api)
    return self._restore(directory, target, partial, api)

  def metadata(self, directory):
    """The saved tree as ShapeDtypeStructs in the shardings it was saved with."""
    self.wait_until_finished()
    return _impl.abstract_tree(os.fspath(directory), 0, f"{self._name}.metadata")

  def wait_until_finished(self):
    if self._pending:
      self._pending = False
      ckpt.wait()

  def check_for_errors(self):
    self.wait_until_finished()

  def close(self):
    self.wait_until_finished()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False


class Checkpointer(_Base):
  """Checkpointer(StandardCheckpointHandler() or PyTreeCheckpointHandler()). Saves return once
  the step is committed."""

  def save(self, directory, *args, **kwargs):
    super().save(directory, *args, **kwargs)
    self.wait_until_finished()


class AsyncCheckpointer(_Base):
  _name = "AsyncCheckpointer"


class StandardCheckpointer(_Base):
  """save(path, state) asynchronously (wait_until_finished() joins); restore(path, target)
  with target a pytree of ShapeDtypeStructs (with shardings) or arrays, or None."""
  _name = "StandardCheckpointer"

  def __init__(self, **kwargs):
    super().__init__()

  def save(self, directory, state=None, *, save_args=None, force=False, custom_metadata=None,
           args=None):
    api = "StandardCheckpointer.save"
    if args is None:
      args = args_lib.StandardSave(state, save_args=save_args)
    self._save(directory, args, force, api, custom_metadata)

  def restore(self, directory, target=None, *, strict=True, args=None):
    api = "StandardCheckpointer.restore"
    if args is None:
      args = args_lib.StandardRestore(target, strict=strict)
    target, partial = args_lib._restore_item(args, api)
    return self._restore(directory, target, partial, api)


class PyTreeCheckpointer(Checkpointer):
  """Checkpointer(PyTreeCheckpointHandler()): save(path, item) / restore(path, item)."""
  _name = "PyTreeCheckpointer"

  def __init__(self, **kwargs):
    super().__init__()

  def restore(self, directory, item=None, *, args=None, **kwargs):
    api = "PyTreeCheckpointer.restore"
    if kwargs:
      raise ValueError(f"[{api}] unexpected arguments {sorted(kwargs)} (restore_args and "
                       "transforms are not supported)")
    if args is None:
      args = args_lib.PyTreeRestore(item)
    target, partial = args_lib._restore_item(args, api)
    return self._restore(directory, target, partial, api)
