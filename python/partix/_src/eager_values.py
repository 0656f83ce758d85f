"""Values of an eager shard_map's body (JAX runs such a body on concrete per-device values,
so Python control flow on an invariant value and str() of a block work there).

partix traces the body instead. When the body converts a traced value to a Python value
(bool, int, float, an index, numpy, str), the trace stops; a probe program runs the body up
to that point on the devices and returns the value of every device; the body is then traced
again, and that conversion now gets the value. Each conversion costs one probe and one more
trace; the Python code of the body runs once per trace. A value-dependent trace is never
cached. As in JAX, only values that vary over no manual axis convert (with check_vma); str()
shows every device's block."""
import contextlib

import numpy as np

from partix import _core
from partix._src import core as core_mod
from partix._src.core import Array, PartixError


class _NeedValue(BaseException):
  """A conversion the body has not been given a value for yet: stops the trace (passes
  through the body's own `except Exception`)."""


class _Probe(BaseException):
  """Raised by the conversion being probed; carries its traced value to the probe's body."""

  def __init__(self, x):
    super().__init__()
    self.x = x


_MAX_CONVERSIONS = 256  # each costs a probe program and a trace
_UNANSWERABLE = object()  # the probe failed (e.g. a value of a nested trace): the usual error


class Oracle:
  """The values of one eager call's conversions, in the order the body asks for them."""

  def __init__(self, mesh, manual, check):
    self.mesh, self.check = mesh, check
    self.axes = tuple(a for a in mesh.axis_names if a in manual)  # mesh order
    self.known, self.count, self.probing = [], 0, False

  def hook(self, x, what):
    i = self.count
    self.count += 1
    if what != "str" and (not self.check or set(_core.varying_axes(x._a)) & set(self.axes)):
      return None  # as JAX: a value that differs per device has no one Python value
    if i < len(self.known):
      v = self.known[i]
      if v is _UNANSWERABLE:
        return None
      return self._text(v) if what == "str" else v[0]
    if self.probing:
      raise _Probe(x)
    raise _NeedValue()

  def _text(self, stacked):
    """JAX's text of a value in an eager shard_map: each device's block with its mesh
    coordinates."""
    names = f"({', '.join(map(str, self.mesh.axis_names))},)"
    sizes = [self.mesh.shape[a] for a in self.axes]
    where = [self.mesh.axis_names.index(a) for a in self.axes]
    parts = []
    for idx, device in np.ndenumerate(self.mesh.devices):
      block = stacked[int(np.ravel_multi_index([idx[w] for w in where], sizes))] if sizes else (
          stacked[0])
      parts.append(f"On {device} at mesh coordinates {names} = {idx}:\n{block}\n")
    return "\n".join(parts)

  def probe_body(self, f):
    """The probe's body: f up to the conversion probed, whose value it returns with a leading
    dimension of one, varying over every manual axis (out_specs P(axes))."""
    def body(*args):
      try:
        f(*args)
      except _Probe as p:
        x = p.x
        missing = tuple(a for a in self.axes if a not in set(_core.varying_axes(x._a)))
        if self.check and missing:
          x = Array(_core.pvary(x._a, missing))
        return x[None]
      raise PartixError("[shard_map] an eager body ended before the conversion being probed "
                        "(it took another path when traced again)")
    return body


def _probe_next(oracle, probe, who, instead):
  """Runs probe() for the oracle's next conversion and keeps its value (or, where the probe
  cannot return it, a marker that gives the usual error)."""
  if len(oracle.known) >= _MAX_CONVERSIONS:
    raise PartixError(f"{who} converted more than {_MAX_CONVERSIONS} traced values to Python "
                      f"values; {instead}")
  oracle.count, oracle.probing = 0, True
  try:
    with active(oracle):
      value = np.asarray(probe())
  except Exception:  # noqa: BLE001 (a value the probe cannot return: the usual error follows)
    value = _UNANSWERABLE
  finally:
    oracle.probing = False
  oracle.known.append(value)


@contextlib.contextmanager
def active(oracle):
  if oracle is None:  # (a probe's own shard_map: its caller's oracle answers)
    yield
    return
  before = getattr(core_mod._eager_values, "hook", None)
  core_mod._eager_values.hook = oracle.hook
  try:
    yield
  finally:
    core_mod._eager_values.hook = before


def run(oracle, run_with, first, fresh, probe):
  """Runs an eager shard_map: `run_with(jitted)` traces and runs it with oracle active (first:
  the cached jit; fresh() an uncached one); probe() runs the probe program for the next
  conversion and returns every device's value stacked."""
  try:
    return run_with(first)
  except _NeedValue:
    pass
  while True:
    _probe_next(oracle, probe, "[shard_map] an eager body", "jit it, or use lax.cond/while_loop")
    oracle.count = 0
    try:
      return run_with(fresh())
    except _NeedValue:
      continue


# ---- eager grad: Python control flow on the primal values ----

class PrimalValues:
  """The values of the conversions an eagerly called grad's function asks for, in order. JAX
  differentiates such a call on concrete primal values, so `if x < 3:`, int(x) and indexing
  with x see them (a value converted so carries no derivative, as in JAX). partix traces the function
  instead: a conversion stops the trace, a probe program (the function under jit, up to that
  conversion) computes its value, and the function is traced again with it."""

  def __init__(self):
    self.known, self.count, self.probing = [], 0, False

  # The conversions JAX 0.10 answers from a concrete primal (Tracer.__bool__, __int__ and
  # __index__); float(), np.asarray, tolist and item raise there as under jit.
  _ANSWERED = ("Array.__bool__", "Array.__int__", "Array.__index__")

  def hook(self, x, what):
    if what not in self._ANSWERED:
      return None
    i = self.count
    self.count += 1
    if i < len(self.known):
      v = self.known[i]
      return None if v is _UNANSWERABLE else v
    if self.probing:
      raise _Probe(x)
    raise _NeedValue()

  def probe_body(self, api, f):
    """f as a probe: it runs until the conversion being probed and returns that value."""
    def body(*args):
      try:
        f(*args)
      except _Probe as p:
        return p.x
      raise PartixError(f"[{api}] the function ended before the conversion being probed (it "
                        "took another path when traced again)")
    return body


def run_with_primal_values(api, attempt, probe):
  """attempt() traces and runs an eager grad; where its function converts a traced value,
  probe(values) runs the probe program for the next conversion (values answering it) and the
  grad is traced again."""
  values = PrimalValues()
  while True:
    values.count = 0
    try:
      with active(values):
        return attempt()
    except _NeedValue:
      pass
    _probe_next(values, lambda: probe(values), f"[{api}] the function", "use lax.cond/while_loop")
