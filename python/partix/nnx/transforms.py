"""nnx.jit, grad, value_and_grad, remat and eval_shape: partix's transformations lifted over
functions of modules. The graph nodes among the arguments are split into a static GraphDef and
a State, the State goes through the partix transformation, the function runs on modules merged
inside it, and what it changed in its argument modules (Variable values and metadata, new or
deleted attributes) is written back to them afterwards, as Flax NNX does. Modules returned are
built from the state that comes out."""
import functools

import partix
from partix import tree_util as _tu
from partix._src.core import PartixError
from partix.nnx import filterlib, graph, statelib
from partix.nnx import variables as _vars

_MISSING = object()


def _is_node(x):
  return graph.is_node_object(x) or isinstance(x, _vars.Variable)


class _Extracted:
  """The graph nodes of a pytree (a call's arguments) split out: one GraphDef and State for all
  of them (so nodes shared between arguments stay shared), the other leaves kept apart."""

  def __init__(self, tree):
    leaves, self.treedef = _tu.tree_flatten(tree, is_leaf=_is_node)
    self.node_pos = tuple(i for i, x in enumerate(leaves) if _is_node(x))
    pos = set(self.node_pos)
    self.others = [x for i, x in enumerate(leaves) if i not in pos]
    self.graphdef, flat, self.objects = graph.flatten([leaves[i] for i in self.node_pos])
    self.state = statelib.from_flat_state(flat)
    self.n = len(leaves)

  def key(self):
    return (self.treedef, self.node_pos, self.graphdef)


def _rebuild(treedef, node_pos, graphdef, state, others, n):
  """The tree back from its parts, with new node objects; (tree, objects by index)."""
  nodes, objects = graph.unflatten(graphdef, statelib.to_flat_state(state))
  nodes, others = iter(nodes or ()), iter(others)
  pos = set(node_pos)
  leaves = [next(nodes) if i in pos else next(others) for i in range(n)]
  return _tu.tree_unflatten(treedef, leaves), objects


def _split_out(in_nodes, in_objects, out):
  """Inside a transformation: the argument nodes (as the function left them) and the result's
  nodes as one state, the result's other leaves, and the static facts to rebuild them."""
  leaves, out_treedef = _tu.tree_flatten(out, is_leaf=_is_node)
  out_pos = tuple(i for i, x in enumerate(leaves) if _is_node(x))
  pos = set(out_pos)
  gdef, flat, objs = graph.flatten([list(in_nodes), [leaves[i] for i in out_pos]])
  inner = {id(o): i for i, o in in_objects.items()}
  outer_of = tuple((j, inner[id(o)]) for j, o in enumerate(objs) if id(o) in inner)
  others = [x for i, x in enumerate(leaves) if i not in pos]
  info = (gdef, out_treedef, out_pos, len(leaves), outer_of)
  return statelib.from_flat_state(flat), others, info


def _finish(ex_objects, info, state, others, write_back=True):
  """Outside: argument nodes updated in place (write_back), result nodes built."""
  gdef, out_treedef, out_pos, n, outer_of = info
  existing = {j: ex_objects[i] for j, i in outer_of} if write_back else {}
  built, _ = graph.unflatten(gdef, statelib.to_flat_state(state), existing=existing)
  out_nodes = iter(built[1] if built else ())
  others = iter(others)
  pos = set(out_pos)
  leaves = [next(out_nodes) if i in pos else next(others) for i in range(n)]
  return _tu.tree_unflatten(out_treedef, leaves)


def _node_list(tree):
  leaves = _tu.tree_leaves(tree, is_leaf=_is_node)
  return [x for x in leaves if _is_node(x)]


def _decorator(f, make):
  if f is _MISSING:
    return make
  return make(f)


# ---- jit ----

class _Bundle:
  """A call's static part: the arguments' structure, their GraphDef and static values."""
  __slots__ = ("key", "_hash")

  def __init__(self, key):
    self.key = key
    self._hash = hash(key)

  def __hash__(self):
    return self._hash

  def __eq__(self, other):
    return isinstance(other, _Bundle) and self.key == other.key


class JitWrapped:
  """nnx.jit(f): partix.jit over f's argument state, modules written back after the call."""

  def __init__(self, fun, static_argnums, static_argnames, donate_argnums, donate_argnames,
               in_shardings, out_shardings):
    if not callable(fun):
      raise PartixError(f"[nnx.jit] {fun!r} is not callable")
    functools.update_wrapper(self, fun, updated=())
    self._fun = fun
    nums = static_argnums if static_argnums is not None else ()
    self._static = (nums,) if isinstance(nums, int) else tuple(nums)
    names = static_argnames or ()
    self._static_names = (names,) if isinstance(names, str) else tuple(names)
    if in_shardings is not None or out_shardings is not None:
      raise PartixError("[nnx.jit] in_shardings / out_shardings are not provided by partix.nnx: "
                        "annotate the Variables (out_sharding=) and constrain arrays with "
                        "partix.lax.with_sharding_constraint inside the function")
    self._infos = {}
    self._jitted = partix.jit(self._inner, static_argnums=(0,))

  def _inner(self, bundle, state, others):
    (treedef, node_pos, gdef, n), statics, skw, n_args = bundle.key
    (dyn, dkw), objects = _rebuild(treedef, node_pos, gdef, state, others, n)
    it = iter(dyn)
    sd = dict(statics)
    args = [sd[i].value if i in sd else next(it) for i in range(n_args)]
    kwargs = dict(dkw)
    kwargs.update({k: v.value for k, v in skw})
    in_nodes = _node_list((dyn, dkw))
    out = self._fun(*args, **kwargs)
    st, oth, info = _split_out(in_nodes, objects, out)
    self._infos[bundle] = info
    return st, oth

  def __call__(self, *args, **kwargs):
    n = len(args)
    static = {a % n for a in self._static if -n <= a < n}
    statics = tuple((i, graph._Static(args[i])) for i in sorted(static))
    for i, s in statics:
      try:
        hash(s.value)
      except TypeError as e:
        raise PartixError(f"[nnx.jit] static argument {i} must be hashable: {e}") from None
    dyn = tuple(a for i, a in enumerate(args) if i not in static)
    dkw = {k: v for k, v in kwargs.items() if k not in self._static_names}
    skw = tuple(sorted((k, graph._Static(v)) for k, v in kwargs.items()
                       if k in self._static_names))
    ex = _Extracted((dyn, dkw))
    bundle = _Bundle(((ex.treedef, ex.node_pos, ex.graphdef, ex.n), statics, skw, n))
    state, others = self._jitted(bundle, ex.state, ex.others)
    return _finish(ex.objects, self._infos[bundle], state, others)

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return functools.partial(self, obj)

  def lower(self, *args, **kwargs):
    raise PartixError("[nnx.jit] lower is not provided by partix.nnx; split the module and "
                      "use partix.jit(...).lower on its state")


def jit(fun=_MISSING, *, in_shardings=None, out_shardings=None, static_argnums=None,
        static_argnames=None, donate_argnums=None, donate_argnames=None, keep_unused=False,
        device=None, backend=None, inline=False, **unused):
  """nnx.jit: compiles fun over its arguments' state; modules passed in are updated with what
  fun changed in them; modules returned come out built from the compiled program's state.
  (donate_argnums is accepted and ignored: partix does not reuse a module's buffers.)"""
  return _decorator(fun, lambda f: JitWrapped(f, static_argnums, static_argnames,
                                              donate_argnums, donate_argnames, in_shardings,
                                              out_shardings))


# ---- autodiff ----

class DiffState:
  """argnums entry for nnx.grad: differentiate argument `argnum` with respect to the
  Variables `filter` selects."""

  def __init__(self, argnum, filter):
    self.argnum, self.filter = argnum, filter


def _diff_specs(argnums, n, api):
  single = isinstance(argnums, (int, DiffState))
  items = (argnums,) if single else tuple(argnums)
  specs = []
  for a in items:
    d = a if isinstance(a, DiffState) else DiffState(a, _vars.Param)
    if not isinstance(d.argnum, int) or not -n <= d.argnum < n:
      raise PartixError(f"[nnx.{api}] argnums {argnums!r} names an argument the call does not "
                        f"have ({n} positional arguments)")
    specs.append(DiffState(d.argnum % n, d.filter))
  return specs, single


def _split_diff(arg, filter):
  """(graphdef, wrt state, rest state) of a module argument (None for a plain pytree)."""
  if not _node_list(arg):
    return None
  ex = _Extracted(arg)
  flat = statelib.to_flat_state(ex.state)
  pred = filterlib.to_predicate(filter)
  single = _is_node(arg)  # one module: its gradient's paths start at its attributes
  wrt = [(p[1:] if single else p, v) for p, v in flat if pred(p[1:] if single else p, v)]
  rest = [(p, v) for p, v in flat if not pred(p[1:] if single else p, v)]
  return ex, statelib.from_flat_state(wrt), statelib.from_flat_state(rest)


def _prefixed(state, single):
  if not single:
    return state
  return statelib.from_flat_state([((0,) + p, v) for p, v in statelib.to_flat_state(state)])


def _grad_pieces(f, args, specs, has_aux):
  """The pure function partix differentiates and its differentiated inputs."""
  parts = {s.argnum: _split_diff(args[s.argnum], s.filter) for s in specs}
  others = [(i, a) for i, a in enumerate(args) if i not in parts]
  side = {}
  for i, a in others:  # modules not differentiated still carry state (e.g. rng counts)
    if _node_list(a):
      side[i] = _Extracted(a)

  def pure(diffs):
    full = list(args)
    for s, d in zip(specs, diffs):
      p = parts[s.argnum]
      if p is None:
        full[s.argnum] = d
        continue
      ex, _, rest = p
      state = statelib.merge_state(_prefixed(d, _is_node(args[s.argnum])), _copied(rest))
      full[s.argnum], _ = _rebuild(ex.treedef, ex.node_pos, ex.graphdef, state, ex.others,
                                   ex.n)
    for i, ex in side.items():
      full[i], _ = _rebuild(ex.treedef, ex.node_pos, ex.graphdef, _copied(ex.state),
                            ex.others, ex.n)
    out = f(*full)
    value, aux = out if has_aux else (out, None)
    if not has_aux and isinstance(out, tuple):
      raise PartixError("[nnx.grad] the function returned a tuple; with has_aux=False it must "
                        "return one scalar")
    new_states = {i: graph.state(full[i]) for i in list(parts) + list(side)
                  if _node_list(full[i])}
    return value, (aux, new_states)
  diffs = [parts[s.argnum][1] if parts[s.argnum] is not None else args[s.argnum]
           for s in specs]
  return pure, diffs


def _copied(state):
  return statelib.from_flat_state([(p, v.copy() if isinstance(v, _vars.Variable) else v)
                                   for p, v in statelib.to_flat_state(state)])


def _write_back(args, new_states):
  for i, st in new_states.items():
    rest = [(p, v) for p, v in statelib.to_flat_state(st) if not isinstance(v, _vars.Param)]
    if rest:
      graph.update(args[i], statelib.from_flat_state(rest))


def value_and_grad(f=_MISSING, *, argnums=0, has_aux=False, holomorphic=False,
                   allow_int=False, reduce_axes=(), **unused):
  """nnx.value_and_grad: the value of f and its gradient with respect to the Params of the
  module arguments in argnums (a State like nnx.state(model, nnx.Param)), or to plain array
  arguments; other state f changes (rng counts, batch statistics) is written back."""
  def make(fun):
    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
      specs, single = _diff_specs(argnums, len(args), "value_and_grad")
      f = functools.partial(fun, **kwargs) if kwargs else fun
      pure, diffs = _grad_pieces(f, args, specs, has_aux)
      (value, (aux, new_states)), grads = partix.value_and_grad(pure, has_aux=True)(diffs)
      _write_back(args, new_states)
      grads = grads[0] if single else tuple(grads)
      return ((value, aux) if has_aux else value), grads
    return wrapper
  return _decorator(f, make)


def grad(f=_MISSING, *, argnums=0, has_aux=False, holomorphic=False, allow_int=False,
         reduce_axes=(), **unused):
  """nnx.grad: value_and_grad's gradient (and aux with has_aux)."""
  def make(fun):
    vg = value_and_grad(fun, argnums=argnums, has_aux=has_aux)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
      (out, g) = vg(*args, **kwargs)
      return (g, out[1]) if has_aux else g
    return wrapper
  return _decorator(f, make)


# ---- remat, eval_shape ----

def _lifted_call(transform, fun, args, kwargs, write_back=True):
  ex = _Extracted((args, kwargs))
  box = {}

  def inner(state, others):
    (a, k), objects = _rebuild(ex.treedef, ex.node_pos, ex.graphdef, state, others, ex.n)
    out = fun(*a, **k)
    st, oth, box["info"] = _split_out(_node_list((a, k)), objects, out)
    return st, oth
  state, others = transform(inner)(ex.state, ex.others)
  return _finish(ex.objects, box["info"], state, others, write_back)


def remat(f=_MISSING, *, prevent_cse=True, static_argnums=(), policy=None, **unused):
  """nnx.remat: f's intermediate values are recomputed in the backward pass
  (partix.checkpoint) instead of kept."""
  def make(fun):
    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
      return _lifted_call(lambda g: partix.checkpoint(g, prevent_cse=prevent_cse,
                                                      policy=policy), fun, args, kwargs)
    return wrapper
  return _decorator(f, make)


def eval_shape(f, *args, **kwargs):
  """What f would build or return, without computing it: modules whose Variables hold
  ShapeDtypeStructs (with the sharding each would have)."""
  return _lifted_call(lambda g: functools.partial(partix.eval_shape, g), f, args, kwargs,
                      write_back=False)
