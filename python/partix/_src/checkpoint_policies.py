"""jax.checkpoint_policies: which intermediates of a checkpointed function its forward pass
keeps for the backward pass (the others are recomputed), and checkpoint_name, which names a
value for save_only_these_names. A policy here is a value partix.checkpoint reads, not a
function of JAX's primitives: user-written policy functions are refused by name."""
from partix import _core
from partix._src.core import Array, PartixError, core
from partix._src import tree_util as tu

__all__ = ["nothing_saveable", "everything_saveable", "dots_saveable", "checkpoint_dots",
           "dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims",
           "save_only_these_names", "save_any_names_but_these", "save_from_both_policies",
           "checkpoint_name"]


class SavePolicy:
  """One of jax.checkpoint_policies: `kind` as partix's remat reads it, `names` for
  save_only_these_names."""

  def __init__(self, kind, names=()):
    self.kind, self.names = kind, tuple(names)

  def __call__(self, *args, **kwargs):
    raise PartixError(f"[checkpoint_policies] {self!r} is applied by partix.checkpoint(policy=...)"
                      ", not called")

  def __repr__(self):
    if self.kind == "names":
      return f"save_only_these_names({', '.join(map(repr, self.names))})"
    return {"nothing": "nothing_saveable", "everything": "everything_saveable",
            "dots": "dots_saveable", "dots_no_batch": "dots_with_no_batch_dims_saveable"}[self.kind]


nothing_saveable = SavePolicy("nothing")
everything_saveable = SavePolicy("everything")
dots_saveable = checkpoint_dots = SavePolicy("dots")
dots_with_no_batch_dims_saveable = checkpoint_dots_with_no_batch_dims = SavePolicy("dots_no_batch")


def save_only_these_names(*names):
  for n in names:
    if not isinstance(n, str) or not n:
      raise PartixError(f"[save_only_these_names] names must be non-empty strs, got {n!r}")
  return SavePolicy("names", names)


def save_any_names_but_these(*names):
  raise PartixError("[save_any_names_but_these] is not supported: use save_only_these_names "
                    "with the names to keep")


def save_from_both_policies(policy_1, policy_2):
  raise PartixError("[save_from_both_policies] is not supported: use one of "
                    "partix.checkpoint_policies")


def policy_args(policy):
  """(kind, names) of a checkpoint policy for the core; None is nothing_saveable."""
  if policy is None:
    return "nothing", []
  if isinstance(policy, SavePolicy):
    return policy.kind, list(policy.names)
  if callable(policy):
    kind = _kind_of_function(policy)
    if kind is not None:
      return kind, []
  raise PartixError(f"[checkpoint] policy {policy!r} is not one of partix.checkpoint_policies "
                    "(nothing_saveable, everything_saveable, dots_saveable, "
                    "dots_with_no_batch_dims_saveable, save_only_these_names(...)); policy "
                    "functions of JAX's primitives are not supported")


def checkpoint_name(x, name):
  """jax.ad_checkpoint.checkpoint_name: x (any tree of arrays), named for
  save_only_these_names; an identity otherwise."""
  if not isinstance(name, str) or not name:
    raise PartixError(f"[checkpoint_name] name must be a non-empty str, got {name!r}")
  return tu.tree_map(lambda a: Array(_core.checkpoint_name(core(a, api="checkpoint_name"), name)),
                     x)


class _Prim:
  """A stand-in for a JAX primitive, as a policy function receives it (it reads .name)."""

  def __init__(self, name):
    self.name = name

  def __repr__(self):
    return self.name


# Primitives a policy function is asked about; its answers must match one of the policies
# the core has (all saved, none saved, contractions only), else it is refused.
_PROBE = ["dot_general", "sin", "exp", "add", "mul", "reduce_sum", "tanh", "psum", "all_gather",
          "broadcast_in_dim", "reshape", "transpose"]


def _kind_of_function(policy):
  """The core's policy a policy function amounts to, or None when it is none of them."""
  try:
    saved = {p: bool(policy(_Prim(p))) for p in _PROBE}
  except Exception:  # noqa: BLE001 (it reads what only JAX's primitives carry)
    return None
  if all(saved.values()):
    return "everything"
  if not any(saved.values()):
    return "nothing"
  if [p for p, v in saved.items() if v] == ["dot_general"]:
    return "dots"
  return None
