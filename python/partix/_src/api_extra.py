"""jax.clear_caches, jax.live_arrays, jax.ensure_compile_time_eval and jax.closure_convert."""
import contextlib
import gc

from partix import _core
from partix._src import api as _api
from partix._src import dtypes
from partix._src import tree_util as tu
from partix._src.core import Array, PartixError, PartixTypeError, wrap
from partix._src.tracing import _leaf_core, _out_leaves

__all__ = ["clear_caches", "live_arrays", "ensure_compile_time_eval", "closure_convert"]


def clear_caches():
  """jax.clear_caches: every jit's traces are dropped, so each jitted function traces again
  on its next call (its trace_count starts over). partix's core keeps its cache of compiled
  programs, keyed on the program itself, so a retrace that gives the same program reuses it."""
  with _api._lock:
    for per_function in list(_api._shared_caches.values()):
      for caches in list(per_function.values()):
        for cache in caches:  # the traces by signature (dicts); the result trees stay
          if isinstance(cache, dict):
            cache.clear()


def live_arrays(platform=None):
  """jax.live_arrays: the Arrays alive in this process holding device buffers (not deleted,
  not traced values), found through Python's garbage collector's list of objects."""
  if platform not in (None, "cpu"):
    return []
  out = []
  for obj in gc.get_objects():
    if type(obj) is Array:
      a = obj._a
      if not (a.is_tracer() or a.is_abstract() or a.is_deleted()):
        out.append(obj)
  return out


@contextlib.contextmanager
def ensure_compile_time_eval():
  """jax.ensure_compile_time_eval: in JAX, operations on concrete values inside the block run
  at once even while jit traces, so their results stay concrete. Outside any trace partix
  runs every operation at once already, so there the block does what JAX's does. Inside a
  trace (jit, grad, vmap, shard_map, loop bodies) partix still records the operations into the
  program: their results are the same values, but traced, so converting them to Python values
  (int(), np.asarray, `if`) is refused there as anywhere in a trace (compute such values with
  numpy, or outside the traced function)."""
  yield


def _maybe_perturbed(c):
  """Whether a captured value can carry a derivative: a traced value of a float dtype (what
  JAX's closure_convert hoists); concrete arrays and traced integers stay captured."""
  return c.is_tracer() and c.dtype in ("f16", "bf16", "f32", "f64")


def closure_convert(fun, *example_args):
  """jax.closure_convert: (converted, consts) where converted(*args, *consts) computes
  fun(*args) and consts are the traced floating-point values fun reads from its closure
  (values of an enclosing jit/grad/vmap that a custom_vjp/custom_jvp rule must receive as
  arguments to differentiate them). fun is traced once, on example_args' shapes and dtypes;
  converted accepts arguments of that structure and those types. Outside any transformation
  consts is empty and converted evaluates the traced program on its arguments."""
  api = "closure_convert"
  if not callable(fun):
    raise PartixError(f"[{api}] {fun!r} is not callable")
  leaves, in_tree = tu.tree_flatten(tuple(example_args))
  cores = [_leaf_core(x, api) for x in leaves]
  got = {}

  def traced(tracers):
    args = tu.tree_unflatten(in_tree, [wrap(t) for t in tracers])
    outs, got["tree"] = _out_leaves(fun(*args), api)
    return outs
  program = _core.trace_program(cores, traced)
  out_tree = got["tree"]
  captures = list(program.captures)
  hoisted = [i for i, c in enumerate(captures) if _maybe_perturbed(c)]
  consts = [wrap(captures[i]) for i in hoisted]
  avals = [(tuple(c.shape), c.dtype) for c in cores]

  def converted(*args_and_consts):
    n = len(args_and_consts) - len(hoisted)
    if n < 0:
      raise PartixTypeError(f"[{api}] the converted function takes its arguments, then the "
                            f"{len(hoisted)} hoisted consts; got {len(args_and_consts)} values")
    args, given = args_and_consts[:n], args_and_consts[n:]
    arg_leaves, tree = tu.tree_flatten(tuple(args))
    if tree != in_tree:
      raise PartixTypeError(f"[{api}] the converted function's arguments must have the "
                            f"structure of the example arguments {in_tree}, got {tree}")
    arg_cores = [_leaf_core(x, api) for x in arg_leaves]
    for i, (c, (shape, dt)) in enumerate(zip(arg_cores, avals)):
      if tuple(c.shape) != shape or c.dtype != dt:
        raise PartixTypeError(
            f"[{api}] argument leaf {i} is {dtypes.from_core(c.dtype)}{list(c.shape)}, but "
            f"the function was converted for {dtypes.from_core(dt)}{list(shape)}")
    full = list(captures)
    for i, v in zip(hoisted, given):
      full[i] = _leaf_core(v, api)
    outs = program.eval(arg_cores + full)
    return tu.tree_unflatten(out_tree, [wrap(o) for o in outs])
  converted.__name__ = getattr(fun, "__name__", "converted")
  converted.__doc__ = getattr(fun, "__doc__", None)
  return converted, consts
