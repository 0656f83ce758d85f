"""jax.custom_vjp and jax.custom_jvp: functions differentiated by rules of the user's own.

The function and its rules are traced once per call into regions of one core instruction
(custom_vjp_call / custom_jvp_call): region 0, the function, is what runs; the VJP runs the
rules. Outside any trace (nothing can differentiate the call) the function runs as it is."""
import contextlib
import functools
import inspect
import threading

from partix import _core
from partix._src import dtypes
from partix._src import tree_util as tu
from partix._src.tracing import _keep_tree, _leaf_core, _out_leaves, _trees
from partix._src.core import Array, PartixError, wrap
import partix.numpy as jnp

__all__ = ["custom_gradient", "custom_jvp", "custom_vjp"]


def _positional(fun, args, kwargs, api):
  """args with kwargs bound by fun's signature, as JAX resolves them."""
  if not kwargs:
    return tuple(args)
  try:
    bound = inspect.signature(fun).bind(*args, **kwargs)
  except (TypeError, ValueError) as e:
    raise PartixError(f"[{api}] cannot bind the arguments to {fun.__name__}: {e}") from None
  bound.apply_defaults()
  if bound.kwargs:
    raise PartixError(f"[{api}] keyword-only arguments {sorted(bound.kwargs)} are not supported")
  return tuple(bound.args)


_rules = threading.local()


@contextlib.contextmanager
def _tracing_rules(fn):
  """While fn's rules are traced, fn called inside them (a fwd or jvp rule computing the output
  with fn itself, a bwd rule solving with it) is another custom call, whose rules are traced
  in turn, down to _RULE_DEPTH levels; below that it is its plain function (tracing the rules
  again would never end). Derivatives up to second order through such calls are so the
  rules' own, as in JAX (which traces a rule only when it differentiates); a third-order one
  sees fn's own derivatives at the deepest level."""
  depth = getattr(_rules, "depth", {})
  _rules.depth = {**depth, id(fn): depth.get(id(fn), 0) + 1}
  try:
    yield
  finally:
    _rules.depth = depth


_RULE_DEPTH = 2


def _in_own_rules(fn):
  return getattr(_rules, "depth", {}).get(id(fn), 0) >= _RULE_DEPTH


class _Call:
  """One call's arguments: the differentiable ones flattened into leaves, the nondiff ones
  (nondiff_argnums) kept as they are."""

  def __init__(self, api, args, nondiff):
    self.api, self.n = api, len(args)
    for i in nondiff:
      if not -self.n <= i < self.n:
        raise PartixError(f"[{api}] nondiff_argnums names argument {i} but {self.n} are given")
    self.nondiff = sorted({i % self.n for i in nondiff})
    self.static = [args[i] for i in self.nondiff]
    diff = [a for i, a in enumerate(args) if i not in self.nondiff]
    leaves, self.tree = tu.tree_flatten(tuple(diff))
    self.cores = [_leaf_core(x, api) for x in leaves]
    self.avals = [(tuple(c.shape), c.dtype) for c in self.cores]

  def diff_args(self, tracers):
    return tu.tree_unflatten(self.tree, [wrap(t) for t in tracers])

  def full_args(self, tracers):
    it = iter(self.diff_args(tracers))
    st = iter(self.static)
    return tuple(next(st) if i in self.nondiff else next(it) for i in range(self.n))

  def traced(self, fn, out_check=None):
    """fn of this call's arguments as a rule the core traces: (leaves, tree id)."""
    def run(tracers):
      out = fn(tracers)
      if out_check is not None:
        out = out_check(out)
      cores, tree = _out_leaves(out, self.api)
      return cores, _keep_tree(tree)
    return run


class custom_vjp:
  """jax.custom_vjp: `f.defvjp(fwd, bwd)` gives f a VJP of your own. fwd takes f's arguments
  and returns (output, residuals); bwd takes (*nondiff_args, residuals, output cotangent) and
  returns a tuple with one cotangent (or None for zero) per differentiable argument."""

  def __init__(self, fun, nondiff_argnums=()):
    if not callable(fun):
      raise PartixError(f"[custom_vjp] {fun!r} is not callable")
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = tuple(nondiff_argnums)
    self.fwd = self.bwd = None

  def defvjp(self, fwd, bwd, symbolic_zeros=False, optimize_remat=False):
    if not (callable(fwd) and callable(bwd)):
      raise PartixError("[custom_vjp] defvjp takes two functions, fwd and bwd")
    self.fwd, self.bwd = fwd, bwd

  def __get__(self, obj, objtype=None):  # as a method
    return self if obj is None else functools.partial(self, obj)

  def __call__(self, *args, **kwargs):
    api = "custom_vjp"
    if self.fwd is None:
      raise PartixError(f"[{api}] {self.__name__} has no VJP rules: call "
                        f"{self.__name__}.defvjp(fwd, bwd) first")
    args = _positional(self.fun, args, kwargs, api)
    if not _core.is_tracing() or _in_own_rules(self):
      return self.fun(*args)
    call = _Call(api, args, self.nondiff_argnums)
    res_tree, out_tree = [], []

    def fwd_out(out):
      if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise PartixError(f"[{api}] fwd must return a pair (output, residuals), got "
                          f"{type(out).__name__}")
      res_leaves, rt = tu.tree_flatten(out[1])
      res_tree.append(rt)
      out_tree.append(tu.tree_structure(out[0]))
      return (out[0], res_leaves)

    def bwd_in(tracers):
      nres = res_tree[0].num_leaves
      res = tu.tree_unflatten(res_tree[0], [wrap(t) for t in tracers[:nres]])
      ct = tu.tree_unflatten(out_tree[0], [wrap(t) for t in tracers[nres:]])
      cts = self.bwd(*call.static, res, ct)
      return _cotangents(api, cts, call)

    with _tracing_rules(self):
      outs, tid = _core.custom_vjp(
          call.cores, call.traced(lambda t: self.fun(*call.full_args(t))),
          call.traced(lambda t: self.fwd(*call.full_args(t)), fwd_out), call.traced(bwd_in))
    return tu.tree_unflatten(_trees.pop(tid), [Array(o) for o in outs])


def _cotangents(api, cts, call):
  """bwd's result as one leaf per differentiable argument leaf (None: zeros)."""
  ndiff = call.n - len(call.nondiff)
  if not (isinstance(cts, (tuple, list)) and len(cts) == ndiff):
    raise PartixError(f"[{api}] bwd must return a tuple of {ndiff} cotangents (one per "
                      f"differentiable argument), got {type(cts).__name__}"
                      + (f" of length {len(cts)}" if isinstance(cts, (tuple, list)) else ""))
  leaves = []
  # Each differentiable argument's leaf numbers, as a tree shaped like the argument.
  arg_trees = tu.tree_unflatten(call.tree, list(range(call.tree.num_leaves)))
  for i, (c, idx) in enumerate(zip(cts, arg_trees)):
    want = tu.tree_structure(idx)
    if c is None:
      leaves += [jnp.zeros(*call.avals[j]) for j in tu.tree_leaves(idx)]
      continue
    cl, ct = tu.tree_flatten(c, is_leaf=lambda x: x is None)
    if ct != want:
      raise PartixError(f"[{api}] bwd's cotangent {i} has structure {ct}, but argument {i} is "
                        f"{want}")
    for x, j in zip(cl, tu.tree_leaves(idx)):
      # An integer argument has no cotangent (JAX's is float0): whatever bwd gives it (float0
      # zeros, integer zeros) is zero.
      zero = x is None or not dtypes.differentiable(call.avals[j][1])
      leaves.append(jnp.zeros(*call.avals[j]) if zero else x)
  return tuple(leaves)


class SymbolicZero:
  """jax.custom_derivatives.SymbolicZero: a tangent known to be zero, of the given type
  (shape, dtype). partix's custom_jvp rules receive zero tangents as arrays instead; the class
  exists for rules that test for it and for libraries that build one."""

  def __init__(self, aval):
    self.aval = aval

  shape = property(lambda self: tuple(self.aval.shape))
  dtype = property(lambda self: self.aval.dtype)

  def zero(self):
    return jnp.zeros(self.shape, self.dtype)

  @staticmethod
  def from_primal_value(val):
    a = jnp.asarray(val)
    return SymbolicZero(a)

  def __repr__(self):
    return f"SymbolicZero({self.dtype}{list(self.shape)})"


class custom_jvp:
  """jax.custom_jvp: `@f.defjvp` gives f a JVP rule jvp(primals, tangents) -> (primal_out,
  tangent_out), linear in the tangents (reverse mode transposes it); `f.defjvps(*fns)` gives one
  function per argument, fn(tangent, primal_out, *primals) -> its tangent contribution."""

  def __init__(self, fun, nondiff_argnums=()):
    if not callable(fun):
      raise PartixError(f"[custom_jvp] {fun!r} is not callable")
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = tuple(nondiff_argnums)
    self.jvp = None

  def defjvp(self, jvp, symbolic_zeros=False):
    """The JVP rule jvp(primals, tangents) -> (primal_out, tangent_out). With
    symbolic_zeros=True JAX may pass a SymbolicZero for a tangent known to be zero; partix
    passes every tangent as an array (zeros where it is zero), which such rules handle too."""
    if not callable(jvp):
      raise PartixError("[custom_jvp] defjvp takes a function jvp(primals, tangents)")
    self.jvp = jvp
    return jvp

  def defjvps(self, *jvps):
    def jvp(primals, tangents):
      out = self.fun(*primals)
      tan = None
      for fn, t in zip(jvps, tangents):
        if fn is None:
          continue
        term = fn(t, out, *primals)
        tan = term if tan is None else tu.tree_map(lambda a, b: a + b, tan, term)
      if tan is None:
        tan = tu.tree_map(jnp.zeros_like, out)
      return out, tan
    self.jvp = jvp

  def __get__(self, obj, objtype=None):
    return self if obj is None else functools.partial(self, obj)

  def __call__(self, *args, **kwargs):
    api = "custom_jvp"
    if self.jvp is None:
      raise PartixError(f"[{api}] {self.__name__} has no JVP rule: decorate one with "
                        f"@{self.__name__}.defjvp first")
    args = _positional(self.fun, args, kwargs, api)
    if not _core.is_tracing() or _in_own_rules(self):
      return self.fun(*args)
    call = _Call(api, args, self.nondiff_argnums)
    n = len(call.cores)

    def rule(tracers):
      primals = call.diff_args(tracers[:n])
      tangents = call.diff_args(tracers[n:])
      out = self.jvp(*call.static, tuple(primals), tuple(tangents))
      if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise PartixError(f"[{api}] the jvp rule must return a pair (primal_out, tangent_out), "
                          f"got {type(out).__name__}")
      po, to = out
      if tu.tree_structure(po) != tu.tree_structure(to):
        raise PartixError(f"[{api}] the jvp rule's tangent_out has structure "
                          f"{tu.tree_structure(to)}, but primal_out is {tu.tree_structure(po)}")
      return tuple(tu.tree_leaves(po)) + tuple(tu.tree_leaves(to))

    def traced_rule(tracers):
      cores, _ = _out_leaves(rule(tracers), api)
      return cores, -1
    with _tracing_rules(self):
      outs, tid = _core.custom_jvp(
          call.cores, call.traced(lambda t: self.fun(*call.full_args(t))), traced_rule)
    return tu.tree_unflatten(_trees.pop(tid), [Array(o) for o in outs])


def custom_gradient(fun):
  """jax.custom_gradient: fun(*args) returns (output, vjp) where vjp(output cotangent) gives one
  cotangent per positional argument (a tuple; a single value for one argument). Built on
  custom_vjp: the backward pass calls fun again on the saved arguments to obtain vjp (the
  forward computation is done twice when differentiated, once otherwise)."""
  api = "custom_gradient"
  if not callable(fun):
    raise PartixError(f"[{api}] {fun!r} is not callable")

  def pair(out):
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and callable(out[1])):
      raise PartixError(f"[{api}] {getattr(fun, '__name__', 'fun')} must return a pair (output, "
                        f"vjp function), got {type(out).__name__}")
    return out

  @functools.wraps(fun)
  def wrapped(*args, **kwargs):
    def primal(*a):
      return pair(fun(*a, **kwargs))[0]
    f = custom_vjp(primal)

    def fwd(*a):
      return pair(fun(*a, **kwargs))[0], a

    def bwd(res, ct):
      cts = pair(fun(*res, **kwargs))[1](ct)
      if len(res) == 1 and not isinstance(cts, (tuple, list)):
        cts = (cts,)
      if not isinstance(cts, (tuple, list)) or len(cts) != len(res):
        raise PartixError(f"[{api}] the vjp function must return one cotangent per positional "
                          f"argument ({len(res)}), got {cts!r}")
      return tuple(cts)
    f.defvjp(fwd, bwd)
    return f(*args)
  return wrapped
