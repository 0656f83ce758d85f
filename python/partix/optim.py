"""partix.optim: the optimizers the model library trains with (AdamW, global-norm clipping, the
warmup + cosine schedule), over the C++ ones. Each function traces: call it inside jit."""
import collections

from partix import _core
from partix._src.core import Array, PartixError, core, wrap

__all__ = ["AdamWState", "adamw_init", "adamw_update", "clip_by_global_norm", "global_norm",
           "warmup_cosine"]

AdamWState = collections.namedtuple("AdamWState", ["mu", "nu", "master", "count"])
AdamWState.__doc__ = ("AdamW's state: f32 moments mu and nu (sharded like the parameters), f32 "
                      "master copies of half-precision parameters, the step count.")


def _params(tree, api, what):
  if not isinstance(tree, dict):
    raise PartixError(f"[{api}] {what} must be a dict of name -> Array, got "
                      f"{type(tree).__name__}")
  out = {}
  for k, v in tree.items():
    if not isinstance(k, str):
      raise PartixError(f"[{api}] {what} has a non-string key {k!r}")
    if not isinstance(v, (Array, _core.Array)):
      raise PartixError(f"[{api}] {what}['{k}'] is not an Array (got {type(v).__name__})")
    out[k] = core(v)
  return out


def _wrap_params(p):
  return {k: wrap(v) for k, v in p.items()}


def _wrap_state(s):
  mu, nu, master, count = s
  return AdamWState(_wrap_params(mu), _wrap_params(nu), _wrap_params(master), wrap(count))


def _core_state(s, api):
  if not isinstance(s, tuple) or len(s) != 4:
    raise PartixError(f"[{api}] state must be an AdamWState, got {type(s).__name__}")
  mu, nu, master, count = s
  return (_params(mu, api, "state.mu"), _params(nu, api, "state.nu"),
          _params(master, api, "state.master"), core(count))


def _lr(lr, api):
  """lr as an f32 scalar Array (a Python or numpy number, or a scalar Array)."""
  if isinstance(lr, (Array, _core.Array)):
    return core(lr, "float32", api)
  try:
    v = float(lr)
  except (TypeError, ValueError):
    raise PartixError(f"[{api}] lr must be a number or a scalar Array, got {lr!r}") from None
  return _core.full([], v, "f32", None)


def adamw_init(params):
  """Zero moments for params (a dict of name -> Array), sharded like them."""
  return _wrap_state(_core.adamw_init(_params(params, "adamw_init", "params")))


def adamw_update(params, grads, state, lr, *, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
  """One AdamW step: (new params, new state). lr: a float or a scalar Array."""
  api = "adamw_update"
  p = _params(params, api, "params")
  g = _params(grads, api, "grads")
  if set(p) != set(g):
    raise PartixError(f"[{api}] grads' names differ from params': "
                      f"{sorted(set(p) ^ set(g))}")
  np_, ns = _core.adamw_update(p, g, _core_state(state, api), _lr(lr, api),
                               float(b1), float(b2), float(eps), float(weight_decay))
  return _wrap_params(np_), _wrap_state(ns)


def clip_by_global_norm(grads, max_norm):
  """grads scaled so that their global norm is at most max_norm: (clipped, norm)."""
  g, n = _core.clip_by_global_norm(_params(grads, "clip_by_global_norm", "grads"),
                                   float(max_norm))
  return _wrap_params(g), wrap(n)


def global_norm(tree):
  return wrap(_core.global_norm(_params(tree, "global_norm", "tree")))


def warmup_cosine(step, peak, warmup, total, final_fraction=0.1):
  """The learning rate at `step`: linear warmup to `peak`, then cosine to peak*final_fraction."""
  return _core.warmup_cosine(int(step), float(peak), int(warmup), int(total),
                             float(final_fraction))
