"""jax.test_util (partix.test_util): check_grads, the gradient check of JAX's own tests:
forward mode against central differences, reverse mode against forward mode (the inner
products <vjp(ct), t> and <ct, jvp(t)> agree), recursively up to `order`."""
import contextlib as _contextlib

import numpy as _np

from partix._src import tree_util as _tu
from partix._src.core import PartixError
from partix._src import dtypes as _dtypes
from partix._src.forward import jvp as _jvp, vjp as _vjp
from partix._src.api import _jit_events

__all__ = ["check_grads", "check_jvp", "check_vjp", "count_jit_dispatch_misses",
           "count_jit_traces", "count_pjit_cpp_cache_miss", "count_jit_and_pmap_lowerings",
           "count_jit_tracing_cache_miss"]

_EPS = {2: 1e-2, 4: 1e-3, 8: 1e-5}        # by itemsize: bf16/f16, f32, f64
_TOL = {2: 1e-1, 4: 2e-2, 8: 1e-5}


def _leaves(tree):
  return [_np.asarray(x, dtype=_np.float64) for x in _tu.tree_leaves(tree)]


def _itemsize(tree):
  """The smallest float size the values take in partix (float64 host data is float32 unless
  x64 is on), which sets the step and tolerances."""
  sizes = [_np.dtype(_dtypes.canonicalize(_np.asarray(x).dtype)).itemsize
           for x in _tu.tree_leaves(tree)]
  return min(sizes) if sizes else 8


def _random_like(tree, rng):
  return _tu.tree_map(lambda x: _np.asarray(rng.standard_normal(_np.shape(x)),
                                            dtype=_np.asarray(x).dtype), tree)


def _axpy(a, x, y):
  return _tu.tree_map(lambda u, v: (_np.asarray(u) * a + _np.asarray(v)).astype(
      _np.asarray(v).dtype), x, y)


def _inner(x, y):
  return sum(float(_np.sum(a * b)) for a, b in zip(_leaves(x), _leaves(y)))


def _check_close(got, want, atol, rtol, what):
  for g, w in zip(_leaves(got), _leaves(want)):
    if not _np.allclose(g, w, atol=atol, rtol=rtol):
      raise AssertionError(f"[check_grads] {what}: got {g} where {w} was expected "
                           f"(atol={atol}, rtol={rtol})")


def check_jvp(f, f_jvp, args, atol=None, rtol=None, eps=None, err_msg=""):
  """f_jvp(primals, tangents) against f's central differences along a random tangent."""
  size = _itemsize(args)
  eps = eps or _EPS.get(size, 1e-3)
  atol, rtol = atol or _TOL.get(size, 2e-2), rtol or _TOL.get(size, 2e-2)
  rng = _np.random.default_rng(0)
  t = _random_like(args, rng)
  out, tout = f_jvp(args, t)
  _check_close(out, f(*args), atol, rtol, f"jvp's primal output {err_msg}")
  plus, minus = f(*_axpy(eps, t, args)), f(*_axpy(-eps, t, args))
  fd = _tu.tree_map(lambda a, b: (_np.asarray(a, _np.float64) - _np.asarray(b, _np.float64))
                    / (2 * eps), plus, minus)
  _check_close(tout, fd, atol, rtol, f"jvp against central differences {err_msg}")


def check_vjp(f, f_vjp, args, atol=None, rtol=None, eps=None, err_msg=""):
  """<vjp(ct), t> against <ct, jvp(t)> for random t and ct."""
  size = _itemsize(args)
  atol, rtol = atol or _TOL.get(size, 2e-2), rtol or _TOL.get(size, 2e-2)
  rng = _np.random.default_rng(1)
  out, pullback = f_vjp(*args)
  ct = _random_like(out, rng)
  t = _random_like(args, rng)
  got = _inner(pullback(ct), t)
  _, tout = _jvp(f, tuple(args), tuple(t))
  want = _inner(ct, tout)
  if not _np.isclose(got, want, atol=atol, rtol=rtol):
    raise AssertionError(f"[check_grads] vjp against jvp {err_msg}: <vjp(ct), t> = {got}, "
                         f"<ct, jvp(t)> = {want} (atol={atol}, rtol={rtol})")


def check_grads(f, args, order, modes=("fwd", "rev"), atol=None, rtol=None, eps=None):
  """jax.test_util.check_grads: raises AssertionError when f's derivatives up to `order` in
  `modes` ('fwd', 'rev') disagree with finite differences (forward) or with each other."""
  args = tuple(args)
  if order < 1:
    raise PartixError(f"[check_grads] order must be at least 1, got {order}")
  for mode in modes:
    if mode not in ("fwd", "rev"):
      raise PartixError(f"[check_grads] modes are 'fwd' and 'rev', got {mode!r}")

  def f_jvp(primals, tangents):
    return _jvp(f, tuple(primals), tuple(tangents))
  if "fwd" in modes:
    check_jvp(f, f_jvp, args, atol, rtol, eps, f"(order {order})")
    if order > 1:
      n = len(args)
      check_grads(lambda *pt: _jvp(f, pt[:n], pt[n:])[1],
                  args + tuple(_random_like(args, _np.random.default_rng(2))), order - 1,
                  ("fwd",), atol, rtol, eps)
  if "rev" in modes:
    check_vjp(f, lambda *a: _vjp(f, *a), args, atol, rtol, eps, f"(order {order})")
    if order > 1:
      out = f(*args)
      ct = _random_like(out, _np.random.default_rng(3))
      check_grads(lambda *a: _vjp(f, *a)[1](ct), args, order - 1, ("rev",), atol, rtol, eps)


@_contextlib.contextmanager
def _count(which):
  start = _jit_events[which]
  end = []
  try:
    yield lambda: (end[0] if end else _jit_events[which]) - start
  finally:
    end.append(_jit_events[which])


def count_jit_dispatch_misses():
  """`with count_jit_dispatch_misses() as n:` ... `n()`: how many jit calls in the block found
  no ready program for their signature (they traced, or their all-Array argument signature
  was new to the dispatch fast path). Read after the block, it is the block's count. Not
  thread-safe: exact when one thread calls jitted functions."""
  return _count(0)


def count_jit_traces():
  """`with count_jit_traces() as n:` ... `n()`: how many times jit traced a function in the
  block (partix traces and lowers in one step, once per signature; a jit nested in another is
  traced as part of it, not counted)."""
  return _count(1)


# JAX's names for the same counters (jax._src.test_util), so tests written against them run.
count_pjit_cpp_cache_miss = count_jit_dispatch_misses
count_jit_and_pmap_lowerings = count_jit_traces
count_jit_tracing_cache_miss = count_jit_traces
