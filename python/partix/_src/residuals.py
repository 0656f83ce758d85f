"""What reverse mode keeps for its backward pass.

A vjp's pullback reads some values of the forward pass (its residuals). Traced as a program of
the output cotangents, those reads are the program's captures, so the residuals are found by
tracing the backward pass, not by rule. Two uses:

* vjp's vjp_fn is a pytree (JAX's is a tree_util.Partial): flattening it traces its backward
  pass once and gives the residuals as leaves; rebuilt from leaves it runs that program on
  them. A custom_vjp fwd rule may so return a vjp_fn among its residuals.
* jax.ad_checkpoint.saved_residuals / print_saved_residuals list the residuals of
  differentiating f at its arguments: the arguments, constants and intermediates the backward
  pass reads (remat regions are recomputed there from what their save policy keeps).
"""
import inspect
import re

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src import tree_util as tu
from partix._src.api import ShapedArray
from partix._src.core import Array, PartixError, core, wrap
from partix._src.tracing import _INSTR, _leaf_core, _out_leaves


def _specs(cores):
  """(shape, dtype) of each core array."""
  return [(tuple(c.shape), np.dtype(Array(c).dtype)) for c in cores]


def backward_program(pb, out_cores, n_aux=0):
  """pb (a _core.Pullback of len(out_cores) + n_aux results) traced as a program of the float
  outputs' cotangents, and those outputs' positions. Its captures are the values of the
  forward pass the backward pass reads. The parameters are typed as the outputs are (their
  sharding and, inside shard_map, the axes they vary over)."""
  diff = [i for i, (_, d) in enumerate(_specs(out_cores)) if dtypes.differentiable(d)]

  def back(cts):
    full = [None] * (len(out_cores) + n_aux)
    for i, c in zip(diff, cts):
      full[i] = c
    return pb(full)
  return _core.trace_program([out_cores[i] for i in diff], back), diff


def _cotangent_cores(cotangents, out_tree, out_specs):
  """The cotangent leaves checked against the outputs' (shape, dtype): the outputs' structure;
  shape, and the dtype of float outputs. An integer output's cotangent is not read (None
  here): any dtype of its shape, float0 too."""
  leaves, ctree = tu.tree_flatten(cotangents)
  if ctree != out_tree:
    raise PartixError(f"[vjp] the cotangent must have the structure of the function's "
                      f"output {out_tree}, got {ctree}")
  cts = []
  for x, (shape, dt), path in zip(leaves, out_specs, tu.treedef_paths(out_tree, "cotangent")):
    got = tuple(getattr(x, "shape", np.shape(x)))
    if got != shape:
      raise PartixError(f"[vjp] cotangent {path} has shape {got} but must have shape "
                        f"{shape}, as its primal")
    if not dtypes.differentiable(dt):
      cts.append(None)
      continue
    c = core(x, api="vjp")
    if np.dtype(Array(c).dtype) != dt:
      raise PartixError(f"[vjp] cotangent {path} has dtype {Array(c).dtype} but must have "
                        f"dtype {dt}, as its primal")
    cts.append(c)
  return cts


class _Pullback:
  """A vjp's backward pass over the forward values it keeps (the C++ pullback)."""

  def __init__(self, pb, out_cores, out_tree, primal_tree, n_aux):
    self.pb, self.out_cores, self.out_tree = pb, out_cores, out_tree
    self.primal_tree, self.n_aux = primal_tree, n_aux
    self._replay = self._residuals = None

  def __call__(self, cotangents):
    cts = _cotangent_cores(cotangents, self.out_tree, _specs(self.out_cores))
    res = self.pb(cts + [None] * self.n_aux)
    return tu.tree_unflatten(self.primal_tree, [Array(r) for r in res])

  def flatten(self):
    """(residual leaves, the backward pass as a function of them and the cotangents). Traced
    once, where it is first flattened (the forward values must still be alive there)."""
    if self._replay is None:
      program, diff = backward_program(self.pb, self.out_cores, self.n_aux)
      self._replay = _Replay(program, diff, self.out_cores, self.out_tree, self.primal_tree)
      self._residuals = [wrap(c) for c in program.captures]
    return self._residuals, self._replay


class _Replay:
  """The traced backward pass: called with the residuals, then the cotangents."""

  def __init__(self, program, diff, out_cores, out_tree, primal_tree):
    self.program, self.diff, self.out_tree = program, diff, out_tree
    self.out_specs, self.primal_tree = _specs(out_cores), primal_tree

  def __call__(self, *args):
    if not args:
      raise PartixError("[vjp] the vjp function takes the output cotangents")
    *residuals, cotangents = args
    want = len(self.program.captures)
    if len(residuals) != want:
      raise PartixError(f"[vjp] the vjp function holds {want} residuals, got {len(residuals)}")
    cts = _cotangent_cores(cotangents, self.out_tree, self.out_specs)
    ins = [cts[i] for i in self.diff] + [core(r, api="vjp") for r in residuals]
    return tu.tree_unflatten(self.primal_tree, [wrap(o) for o in self.program.eval(ins)])


class VjpFunction(tu.Partial):
  """vjp's vjp_fn: vjp_fn(cotangents) gives one cotangent per primal. A pytree, as JAX's
  (a tree_util.Partial): its leaves are the residuals its backward pass reads."""

  def __repr__(self):
    return "<vjp function>"


def _flatten_vjp(f):
  return f.func.flatten()


def _unflatten_vjp(replay, leaves):
  return tu.Partial(replay, *leaves)


tu.register_pytree_node(VjpFunction, _flatten_vjp, _unflatten_vjp)


def vjp_function(pb, out_cores, out_tree, primal_tree, n_aux):
  """vjp's vjp_fn for the pullback pb of out_cores (then n_aux aux results)."""
  return VjpFunction(_Pullback(pb, out_cores, out_tree, primal_tree, n_aux))


# ---- saved_residuals / print_saved_residuals ----

_API = "saved_residuals"


def _param_names(f, args, kwargs):
  """name(i) for positional argument i and name(k) for keyword k, as f's signature calls them
  (None where it cannot tell)."""
  try:
    params = list(inspect.signature(f).parameters.values())
  except (TypeError, ValueError):
    return lambda i: None, lambda k: None
  pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  var = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
  named = {p.name for p in params if p.kind != p.VAR_POSITIONAL and p.kind != p.VAR_KEYWORD}
  varkw = next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)

  def positional(i):
    if i < len(pos):
      return pos[i]
    return f"{var}[{i - len(pos)}]" if var else None

  def keyword(k):
    if k in named:
      return k
    return f"{varkw}[{k!r}]" if varkw else None
  return positional, keyword


def _arg_names(f, args, kwargs):
  """One name per leaf of (args, kwargs): the parameter's name and the leaf's path in it."""
  positional, keyword = _param_names(f, args, kwargs)
  names = []
  for path, _ in tu.tree_flatten_with_path((args, kwargs))[0]:
    top, key, rest = path[0], path[1], path[2:]
    base = positional(key.idx) if top.idx == 0 else keyword(key.key)
    names.append(None if base is None else base + tu.keystr(rest))
  return names


_HEADER = re.compile(r"^program @\S+ \((.*)\) -> \(([^)]*)\) \{$")


class _Instr:
  """One top-level instruction of a program text: results, primitive, operands, attributes
  text, and its whole text (with its regions)."""

  def __init__(self, m):
    self.outs, self.prim = m.group(1).split(", "), m.group(2)
    self.ins = re.findall(r"%\d+", m.group(3))
    self.attrs, self.text = m.group(4) or "", m.group(0)


def _parse(text):
  """(parameters in order, results, top-level instructions) of a program text."""
  lines = text.splitlines()
  m = _HEADER.match(lines[0])
  if m is None:
    raise PartixError(f"[{_API}] cannot read the program header {lines[0]!r}")
  instrs = []
  for line in lines[1:]:
    e = _INSTR.match(line)
    if e is not None:
      instrs.append(_Instr(e))
    elif instrs and line.startswith("   "):
      instrs[-1].text += "\n" + line  # a line of its regions
  return re.findall(r"(%\d+):", m.group(1)), re.findall(r"%\d+", m.group(2)), instrs


def _live_captures(program, n_params):
  """The captures of a traced program its results (or its effects) read, as the compiled
  program keeps them: instructions none of whose results is used are dropped (a region with
  its instruction), but for those with effects."""
  params, results, instrs = _parse(program.text)
  live = set(results)
  for ins in reversed(instrs):
    if live.intersection(ins.outs) or "effect_callback" in ins.text:
      live.update(ins.ins)
  return [c for c, v in zip(program.captures, params[n_params:]) if v in live]


def _describe(value, aval, params, n_args, made, names):
  """(order, text) of where the residual `value` (of type aval) comes from."""
  if value in params[:n_args]:
    i = params.index(value)
    who = f"the argument {names[i]}" if names[i] else f"the argument at flattened index {i}"
    return (2, i), f"from {who}"
  if value in params:
    return (1, params.index(value)), "from a constant"
  prim, attrs = made[value].prim, made[value].attrs
  order = (3, int(value[1:]))
  if prim == "constant":
    return ((0, int(value[1:])), "from a literal") if not aval.shape else (
        (1, -1), "from a constant")
  named = re.search(r'name="([^"]*)"', attrs) if prim == "checkpoint_name" else None
  if named:
    return order, f"named '{named.group(1)}'"
  return order, f"output of {prim}"


def saved_residuals(f, *args, **kwargs):
  """jax.ad_checkpoint.saved_residuals: the values reverse-mode differentiation of f at args
  keeps for its backward pass, as (type, where it comes from) pairs: the arguments,
  constants, literals and intermediates its backward pass reads. Found by tracing f's vjp and
  its backward pass (which values that pass reads), so remat regions count what their policy
  saves. args may be arrays or ShapeDtypeStructs."""
  if not callable(f):
    raise PartixError(f"[{_API}] {f!r} is not callable")
  leaves, tree = tu.tree_flatten((args, kwargs))
  cores = [_leaf_core(x, _API, p) for x, p in zip(leaves, tu.treedef_paths(tree, "args"))]
  types = []

  def outer(tracers):
    def fun(ts):
      a, k = tu.tree_unflatten(tree, [wrap(t) for t in ts])
      return _out_leaves(f(*a, **k), _API)[0]
    outs, pb = _core.vjp(list(tracers), fun)
    program, diff = backward_program(pb, outs)
    res = _live_captures(program, len(diff))
    types.extend(ShapedArray(_core.type_of(r)) for r in res)
    return res
  params, results, instrs = _parse(_core.trace_program(cores, outer).text)
  made = {v: ins for ins in instrs for v in ins.outs}
  names = _arg_names(f, args, kwargs)
  found = {}
  for value, t in zip(results, types):
    if value not in found:
      order, text = _describe(value, t, params, len(cores), made, names)
      found[value] = (order, t, text)
  return [(t, text) for _, t, text in sorted(found.values(), key=lambda e: e[0])]


def print_saved_residuals(f, *args, **kwargs):
  """jax.ad_checkpoint.print_saved_residuals: prints saved_residuals(f, *args, **kwargs), one
  line per residual: its type (short dtype names, f32[4]) and where it comes from."""
  for aval, text in saved_residuals(f, *args, **kwargs):
    print(f"{aval.str_short(short_dtypes=True)} {text}")
