"""vjp, jvp, linearize, the Jacobians (jacrev, jacfwd, jacobian, hessian), linear_transpose and
make_jaxpr over the C++ engine (partix::detail::vjp_engine / jvp_of_pullback / trace_text).

fun is traced once per call: vjp keeps the forward pass's values and its pullback only runs the
backward pass; linearize and the Jacobians compile their linear map once (jit) and run it per
tangent or cotangent. Forward mode has no per-primitive JVP rules yet: J t is the gradient over u
of <VJP(u), t> (a forward and two backward passes), computed in C++.
"""
import functools

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src import tree_util as tu
from partix._src.api import ShapeDtypeStruct, _leaf_core, _out_leaves, jit
from partix._src.tracing import Jaxpr, make_jaxpr  # noqa: F401 (partix.make_jaxpr)
from partix._src.core import Array, PartixError, core, wrap
from partix import numpy as jnp
from partix._src.batching import vmap
from partix._src.residuals import vjp_function
from partix._src import eager_values
from partix._src.api import device_put


def _check_callable(fun, api):
  if not callable(fun):
    raise PartixError(f"[{api}] {fun!r} is not callable")


class _Traced:
  """fun as the C++ tracer calls it: tracers -> result leaves (aux leaves after the others).
  Keeps the result tree, the aux tree and the number of differentiated leaves."""

  def __init__(self, fun, in_tree, has_aux, api):
    self.fun, self.in_tree, self.has_aux, self.api = fun, in_tree, has_aux, api
    self.out_tree = self.aux_tree = None
    self.n_out = 0

  def __call__(self, tracers):
    args = tu.tree_unflatten(self.in_tree, [wrap(t) for t in tracers])
    out = self.fun(*args)
    aux_cores = []
    if self.has_aux:
      if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise PartixError(f"[{self.api}] with has_aux=True the function must return a pair "
                          f"(output, aux), got {type(out).__name__}")
      out, aux = out
      aux_cores, self.aux_tree = _out_leaves(aux, self.api)
    cores, self.out_tree = _out_leaves(out, self.api)
    self.n_out = len(cores)
    return cores + aux_cores

  def split(self, leaves):
    """(outputs tree, aux tree or None) from the result leaves."""
    outs = tu.tree_unflatten(self.out_tree, [Array(o) for o in leaves[:self.n_out]])
    aux = tu.tree_unflatten(self.aux_tree, [Array(a) for a in leaves[self.n_out:]]) \
        if self.has_aux else None
    return outs, aux


def _eagerly(api, cores, traced, attempt):
  """attempt() (tracing `traced` on cores); called eagerly, fun's Python control flow sees the
  primal values, as JAX's (eager_values.run_with_primal_values)."""
  if _core.is_tracing():
    return attempt()

  def probe(values):
    body = values.probe_body(api, lambda *xs: traced.fun(*tu.tree_unflatten(traced.in_tree,
                                                                             list(xs))))
    return jit(body)(*[wrap(c) for c in cores])
  return eager_values.run_with_primal_values(api, attempt, probe)


def _primal_cores(primals, api):
  leaves, tree = tu.tree_flatten(tuple(primals))
  return [_leaf_core(x, api, p) for x, p in zip(leaves, tu.treedef_paths(tree, "primals"))], tree


def _check_like(api, what, path, got, want, check_dtype):
  """got (a _core.Array) against want: same shape, and dtype where check_dtype."""
  if tuple(got.shape) != tuple(want.shape):
    raise PartixError(f"[{api}] {what} {path} has shape {tuple(got.shape)} but must have shape "
                      f"{tuple(want.shape)}, as its primal")
  if check_dtype and got.dtype != want.dtype:
    raise PartixError(f"[{api}] {what} {path} has dtype {Array(got).dtype} but must have dtype "
                      f"{Array(want).dtype}, as its primal")


def _tangent_cores(tangents, tree, primal_cores, api, what="tangent", root="tangents"):
  """The tangent leaves, checked against the primals' structure, shapes and dtypes (integer
  primals: any dtype of the right shape; they get no tangent)."""
  leaves, ttree = tu.tree_flatten(tangents)
  if ttree != tree:
    raise PartixError(f"[{api}] {what}s must have the primals' tree structure: primals are "
                      f"{tree}, {what}s are {ttree}")
  out = []
  for x, p, path in zip(leaves, primal_cores, tu.treedef_paths(tree, root)):
    c = core(x, api=api)
    _check_like(api, what, path, c, p, dtypes.differentiable(Array(p).dtype))
    out.append(c)
  return out


def vjp(fun, *primals, has_aux=False, reduce_axes=()):
  """jax.vjp: (primals_out, vjp_fn) (and aux with has_aux). vjp_fn(cotangents), cotangents
  shaped as primals_out, returns a tuple of cotangents, one per primal, each with its primal's
  structure and sharding. fun is traced and run once; vjp_fn only runs the backward pass from
  the saved values, and may be called any number of times (eagerly, or inside the jit trace the
  vjp was taken in). vjp_fn is a pytree whose leaves are those values (a custom_vjp fwd rule
  may return it as a residual)."""
  _check_callable(fun, "vjp")
  cores, tree = _primal_cores(primals, "vjp")
  traced = _Traced(fun, tree, has_aux, "vjp")
  outs, pb = _eagerly("vjp", cores, traced, lambda: _core.vjp(cores, traced))
  primals_out, aux = traced.split(outs)
  # A pytree whose leaves are the residuals its backward pass reads (as JAX's Partial).
  vjp_fn = vjp_function(pb, outs[:traced.n_out], traced.out_tree, tree, len(outs) - traced.n_out)
  return (primals_out, vjp_fn, aux) if has_aux else (primals_out, vjp_fn)


def _jvp_args(primals, tangents):
  for name, x in (("primal", primals), ("tangent", tangents)):
    if not isinstance(x, (tuple, list)):
      raise PartixError(f"[jvp] primal and tangent arguments must be tuples or lists; found "
                        f"{name}s of type {type(x).__name__}")
  if len(primals) != len(tangents):
    raise PartixError(f"[jvp] primals and tangents must have the same number of elements: "
                      f"{len(primals)} primals, {len(tangents)} tangents")


def jvp(fun, primals, tangents, has_aux=False):
  """jax.jvp: (primals_out, tangents_out) (and aux with has_aux): fun's outputs and their
  directional derivatives along tangents (one per primal, shaped and typed as it). Integer
  outputs get zero tangents of their own dtype (JAX: float0). Computed as the gradient over u
  of <VJP(u), tangents> (no per-primitive JVP rules yet): one forward and two backward passes."""
  _check_callable(fun, "jvp")
  _jvp_args(primals, tangents)
  cores, tree = _primal_cores(primals, "jvp")
  tcores = _tangent_cores(tuple(tangents), tree, cores, "jvp")
  traced = _Traced(fun, tree, has_aux, "jvp")
  outs, touts = _eagerly("jvp", cores, traced, lambda: _core.jvp(cores, tcores, traced))
  primals_out, aux = traced.split(outs)
  tangents_out, _ = traced.split(touts)
  return (primals_out, tangents_out, aux) if has_aux else (primals_out, tangents_out)


def linearize(fun, *primals, has_aux=False):
  """jax.linearize: (primals_out, f_jvp) (and aux with has_aux). f_jvp(*tangents) is the
  Jacobian of fun at primals applied to tangents: fun is traced and run once, and f_jvp is one
  compiled program of the tangents (the saved forward values are its constants), traced once
  per tangent signature however often it is called (f_jvp.trace_count)."""
  _check_callable(fun, "linearize")
  cores, tree = _primal_cores(primals, "linearize")
  traced = _Traced(fun, tree, has_aux, "linearize")
  outs, pb = _eagerly("linearize", cores, traced, lambda: _core.vjp(cores, traced))
  primals_out, aux = traced.split(outs)

  def linear(*tangents):
    if len(tangents) != len(primals):
      raise PartixError(f"[linearize] f_jvp takes {len(primals)} tangents (one per primal), "
                        f"got {len(tangents)}")
    tcores = _tangent_cores(tuple(tangents), tree, cores, "linearize")
    _check_tangent_vma(cores, tcores)
    res = pb.jvp(tcores, "linearize")
    return traced.split(res)[0]

  f_jvp = jit(linear, name="linearize")
  return (primals_out, f_jvp, aux) if has_aux else (primals_out, f_jvp)


def _vma(c):
  return frozenset(_core.varying_axes(c)) if c.is_tracer() else frozenset()


def _check_tangent_vma(primal_cores, tangent_cores):
  """Inside shard_map, as JAX: each tangent given to linearize's f_jvp varies over the mesh
  axes its primal varies over (the linearization was taken at a value of that type)."""
  for i, (p, t) in enumerate(zip(primal_cores, tangent_cores)):
    pv, tv = _vma(p), _vma(t)
    if pv == tv or not dtypes.differentiable(Array(p).dtype):
      continue
    fixes = []
    if tv - pv:
      fixes.append(f"applying `jax.lax.pcast(..., {tuple(sorted(tv - pv))}, to='varying')` to "
                   "the primal value passed to `jax.linearize`")
    if pv - tv:
      fixes.append(f"applying `jax.lax.pcast(..., {tuple(sorted(pv - tv))}, to='varying')` to "
                   "the tangent value passed to the callable `f_jvp` returned by "
                   "`jax.linearize`")
    raise PartixError(
        f"[linearize] f_jvp called with a tangent of varying axes {set(tv) or '{}'} for primal "
        f"{i}, whose linearization varies over {set(pv) or '{}'}. \nThis might be fixed by:\n" +
        "\n".join(f"  * {d};" for d in fixes))


def _dyn(fun, args, argnums, api):
  """(fun of the argnums arguments only, those arguments, whether argnums is a tuple)."""
  multi = not isinstance(argnums, int)
  nums = (argnums,) if not multi else tuple(argnums)
  n = len(args)
  for a in nums:
    if not isinstance(a, int) or not -n <= a < n:
      raise PartixError(f"[{api}] argnums entry {a!r} does not name one of the {n} arguments")
  nums = tuple(a % n for a in nums)

  def partial(*dyn):
    full = list(args)
    for a, d in zip(nums, dyn):
      full[a] = d
    return fun(*full)
  return partial, tuple(args[a] for a in nums), multi


def _pick(t, multi):
  return t if multi else t[0]


def _assemble(out_leaves, in_tree, blocks):
  """The Jacobian tree: the output tree of input trees; blocks[o][i] is leaf (o, i)."""
  return [tu.tree_unflatten(in_tree, blocks[o]) for o in range(len(out_leaves))]


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
  """jax.jacrev: the Jacobian by reverse mode, the pullback vmapped over the output's basis;
  each leaf is shaped out.shape + in.shape, in the output tree of (argnums') input trees. fun
  is traced once; the pullback is evaluated once per output leaf, on all its rows at once."""
  _check_callable(fun, "jacrev")

  @functools.wraps(fun)
  def jac(*args):
    partial, dyn, multi = _dyn(fun, args, argnums, "jacrev")
    res = vjp(partial, *dyn, has_aux=has_aux)
    y, vjp_fn = res[0], res[1]
    xs = [Array(_leaf_core(x, "jacrev")) for x in tu.tree_leaves(_pick(tuple(dyn), multi))]
    y_leaves, y_tree = tu.tree_flatten(y)
    in_tree = tu.tree_structure(_pick(tuple(dyn), multi))
    blocks = []
    for o, yo in enumerate(y_leaves):
      n = int(np.prod(yo.shape, dtype=np.int64))
      if n == 0:
        blocks.append([_rows(jnp, [], yo.shape, x) for x in xs])
        continue
      basis = np.eye(n, dtype=yo.dtype).reshape((n,) + tuple(yo.shape))

      def row(e, o=o):
        cts = [e if j == o else jnp.zeros(l.shape, l.dtype) for j, l in enumerate(y_leaves)]
        return tu.tree_leaves(_pick(vjp_fn(tu.tree_unflatten(y_tree, cts)), multi))
      rows = vmap(row)(basis)
      blocks.append([jnp.reshape(r, tuple(yo.shape) + tuple(x.shape)) for r, x in zip(rows, xs)])
    out = tu.tree_unflatten(y_tree, _assemble(y_leaves, in_tree, blocks))
    return (out, res[2]) if has_aux else out
  return jac


def _rows(jnp, rows, out_shape, x):
  if not rows:
    return jnp.zeros(tuple(out_shape) + tuple(x.shape), x.dtype)
  return jnp.reshape(jnp.stack(rows), tuple(out_shape) + tuple(x.shape))


jacobian = jacrev


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
  """jax.jacfwd: the Jacobian by forward mode, the linear map vmapped over each input's basis;
  each leaf is shaped out.shape + in.shape, in the output tree of (argnums') input trees. fun is
  traced once (linearize); the linear map is evaluated once per input leaf, on all its columns
  at once."""
  _check_callable(fun, "jacfwd")

  @functools.wraps(fun)
  def jac(*args):
    partial, dyn, multi = _dyn(fun, args, argnums, "jacfwd")
    x_leaves, x_tree = tu.tree_flatten(tuple(dyn))
    xs = [Array(_leaf_core(x, "jacfwd")) for x in x_leaves]
    for path, x in zip(tu.treedef_paths(x_tree, "args"), xs):
      if not dtypes.differentiable(x.dtype):
        raise PartixError(f"[jacfwd] requires float inputs; {path} has dtype {x.dtype}")
    res = linearize(partial, *tu.tree_unflatten(x_tree, xs), has_aux=has_aux)
    y, f_jvp = res[0], res[1]
    y_leaves, y_tree = tu.tree_flatten(y)
    cols = []  # per input leaf: the output leaves, each [n] + out.shape
    for i, x in enumerate(xs):
      if x.size == 0:
        cols.append(None)
        continue
      basis = np.eye(x.size, dtype=x.dtype).reshape((x.size,) + tuple(x.shape))

      def col(e, i=i):
        ts = [e if j == i else jnp.zeros(v.shape, v.dtype) for j, v in enumerate(xs)]
        return tu.tree_leaves(f_jvp(*tu.tree_unflatten(x_tree, ts)))
      cols.append(vmap(col)(basis))
    in_tree = tu.tree_structure(_pick(tuple(dyn), multi))
    blocks = [[_cols(jnp, None if cols[i] is None else cols[i][o], yo.shape, x.shape, yo)
               for i, x in enumerate(xs)] for o, yo in enumerate(y_leaves)]
    out = tu.tree_unflatten(y_tree, _assemble(y_leaves, in_tree, blocks))
    return (out, res[2]) if has_aux else out
  return jac


def _cols(jnp, cols, out_shape, in_shape, like):
  """The columns [n] + out.shape of one input leaf as out.shape + in.shape."""
  if cols is None:
    return jnp.zeros(tuple(out_shape) + tuple(in_shape), like.dtype)
  return jnp.reshape(jnp.moveaxis(cols, 0, -1), tuple(out_shape) + tuple(in_shape))


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
  """jax.hessian: jacfwd(jacrev(fun)), each leaf shaped out.shape + in.shape + in.shape."""
  _check_callable(fun, "hessian")
  return jacfwd(jacrev(fun, argnums, has_aux=has_aux), argnums, has_aux=has_aux)


def linear_transpose(fun, *primals, reduce_axes=()):
  """jax.linear_transpose: the transpose of the linear fun, for arguments shaped and typed as
  primals (arrays or ShapeDtypeStructs): f_t(out_cotangent) returns a tuple, one cotangent per
  primal. It is fun's pullback at zeros of those avals (a linear fun's pullback does not depend
  on the point), compiled once."""
  _check_callable(fun, "linear_transpose")
  leaves, tree = tu.tree_flatten(tuple(primals))
  zeros = []
  for x in leaves:
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
      x = Array(_leaf_core(x, "linear_transpose"))
    # Inside shard_map a traced primal's zeros vary as it does (its type, as JAX's).
    z = (jnp.zeros_like(x) if isinstance(x, Array) and x._a.is_tracer()
         else jnp.zeros(x.shape, x.dtype))
    if isinstance(x, ShapeDtypeStruct) and x.sharding is not None:
      z = device_put(z, x.sharding)
    elif isinstance(x, Array) and not _core.is_tracing():
      z = device_put(z, x.sharding)
    zeros.append(z)
  _, vjp_fn = vjp(fun, *tu.tree_unflatten(tree, zeros))
  return jit(vjp_fn, name="linear_transpose")


