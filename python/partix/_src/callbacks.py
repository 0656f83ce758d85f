"""Host callbacks: jax.pure_callback, jax.experimental.io_callback, jax.debug.callback and
jax.debug.print. Under a trace the call is an instruction of the program (pure_callback, or
effect_callback, which is never dropped), run on the devices: outside shard_map once, with
the whole values (an effect on the program's first device, its results sent to the others);
inside a shard_map body on every device, with its blocks (ARCHITECTURE.md, "Host callbacks").
Outside any trace the function is called at once."""
import atexit

import numpy as np

from partix import _core
from partix import numpy as jnp
from partix._src import dtypes
from partix._src import tree_util
from partix._src.core import Array, PartixError

# The registered functions die with the interpreter's other objects, not after them.
atexit.register(_core.clear_host_callbacks)

_VMAP_METHODS = {"sequential": "sequential", "sequential_unrolled": "sequential",
                 "expand_dims": "expand_dims", "broadcast_all": "broadcast_all",
                 "legacy_vectorized": "expand_dims"}


def _result_specs(api, result_shape_dtypes):
  leaves, tree = tree_util.tree_flatten(result_shape_dtypes)
  specs = []
  for leaf in leaves:
    if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
      raise PartixError(f"[{api}] result_shape_dtypes holds {leaf!r}, which has no shape and "
                        "dtype (give a ShapeDtypeStruct or an array)")
    d = np.dtype(leaf.dtype)
    if dtypes.canonicalize(d, api) != d:
      raise PartixError(f"[{api}] result_shape_dtypes cannot give the 64-bit dtype {d} while "
                        "jax_enable_x64 is off")
    dtypes.to_core(d, api)
    specs.append((tuple(int(s) for s in leaf.shape), d))
  return specs, tree


def _checked_results(api, out, specs, tree):
  """The callback's results as numpy arrays of the declared shapes and dtypes."""
  leaves, got = tree_util.tree_flatten(out)
  if len(leaves) != len(specs):
    raise PartixError(f"[{api}] the callback returned {len(leaves)} values where "
                      f"result_shape_dtypes declares {len(specs)} ({got} vs {tree})")
  vals = []
  for k, (leaf, (shape, d)) in enumerate(zip(leaves, specs)):
    v = np.asarray(leaf) if isinstance(leaf, (np.ndarray, np.generic, Array)) else \
        np.asarray(leaf, dtype=d)
    if v.shape != shape:
      raise PartixError(f"[{api}] result {k} of the callback has shape {v.shape}; "
                        f"result_shape_dtypes declares {shape}")
    if v.dtype != d:
      raise PartixError(f"[{api}] result {k} of the callback has dtype {v.dtype}; "
                        f"result_shape_dtypes declares {d}")
    vals.append(v)
  return vals


def _host_value(x):
  return np.asarray(x) if isinstance(x, Array) else x


def _call(api, callback, specs, tree, args, kwargs, *, effect, vmap_method):
  leaves, in_tree = tree_util.tree_flatten((args, kwargs))
  if not _core.is_tracing():
    a, k = tree_util.tree_unflatten(in_tree, [_host_value(x) for x in leaves])
    vals = _checked_results(api, callback(*a, **k), specs, tree)
    return tree_util.tree_unflatten(tree, [jnp.asarray(v) for v in vals])
  arrays = [x if isinstance(x, Array) else jnp.asarray(x) for x in leaves]
  for x in arrays:
    dtypes.to_core(x.dtype, api)

  def trampoline(device, position, ins, outs):
    del device, position
    vals = [np.frombuffer(v, dtype=dtypes.from_core(d)).reshape(shape).copy()
            for v, shape, d in ins]
    a, k = tree_util.tree_unflatten(in_tree, vals)
    try:
      out = callback(*a, **k)
    except Exception as e:  # noqa: BLE001 (any failure of the user's function is reported)
      raise PartixError(f"[{api}] the callback raised {type(e).__name__}: {e}") from e
    # The results as this call has them (under vmap with the batch in front).
    here = [(tuple(shape), np.dtype(dtypes.from_core(d))) for _, shape, d in outs]
    for v, (view, shape, d) in zip(_checked_results(api, out, here, tree), outs):
      view.view(dtypes.from_core(d)).reshape(shape)[...] = v

  cid = _core.register_host_callback(trampoline)
  outs = _core.host_callback(api, cid, [x._a for x in arrays],
                             [(s, dtypes.to_core(d, api)) for s, d in specs], effect,
                             vmap_method)
  return tree_util.tree_unflatten(tree, [Array(o) for o in outs])


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None,
                  vectorized=None, **kwargs):
  """jax.pure_callback: calls the host function `callback` on the values of args (numpy
  arrays) and returns its results, declared by result_shape_dtypes. The function must be pure:
  a program may call it on each device, or not at all when its results go unused. Under vmap,
  vmap_method says how: 'sequential' (once per example), 'expand_dims' (once, unbatched
  arguments with a leading 1) or 'broadcast_all' (once, every argument batched)."""
  del sharding
  api = "pure_callback"
  if vectorized is not None:
    if vmap_method is not None:
      raise PartixError(f"[{api}] give vmap_method= or the deprecated vectorized=, not both")
    vmap_method = "legacy_vectorized" if vectorized else "sequential"
  method = ""
  if vmap_method is not None:
    if vmap_method not in _VMAP_METHODS:
      raise PartixError(f"[{api}] vmap_method={vmap_method!r} is not one of "
                        f"{sorted(_VMAP_METHODS)}")
    method = _VMAP_METHODS[vmap_method]
  specs, tree = _result_specs(api, result_shape_dtypes)
  return _call(api, callback, specs, tree, args, kwargs, effect=False, vmap_method=method)


def io_callback(callback, result_shape_dtypes, *args, sharding=None, ordered=False, **kwargs):
  """jax.experimental.io_callback: calls the host function `callback`, which may have effects
  (a write, a read of outside state), on the values of args: once per run of the program
  (once per device inside shard_map), in program order, never dropped."""
  del sharding, ordered
  api = "io_callback"
  specs, tree = _result_specs(api, result_shape_dtypes)
  return _call(api, callback, specs, tree, args, kwargs, effect=True, vmap_method="sequential")


def debug_callback(callback, *args, ordered=False, partitioned=False, **kwargs):
  """jax.debug.callback: calls callback(*args, **kwargs) on their values (numpy arrays) each
  time the program runs (inside shard_map: on each device with its blocks); under vmap once
  per example."""
  del ordered, partitioned

  def call(*a, **k):
    callback(*a, **k)
    return ()
  _call("debug.callback", call, [], tree_util.tree_flatten(())[1], args, kwargs, effect=True,
        vmap_method="sequential")


def debug_print(fmt, *args, ordered=False, partitioned=False, **kwargs):
  """jax.debug.print: formats fmt with the values of args and kwargs (str.format) and prints
  it each time the program runs, as debug_callback."""
  def show(*a, **k):
    print(fmt.format(*a, **k))
  debug_callback(show, *args, ordered=ordered, partitioned=partitioned, **kwargs)
