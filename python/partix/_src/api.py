"""jit, grad, value_and_grad, eval_shape, device_put and friends: Python callables over pytrees,
traced by the C++ tracer (each call back into Python traces the function once per signature)."""
import contextlib
import copy
import functools
import inspect
import itertools
import logging
import re
import threading
import weakref

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src import eager_values
from partix._src import transfer_guard
from partix._src import tree_util as tu
from partix._src.core import (Array, PartixError, PartixTypeError, core, host_block, to_numpy,
                              wrap)
from partix._src.sharding import (AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec, Device, _mesh_contexts,
                                  _on_devices, concrete_context_mesh, concrete_sharding,
                                  context_mesh, get_abstract_mesh, get_mesh, legacy_mesh_only,
                                  set_mesh, to_sharding, use_mesh)
from partix._src.tracing import (ShapeDtypeStruct, _keep_tree, _leaf_core, _lock, _out_leaves,
                                 _tree_ids, _trees, make_jaxpr)
from partix._src.tracing import with_out_sharding as _with_out_sharding
from partix._src.checkpoint_policies import policy_args


# Jit cache events, for tests of the caches (partix.test_util's counters): [dispatch misses,
# traces]. A dispatch miss is a call that found no ready program for its signature (it traced,
# or its argument signature was new to the all-Array fast path); a trace runs the function.
# Counted without a lock, as JAX's counters are: exact when one thread calls jitted functions.
_jit_events = [0, 0]

# jax.explain_cache_misses / jax.config.update("jax_explain_cache_misses", True): a jit call
# that traces again logs (a WARNING of logger "partix.jit") how its argument types differ from
# the nearest earlier signature of the same jit.
_explain = [False]

# Options a trace depends on, part of every jit signature (JAX's include_in_jit_key flags):
# one tuple (jax_remove_size_one_mesh_axis_from_type, jax_auto_pcast), replaced on a change.
_trace_options = [(False, True)]
_log = logging.getLogger("partix.jit")


@contextlib.contextmanager
def explain_cache_misses(enabled=True):
  previous = _explain[0]
  _explain[0] = bool(enabled)
  try:
    yield
  finally:
    _explain[0] = previous


def _type_text(c):
  """An argument's type as JAX's miss explanations print it: f32[8]({Auto: ('x',)}), one
  {...} per dimension with the Auto axes it is split over ({} unsplit), Explicit axes as
  f32[8@x]."""
  dims, parts = list(c.shape), []
  spec, types = (), {}
  if c.committed() and not c.is_abstract():
    sh = NamedSharding._interned(c.sharding())
    spec, types = tuple(sh.spec), dict(zip(sh.mesh.axis_names, sh.mesh.axis_types))
  explicit = False
  for d, n in enumerate(dims):
    entry = spec[d] if d < len(spec) else None
    axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    shown = [a for a in axes if str(types.get(a)) not in ("Explicit", "AxisType.Explicit")]
    if len(shown) < len(axes):
      explicit = True
      dims[d] = f"{n}@{','.join(a for a in axes if a not in shown)}"
    parts.append("{Auto: " + repr(tuple(shown)) + "}" if shown else "{}")
  text = f"{c.dtype}[{','.join(str(n) for n in dims)}]"
  return text if explicit and all(p == "{}" for p in parts) else text + f"({', '.join(parts)})"


def _explain_miss(name, sig, cores):
  """Logs why this call traced again: the arguments whose types differ from the nearest earlier
  signature (fewest differences); then remembers this one."""
  now = [_type_text(c) for c in cores]
  if _explain[0] and sig.seen:
    before = min(sig.seen, key=lambda b: sum(x != y for x, y in zip(now, b)))
    paths = sig.paths
    diffs = [f"  * at {paths[i] if i < len(paths) else f'leaf {i}'}, now {x} and before {y}"
             for i, (x, y) in enumerate(zip(now, before)) if x != y]
    if diffs:
      _log.warning("TRACING CACHE MISS for %s: different input types:\n%s", name,
                   "\n".join(diffs))
    else:
      _log.warning("TRACING CACHE MISS for %s: the same input types; another context (the "
                   "current mesh, the default device or the argument tree) differs", name)
  sig.seen.append(now)

# As JAX's, jit wrappers of one function with equal options share their traces and programs
# (`jit(f)(x)` in a loop traces f once): per function (a weak key, so the caches die with it),
# per options, the caches. They hold nothing of the function itself.
_shared_caches = weakref.WeakKeyDictionary()


def _frozen(x):
  """Options as a hashable key: lists and dicts (pytree prefixes of shardings) become tagged
  tuples, so [a] and (a,) stay distinct prefixes."""
  if isinstance(x, list):
    return ("list",) + tuple(_frozen(v) for v in x)
  if isinstance(x, tuple):
    return ("tuple",) + tuple(_frozen(v) for v in x)
  if isinstance(x, dict):
    return ("dict",) + tuple((k, _frozen(v)) for k, v in sorted(x.items(), key=repr))
  return x


class _Traces:
  """What one jit keeps of each of its traces, by the tree id its C++ cache hands back on
  every call: the result tree, the results' shapes (to check out_shardings' ranks) and
  (shape, dtype). Owned by the Jitted object and freed with it, as its C++ programs are; it
  holds nothing that refers back to the jit, so no reference cycle keeps either alive."""
  __slots__ = ("trees", "shapes", "avals")

  def __init__(self):
    self.trees, self.shapes, self.avals = {}, {}, {}

  def keep(self, treedef, cores):
    with _lock:
      i = next(_tree_ids)
    self.trees[i] = treedef
    self.shapes[i] = [tuple(c.shape) for c in cores]
    self.avals[i] = [(tuple(c.shape), c.dtype) for c in cores]
    return i


def _norm_argnums(nums, n=None, api="jit", what="static_argnums"):
  if nums is None:
    return ()
  if isinstance(nums, int):
    nums = (nums,)
  out = []
  for a in nums:
    if not isinstance(a, int):
      raise PartixError(f"[{api}] {what} entry {a!r} is not an int")
    if n is not None:
      if a < -n or a >= n:
        raise PartixError(f"[{api}] {what} names argument {a} but the function takes {n}")
      a %= n
    out.append(a)
  return tuple(out)


def _expand_prefix(prefix, treedef, api, what):
  """A per-leaf list from a pytree prefix of treedef (a single sharding applies to all)."""
  if prefix is None:
    return [None] * treedef.num_leaves
  out = []

  def walk(p, t):
    if p is None or isinstance(p, (NamedSharding, PartitionSpec, Device)):
      out.extend([p] * t.num_leaves)
      return
    if t is tu._LEAF or tu.treedef_is_leaf(tu.tree_structure(p)):
      if tu.treedef_is_leaf(tu.tree_structure(p)):
        raise PartixError(f"[{api}] {what}: {p!r} is not a sharding (NamedSharding, "
                          "PartitionSpec, Device or None)")
      raise PartixError(f"[{api}] {what}: {p!r} stands where the arguments have one array")
    leaves_p, tp = tu.tree_flatten(p, is_leaf=lambda x: x is None or isinstance(
        x, (NamedSharding, PartitionSpec, Device)))
    if tp.kind != t.kind or len(tp.children) != len(t.children) or (
        tp.kind is dict and tp.data != t.data):
      raise PartixError(f"[{api}] {what} {p!r} does not match the structure {t}")
    kids = [tu._build(c, iter(tu.tree_leaves(x, is_leaf=lambda y: y is None or isinstance(
        y, (NamedSharding, PartitionSpec, Device))))) for c, x in zip(tp.children, _children(p))]
    for kp, kt in zip(kids, t.children):
      walk(kp, kt)
  walk(prefix, treedef)
  return out


def _children(p):
  if isinstance(p, dict):
    return [p[k] for k in sorted(p)]
  if isinstance(p, (list, tuple)):
    return list(p)
  return list(tu.flatten_one_level(p)[0])  # a registered node: its children, in tree order


class Compiled:
  """jit(f).lower(...).compile(): the compiled program; callable with the same arguments."""

  def __init__(self, lowered, device_assignment=None, context=None):
    self._lowered = lowered
    # compile(device_assignment=...) of a program lowered on an AbstractMesh: its devices, and
    # the mesh in context it was lowered for them in (it runs in that context).
    self._device_assignment = device_assignment
    self._context = context

  def as_text(self):
    """The per-device program partix runs, with the collectives partitioning inserted."""
    return self._lowered._l.as_text()

  def cost_analysis(self):
    return self._lowered.cost_analysis()

  def memory_analysis(self):
    return self._lowered.memory_analysis()

  @property
  def input_shardings(self):
    """As JAX's: (the positional arguments' shardings, the keyword arguments'), each in its
    argument's tree (static arguments left out)."""
    l = self._lowered
    return tu.tree_unflatten(l._sig.treedef, l.input_shardings)

  @property
  def output_shardings(self):
    return self._lowered.output_shardings

  in_tree = property(lambda self: self._lowered.in_tree)
  in_avals = property(lambda self: self._lowered.in_avals)
  args_info = property(lambda self: self._lowered.args_info)
  donate_argnums = property(lambda self: self._lowered.donate_argnums)

  @property
  def out_info(self):
    """The results as ShapeDtypeStructs, with the shardings the program gives them."""
    l = self._lowered
    shardings = [NamedSharding._wrap(s) for s in l._l.out_shardings()]
    return tu.tree_unflatten(l._out_tree, [ShapeDtypeStruct(s, dtypes.from_core(d), sh)
                                           for (s, d), sh in zip(l._out_avals or [], shardings)])

  def runtime_executable(self):
    """The compiled program partix runs (its lowered form)."""
    return self._lowered._l

  def __call__(self, *args, **kwargs):
    if self._context is None:
      return self._call(args, kwargs)
    with set_mesh(self._context):
      return self._call(args, kwargs)

  def _call(self, args, kwargs):
    # As JAX: a compiled program runs only on arguments of the signature it was lowered for;
    # it takes the dynamic arguments only (the static ones are part of it).
    l = self._lowered
    n, static_args, static_kw = l._statics
    if static_args or static_kw:
      it = iter(args)
      try:
        args = tuple(static_args[i] if i in static_args else next(it) for i in range(n))
      except StopIteration:
        raise PartixError(f"[Compiled] takes the {n - len(static_args)} dynamic arguments it "
                          f"was lowered with, got {len(args)}") from None
      kwargs = {**kwargs, **static_kw}
    sig, cores, _ = l._jitted._prepare(args, kwargs, place=True)
    got = [(tuple(c.shape), c.dtype) for c in cores]
    if sig is not l._sig or got != l._avals:
      raise PartixError(f"[Compiled] the arguments {got} (tree {sig.treedef}) differ from those "
                        f"it was compiled for {l._avals} (tree {l._sig.treedef})")
    if self._device_assignment is not None:
      want = sorted(d.id for d in self._device_assignment)
      for i, c in enumerate(cores):
        if c.committed() and not c.is_abstract():
          have = sorted(d.id for d in c.sharding().mesh.devices)
          if have != want:
            where = sig.paths[i] if i < len(sig.paths) else f"leaf {i}"
            raise PartixError(f"[Compiled] argument {where} is on device ids {have}, but the "
                              f"program was compiled for device_assignment {want}")
    return l._jitted(*args, **kwargs)


class MemoryAnalysis:
  """Per-device bytes (lists, one entry per mesh device) and JAX's attribute names (the largest
  over devices)."""

  def __init__(self, d):
    self.argument_bytes = list(d["argument_bytes"])
    self.output_bytes = list(d["output_bytes"])
    self.peak_temp_bytes = list(d["peak_temp_bytes"])
    self.peak_bytes = list(d["peak_bytes"])
    m = lambda v: max(v) if v else 0
    self.argument_size_in_bytes = m(self.argument_bytes)
    self.output_size_in_bytes = m(self.output_bytes)
    self.temp_size_in_bytes = m(self.peak_temp_bytes)
    self.peak_memory_in_bytes = m(self.peak_bytes)
    self.alias_size_in_bytes = 0
    self.generated_code_size_in_bytes = 0

  def __repr__(self):
    return (f"MemoryAnalysis(argument_bytes={self.argument_bytes}, output_bytes="
            f"{self.output_bytes}, peak_temp_bytes={self.peak_temp_bytes}, "
            f"peak_bytes={self.peak_bytes})")


class ArgInfo:
  """One argument leaf of a lowered program (jax.stages.ArgInfo): its type and whether it is
  donated."""
  __slots__ = ("_aval", "donated")

  def __init__(self, aval, donated):
    self._aval, self.donated = aval, bool(donated)

  shape = property(lambda self: self._aval.shape)
  dtype = property(lambda self: self._aval.dtype)

  def __repr__(self):
    return f"ArgInfo({self._aval}, donated={self.donated})"


class HloComputation:
  """A lowered program as XLA HLO text (Lowered.compiler_ir(dialect='hlo')): the global
  program as traced, with the arguments' and results' shardings."""

  def __init__(self, lowered):
    self._l = lowered

  def as_hlo_text(self, print_large_constants=False):
    """The HLO module's text; constants of more than 1000 elements print as {...} (as XLA
    prints them) unless print_large_constants."""
    return self._l.hlo_text(bool(print_large_constants))

  def __str__(self):
    return self.as_hlo_text()

  def __repr__(self):
    return "HloComputation(...)"


class Lowered:
  """jit(f).lower(...): as_text() is the traced program (global shapes, the arguments'
  shardings and the constraints the user wrote, before partitioning), as JAX's lowered text;
  compile().as_text() the per-device program with its collectives; costs and memory."""

  def __init__(self, l, out_tree, jitted, sig=None, avals=None):
    self._l, self._out_tree, self._jitted = l, out_tree, jitted
    self._sig, self._avals = sig, avals
    self._out_avals = None
    self._types = []  # the arguments' _core types (jit(f).lower sets them)
    self._statics = (0, {}, {})  # (argument count, static positional, static keyword)
    self._call = ((), {})  # the arguments it was lowered for (compile(device_assignment=))
    self._platforms = None  # lower(lowering_platforms=...): recorded; partix's IR is the same
    self._abstract_context = None  # the AbstractMesh in context when traced, if any
    self._trace_context = None  # get_abstract_mesh() when traced

  def _mesh(self):
    """The core mesh the program runs on (None for a program with no arguments or results)."""
    for s in list(self._l.in_shardings()) + list(self._l.out_shardings()):
      return s.mesh
    return None

  def _on_abstract_mesh(self):
    m = self._mesh()
    return m is not None and m.is_abstract()

  def as_text(self, dialect=None):
    # partix's own program text (not StableHLO), after one header line with the number of
    # devices the program is partitioned over, as JAX's module attributes give it
    # (mhlo.num_partitions). The header is written here; the program text is the C++ side's.
    m = self._mesh()
    n = m.size if m is not None else 1
    return f"# num_partitions = {n}, num_replicas = 1\n" + self._l.global_text()

  def global_text(self):
    return self._l.global_text()

  def fusions(self):
    return self._l.fusions()

  def compile(self, compiler_options=None, *, device_assignment=None):
    """The compiled program. A program lowered on an AbstractMesh only (no devices) compiles
    for the devices of device_assignment (as many as the mesh has, in order); one lowered on
    devices takes only those devices there. compiler_options are XLA's, which partix's
    compiler has no use for."""
    api = "Lowered.compile"
    m = self._mesh()
    if device_assignment is None:
      if self._on_abstract_mesh():
        raise PartixError(f"[{api}] device_assignment cannot be `None` during compilation. "
                          "Please pass a tuple of devices to `.compile(device_assignment=)`: "
                          f"the program was lowered on {Mesh._wrap(m)}, which has no devices")
      return Compiled(self)
    devs = _device_list(device_assignment, api)
    if not self._on_abstract_mesh():
      have = [d.id for d in m.devices] if m is not None else [_core.default_device().id]
      if [d.id for d in devs] != have:
        platform = lambda ds: (ds[0].platform if ds else "cpu").upper()  # noqa: E731
        raise PartixError(
            f"[{api}] device_assignment passed to `.compile` must match the device_assignment "
            f"calculated from array shardings and out_shardings. Got device ids passed to "
            f"compile {[d.id for d in devs]} on platform {platform(devs)} and devices ids "
            f"calculated from array shardings and out_shardings {have} on platform "
            f"{platform(list(m.devices) if m is not None else [])}")
      return Compiled(self)
    if m.size != len(devs):
      s = NamedSharding._wrap(next(iter(list(self._l.in_shardings()) +
                                        list(self._l.out_shardings()))))
      raise PartixError(f"[{api}] The size of abstract mesh {m.size} in {s} must match the "
                        f"length of device assignment: {len(devs)}")
    # Lowered again with the abstract meshes laid over these devices, in the context it was
    # traced in (its abstract mesh, now on these devices), so the trace recorded then is
    # replayed (see Jitted._trace_fn).
    args, kwargs = self._call
    ctx = self._trace_context
    if ctx is not None and not ctx.empty and ctx.size == len(devs):
      context = _on_devices(ctx, devs)
    else:
      context = Mesh(np.empty((), dtype=object), ())  # JAX's empty mesh: no mesh in context
    with set_mesh(context):
      concrete = self._jitted._lower(args, kwargs, device_assignment=devs)
    concrete._platforms = self._platforms
    return Compiled(concrete, tuple(devs), context)

  def cost_analysis(self):
    return dict(self._l.cost_analysis())

  def memory_analysis(self):
    return MemoryAnalysis(self._l.memory_analysis())

  def warnings(self):
    return list(self._l.warnings())

  @property
  def input_shardings(self):
    return [NamedSharding._wrap(s) for s in self._l.in_shardings()]

  @property
  def in_tree(self):
    """The tree of (positional arguments, keyword arguments), static ones left out."""
    return self._sig.treedef

  @property
  def in_avals(self):
    context = getattr(self, "_context", None) or [None] * len(self._types)
    return tu.tree_unflatten(self._sig.treedef, [
        ShapedArray(t) if m is None else ShapedArray(
            tuple(t.shape), dtypes.from_core(t.dtype),
            sharding=NamedSharding(m.abstract_mesh, PartitionSpec()))
        for t, m in zip(self._types, context)])

  def _donated_positions(self):
    n = self._statics[0]
    return sorted({a % n for a in self._jitted._donate if -n <= a < n}) if n else []

  @property
  def donate_argnums(self):
    return tuple(self._donated_positions())

  @property
  def args_info(self):
    """Per argument leaf: its type (shape, dtype) and whether it is donated."""
    n, static_args, _ = self._statics
    dyn_pos = [i for i in range(n) if i not in static_args]
    donate = set(self._donated_positions())
    donated, first = set(), 0
    for j, c in enumerate(self._sig.counts):  # one group per positional, then keyword argument
      if j < len(dyn_pos) and dyn_pos[j] in donate:
        donated.update(range(first, first + c))
      first += c
    return tu.tree_unflatten(self._sig.treedef, [
        ArgInfo(ShapedArray(t), k in donated) for k, t in enumerate(self._types)])

  @property
  def out_info(self):
    """The results as ShapeDtypeStructs; before compiling their shardings are not fixed
    (None), as JAX's lowered out_info."""
    return tu.tree_unflatten(self._out_tree, [ShapeDtypeStruct(s, dtypes.from_core(d))
                                              for s, d in self._out_avals or []])

  def compiler_ir(self, dialect=None):
    """The lowered program: dialect='hlo' gives it as XLA HLO text (an object with
    as_hlo_text(), as JAX's XlaComputation); None or 'partix' partix's own IR text. partix
    does not write StableHLO."""
    if dialect == "hlo":
      self._l.hlo_text(False)  # an op without an HLO form fails here, naming it
      return HloComputation(self._l)
    if dialect not in (None, "partix"):
      raise PartixError(f"[Lowered.compiler_ir] dialect={dialect!r}: partix writes its own "
                        "IR (dialect=None) or XLA HLO text (dialect='hlo'), not StableHLO")
    return self._l.global_text()

  @property
  def output_shardings(self):
    outs = [NamedSharding._wrap(s) for s in self._l.out_shardings()]
    return tu.tree_unflatten(self._out_tree, outs) if self._out_tree is not None else outs

  def __repr__(self):
    return "Lowered(...)"


class Traced:
  """jit(f).trace(...): out_info (the results as ShapeDtypeStructs), jaxpr (the traced program,
  as make_jaxpr gives it: global shapes, before partitioning) and lower()."""

  def __init__(self, lowered, jaxpr=None):
    self._lowered = lowered
    self._jaxpr = jaxpr

  def lower(self, *, lowering_platforms=None, _private_parameters=None):
    """The lowered program. One traced on AbstractMeshes only (no devices in its arguments,
    shardings or context) needs lowering_platforms, as in JAX, unless an AbstractMesh is in
    context (use_abstract_mesh: it stands for partix's devices). partix's program is the same
    for every platform: the names are kept, not used."""
    l = self._lowered
    if lowering_platforms is not None:
      if isinstance(lowering_platforms, str) or not isinstance(
          lowering_platforms, (tuple, list)) or not lowering_platforms or not all(
          isinstance(p, str) for p in lowering_platforms):
        raise PartixError(f"[Traced.lower] lowering_platforms={lowering_platforms!r} must be a "
                          "non-empty tuple of platform names, e.g. ('cpu',)")
      l = copy.copy(l)
      l._platforms = tuple(lowering_platforms)
    elif l._on_abstract_mesh() and l._abstract_context is None:
      raise PartixError(
          "[Traced.lower] Passing lowering_platforms via jax.export or "
          "jit(f).trace(*args).lower(lowering_platforms=...) is required when only AbstractMesh "
          f"exists in a jitted computation. Got context mesh: {l._trace_context} ("
          f"{self._lowered._jitted._name} was traced on {Mesh._wrap(l._mesh())}, with no devices "
          "in its arguments, shardings or context)")
    return l

  @property
  def jaxpr(self):
    return self._jaxpr()

  @property
  def in_avals(self):
    """The arguments' types: (positional, keyword), as the call's tree."""
    return self._lowered.in_avals

  @property
  def out_info(self):
    l = self._lowered
    shardings = [NamedSharding._wrap(s) for s in l._l.out_shardings()]
    avals = l._out_avals or []
    return tu.tree_unflatten(l._out_tree, [ShapeDtypeStruct(s, dtypes.from_core(d), sh)
                                           for (s, d), sh in zip(avals, shardings)])


_disabled = threading.local()


def _jit_disabled():
  return getattr(_disabled, "depth", 0) > 0


class disable_jit:
  """jax.disable_jit: inside the context (this thread), jit-decorated functions run their
  Python op by op (eagerly) instead of being traced and compiled, so prints and breakpoints
  see values. Also usable as disable_jit(False) to leave it as it is."""

  def __init__(self, disable=True):
    self._disable = bool(disable)

  def __enter__(self):
    if self._disable:
      _disabled.depth = getattr(_disabled, "depth", 0) + 1
    return self

  def __exit__(self, *exc):
    if self._disable:
      _disabled.depth -= 1


def _moved_onto(device, tree):
  """jit(device=d)'s arguments: as JAX, an array committed to other devices is moved onto d
  (an explicit transfer); everything else goes there as uncommitted data does."""
  def move(x):
    if isinstance(x, Array) and x.committed and not x._a.is_tracer() and (
        set(x.sharding.device_set) != {device}):
      return device_put(x, device)
    return x
  return tu.tree_map(move, tree)


# Jitted._call_arrays's answer when the general dispatch path must run instead.
_GENERAL_PATH = object()

# A shard_map instruction in a program's text (at any depth of its regions).
_SHARD_MAP = re.compile(r"= shard_map\(")


def _abstract_sharding(s):
  return isinstance(s, NamedSharding) and s._c.mesh.is_abstract()


def _onto(s, target):
  """s, a sharding, on the mesh `target` stands for when s is on an AbstractMesh: one of the
  same shape (its axis names, sizes and types) laid over target's devices; one of the same
  axis sizes under other names renamed onto target's axes by position (partix's program has
  one mesh; both place every block on the same device); else as it is."""
  if target is None or not _abstract_sharding(s) or s.mesh == target:
    return s
  am = s.mesh
  if am.shape_tuple == target.shape_tuple:
    mesh = target if isinstance(target, AbstractMesh) else _on_devices(am, target)
    return NamedSharding(mesh, s.spec, memory_kind=s._kind)
  if am.axis_sizes == target.axis_sizes:
    names = dict(zip(am.axis_names, target.axis_names))
    rename = lambda e: e if e is None else names[e] if isinstance(e, str) else tuple(  # noqa
        names[n] for n in e)
    spec = PartitionSpec(*[rename(e) for e in s.spec],
                         unreduced={names[n] for n in s.spec.unreduced} or None)
    return NamedSharding(target, spec, memory_kind=s._kind)
  if not isinstance(target, AbstractMesh) and am.size == target.size:
    return NamedSharding(_on_devices(am, target), s.spec, memory_kind=s._kind)
  return s


def _device_list(devs, api):
  if isinstance(devs, Device):
    devs = (devs,)
  try:
    devs = list(devs)
  except TypeError:
    devs = [devs]
  if not devs or not all(isinstance(d, Device) for d in devs):
    raise PartixError(f"[{api}] device_assignment={devs!r} must be a non-empty tuple of partix "
                      "Devices (jax.devices())")
  if len({d.id for d in devs}) != len(devs):
    raise PartixError(f"[{api}] device_assignment {[d.id for d in devs]} names a device twice")
  return devs


# The meshes of the jits this thread is tracing, innermost last: each a function giving the
# concrete mesh its program runs on (or None), for shard_map(mesh=AbstractMesh) inside.
_tracing = threading.local()


def _trace_meshes():
  stack = getattr(_tracing, "meshes", None)
  if stack is None:
    stack = _tracing.meshes = []
  return stack


def jit_trace_mesh():
  """The concrete mesh the innermost jit being traced on this thread runs on, as far as its
  arguments and shardings say (None if they name none)."""
  stack = _trace_meshes()
  f = stack[-1] if stack else None
  return f() if f is not None else None


def _abstract_leaf_key(x, c):
  """An argument leaf's part of an abstract signature, as JAX's trace key sees it: shape,
  dtype, weak type and, for an array committed to a sharding (or a ShapeDtypeStruct given
  one), that sharding on its mesh's AbstractMesh (the devices left out). Host data that the
  call places on in_shardings counts as unplaced."""
  s = None
  if isinstance(x, Array):
    if not c.is_tracer() and c.committed():
      s = c.sharding()
  elif isinstance(x, ShapeDtypeStruct) and x._sharding is not None:
    s = c.sharding()
  placed = None
  if s is not None:
    placed = (Mesh._wrap(s.mesh).abstract_mesh, s.spec.to_string(), tuple(sorted(s.unreduced)))
  weak = bool(getattr(x, "weak_type", isinstance(x, (int, float, complex)) and
                      not isinstance(x, bool)))
  return (tuple(c.shape), c.dtype, weak, placed)


def _program_mesh(target, sig, cores):
  if target is not None and not isinstance(target, AbstractMesh):
    return target
  for s in sig.places:
    if s is not None and s.mesh.axis_names:
      return Mesh._wrap(s.mesh)
  for c in cores:
    if not c.is_tracer() and not c.is_abstract() and not c.is_deleted() and c.committed():
      m = c.sharding().mesh
      if m.axis_names and not m.is_abstract():
        return Mesh._wrap(m)
  return None


class _NoRefRules:
  """How a jit call treats jax.Refs until refs.py, which builds on this module, installs its
  rules (set_ref_rules): no Ref is known, the call is plain."""

  @staticmethod
  def inline_jit(jitted, args, kwargs):
    return jitted._inline(args, kwargs)

  @staticmethod
  def involved(jitted, args, kwargs):
    return False

  @staticmethod
  def catching(jitted, args, kwargs, call):
    return call(args, kwargs)


_ref_rules = _NoRefRules


def set_ref_rules(rules):
  """Installs refs.py's rules for jit calls (inline_jit, involved, call_jit, catching)."""
  global _ref_rules
  _ref_rules = rules


class Jitted:
  """jit(f): traces f once per signature (tree structure, shapes, dtypes, shardings, static
  arguments), compiles it for the arguments' mesh and runs it."""

  def __init__(self, fun, in_shardings, out_shardings, static_argnums, static_argnames,
               donate_argnums, donate_argnames, name, api="jit"):
    if not callable(fun):
      raise PartixError(f"[{api}] {fun!r} is not callable")
    self._api = api
    self._fun = fun
    functools.update_wrapper(self, fun, updated=())
    try:
      self._sig = inspect.signature(fun)
    except (TypeError, ValueError):
      self._sig = None
    self._static = _norm_argnums(static_argnums, api="jit")
    self._static_names = (static_argnames,) if isinstance(static_argnames, str) else tuple(
        static_argnames or ())
    self._donate = _norm_argnums(donate_argnums, api="jit", what="donate_argnums")
    self._donate_names = (donate_argnames,) if isinstance(donate_argnames, str) else tuple(
        donate_argnames or ())
    self._static, self._static_names = self._resolve(
        self._static, self._static_names, "static_argnums",
        both=static_argnums is not None and static_argnames is not None)
    self._donate, self._donate_names = self._resolve(
        self._donate, self._donate_names, "donate_argnums",
        both=donate_argnums is not None and donate_argnames is not None)
    self._in_shardings = in_shardings
    self._out_shardings = out_shardings
    self._device = None  # jit(device=d): arguments committed elsewhere move onto d first
    self._placed_by_argument = False  # device= or backend= given
    self._name = name or getattr(fun, "__name__", api)
    self._states = {}
    self._fast_sigs = {}  # by argument count: the signatures of the all-Array fast path
    self._traces = _Traces()
    # Programs recorded per abstract signature, to replay for other devices (see _trace_fn).
    self._replays = {}
    self._check_sharding_arg(in_shardings, "in_shardings")
    self._check_sharding_arg(out_shardings, "out_shardings")
    # in_shardings / out_shardings on an AbstractMesh: they stand for a mesh of devices that
    # each call finds (its arguments', or the one in context), part of the signature.
    self._abstract_io = any(_abstract_sharding(x) for x in tu.tree_leaves(
        (in_shardings, out_shardings), is_leaf=lambda y: isinstance(y, NamedSharding)))

  def _resolve(self, nums, names, what, both=False):
    """As JAX: given one of argnums and argnames, the other is inferred through the signature,
    so an argument is static (or donated) whether it is passed by position or by keyword;
    given both, each is respected as written."""
    if self._sig is None:
      return nums, names
    params = list(self._sig.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
      return nums, names
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    out = []
    for a in nums:
      if a < -len(pos) or a >= len(pos):
        raise PartixError(f"[jit] {what} names argument {a} but the function takes "
                          f"{len(pos)} positional arguments")
      out.append(a % len(pos))
    if both:
      return tuple(sorted(out)), tuple(names)
    names = tuple(names) + tuple(pos[a] for a in out if pos[a] not in names and
                                 params[a].kind is not params[a].POSITIONAL_ONLY)
    out += [pos.index(nm) for nm in names if nm in pos and pos.index(nm) not in out]
    return tuple(sorted(out)), names

  @staticmethod
  def _check_sharding_arg(s, what):
    for x in tu.tree_leaves(s, is_leaf=lambda y: isinstance(y, (NamedSharding, PartitionSpec))):
      if x is not None and not isinstance(x, (NamedSharding, PartitionSpec, Device)):
        raise PartixError(f"[jit] {what} entry {x!r} is not a sharding (NamedSharding, "
                          "PartitionSpec or None)")
      if isinstance(x, NamedSharding) and getattr(x.mesh, "empty", False):
        raise PartixError(f"[jit] {what} got an empty NamedSharding: {x!r} has a mesh with no "
                          "devices; give a mesh of devices (jax.make_mesh) or leave it None")
      if isinstance(x, PartitionSpec) and any(e is PartitionSpec.UNCONSTRAINED for e in x) or (
          isinstance(x, NamedSharding) and x._free):
        raise PartixError(f"[jit] Unconstrained dims are not allowed when passed to jit's "
                          f"{what}: {x!r} (P.UNCONSTRAINED is for with_sharding_constraint)")

  def _split(self, args, kwargs):
    n = len(args)
    static_pos = {a % n for a in self._static if -n <= a < n}
    statics = tuple((i, args[i]) for i in sorted(static_pos))
    dyn = tuple(a for i, a in enumerate(args) if i not in static_pos)
    skw = tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_names))
    dkw = {k: v for k, v in kwargs.items() if k not in self._static_names}
    try:
      hash(statics), hash(skw)
    except TypeError as e:
      raise PartixError(f"[jit] static arguments must be hashable: {e}") from None
    return dyn, dkw, statics, skw, static_pos

  def _state(self, dyn, dkw, statics, skw, static_pos, n_args, target=None, leaves=None,
             treedef=None):
    if leaves is None:
      leaves, treedef = tu.tree_flatten((dyn, dkw))
    # The current mesh is part of the signature: PartitionSpecs (in shardings, constraints,
    # creation functions) resolve against it while tracing. So is the mesh that in_shardings /
    # out_shardings on an AbstractMesh stand for (`target`, see _abstract_target).
    key = (treedef, statics, skw, context_mesh(), _trace_options[0],
           target if self._abstract_io else None)
    st = self._states.get(key)
    if st is None:
      with _lock:  # two threads calling at once build one state (and trace once)
        st = self._states.get(key)
        if st is None:
          st = self._make_state(treedef, dyn, dkw, static_pos, n_args, target)
          self._states[key] = st
    return st, leaves

  def _make_state(self, treedef, dyn, dkw, static_pos, n_args, target=None):
    dyn_tree = tu.tree_structure(dyn)
    kw_tree = tu.tree_structure(dkw)
    api = self._api
    if api == "jit" and legacy_mesh_only() and any(
        isinstance(x, PartitionSpec) for x in tu.tree_leaves(
            (self._in_shardings, self._out_shardings),
            is_leaf=lambda y: isinstance(y, (NamedSharding, PartitionSpec)))):
      raise PartixError(f"[{self._name}] jit requires a non-empty mesh in context for the "
                        "PartitionSpecs of in_shardings/out_shardings: as in JAX 0.10, `with "
                        "mesh:` does not set the mesh jit reads; use `with jax.set_mesh(mesh):` "
                        "or give NamedShardings (experimental.pjit reads `with mesh:`)")
    ins = self._in_shardings
    if ins is None:
      in_list = []
    elif isinstance(ins, (NamedSharding, PartitionSpec)):
      in_list = [_onto(to_sharding(ins, api), target)._s]
    else:
      if not isinstance(ins, (tuple, list)):
        ins = (ins,)
      if len(ins) != len(dyn):
        raise PartixError(f"[{api}] in_shardings has {len(ins)} entries for {len(dyn)} "
                          "positional (non-static) arguments")
      per = _expand_prefix(tuple(ins), dyn_tree, api, "in_shardings")
      per += [None] * kw_tree.num_leaves
      in_list = [_onto(to_sharding(s, api), target)._s if s is not None else None
                 for s in per]
    outs = self._out_shardings
    out_list, out_fn = [], None
    if outs is not None:
      traces = self._traces  # not self: the C++ jit keeps out_fn (no cycle through it)

      def out_fn(tree_id, n):
        per = _expand_prefix(outs, traces.trees[tree_id], api, "out_shardings")
        shapes = traces.shapes.get(tree_id, [])
        res = []
        for i, sh in enumerate(per):
          if sh is None:
            res.append(None)
            continue
          sh = _onto(to_sharding(sh, api), target)
          if i < len(shapes) and len(sh.spec) > len(shapes[i]):
            raise PartixError(f"[{api}] out_shardings: {sh.spec} has {len(sh.spec)} entries "
                              f"but result {i} has shape {shapes[i]}")
          res.append(sh._s)
        return res
    # donate_argnums count positions among all arguments; the engine counts dynamic ones.
    dyn_pos = [i for i in range(n_args) if i not in static_pos]
    donate = {a % n_args for a in self._donate if -n_args <= a < n_args}
    for d in donate:
      if d in static_pos:
        raise PartixError(f"[{api}] argument {d} is both static and donated")
    donate_dyn = [dyn_pos.index(d) for d in sorted(donate) if d in dyn_pos]
    # One group of leaves per positional argument, then per keyword argument (sorted, as the
    # dict flattens), so a keyword argument can be donated by name.
    kw_names = sorted(dkw)
    donate_dyn += [len(dyn) + j for j, k in enumerate(kw_names) if k in self._donate_names]
    counts = [tu.tree_structure(a).num_leaves for a in dyn] + [
        tu.tree_structure(dkw[k]).num_leaves for k in kw_names]
    jit = _core.Jit(in_list, out_list, donate_dyn, self._name, out_fn)
    paths = self._arg_paths(dyn_tree, kw_tree, dyn_pos)
    n_leaves = sum(counts)
    places = in_list * n_leaves if len(in_list) == 1 else list(in_list) + [None] * (
        n_leaves - len(in_list))
    places = [p if p is not None and not p.mesh.is_abstract() else None for p in places]
    return _JitSig(jit, counts, treedef, str(next(_tree_ids)), paths, places)

  def _arg_paths(self, dyn_tree, kw_tree, dyn_pos):
    """Each argument leaf named as JAX names it in messages: by the function's parameter
    ("x", "params['w']", "args[2]" for a *args entry) and keyword ("lr")."""
    names = {}
    if self._sig is not None:
      params = list(self._sig.parameters.values())
      pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
      star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
      for k, i in enumerate(dyn_pos):
        if i < len(pos):
          names[k] = pos[i]
        elif star is not None:
          names[k] = f"{star}[{i - len(pos)}]"

    def rename(path):
      m = re.match(r"args\[(\d+)\]", path)
      return names[int(m.group(1))] + path[m.end():] if m and int(m.group(1)) in names else path
    kw = [re.sub(r"^args\[('[^']*')\]", lambda m: m.group(1)[1:-1], p)
          for p in tu.treedef_paths(kw_tree, "args")]
    return [rename(p) for p in tu.treedef_paths(dyn_tree, "args")] + kw

  def _trace_fn(self, sig, args, kwargs, static_pos, mesh_of=None, replay_key=None):
    fun = self._fun
    api = self._api
    traces = self._traces
    replays = self._replays

    def run(tracers):
      dyn, dkw = tu.tree_unflatten(sig.treedef, [wrap(t) for t in tracers])
      it = iter(dyn)
      full = [args[i] if i in static_pos else next(it) for i in range(len(args))]
      kw = dict(kwargs)
      kw.update(dkw)
      _jit_events[1] += 1
      meshes = _trace_meshes()
      meshes.append(mesh_of)
      try:
        out = fun(*full, **kw)
      finally:
        meshes.pop()
      return _out_leaves(out, api)

    def trace(tracers):
      if replay_key is None:
        cores, treedef = run(tracers)
        return cores, traces.keep(treedef, cores)
      # Shardings on AbstractMeshes: as JAX, the function is traced once per abstract
      # signature (its AbstractMeshes, not the devices they stand for this time). Its program
      # is recorded and replayed into the trace for other devices. (A constraint inside names a
      # mesh, which in a program on another mesh of its size stands for that one; a shard_map
      # runs on its own mesh only, so a program with one is traced again on the new devices.)
      known = replays.get(replay_key)
      if known is not None and known[0] is not None:
        program, treedef = known
      elif known is not None:
        cores, treedef = run(tracers)
        return cores, traces.keep(treedef, cores)
      else:
        box = {}

        def record(ts):
          cores, box["tree"] = run(ts)
          return cores
        program = _core.trace_program(list(tracers), record)
        treedef = box["tree"]
        replays[replay_key] = (None if _SHARD_MAP.search(program.text) else program, treedef)
      cores = program.eval(list(tracers) + list(program.captures))
      return cores, traces.keep(treedef, cores)
    return trace

  def _prepare(self, args, kwargs, place=False, device_assignment=None):
    dyn, dkw, statics, skw, static_pos = self._split(args, kwargs)
    if dkw and self._in_shardings is not None:
      raise PartixError(f"[{self._api}] keyword arguments {sorted(dkw)} cannot be passed when "
                        "in_shardings is given (as in JAX); pass them positionally")
    leaves, treedef = tu.tree_flatten((dyn, dkw))
    target = None
    if self._abstract_io or device_assignment is not None or isinstance(
        context_mesh(), AbstractMesh) or any(
        isinstance(x, ShapeDtypeStruct) and _abstract_sharding(x._sharding) for x in leaves):
      target, leaves = self._abstract_target(leaves, device_assignment)
      if place and isinstance(target, AbstractMesh) and not any(
          isinstance(x, ShapeDtypeStruct) for x in leaves):
        raise PartixError(f"[{self._name}] only AbstractMesh exists in this jitted computation "
                          f"(its shardings are on {target}, and neither its arguments nor a "
                          "mesh in context name devices), so it cannot run: place the "
                          "arguments on a mesh of that shape, or call it under "
                          "jax.set_mesh(mesh)")
    sig, leaves = self._state(dyn, dkw, statics, skw, static_pos, len(args), target, leaves,
                              treedef)
    paths = sig.paths
    # Host data with an in_sharding goes straight onto it when the program runs (no device
    # holds it whole first); lowering and shape evaluation copy nothing.
    places = sig.places if place else ()
    if place:  # a call, not a lowering: every leaf needs values
      for i, x in enumerate(leaves):
        if isinstance(x, ShapeDtypeStruct):
          where = paths[i] if i < len(paths) else f"leaf {i}"
          raise PartixTypeError(
              f"[{self._api}] Argument '{where}' of shape {x.dtype.name}"
              f"[{','.join(str(d) for d in x.shape)}] of type {type(x)} is not a valid JAX "
              "type: it has no values to run on; use jit(f).lower(...) or eval_shape to "
              "inspect the program")
    cores = [x._a if type(x) is Array else _leaf_core(
        x, self._api, paths[i] if i < len(paths) else None,
        places[i] if i < len(places) else None) for i, x in enumerate(leaves)]
    mesh_of = functools.partial(_program_mesh, target, sig, cores)
    replay_key = None
    if target is not None:
      replay_key = (sig.treedef, statics, skw, get_abstract_mesh(), _trace_options[0],
                    tuple(_abstract_leaf_key(x, c) for x, c in zip(leaves, cores)))
    return sig, cores, self._trace_fn(sig, args, kwargs, static_pos, mesh_of, replay_key)

  def _abstract_target(self, leaves, device_assignment):
    """The mesh this call's shardings on AbstractMeshes stand for, as JAX concretizes them:
    laid over the device assignment (compile(device_assignment=), else the devices of the first
    sharding on devices among the arguments, in_shardings and out_shardings, else the concrete
    mesh in context); without devices, the first AbstractMesh, or the one in context (the
    program is lowered on it). Returns it and the argument leaves, ShapeDtypeStructs on
    AbstractMeshes moved onto it."""
    api = self._name
    given = [s for s in tu.tree_leaves(
        (self._in_shardings, self._out_shardings),
        is_leaf=lambda y: isinstance(y, (NamedSharding, PartitionSpec)))
        if isinstance(s, (NamedSharding, Device))]
    abstract, source = [], None
    for x in leaves:
      s = None
      if isinstance(x, Array):
        a = x._a
        if not a.is_tracer() and not a.is_deleted() and a.committed():
          s = NamedSharding._wrap(a.sharding())
      elif isinstance(x, ShapeDtypeStruct) and isinstance(x._sharding, NamedSharding):
        s = x._sharding
      if s is None:
        continue
      if s._s.mesh.is_abstract():
        abstract.append(s)
      elif source is None:
        source = s
    for s in given:
      if isinstance(s, Device):
        source = source or to_sharding(s, api)
      elif s._s.mesh.is_abstract():
        abstract.append(s)
      elif source is None:
        source = s
    sizes = {s.mesh.size for s in abstract}
    if len(sizes) > 1:
      a, b = abstract[0], next(s for s in abstract if s.mesh.size != abstract[0].mesh.size)
      raise PartixError(f"[{api}] AbstractMesh should be of the same size across all "
                        f"shardings. Got {a.mesh} and {b.mesh}")
    if device_assignment is not None:
      devs = list(device_assignment)
      target = None
      for s in abstract:
        if s.mesh.size != len(devs):
          raise PartixError(f"[{api}] The size of abstract mesh {s.mesh.size} in {s} must match "
                            f"the length of device assignment: {len(devs)}")
      target = _on_devices(abstract[0].mesh, devs) if abstract else concrete_context_mesh()
    else:
      target = source.mesh if source is not None else concrete_context_mesh()
      if target is not None and abstract and abstract[0].mesh.size != target.size:
        raise PartixError(f"[{api}] AbstractMesh size: {abstract[0].mesh.size} does not match "
                          f"the device assignment size: {target.size} ({abstract[0]} and the "
                          f"devices of {source if source is not None else target})")
      if target is None:  # no devices: the abstract meshes' (an AbstractMesh in context too)
        ctx = context_mesh()
        target = abstract[0].mesh if abstract else ctx if isinstance(ctx, AbstractMesh) else None
    if target is None:
      return None, leaves
    out = []
    for x in leaves:
      if isinstance(x, ShapeDtypeStruct) and _abstract_sharding(x._sharding):
        x = ShapeDtypeStruct(x.shape, x.dtype, _onto(x._sharding, target),
                             weak_type=x.weak_type, vma=x.vma)
      out.append(x)
    return target, out

  def __call__(self, *args, **kwargs):
    if _core.is_tracing():  # nested jit: inline; its shardings become constraints
      if self._compiler_options:
        raise PartixError(f"[{self._api}] `compiler_options` can only be passed to top-level "
                          "`jax.jit`: this jit runs inside another, whose program it becomes "
                          "part of")
      return _ref_rules.inline_jit(self, args, kwargs)
    if _jit_disabled():  # jax.disable_jit: the function runs op by op
      return self._fun(*args, **kwargs)
    if _ref_rules.involved(self, args, kwargs):  # jax.Refs passed, or read from its closure
      return _ref_rules.call_jit(self, args, kwargs)
    return _ref_rules.catching(self, args, kwargs, self._call)

  def _call(self, args, kwargs):
    if self._placed_by_argument and _mesh_contexts():
      raise PartixError(f"[{self._api}] Mesh context manager should not be used with jit when "
                        "backend or device is also specified as an argument to jit.")
    if self._device is not None:
      args, kwargs = _moved_onto(self._device, (args, kwargs))
    if not kwargs and not self._static and not self._static_names:
      fast = self._call_arrays(args)
      if fast is not _GENERAL_PATH:
        return fast
    sig, cores, trace = self._prepare(args, kwargs, place=True)
    traced = _jit_events[1]
    outs, tid = sig.jit.call(cores, sig.counts, sig.key, sig.path_fn, trace)
    if _jit_events[1] != traced:
      _jit_events[0] += 1
      _explain_miss(self._name, sig, cores)
    return tu.tree_unflatten(self._traces.trees[tid], [Array(o) for o in outs])

  def _inline(self, args, kwargs):
    if self._in_shardings is not None:
      dyn, _, _, _, static_pos = self._split(args, kwargs)
      ins = self._in_shardings
      if not isinstance(ins, (NamedSharding, PartitionSpec)):
        ins = tuple(ins) if isinstance(ins, (tuple, list)) else (ins,)
        if len(ins) != len(dyn):
          raise PartixError(f"[{self._api}] in_shardings has {len(ins)} entries for "
                            f"{len(dyn)} positional (non-static) arguments")
      dyn = _constrain_tree(tuple(dyn), ins)
      it = iter(dyn)
      args = tuple(args[i] if i in static_pos else next(it) for i in range(len(args)))
    out = self._fun(*args, **kwargs)
    if self._out_shardings is not None:
      out = _constrain_tree(out, self._out_shardings)
    return out

  def _call_arrays(self, args):
    """The dispatch fast path: positional arguments that are all partix Arrays (no pytrees, no
    static arguments) need no flattening; their signature is found by their count alone (the
    C++ cache then keys on shapes, dtypes and shardings). _GENERAL_PATH: take the general path
    (nothing has run; a function may return None)."""
    if self._abstract_io:  # its shardings' mesh depends on the arguments' devices
      return _GENERAL_PATH
    cores = []
    for a in args:
      if type(a) is not Array:
        return _GENERAL_PATH
      cores.append(a._a)
    # The current mesh is part of the signature (as in _state).
    fkey = (len(args), context_mesh(), _trace_options[0])
    sig = self._fast_sigs.get(fkey)
    miss = sig is None
    if miss:
      sig, _ = self._state(args, {}, (), (), set(), len(args))
      self._fast_sigs[fkey] = sig
    traced = _jit_events[1]
    outs, tid = sig.jit.call(cores, sig.counts, sig.key, sig.path_fn,
                             self._trace_fn(sig, args, {}, (), functools.partial(
                                 _program_mesh, None, sig, cores)))
    if miss or _jit_events[1] != traced:
      _jit_events[0] += 1
      if _jit_events[1] != traced:
        _explain_miss(self._name, sig, cores)
    tree = self._traces.trees[tid]
    if tree is tu._LEAF:
      return Array(outs[0])
    return tu.tree_unflatten(tree, [Array(o) for o in outs])

  def lower(self, *args, **kwargs):
    """jit(f).lower(...): jit(f).trace(...).lower() (lowering_platforms are given to
    Traced.lower)."""
    return self.trace(*args, **kwargs).lower()

  def _lower(self, args, kwargs, device_assignment=None):
    sig, cores, trace = self._prepare(args, kwargs, device_assignment=device_assignment)
    l, tid = sig.jit.lower(cores, sig.counts, sig.key, sig.path_fn, trace)
    lowered = Lowered(l, self._traces.trees.get(tid), self, sig,
                      [(tuple(c.shape), c.dtype) for c in cores])
    lowered._out_avals = self._traces.avals.get(tid)
    lowered._types = [_core.type_of(c) for c in cores]
    # An argument nothing placed (host data, an uncommitted array) is typed replicated on the
    # mesh in context, as JAX's avals of such arguments are.
    mesh = get_mesh()
    lowered._context = [mesh if mesh is not None and not c.committed() and not c.is_abstract()
                        else None for c in cores]
    n = len(args)
    static_pos = {a % n for a in self._static if -n <= a < n}
    lowered._statics = (n, {i: args[i] for i in static_pos},
                        {k: v for k, v in kwargs.items() if k in self._static_names})
    lowered._call = (args, kwargs)
    ctx = context_mesh()
    lowered._abstract_context = ctx if isinstance(ctx, AbstractMesh) else None
    lowered._trace_context = get_abstract_mesh()
    return lowered

  def trace(self, *args, **kwargs):
    """jit(f).trace(...): the traced program; .lower() gives Lowered, .out_info the results,
    .jaxpr the program text."""
    static = tuple(self._static)
    return Traced(self._lower(args, kwargs),
                  lambda: make_jaxpr(self._fun, static_argnums=static)(*args, **kwargs))

  def eval_shape(self, *args, **kwargs):
    """The results as ShapeDtypeStructs (with their shardings), from one trace and lowering."""
    return _eval_shape(self._fun, args, kwargs, self._api, dict(
        in_shardings=self._in_shardings, out_shardings=self._out_shardings,
        static_argnums=self._static, static_argnames=self._static_names))

  def _share_caches(self, options):
    """Takes the caches of an earlier jit of the same function with equal options (see
    _shared_caches); a function or options that cannot be a key keep their own."""
    try:
      per = _shared_caches.setdefault(self._fun, {})
      caches = per.setdefault(_frozen(options), (self._states, self._fast_sigs, self._traces,
                                                 self._replays))
    except Exception:  # noqa: BLE001 - unhashable or not weakly referable: no sharing
      return
    self._states, self._fast_sigs, self._traces, self._replays = caches

  def _cache_size(self):
    return sum(s.jit.trace_count for s in self._states.values())

  @property
  def trace_count(self):
    return self._cache_size()

  def __get__(self, obj, objtype=None):  # jit on methods
    if obj is None:
      return self
    return functools.partial(self, obj)

  def __repr__(self):
    return f"<partix.jit of {self._fun!r}>"


class _JitSig:
  __slots__ = ("jit", "counts", "treedef", "key", "paths", "path_fn", "places", "seen")

  def __init__(self, jit, counts, treedef, key, paths, places):
    self.jit, self.counts, self.treedef, self.key, self.paths = jit, counts, treedef, key, paths
    self.path_fn = lambda: paths
    # Per argument leaf, the _core sharding its host data goes straight onto (in_shardings).
    self.places = places
    self.seen = []  # the argument types of each earlier trace (for explain_cache_misses)


def jit(fun=None, *, in_shardings=None, out_shardings=None, static_argnums=None,
        static_argnames=None, donate_argnums=None, donate_argnames=None, keep_unused=False,
        device=None, backend=None, inline=False, abstracted_axes=None, compiler_options=None,
        name=None):
  """jax.jit: traces fun once per input signature and runs the compiled SPMD program; the
  sharding of every intermediate value is propagated and the collectives inserted."""
  if fun is None:  # jax.jit(**options) as a decorator: every option reaches the function
    return lambda f: jit(f, in_shardings=in_shardings, out_shardings=out_shardings,
                         static_argnums=static_argnums, static_argnames=static_argnames,
                         donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                         keep_unused=keep_unused, device=device, backend=backend, inline=inline,
                         abstracted_axes=abstracted_axes, compiler_options=compiler_options,
                         name=name)
  if device is not None and backend is not None:
    raise PartixError(f"[jit] can't specify both a device and a backend for jit (got "
                      f"device={device}, backend={backend!r})")
  for what, given in (("in_shardings", in_shardings), ("out_shardings", out_shardings)):
    if (device is not None or backend is not None) and given is not None:
      raise PartixError(f"[jit] If backend or device is specified on jit, then {what} should "
                        "not be specified.")
  platforms = {_core.default_device().platform} if backend is not None else set()
  if backend is not None and backend not in platforms:
    raise PartixError(f"[jit] backend={backend!r}: this job's devices are "
                      f"{sorted(platforms)}")
  if device is not None:  # the whole program on that device, results included
    in_shardings = out_shardings = to_sharding(device, "jit")
  j = Jitted(fun, in_shardings, out_shardings, static_argnums, static_argnames, donate_argnums,
             donate_argnames, name)
  j._device = device
  j._placed_by_argument = device is not None or backend is not None
  # Accepted for programs written for XLA, whose options partix's compiler has no use for;
  # a jit that has them cannot run nested in another (as in JAX).
  j._compiler_options = dict(compiler_options or {})
  j._share_caches((in_shardings, out_shardings, j._static, j._static_names, j._donate,
                   j._donate_names, j._name, device, backend, j._compiler_options))
  return j


# ---- autodiff ----

def _grad_call(fun, argnums, has_aux, args, kwargs, api, allow_int=False):
  multi = not isinstance(argnums, int)
  nums = _norm_argnums(argnums, len(args), api, "argnums")
  if not nums:
    raise PartixError(f"[{api}] argnums is empty")
  trees, leaves, wrt, firsts = [], [], [], []
  for i, a in enumerate(args):
    if i not in nums:
      # As JAX: an argument not differentiated is passed to fun as it is (a function, a
      # Python int used in range(), ...), closed over, not traced.
      trees.append(None)
      firsts.append(len(leaves))
      continue
    ls, t = tu.tree_flatten(a)
    trees.append(t)
    firsts.append(len(leaves))
    for j, x in enumerate(ls):
      if not allow_int:
        if isinstance(x, (int, bool)) and not isinstance(x, np.generic) or (
            isinstance(x, np.ndarray) and x.dtype.kind in "iub"):
          raise PartixError(f"[{api}] argument {i} leaf {j} is an integer ({x!r}); grad "
                            "differentiates float arrays")
      leaves.append(_leaf_core(x, api))
      # allow_int: an integer leaf is not differentiated; its gradient is float0 (as JAX's).
      wrt.append(not (allow_int and not dtypes.differentiable(leaves[-1].dtype)))
  aux_tree = []

  def call(arrays):  # fun on the differentiated leaves `arrays`, the other arguments as given
    it = iter(arrays)
    targs = [a if t is None else tu.tree_unflatten(t, [next(it) for _ in range(t.num_leaves)])
             for a, t in zip(args, trees)]
    return fun(*targs, **kwargs)

  def traced(tracers):
    aux_tree.clear()
    out = call([wrap(t) for t in tracers])
    if has_aux:
      if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise PartixError(f"[{api}] with has_aux=True the function must return a pair "
                          f"(value, aux), got {type(out).__name__}")
      out, aux = out
      aux_cores, at = _out_leaves(aux, api)
      aux_tree.append(at)
    else:
      aux_cores = []
    if not isinstance(out, Array):
      if isinstance(out, (float, int, np.ndarray, np.generic)):
        out = Array(core(out))
      else:
        raise PartixError(f"[{api}] the function must return a float scalar array, got "
                          f"{type(out).__name__}")
    return [out._a] + aux_cores

  if _core.is_tracing():
    value, grads, aux = _core.grad(leaves, wrt, traced)
  else:  # eager: Python control flow on the primal values, as JAX's (eager_values.py)
    def probe(values):
      return jit(values.probe_body(api, lambda *xs: call(list(xs))))(*[wrap(c) for c in leaves])
    value, grads, aux = eager_values.run_with_primal_values(
        api, lambda: _core.grad(leaves, wrt, traced), probe)
  gtrees = []
  for i in nums:
    n = trees[i].num_leaves
    gs = [Array(g) if g is not None else np.zeros(tuple(c.shape), dtypes.float0)
          for g, c in zip(grads[firsts[i]:firsts[i] + n], leaves[firsts[i]:firsts[i] + n])]
    gtrees.append(tu.tree_unflatten(trees[i], gs))
  g = tuple(gtrees) if multi else gtrees[0]
  auxv = tu.tree_unflatten(aux_tree[0], [Array(a) for a in aux]) if has_aux else None
  return Array(value), g, auxv


def grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False, reduce_axes=()):
  """jax.grad: the gradient of a scalar-valued fun with respect to argnums (an int, or a tuple
  giving a tuple of gradients), each shaped and sharded like its argument. With allow_int,
  integer arguments get float0 gradients (numpy zeros of their shape) instead of an error."""
  if not callable(fun):
    raise PartixError(f"[grad] {fun!r} is not callable")

  @functools.wraps(fun)
  def g(*args, **kwargs):
    _, gr, aux = _grad_call(fun, argnums, has_aux, args, kwargs, "grad", allow_int)
    return (gr, aux) if has_aux else gr
  return g


def value_and_grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False,
                   reduce_axes=()):
  """jax.value_and_grad: (value, gradient), or ((value, aux), gradient) with has_aux."""
  if not callable(fun):
    raise PartixError(f"[value_and_grad] {fun!r} is not callable")

  @functools.wraps(fun)
  def vg(*args, **kwargs):
    v, gr, aux = _grad_call(fun, argnums, has_aux, args, kwargs, "value_and_grad", allow_int)
    return ((v, aux), gr) if has_aux else (v, gr)
  return vg


def checkpoint(fun=None, *, prevent_cse=True, policy=None, static_argnums=()):
  """jax.checkpoint (remat): fun's activations are recomputed in the backward pass, but for
  those `policy` (one of partix.checkpoint_policies) saves. Arguments in static_argnums are
  passed as they are (not traced)."""
  if fun is None:
    return lambda f: checkpoint(f, prevent_cse=prevent_cse, policy=policy,
                                static_argnums=static_argnums)
  if not callable(fun):
    raise PartixError(f"[checkpoint] {fun!r} is not callable")
  static = _norm_argnums(static_argnums, api="checkpoint", what="static_argnums")
  kind, names = policy_args(policy)

  @functools.wraps(fun)
  def f(*args, **kwargs):
    n = len(args)
    for a in static:
      if not -n <= a < n:
        raise PartixError(f"[checkpoint] static_argnums names argument {a} but {n} are given")
    spos = {a % n for a in static}
    dyn = tuple(a for i, a in enumerate(args) if i not in spos)
    leaves, treedef = tu.tree_flatten((dyn, kwargs))
    cores = [_leaf_core(x, "checkpoint") for x in leaves]

    def trace(tracers):
      tdyn, tkw = tu.tree_unflatten(treedef, [wrap(t) for t in tracers])
      it = iter(tdyn)
      full = [args[i] if i in spos else next(it) for i in range(n)]
      c, t = _out_leaves(fun(*full, **tkw), "checkpoint")
      return c, _keep_tree(t)
    outs, tid = _core.checkpoint(cores, trace, kind, names)
    return tu.tree_unflatten(_trees.pop(tid), [Array(o) for o in outs])
  return f


remat = checkpoint


def eval_shape(fun, *args, **kwargs):
  """jax.eval_shape: fun's result tree of ShapeDtypeStructs (with the shardings the program
  gives them), found by tracing and partitioning once, without running."""
  if not callable(fun):
    raise PartixError(f"[eval_shape] {fun!r} is not callable")
  if _core.is_tracing():
    # Inside a trace fun is traced in place (what it adds is dead code, dropped at compile):
    # its results' shapes and dtypes, as the tracers show them.
    out = fun(*args, **kwargs)
    return tu.tree_map(lambda x: ShapeDtypeStruct(
        tuple(x.shape), x.dtype, vma=_core.varying_axes(x._a) if x._a.is_tracer() else ())
        if isinstance(x, Array) else x, out)
  return _eval_shape(fun, args, kwargs, "eval_shape", {})


def _eval_shape(fun, args, kwargs, api, options):
  avals = []

  def capture(*a, **k):
    out = fun(*a, **k)
    avals[:] = [(tuple(x.shape), x.dtype) for x in tu.tree_leaves(out)]
    return out
  j = Jitted(capture, options.get("in_shardings"), options.get("out_shardings"),
             options.get("static_argnums"), options.get("static_argnames"), None, None,
             getattr(fun, "__name__", api), api=api)
  lowered = j._lower(args, kwargs)
  shardings = [NamedSharding._wrap(s) for s in lowered._l.out_shardings()]
  return tu.tree_unflatten(lowered._out_tree, [ShapeDtypeStruct(s, d, sh)
                                               for (s, d), sh in zip(avals, shardings)])


# ---- placement ----

# Eager shard_map bodies being traced on this thread (a device_put onto one device inside such
# a body is refused, as JAX's eager rule; under jit it is ignored).
_eager_bodies = threading.local()


@contextlib.contextmanager
def eager_shard_map_body():
  _eager_bodies.depth = getattr(_eager_bodies, "depth", 0) + 1
  try:
    yield
  finally:
    _eager_bodies.depth -= 1


def _in_manual_body():
  return _core.is_tracing() and bool(getattr(get_abstract_mesh(), "manual_axes", ()))


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
  """jax.device_put: host data or arrays (a pytree) placed with a sharding (NamedSharding,
  PartitionSpec on the current mesh, or a Device); device may be a matching pytree prefix."""
  leaves, treedef = tu.tree_flatten(x)
  if device is None or isinstance(device, (NamedSharding, PartitionSpec, Device)):
    targets = [device] * len(leaves)
  else:
    targets = _expand_prefix(device, treedef, "device_put", "device")
  if not _core.is_tracing():  # (under a trace it is a constraint, which may stay abstract)
    targets = [concrete_sharding(t, "device_put") for t in targets]
  out = []
  for leaf, t in zip(leaves, targets):
    if isinstance(t, Device) and _in_manual_body():  # a shard_map body: one device is no place
      if getattr(_eager_bodies, "depth", 0):
        raise PartixError("[device_put] device_put with explicit device not allowed within "
                          f"shard_map-decorated functions, but got device {t}")
      out.append(Array(core(leaf, api="device_put")))  # under jit: ignored, as in JAX
      continue
    if not isinstance(leaf, Array) and isinstance(t, (Device, NamedSharding, PartitionSpec)):
      # Host data goes straight onto its devices: none holds it whole on the way.
      place = _core.single_device_sharding(t._d) if isinstance(t, Device) else to_sharding(
          t, "device_put")._s
      out.append(Array(_core.device_put(core(leaf, api="device_put", place=place), place)))
      continue
    a = core(leaf, api="device_put")
    if isinstance(leaf, Array) and t is not None and not a.is_tracer():
      _guard_device_move(leaf, t)
    if isinstance(leaf, Array) and may_alias is False and not a.is_tracer():
      a = _core.copy(a)  # the result must not share the argument's buffers
    if t is None and _core.is_tracing():
      out.append(Array(a))  # under a trace there is nowhere to move it: the value as it is
    elif t is None:
      out.append(Array(a) if isinstance(leaf, Array) else Array(
          _core.device_put_device(a, _core.default_device())))
    elif isinstance(t, Device):
      out.append(Array(_core.device_put_device(a, t._d)))
    else:
      out.append(Array(_core.device_put(a, to_sharding(t, "device_put")._s)))
  # donate=True: the arguments are given up, as JAX's (their buffers live on in the results
  # that share them; nothing else may use them). donate may be a pytree prefix of x.
  for leaf, d in zip(leaves, _donate_flags(donate, x)):
    if d and isinstance(leaf, Array) and not leaf._a.is_tracer():
      leaf.delete()
  return tu.tree_unflatten(treedef, out)


def _guard_device_move(x, target):
  """The transfer guard's device-to-device check: device_put onto other devices is an explicit
  transfer; onto a sharding over the same devices it is a reshard computed on them."""
  to = {target} if isinstance(target, Device) else set(
      to_sharding(target, "device_put").device_set)
  if to != set(x.sharding.device_set):
    transfer_guard.check("device_to_device", True, f"{x._aval_str()} onto {target}")


def _donate_flags(donate, x):
  """One flag per leaf of x from donate, a bool or a pytree prefix of bools."""
  if isinstance(donate, (bool, np.bool_)):
    return [bool(donate)] * len(tu.tree_leaves(x))
  out = []
  try:
    tu.tree_map(lambda d, sub: out.extend([bool(d)] * len(tu.tree_leaves(sub))), donate, x)
  except (ValueError, TypeError, PartixError) as e:
    raise PartixError(f"[device_put] donate={donate!r} is not a bool or a pytree prefix of "
                      f"the arguments: {e}") from None
  return out


def block_until_ready(x):
  return x


def make_array_from_callback(shape, sharding, data_callback):
  """An array whose blocks come from data_callback(index) (a tuple of slices) -> host block."""
  if _core.is_tracing():  # as JAX: its blocks are host data, which a trace does not have
    raise PartixError("[make_array_from_callback] jax.make_array_from_callback cannot be called "
                      "within a traced context (inside jit, grad, vmap or a shard_map body)")
  s = concrete_sharding(to_sharding(sharding, "make_array_from_callback"),
                        "make_array_from_callback")

  def cb(index):
    return host_block(data_callback(tuple(slice(a, b) for a, b in index)),
                      "make_array_from_callback")
  return Array(_core.make_array_from_host_callback(list(shape), s._s, cb))


def make_array_from_single_device_arrays(shape, sharding, arrays, *, dtype=None):
  """jax.make_array_from_single_device_arrays: the global array of `shape` whose block on each
  device of `sharding` is the one-device array in `arrays` on that device (one per addressable
  device, shaped as the device's block). The blocks are read and placed again."""
  api = "jax.make_array_from_single_device_arrays"
  if isinstance(arrays, Array) or not isinstance(arrays, (list, tuple)):
    raise PartixTypeError(f"[{api}] {api} `arrays` argument must be a list or tuple, but got "
                          f"{type(arrays).__name__}")
  if any(isinstance(a, Array) and a._a.is_tracer() for a in arrays):
    raise PartixError(f"[{api}] {api} requires a list of concrete arrays as input, but got "
                      "traced values (it cannot be used inside jit)")
  s = concrete_sharding(to_sharding(sharding, api), api)
  shape = tuple(int(d) for d in shape)
  if not arrays and dtype is None:
    raise PartixError(f"[{api}] If the Array has no addressable shards, `dtype` must be "
                      f"provided via the `dtype` argument to `{api}`.")
  for a in arrays:
    if not isinstance(a, Array):
      raise PartixError(f"[{api}] every entry of arrays must be a partix Array on one device, "
                        f"got {type(a).__name__}")
    if len(a.devices()) != 1:
      raise PartixError(f"[{api}] When making an array from single-device arrays the input "
                        f"arrays must have one shard each. An argument array had "
                        f"{len(a.devices())} shard(s).")
  if dtype is not None and arrays and any(np.dtype(a.dtype) != np.dtype(dtype) for a in arrays):
    raise PartixError(f"[{api}] If `dtype` is provided to `{api}`, it must match the dtype of "
                      "the addressable shards.")
  want = s.addressable_devices_indices_map(shape)
  if len(arrays) != len(want):
    raise PartixError(f"[{api}] Expected {len(want)} per-device arrays (this is how many "
                      f"devices are addressable by the sharding), but got {len(arrays)}")
  got_ids = [next(iter(a.devices())).id for a in arrays]
  if len(set(got_ids)) != len(got_ids):
    raise PartixError(f"[{api}] When making an array from single-device arrays, the input "
                      "arrays must be from distinct devices, but got device ids "
                      f"{sorted(got_ids)}")
  want_ids = {d.id for d in want}
  if set(got_ids) != want_ids:
    raise PartixError(f"[{api}] Addressable devices and per-device arrays devices do not "
                      f"match. Sharding contains devices {_id_set(want_ids - set(got_ids))} "
                      "that are not present in per-device arrays. Per-device arrays contain "
                      f"devices {_id_set(set(got_ids) - want_ids)} that are not present in the "
                      "sharding.")
  by_device = dict(zip(got_ids, arrays))
  by_index = {}
  for d, idx in s.devices_indices_map(shape).items():
    if d.id not in by_device:
      continue  # a device of another process
    block = np.asarray(by_device[d.id])
    need = tuple(len(range(*sl.indices(n))) for sl, n in zip(idx, shape))
    if block.shape != need:
      raise PartixError(f"[{api}] the array on device {d.id} has shape {block.shape}, but the "
                        f"device's block of {shape} under {s.spec} is {need}")
    by_index[tuple(sl.indices(n)[:2] for sl, n in zip(idx, shape))] = block
  return make_array_from_callback(
      shape, s, lambda index: by_index[tuple(sl.indices(n)[:2] for sl, n in zip(index, shape))])


def _id_set(ids):
  return "{" + ", ".join(str(i) for i in sorted(ids)) + "}"


def device_get(x):
  """jax.device_get: every Array leaf of x as a numpy array on the host (other leaves as they
  are)."""
  return tu.tree_map(lambda a: to_numpy(a, explicit=True) if isinstance(a, Array) else a, x)


def make_array_from_process_local_data(sharding, local_data, global_shape=None):
  """jax.make_array_from_process_local_data: this process's part of each global array, placed
  with sharding. local_data may be a pytree of arrays; global_shape None, one shape for every
  leaf, or a pytree prefix of local_data whose leaves are shapes."""
  api = "make_array_from_process_local_data"
  s = concrete_sharding(to_sharding(sharding, api), api)

  def one(x, g):
    try:
      return Array(_core.make_array_from_process_local_data(
          s._s, core(x, api=api), list(g) if g is not None else None))
    except PartixError as e:
      if g is None:
        raise
      raise PartixError(f"[{api}] global_shape {tuple(g)} does not fit the local data of "
                        f"shape {np.shape(x)}: {str(e).split('] ', 1)[-1]}") from None

  def is_shape(g):
    return g is None or (isinstance(g, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in g))

  if isinstance(local_data, (Array, np.ndarray, np.generic, int, float)):
    return one(local_data, global_shape)
  try:
    return tu.tree_map(lambda g, sub: tu.tree_map(lambda x: one(x, g), sub), global_shape,
                       local_data, is_leaf=is_shape)
  except PartixError as e:
    if f"[{api}]" in str(e):
      raise
    raise PartixError(f"[{api}] global_shape {global_shape!r} does not match the structure of "
                      f"local_data: {e}") from None


def _constrain(x, sharding, api):
  """x with sharding (a NamedSharding, or a PartitionSpec on the current mesh): a constraint
  inside a trace, a device_put outside (as with_sharding_constraint)."""
  s = to_sharding(sharding, api)
  if _abstract_sharding(s) and not _core.is_tracing():
    s = _eager_abstract_target(x, s, api)
  a = core(x, api=api)
  if s.spec is not None and s.spec.unreduced and not _already_unreduced(a, s.spec.unreduced):
    raise PartixError(f"[{api}] {s.spec} has unreduced axes: a constraint cannot make a value "
                      "partial sums (give out_sharding=P(..., unreduced=...) to the op that "
                      "makes them)")
  # P.UNCONSTRAINED dimensions (s._free) are left to the compiler: only constraints take them.
  out = Array(_core.with_sharding_constraint(a, s._c, list(s._free)))
  if _core.is_tracing():
    # As JAX: the constrained value's type names the constraint's abstract mesh (an empty one
    # for a sharding of one device given as such), even where no Explicit axis splits it.
    one_device = not isinstance(sharding, (NamedSharding, PartitionSpec))
    _remember_constraint(out, AbstractMesh((), ()) if one_device else s.mesh.abstract_mesh)
  return out


# Traced values made by a constraint (by id; dropped with the value): their type's mesh.
_constraint_meshes = {}


def _remember_constraint(x, mesh):
  key = id(x)
  _constraint_meshes[key] = (weakref.ref(x, lambda _, k=key: _constraint_meshes.pop(k, None)),
                             mesh)


def _constraint_mesh(x):
  entry = _constraint_meshes.get(id(x))
  return entry[1] if entry is not None and entry[0]() is x else None


def _eager_abstract_target(x, s, api):
  """Where an eager with_sharding_constraint to s, a sharding on an AbstractMesh, moves x (as
  JAX): an array placed on a mesh stays on that mesh, whose shape must be s's; host data (and,
  in partix, an array not placed yet) goes onto the concrete mesh in context of s's shape."""
  placed = isinstance(x, Array) and x.committed
  if not placed and concrete_context_mesh() is not None:
    return concrete_sharding(s, api)
  if not isinstance(x, Array):
    raise PartixError(f"[{api}] Target sharding contains a `jax.sharding.AbstractMesh` which "
                      f"requires the input passed should be a `jax.Array`. Got {type(x)} with "
                      f"shape {_short_type(x)} ({s} has no devices, and no mesh is in context)")
  have = x.sharding
  if not placed or not isinstance(have, NamedSharding) or not have.mesh.axis_names:
    raise PartixTypeError(f"[{api}] The sharding on the input must be a `NamedSharding` since "
                          "the target sharding has an `AbstractMesh` in it. Got sharding type "
                          f"{type(have)} for shape {x._aval_str()} (device_put it onto a mesh "
                          f"of shape {dict(s.mesh.shape_tuple)} first)")
  if have.mesh.shape_tuple != s.mesh.shape_tuple:
    raise PartixError(f"[{api}] Mesh shape of the input {have.mesh.shape_tuple} does not match "
                      f"the mesh shape of the target sharding {s.mesh.shape_tuple} for shape "
                      f"{x._aval_str()}")
  return NamedSharding(have.mesh, s.spec, memory_kind=s._kind)


def _short_type(x):
  a = np.asarray(x)
  name = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64",
          "bool": "bool"}.get(a.dtype.name, a.dtype.name)
  return f"{name}[{','.join(str(d) for d in a.shape)}]"


def _already_unreduced(a, axes):
  """Whether a's type already holds partial sums over exactly these axes."""
  return set(_core.type_of(a).unreduced) == set(axes)


class ManualAxisType:
  """A value's types over a shard_map body's Manual axes (jax.core.ManualAxisType, a
  ShapedArray's .mat): the axes it varies over (differs per device); unreduced and reduced
  are empty in partix, whose shard_map takes and returns no partial sums."""
  __slots__ = ("varying", "unreduced", "reduced")

  def __init__(self, *, varying=frozenset(), unreduced=frozenset(), reduced=frozenset()):
    # Frozen, as JAX's dataclass: the fields are set once here.
    object.__setattr__(self, "varying", frozenset(varying))
    object.__setattr__(self, "unreduced", frozenset(unreduced))
    object.__setattr__(self, "reduced", frozenset(reduced))
    if self.varying & self.unreduced or self.varying & self.reduced:
      raise PartixError(f"[ManualAxisType] varying and unreduced/reduced cannot have common mesh "
                        f"axes. Got varying={set(self.varying)}")

  def __setattr__(self, name, value):
    raise AttributeError(f"cannot assign to field {name!r}: ManualAxisType is frozen")

  def __delattr__(self, name):
    raise AttributeError(f"cannot delete field {name!r}: ManualAxisType is frozen")

  def __repr__(self):
    return (f"ManualAxisType(varying={self.varying}, unreduced={self.unreduced}, "
            f"reduced={self.reduced})")

  def __eq__(self, other):
    return isinstance(other, ManualAxisType) and (self.varying, self.unreduced, self.reduced) == (
        other.varying, other.unreduced, other.reduced)

  def __hash__(self):
    return hash((self.varying, self.unreduced, self.reduced))

  def update(self, **kw):
    return ManualAxisType(varying=kw.get("varying", self.varying),
                          unreduced=kw.get("unreduced", self.unreduced),
                          reduced=kw.get("reduced", self.reduced))

  @property
  def empty(self):
    return not (self.varying or self.unreduced or self.reduced)

  @property
  def vur(self):
    return self.varying | self.unreduced | self.reduced

  def invarying(self, mesh):
    """The manual axes of mesh the value does not vary over."""
    return frozenset(mesh.manual_axes) - self.vur


def _typed_part(sharding, ndim):
  """What of a sharding is part of a type (as JAX's avals keep it): the Explicit axes of each
  entry, the spec padded with None to the rank; unreduced and reduced axes stay."""
  types = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_types))
  spec = sharding.spec
  entries = []
  for e in tuple(spec) + (None,) * max(0, ndim - len(spec)):
    axes = () if e is None else (e,) if isinstance(e, str) else tuple(e)
    kept = tuple(a for a in axes if types.get(a) == AxisType.Explicit)
    entries.append(None if not kept else kept[0] if len(kept) == 1 else kept)
  typed = PartitionSpec(*entries, unreduced=getattr(spec, "unreduced", None) or None,
                        reduced=getattr(spec, "reduced", None) or None)
  return sharding if typed == spec else NamedSharding(sharding.mesh, typed,
                                                      memory_kind=sharding.memory_kind)


def _padded(sharding, ndim):
  """As JAX's avals: the spec of a type has one entry per dimension."""
  spec = sharding.spec
  if len(spec) >= ndim or not isinstance(sharding, NamedSharding):
    return sharding
  padded = PartitionSpec(*tuple(spec), *([None] * (ndim - len(spec))),
                         unreduced=spec.unreduced or None, reduced=spec.reduced or None)
  return NamedSharding(sharding.mesh, padded, memory_kind=sharding.memory_kind)


class ShapedArray:
  """An array's type (jax.core.ShapedArray, as jax.typeof returns it): shape, dtype and
  sharding. str() is JAX's notation, float32[8@X,4]: a dimension split over Explicit mesh axes
  shows them after '@'; Auto and Manual axes are not part of the type. Inside a shard_map
  body, .mat (manual_axis_type) says which Manual axes the value varies over."""
  __slots__ = ("shape", "dtype", "sharding", "_str", "mat")
  weak_type = False

  def __init__(self, t, dtype=None, weak_type=False, *, sharding=None, varying=(),
               manual_axis_type=None):
    if dtype is not None:  # ShapedArray(shape, dtype, sharding=...), as jax.core's
      if sharding is not None:
        sharding = _typed_part(to_sharding(sharding, "ShapedArray"), len(tuple(t)))
      t = _core.type_of(_core.abstract_array(
          [int(d) for d in t], dtypes.to_core(dtypes.canonicalize(dtype, "ShapedArray")),
          to_sharding(sharding, "ShapedArray")._s if sharding is not None else None))
      if manual_axis_type is not None:
        varying = manual_axis_type.varying
    self.shape = tuple(t.shape)
    self.dtype = dtypes.from_core(t.dtype) if t.dtype in dtypes._FROM_CORE else t.dtype
    self.sharding = _padded(NamedSharding._wrap(t.sharding), len(self.shape)) if (
        t.sharding is not None) else None
    if dtype is not None and sharding is None:  # as JAX's: no mesh yet (the empty one)
      self.sharding = NamedSharding(AbstractMesh((), ()), PartitionSpec(*[None] * len(self.shape)))
    self._str = t.to_string()
    self.mat = ManualAxisType(varying=varying)

  manual_axis_type = property(lambda self: self.mat)

  def update(self, shape=None, dtype=None, weak_type=None, *, sharding=None, **kw):
    """A copy with the given fields replaced (jax.core.ShapedArray.update)."""
    mat = kw.pop("manual_axis_type", None) or kw.pop("mat", None) or self.mat
    if kw:
      raise PartixError(f"[ShapedArray.update] unknown fields {sorted(kw)}")
    return ShapedArray(self.shape if shape is None else shape,
                       self.dtype if dtype is None else dtype,
                       sharding=self.sharding if sharding is None else sharding,
                       manual_axis_type=mat)

  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: int(np.prod(self.shape)))

  def str_short(self, short_dtypes=False, mesh_axis_types=False):
    """The type as text; with short_dtypes, numpy's short names (f32, i32, bf16) as JAX
    writes them."""
    if not short_dtypes:
      return self._str
    long_name = dtypes.dtype(self.dtype).name if not isinstance(self.dtype, str) else self.dtype
    return _SHORT_DTYPE.get(long_name, long_name) + self._str[len(long_name):]

  def __str__(self):
    return self._str

  def __repr__(self):
    return f"ShapedArray({self._str})"

  def __eq__(self, other):
    return isinstance(other, ShapedArray) and self._str == other._str and (
        self.sharding == other.sharding)

  def __hash__(self):
    return hash(self._str)


_SHORT_DTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
                "uint16": "u16", "uint32": "u32", "bool": "bool"}


def typeof(x):
  """jax.typeof: x's type. A concrete array's sharding is its own; a traced value's sharding
  along Explicit mesh axes is computed per op while tracing (explicit sharding), and otherwise
  shows what is known (a jit argument's fixed sharding, a constrained value)."""
  if isinstance(x, ShapeDtypeStruct):  # its declared type, varying axes included
    return ShapedArray(x.shape, x.dtype, sharding=x.sharding, varying=x.vma)
  if getattr(type(x), "_partix_ref", False):  # a jax.Ref (refs.py): Ref{its value's type}
    return x.aval
  a = core(x, api="typeof")
  t = ShapedArray(_core.type_of(a), varying=_core.varying_axes(a) if a.is_tracer() else ())
  if a.is_tracer():  # partial sums are not "varying" in JAX's types, but unreduced
    unreduced, reduced = _core.sum_types(a)
    if unreduced or reduced:
      t.mat = ManualAxisType(varying=t.mat.varying - frozenset(unreduced),
                             unreduced=unreduced, reduced=reduced)
  if t.sharding is None and a.is_tracer() and _constraint_mesh(x) is not None:
    t.sharding = NamedSharding(_constraint_mesh(x), PartitionSpec(*[None] * t.ndim))
  if t.sharding is None and a.is_tracer() and _core.has_current_mesh():
    # As JAX: under a mesh every traced value's type names it (with its axis types, Manual
    # inside shard_map); no Explicit axis splits it, so its spec is all None.
    t.sharding = NamedSharding(Mesh._wrap(_core.current_mesh()), PartitionSpec(*[None] * t.ndim))
  if a.is_tracer() and t.sharding is not None and not isinstance(t.sharding.mesh, AbstractMesh):
    # As JAX: a traced value's type names the abstract mesh (its sizes, names and types), not
    # the devices the program will run on.
    t.sharding = NamedSharding(t.sharding.mesh.abstract_mesh, t.sharding.spec,
                               memory_kind=t.sharding._kind)
  return t


def reshard(xs, out_shardings):
  """jax.sharding.reshard: xs (a pytree) with these shardings (NamedSharding, or a
  PartitionSpec on the current mesh). Eagerly the data moves as with device_put; inside jit
  it is a constraint the partitioner always honours."""
  leaves, treedef = tu.tree_flatten(xs)
  if isinstance(out_shardings, (NamedSharding, PartitionSpec)):
    per = [out_shardings] * len(leaves)
  else:
    per = _expand_prefix(out_shardings, treedef, "reshard", "out_shardings")
  out = []
  for leaf, s in zip(leaves, per):
    if isinstance(s, PartitionSpec) and (s.unreduced or s.reduced):
      s = to_sharding(s, "reshard")  # the core's PartitionSpec holds no unreduced axes
    if s is None:
      out.append(leaf)
    elif isinstance(s, PartitionSpec):
      out.append(Array(_core.reshard_spec(core(leaf, api="reshard"), s._core())))
    elif isinstance(s, NamedSharding):
      if _abstract_sharding(s) and not _core.is_tracing():
        own = leaf.sharding if isinstance(leaf, Array) and leaf.committed else None
        if concrete_context_mesh() is None and isinstance(own, NamedSharding) and (
            own.mesh.shape_tuple == s.mesh.shape_tuple):
          s = NamedSharding(own.mesh, s.spec, memory_kind=s._kind)
        else:
          s = concrete_sharding(s, "reshard")
      out.append(Array(_core.reshard(core(leaf, api="reshard"), s._s)))
    else:
      raise PartixError(f"[reshard] {s!r} is not a NamedSharding or PartitionSpec")
  return tu.tree_unflatten(treedef, out)


def _axes_list(axes, api):
  if axes is None:
    return []
  if isinstance(axes, str):
    return [axes]
  if isinstance(axes, (tuple, list)) and all(isinstance(a, str) for a in axes):
    return list(axes)
  raise PartixError(f"[{api}] axes={axes!r} is not a mesh axis name or a tuple of names")


def _spec_of(s, api, what):
  if isinstance(s, NamedSharding):
    return s.spec
  if isinstance(s, PartitionSpec):
    return s
  raise PartixError(f"[{api}] {what} must be a PartitionSpec or NamedSharding, got {s!r:.60}")


def _specs(shardings, n, api, what):
  """One spec for every array, or one each (a list or tuple with an entry per array)."""
  if shardings is None:
    raise PartixError(f"[{api}] needs {what}= (how its results are to be sharded)"
                      if what.startswith("out") else f"[{api}] needs {what}=")
  if isinstance(shardings, (PartitionSpec, NamedSharding)):
    return [_spec_of(shardings, api, what)._core()]
  if isinstance(shardings, (list, tuple)) and len(shardings) == n:
    return [_spec_of(s, api, what)._core() for s in shardings]
  raise PartixError(f"[{api}] {what} needs one PartitionSpec for all {n} arrays or one each, "
                    f"got {shardings!r:.80}")


def _region_call(api, run, fun, args, kwargs):
  """Calls fun(*args, **kwargs) through the C++ region `run(body, leaves)` (auto_axes or
  explicit_axes): leaves cross as core arrays, the result's tree is kept on the Python side."""
  leaves, treedef = tu.tree_flatten(args)
  box = {}

  def body(cs):
    r = fun(*tu.tree_unflatten(treedef, [Array(c) for c in cs]), **kwargs)
    rl, box["tree"] = tu.tree_flatten(r)
    return [core(x, api=api) for x in rl]
  res = run(body, [core(x, api=api) for x in leaves])
  return tu.tree_unflatten(box["tree"], [Array(c) for c in res])


def auto_axes(fun=None, *, axes=None, out_sharding=None):
  """jax.sharding.auto_axes: fun runs with `axes` (default: every Explicit axis) Auto, so its
  arguments' types forget them and the partitioner decides inside; its results are then
  resharded to out_sharding (given here or at the call, one for all results or one each)."""
  if fun is None:
    return lambda f: auto_axes(f, axes=axes, out_sharding=out_sharding)
  ax = _axes_list(axes, "auto_axes")

  @functools.wraps(fun)
  def wrapped(*args, out_sharding=out_sharding, out_shardings=None, **kwargs):
    outs = out_sharding if out_sharding is not None else out_shardings
    # One spec serves every result; a list gives one per result leaf (C++ checks the count).
    single = outs is None or isinstance(outs, (PartitionSpec, NamedSharding))
    specs = _specs(outs, 1, "auto_axes", "out_sharding") if single else \
        [_spec_of(s, "auto_axes", "out_sharding")._core() for s in outs]
    return _region_call("auto_axes", lambda body, ls: _core.auto_axes(body, ls, specs, ax), fun,
                        args, kwargs)
  return wrapped


def explicit_axes(fun=None, *, axes=None, in_sharding=None):
  """jax.sharding.explicit_axes: fun runs with `axes` (default: every Auto axis) Explicit: its
  arguments enter resharded to in_sharding (given here or at the call, one for all arguments or
  one each) and typed; its results leave with those axes Auto again."""
  if fun is None:
    return lambda f: explicit_axes(f, axes=axes, in_sharding=in_sharding)
  ax = _axes_list(axes, "explicit_axes")

  @functools.wraps(fun)
  def wrapped(*args, in_sharding=in_sharding, in_shardings=None, **kwargs):
    ins = in_sharding if in_sharding is not None else in_shardings
    n = len(tu.tree_leaves(args))
    if isinstance(ins, (list, tuple)) and len(ins) == len(args) and len(args) != n:
      per = []  # one per argument: repeated for each of its leaves
      for a, s in zip(args, ins):
        per += [s] * len(tu.tree_leaves(a))
      ins = per
    specs = _specs(ins, n, "explicit_axes", "in_sharding")
    return _region_call("explicit_axes", lambda body, ls: _core.explicit_axes(body, ls, specs, ax),
                        fun, args, kwargs)
  return wrapped


def _constrain_tree(x, shardings):
  """A nested jit's in/out shardings as constraints: a None entry leaves its leaves free."""
  leaves, treedef = tu.tree_flatten(x)
  if isinstance(shardings, (NamedSharding, PartitionSpec)):
    per = [shardings] * len(leaves)
  else:
    per = _expand_prefix(shardings, treedef, "jit", "shardings")
  return tu.tree_unflatten(treedef, [leaf if s is None else _constrain(leaf, s, "jit")
                                     for leaf, s in zip(leaves, per)])


def with_sharding_constraint(x, shardings):
  """lax.with_sharding_constraint: x (a pytree) has these shardings at this point of the
  program; shardings is one sharding or a matching pytree prefix."""
  leaves, treedef = tu.tree_flatten(x)
  if isinstance(shardings, (NamedSharding, PartitionSpec)):
    per = [shardings] * len(leaves)
  else:
    per = _expand_prefix(shardings, treedef, "with_sharding_constraint", "shardings")
  if leaves and any(s is None for s in per):
    raise PartixError("[with_sharding_constraint] One of with_sharding_constraint arguments got "
                      "sharding None which is not allowed: give a sharding or PartitionSpec for "
                      "every array (P() replicates)")
  out = [_constrain(leaf, s, "with_sharding_constraint") for leaf, s in zip(leaves, per)]
  return tu.tree_unflatten(treedef, out)
