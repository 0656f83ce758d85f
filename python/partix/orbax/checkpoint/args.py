"""orbax.checkpoint.args: what CheckpointManager.save/restore and the checkpointers are asked to
do. StandardSave/StandardRestore and PyTreeSave/PyTreeRestore carry one pytree; Composite
carries several, by the item names of the manager."""

import dataclasses
from typing import Any, Optional


class CheckpointArgs:
  """Base of the argument classes (Orbax's CheckpointArgs)."""


@dataclasses.dataclass
class StandardSave(CheckpointArgs):
  item: Any
  save_args: Optional[Any] = None
  custom_metadata: Optional[dict] = None


@dataclasses.dataclass
class StandardRestore(CheckpointArgs):
  item: Optional[Any] = None
  strict: bool = True
  support_layout: bool = False
  fallback_sharding: Optional[Any] = None


@dataclasses.dataclass
class PyTreeSave(CheckpointArgs):
  item: Any
  save_args: Optional[Any] = None
  ocdbt_target_data_file_size: Optional[int] = None
  enable_pinned_host_transfer: Optional[bool] = None
  custom_metadata: Optional[dict] = None


@dataclasses.dataclass
class PyTreeRestore(CheckpointArgs):
  item: Optional[Any] = None
  restore_args: Optional[Any] = None
  transforms: Optional[Any] = None
  transforms_default_to_original: bool = True
  legacy_transform_fn: Optional[Any] = None
  partial_restore: bool = False


@dataclasses.dataclass
class JsonSave(CheckpointArgs):
  """A JSON value (dicts, lists, strings, numbers) saved as one item of a Composite."""
  item: Any


@dataclasses.dataclass
class JsonRestore(CheckpointArgs):
  item: Optional[Any] = None


class Composite(CheckpointArgs):
  """Several items by name: Composite(state=StandardSave(...), meta=JsonSave(...)) to save,
  Composite(state=StandardRestore(...), meta=None) to restore; a restore returns a Composite
  of the restored items."""

  def __init__(self, **items):
    object.__setattr__(self, "_items", dict(items))

  def __getitem__(self, key):
    return self._items[key]

  def __getattr__(self, key):
    try:
      return self.__dict__["_items"][key]
    except KeyError:
      raise AttributeError(key) from None

  def __contains__(self, key):
    return key in self._items

  def __iter__(self):
    return iter(self._items)

  def __len__(self):
    return len(self._items)

  def keys(self):
    return self._items.keys()

  def values(self):
    return self._items.values()

  def items(self):
    return self._items.items()

  def __eq__(self, other):
    return isinstance(other, Composite) and self._items == other._items

  def __repr__(self):
    return f"Composite({', '.join(f'{k}={v!r}' for k, v in self._items.items())})"


def _save_item(a, api):
  """The pytree a save argument carries."""
  if isinstance(a, (StandardSave, PyTreeSave)):
    if a.save_args is not None:
      raise ValueError(f"[{api}] save_args (per-leaf SaveArgs) are not supported by partix's "
                       "checkpoints; leave it None")
    return a.item
  raise ValueError(f"[{api}] args must be StandardSave or PyTreeSave (or a Composite of "
                   f"them), not {type(a).__name__}")


def _restore_item(a, api):
  """(target pytree or None, partial) of a restore argument."""
  if a is None:
    return None, False
  if isinstance(a, StandardRestore):
    if not a.strict:
      raise ValueError(f"[{api}] StandardRestore(strict=False) (padding or truncating arrays "
                       "to the target's shape) is not supported: shapes must match")
    if a.fallback_sharding is not None:
      raise ValueError(f"[{api}] StandardRestore(fallback_sharding=) is not supported; give "
                       "the target tree with the shardings to restore onto")
    return a.item, False
  if isinstance(a, PyTreeRestore):
    if a.transforms is not None or a.legacy_transform_fn is not None:
      raise ValueError(f"[{api}] PyTreeRestore transforms are not supported")
    if a.restore_args is not None:
      raise ValueError(f"[{api}] PyTreeRestore restore_args are not supported; give the "
                       "target as a tree of ShapeDtypeStruct(shape, dtype, sharding=...)")
    return a.item, bool(a.partial_restore)
  raise ValueError(f"[{api}] args must be StandardRestore or PyTreeRestore (or a Composite "
                   f"of them), not {type(a).__name__}")
