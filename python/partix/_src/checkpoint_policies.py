"""jax.checkpoint_policies: which intermediates of a checkpointed function its forward pass
keeps for the backward pass (the others are recomputed), and checkpoint_name, which names a
value for save_only_these_names. A policy here is a value partix.checkpoint reads. A policy
function of JAX's kind (`policy(prim, *avals, **params) -> bool`) is asked once about each of
partix's primitives, by the name JAX gives it, with no avals or params: its answers become the
list of primitives whose results are saved."""
from partix import _core
from partix._src.core import Array, PartixError, core
from partix._src import tree_util as tu

__all__ = ["nothing_saveable", "everything_saveable", "dots_saveable", "checkpoint_dots",
           "dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims",
           "save_only_these_names", "save_any_names_but_these", "save_from_both_policies",
           "checkpoint_name"]


class SavePolicy:
  """One of jax.checkpoint_policies: `kind` as partix's remat reads it ("nothing",
  "everything", "dots", "dots_no_batch", "names", "names_except", "primitives"), `names` for
  the last three (value names; for "primitives", primitive names and `name=N` entries)."""

  def __init__(self, kind, names=()):
    self.kind, self.names = kind, tuple(names)

  def __call__(self, *args, **kwargs):
    raise PartixError(f"[checkpoint_policies] {self!r} is applied by partix.checkpoint(policy=...)"
                      ", not called")

  def __repr__(self):
    if self.kind in ("names", "names_except", "primitives"):
      fn = {"names": "save_only_these_names", "names_except": "save_any_names_but_these",
            "primitives": "save_primitives"}[self.kind]
      return f"{fn}({', '.join(map(repr, self.names))})"
    return {"nothing": "nothing_saveable", "everything": "everything_saveable",
            "dots": "dots_saveable", "dots_no_batch": "dots_with_no_batch_dims_saveable"}[self.kind]


nothing_saveable = SavePolicy("nothing")
everything_saveable = SavePolicy("everything")
dots_saveable = checkpoint_dots = SavePolicy("dots")
dots_with_no_batch_dims_saveable = checkpoint_dots_with_no_batch_dims = SavePolicy("dots_no_batch")


def _check_names(api, names):
  for n in names:
    if not isinstance(n, str) or not n:
      raise PartixError(f"[{api}] names must be non-empty strs, got {n!r}")


def save_only_these_names(*names):
  _check_names("save_only_these_names", names)
  return SavePolicy("names", names)


def save_any_names_but_these(*names):
  """Saves the values named with checkpoint_name, but those named here (nothing else)."""
  _check_names("save_any_names_but_these", names)
  return SavePolicy("names_except", names)


def _as_primitives(policy, api):
  """policy as a set of saved primitives and name=N entries, or None where it has none (a
  policy over every name but some cannot be listed)."""
  kind, names = policy_args(policy)
  if kind == "nothing":
    return set()
  if kind == "dots":
    return {"dot_general"}
  if kind == "names":
    return {f"name={n}" for n in names}
  if kind == "primitives":
    return set(names)
  if kind == "everything":
    return set(_core.primitive_names())
  return None


def save_from_both_policies(policy_1, policy_2):
  """Saves what either policy saves."""
  a, b = (_as_primitives(p, "save_from_both_policies") for p in (policy_1, policy_2))
  if a is None or b is None:
    raise PartixError(f"[save_from_both_policies] cannot combine {policy_1!r} with {policy_2!r}: "
                      "dots_with_no_batch_dims_saveable and save_any_names_but_these combine "
                      "with no other policy in partix")
  return SavePolicy("primitives", sorted(a | b))


def policy_args(policy):
  """(kind, names) of a checkpoint policy for the core; None is nothing_saveable."""
  if policy is None:
    return "nothing", []
  if isinstance(policy, SavePolicy):
    return policy.kind, list(policy.names)
  if callable(policy):
    got = _kind_of_function(policy)
    if got is not None:
      return got[0], list(got[1])
    raise PartixError(f"[checkpoint] policy function {policy!r} raised when asked about a "
                      "primitive: partix asks policy(prim) with prim.name and str(prim) only, "
                      "no avals or params; use one of partix.checkpoint_policies or a function "
                      "of the primitive's name")
  raise PartixError(f"[checkpoint] policy {policy!r} is not one of partix.checkpoint_policies "
                    "(nothing_saveable, everything_saveable, dots_saveable, "
                    "dots_with_no_batch_dims_saveable, save_only_these_names(...), "
                    "save_any_names_but_these(...)) nor a function of a primitive")


def checkpoint_name(x, name):
  """jax.ad_checkpoint.checkpoint_name: x (any tree of arrays), named for
  save_only_these_names; an identity otherwise."""
  if not isinstance(name, str) or not name:
    raise PartixError(f"[checkpoint_name] name must be a non-empty str, got {name!r}")
  return tu.tree_map(lambda a: Array(_core.checkpoint_name(core(a, api="checkpoint_name"), name)),
                     x)


class _Prim:
  """A stand-in for a JAX primitive, as a policy function receives it (it reads .name or
  str())."""

  def __init__(self, name):
    self.name = name

  def __repr__(self):
    return self.name

  __str__ = __repr__


# The names JAX gives partix's primitives where they differ (what a policy function tests).
_JAX_NAMES = {"checkpoint_name": "name", "all_reduce": "psum"}


def _kind_of_function(policy):
  """(kind, names) of the core's policy a policy function amounts to, or None when it cannot
  be asked (it reads what only JAX's primitives carry: avals, params)."""
  prims = sorted(_core.primitive_names())
  try:
    saved = [p for p in prims if policy(_Prim(_JAX_NAMES.get(p, p)))]
  except Exception:  # noqa: BLE001 (it reads what only JAX's primitives carry)
    return None
  if len(saved) == len(prims):
    return "everything", []
  if not saved:
    return "nothing", []
  if saved == ["dot_general"]:
    return "dots", []
  return "primitives", saved
