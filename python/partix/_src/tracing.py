"""What tracing shares below jit and the transformations: arrays that are not allocated
(ShapeDtypeStruct), the conversion of a traced function's arguments and results to core arrays,
the result trees kept for the C++ side, JAX's out_sharding= on ops, and make_jaxpr."""
import functools
import itertools
import re
import threading

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src import tree_util as tu
from partix._src.core import Array, PartixError, PartixTypeError, core, wrap
from partix._src.sharding import (NamedSharding, PartitionSpec, context_mesh, to_sharding,
                                  use_mesh)


class ShapeDtypeStruct:
  """An array that is not allocated: shape, dtype and (optionally) sharding. jit(f).lower and
  eval_shape take it where f takes arrays. A PartitionSpec sharding is resolved against the
  current mesh when .sharding is read, as JAX's."""
  __slots__ = ("shape", "dtype", "_sharding", "weak_type", "vma")

  def __init__(self, shape, dtype, sharding=None, *, weak_type=False, vma=None):
    self.shape = tuple(int(d) for d in shape)
    self.dtype = dtypes.dtype(dtype)
    self.weak_type = bool(weak_type)
    # Inside shard_map: the manual axes the value it stands for varies over (as JAX's).
    self.vma = frozenset(vma or ())
    if isinstance(sharding, PartitionSpec):
      self._sharding = sharding  # resolved when read
    else:
      self._sharding = to_sharding(sharding, "ShapeDtypeStruct")
    spec = sharding if isinstance(sharding, PartitionSpec) else getattr(
        self._sharding, "spec", None)
    if spec is not None and len(spec) > len(self.shape):
      raise PartixError(f"[ShapeDtypeStruct] sharding {spec} is only valid for values of rank "
                        f"at least {len(spec)}, but was applied to a value of rank "
                        f"{len(self.shape)}")

  @property
  def sharding(self):
    s = self._sharding
    if isinstance(s, PartitionSpec):
      mesh = context_mesh()
      if mesh is None:
        raise PartixTypeError("[ShapeDtypeStruct] When specifying PartitionSpec to "
                              "`ShapeDtypeStruct`, the context mesh cannot be empty (use "
                              "jax.set_mesh, or give a NamedSharding)")
      for e in s:
        for a in (() if e is None else (e,) if isinstance(e, str) else e):
          if a not in mesh.axis_names:
            raise PartixError(f"[ShapeDtypeStruct] Resource axis: {a} of {s} is not found in "
                              f"mesh: {mesh.axis_names}")
      return to_sharding(s, "ShapeDtypeStruct")
    return s

  @classmethod
  def like(cls, x):
    """The ShapeDtypeStruct of x (an Array, traced value, numpy array, Python scalar or
    another ShapeDtypeStruct), as JAX's: a committed array's sharding, None for an uncommitted
    one; a traced value's type's sharding and, inside shard_map, the axes it varies over."""
    api = "ShapeDtypeStruct.like"
    if isinstance(x, ShapeDtypeStruct):
      return cls(x.shape, x.dtype, x._sharding, weak_type=x.weak_type, vma=x.vma)
    if isinstance(x, Array):
      a = core(x, api=api)
      if a.is_tracer():
        t = _core.type_of(a)
        sharding = NamedSharding._wrap(t.sharding) if t.sharding is not None else None
        return cls(x.shape, x.dtype, sharding, weak_type=x.weak_type,
                   vma=_core.varying_axes(a))
      return cls(x.shape, x.dtype, x.sharding if x.committed else None,
                 weak_type=x.weak_type)
    if isinstance(x, (bool, int, float)):  # Python scalars are weakly typed (bool is not)
      # The dtype the scalar takes as an array (an int beyond int32 is refused, as there).
      return cls((), dtypes.from_core(core(x, api=api).dtype), weak_type=not isinstance(x, bool))
    if isinstance(x, (np.ndarray, np.generic)):
      return cls(x.shape, dtypes.canonicalize(x.dtype, api))
    if hasattr(x, "shape") and hasattr(x, "dtype"):  # a ShapedArray or another array's type
      return cls(x.shape, x.dtype, getattr(x, "sharding", None),
                 weak_type=getattr(x, "weak_type", False))
    raise PartixTypeError(f"[{api}] cannot take the shape and dtype of {x!r} (type "
                          f"{type(x).__name__}): give an array, a Python scalar or a "
                          "ShapeDtypeStruct")

  def update(self, **kwargs):
    """A copy with some of shape, dtype, sharding and weak_type replaced."""
    unknown = set(kwargs) - {"shape", "dtype", "sharding", "weak_type"}
    if unknown:
      raise PartixError(f"[ShapeDtypeStruct.update] unknown fields {sorted(unknown)}")
    return ShapeDtypeStruct(kwargs.get("shape", self.shape), kwargs.get("dtype", self.dtype),
                            kwargs.get("sharding", self._sharding),
                            weak_type=kwargs.get("weak_type", self.weak_type))

  @property
  def ndim(self):
    return len(self.shape)

  @property
  def size(self):
    return int(np.prod(self.shape))

  def _core(self):
    return _core.abstract_array(list(self.shape), dtypes.to_core(self.dtype),
                                self.sharding._s if self.sharding is not None else None)

  def __repr__(self):
    return (f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}" +
            (f", sharding={self._sharding}" if self._sharding is not None else "") +
            (", weak_type=True" if self.weak_type else "") + ")")

  def __eq__(self, other):
    return isinstance(other, ShapeDtypeStruct) and (
        self.shape, self.dtype, self._sharding, self.weak_type) == (
        other.shape, other.dtype, other._sharding, other.weak_type)

  def __hash__(self):
    return hash((self.shape, self.dtype))


# Result trees of traces, by the id the C++ side keeps for them (a trace's out_proto).
_trees = {}
_tree_ids = itertools.count()
_lock = threading.RLock()


def _keep_tree(t):
  """A one-shot result tree: its reader pops it right after the trace (shard_map, vmap,
  control flow). A jit's trees live as long as its compiled programs: see _Traces."""
  with _lock:
    i = next(_tree_ids)
  _trees[i] = t
  return i


def _leaf_core(x, api, path=None, place=None):
  if getattr(type(x), "_partix_ref", False):  # a jax.Ref (refs.py): jit and shard_map only
    raise PartixError(f"[{api}] argument{' ' + path if path else ''} is a jax.Ref, which {api} "
                      "does not take: pass its value (ref[...]), or use the Ref under jit")
  if isinstance(x, Array):
    return x._a if type(x) is Array else core(x, api=api)  # a deleted array: core() raises
  if isinstance(x, ShapeDtypeStruct):
    return x._core()
  if isinstance(x, np.ndarray) and place is not None:  # the call's own copy, placed
    return core(x, api=api, place=place, temporary=True)
  if isinstance(x, (np.ndarray, np.generic, bool, int, float)):
    return core(x, api=api)
  if hasattr(x, "shape") and hasattr(x, "dtype") and not callable(x):  # an aval, duck-typed
    s = getattr(x, "sharding", None)
    if isinstance(s, NamedSharding) and getattr(s.mesh, "empty", False):
      s = None  # a type with no sharding (ShapedArray(shape, dtype)): placed by the program
    try:
      return ShapeDtypeStruct(x.shape, x.dtype, s)._core()
    except (PartixError, TypeError, ValueError):
      pass
  where = f" {path}" if path else ""
  raise PartixError(f"[{api}] argument{where} is {x!r} of type {type(x).__name__}, not an array; "
                    "pass arrays (or numpy arrays / Python numbers), or mark it static "
                    "with static_argnums")


_FLOAT0 = dtypes.float0


class _Float0Zeros:
  """A float0 result leaf (the cotangent of an integer value, which holds no data): it stays
  in the result tree and comes back as numpy zeros of its shape, as JAX returns float0."""
  __slots__ = ("shape",)

  def __init__(self, shape):
    self.shape = tuple(shape)


tu.register_pytree_node(_Float0Zeros, lambda z: ((), z.shape),
                        lambda shape, _: np.zeros(shape, _FLOAT0))


def _is_float0(x):
  return isinstance(x, np.ndarray) and x.dtype == _FLOAT0


def _out_leaves(out, api):
  leaves, treedef = tu.tree_flatten(out)
  if any(_is_float0(x) for x in leaves):
    out = tu.tree_unflatten(treedef, [_Float0Zeros(x.shape) if _is_float0(x) else x
                                      for x in leaves])
    leaves, treedef = tu.tree_flatten(out)
  cores = []
  for i, x in enumerate(leaves):
    if isinstance(x, Array):
      cores.append(x._a)
    else:
      try:
        cores.append(core(x, api=api))
      except PartixError:
        raise PartixError(f"[{api}] the function returned {x!r} ({type(x).__name__}) as result "
                          f"leaf {i}; results must be arrays") from None
  return cores, treedef


def with_out_sharding(api, operands, out_sharding, make):
  """An op's result with the type out_sharding says (JAX's out_sharding=): make() computes the
  op with ambiguous explicit-sharding types allowed (a contraction split in both operands), and
  the result is then typed so: under jit the partitioner places it there (reducing partial sums
  as needed), eagerly it moves there. A NamedSharding's mesh becomes the current one for it."""
  if isinstance(out_sharding, NamedSharding):
    spec, mesh = out_sharding.spec, out_sharding.mesh
  elif isinstance(out_sharding, PartitionSpec):
    spec, mesh = out_sharding, None
  else:
    raise PartixError(f"[{api}] out_sharding must be a NamedSharding or PartitionSpec, got "
                      f"{out_sharding!r:.60}")
  unreduced = sorted(getattr(spec, "unreduced", ()) or ())
  ops = [core(o, api=api) for o in operands]

  def call():
    return Array(_core.out_sharding_call(api, ops, spec._core(), unreduced, lambda: make()._a))
  if mesh is None:
    return call()
  with use_mesh(mesh):
    return call()


class Primitive:
  """An equation's primitive: its name (str() too, as JAX's)."""
  __slots__ = ("name",)

  def __init__(self, name):
    self.name = name

  def __str__(self):
    return self.name

  __repr__ = __str__

  def __eq__(self, other):
    return isinstance(other, Primitive) and other.name == self.name or other == self.name

  def __hash__(self):
    return hash(self.name)


class JaxprEqn:
  """One instruction of the program: primitive, invars and outvars (partix's value names, %3),
  params (the attributes as the program text writes them)."""
  __slots__ = ("primitive", "invars", "outvars", "params")

  def __init__(self, primitive, invars, outvars, params):
    self.primitive, self.invars, self.outvars, self.params = primitive, invars, outvars, params

  def __repr__(self):
    return f"{', '.join(self.outvars)} = {self.primitive}({', '.join(self.invars)})"


_INSTR = re.compile(r"^  (%\d+(?:, %\d+)*) = (\w+)\(([^)]*)\)(?: \{(.*?)\})? : ")


def _equations(text):
  """The top-level instructions of a program text, as equations. Constants are not equations
  (JAX writes scalar constants as literals and arrays as constvars); a region's instructions
  belong to its loop or branch."""
  out = []
  for line in text.splitlines():
    m = _INSTR.match(line)
    if m is None or m.group(2) == "constant":
      continue
    params = {}
    for item in re.findall(r"(\w+)=((?:<[^>]*>|\[[^\]]*\]|[^,])*)", m.group(4) or ""):
      params[item[0]] = item[1].strip()
    out.append(JaxprEqn(Primitive(m.group(2)), [v.strip() for v in m.group(3).split(",") if
                                               v.strip()], m.group(1).split(", "), params))
  return out


class Jaxpr:
  """make_jaxpr's result: str() is partix's program text of the traced function (global shapes,
  before partitioning); in_avals/out_avals are ShapeDtypeStructs; eqns its top-level
  instructions (JaxprEqn)."""

  def __init__(self, text, in_avals, out_avals, out_tree, program=None):
    self.text, self.in_avals, self.out_avals, self.out_tree = text, in_avals, out_avals, out_tree
    self._program = program

  @property
  def jaxpr(self):
    return self

  @property
  def consts(self):
    """The arrays the traced function captured (the program's last parameters)."""
    return [wrap(c) for c in self._program.captures] if self._program is not None else []

  @property
  def eqns(self):
    return _equations(self.text)

  def pretty_print(self, **_):
    return self.text

  def __str__(self):
    return self.text

  def __repr__(self):
    return self.text


ClosedJaxpr = Jaxpr  # make_jaxpr's result is both (its .jaxpr is itself, .consts its captures)


def eval_jaxpr(jaxpr, consts, *args):
  """jax.core.eval_jaxpr: the results (a list of leaves) of a make_jaxpr program on args (its
  argument leaves) and consts (its captured arrays)."""
  program = getattr(jaxpr, "_program", None)
  if program is None:
    raise PartixError(f"[eval_jaxpr] {type(jaxpr).__name__} is not a program from make_jaxpr")
  cores = [_leaf_core(x, "eval_jaxpr") for x in list(args) + list(consts)]
  return [wrap(o) for o in program.eval(cores)]


def make_jaxpr(fun, static_argnums=(), axis_env=None, return_shape=False,
               abstracted_axes=None):
  """jax.make_jaxpr: make_jaxpr(fun)(*args) traces fun on args (arrays or ShapeDtypeStructs;
  arguments in static_argnums are passed as they are) into partix's program and returns it
  (str() is its text). With return_shape, also fun's results as ShapeDtypeStructs."""
  if not callable(fun):
    raise PartixError(f"[make_jaxpr] {fun!r} is not callable")
  static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

  @functools.wraps(fun)
  def make(*args, **kwargs):
    n = len(args)
    spos = {a % n for a in static if -n <= a < n}
    dyn = tuple(a for i, a in enumerate(args) if i not in spos)
    leaves, tree = tu.tree_flatten((dyn, kwargs))
    cores = [_leaf_core(x, "make_jaxpr", p)
             for x, p in zip(leaves, tu.treedef_paths(tree, "args"))]
    got = {}

    def traced(tracers):
      tdyn, tkw = tu.tree_unflatten(tree, [wrap(t) for t in tracers])
      it = iter(tdyn)
      full = [args[i] if i in spos else next(it) for i in range(n)]
      outs, got["tree"] = _out_leaves(fun(*full, **{**kwargs, **tkw}), "make_jaxpr")
      got["avals"] = [ShapeDtypeStruct(o.shape, Array(o).dtype) for o in outs]
      return outs
    program = _core.trace_program(cores, traced)
    in_avals = [ShapeDtypeStruct(c.shape, Array(c).dtype) for c in cores]
    j = Jaxpr(program.text, in_avals, got["avals"], got["tree"], program)
    if return_shape:
      return j, tu.tree_unflatten(got["tree"], got["avals"])
    return j
  return make
