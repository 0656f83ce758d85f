"""jax.Ref: mutable array references (jax.new_ref, jax.freeze, ref[...] reads and writes).

partix's programs are pure, so a Ref is functionalized in Python:

- Eagerly a Ref holds a partix Array; a read returns it, a write replaces it (moved onto the
  sharding the Ref had, so a Ref keeps its placement).
- A Ref passed to jit or shard_map goes in as its value; inside, the function sees a Ref over
  the traced value (a shard_map body: its block), writes replace that traced value, and the
  last value comes back as a hidden result written into the caller's Ref after the call.
- A Ref a jitted function reads from its closure is found while tracing (the trace stops and
  the function is traced again with that Ref as a hidden argument, re-read at every call), so a
  compiled program never keeps the value the Ref had when it was traced.
- A Ref made while tracing (new_ref of a traced value) lives in that trace only; freeze gives
  its value.
grad, vmap and the other transformations refuse Ref arguments."""
import sys
import threading
import weakref

import numpy as np

from partix import _core
from partix._src import dtypes
from partix._src import tree_util as tu
from partix._src import api
from partix._src import batching
from partix._src.api import Jitted, device_put, typeof
from partix._src.core import Array, PartixError, core
from partix._src.sharding import NamedSharding, PartitionSpec, get_abstract_mesh
from partix import numpy as jnp


class _State(threading.local):
  """Per thread: the jit traces binding closed-over Refs (innermost last), how many jit calls
  are running that can take a closed-over Ref as a hidden argument, and how many jits are
  inlined into a trace (for shard_map's eager rule on new_ref)."""

  def __init__(self):
    self.scopes = []
    self.catch = 0
    self.inlined = 0


_st = _State()


class ClosedRefRead(BaseException):
  """A trace under jit touched a Ref it was not given. Stops the trace (through the function's
  own `except Exception`); the jit call traces again with that Ref as a hidden argument."""

  def __init__(self, ref):
    super().__init__("a jitted function read a jax.Ref from its closure; partix traces it "
                     "again with the Ref as a hidden argument")
    self.ref = ref


# ---- types ----

class AbstractRef:
  """The type of a Ref (jax.ref.AbstractRef): the type of the array it holds."""
  __slots__ = ("inner_aval",)

  def __init__(self, inner_aval):
    self.inner_aval = inner_aval

  shape = property(lambda self: self.inner_aval.shape)
  dtype = property(lambda self: self.inner_aval.dtype)
  ndim = property(lambda self: len(self.inner_aval.shape))
  size = property(lambda self: int(np.prod(self.inner_aval.shape, dtype=np.int64)))
  sharding = property(lambda self: self.inner_aval.sharding)

  def str_short(self, short_dtypes=False, mesh_axis_types=False):
    inner = self.inner_aval.str_short(short_dtypes=short_dtypes, mesh_axis_types=mesh_axis_types)
    return f"Ref{{{inner}}}"

  def __repr__(self):
    return self.str_short()

  __str__ = __repr__

  def __eq__(self, other):
    return type(other) is AbstractRef and self.inner_aval == other.inner_aval

  def __hash__(self):
    return hash((AbstractRef, self.inner_aval))


class Ref:
  """A mutable array reference (jax.Ref), made by new_ref. ref[...] reads its value, ref[idx]
  a part of it (numpy indexing); ref[...] = v and ref[idx] = v write (v of the shape and dtype
  written over, a Python scalar of the same kind cast), ref[...] += v updates."""
  __slots__ = ("_value", "_local", "_manual", "_written", "__weakref__")
  _partix_ref = True  # what tracing.py's argument conversion recognizes (no import cycle)

  def __init__(self, *_, **__):
    raise PartixError("[Ref] Refs are made by new_ref(value), not by calling Ref")

  @classmethod
  def _make(cls, value, local):
    r = object.__new__(cls)
    r._value, r._local, r._written = value, local, False
    r._manual = _manual_axes() if local else frozenset()
    return r

  # ---- type-level information ----
  @property
  def aval(self):
    return AbstractRef(typeof(_get(self, "Ref.aval")))

  shape = property(lambda self: _get(self, "Ref.shape").shape)
  dtype = property(lambda self: _get(self, "Ref.dtype").dtype)
  ndim = property(lambda self: len(_get(self, "Ref.ndim").shape))
  size = property(lambda self: _get(self, "Ref.size").size)
  sharding = property(lambda self: _get(self, "Ref.sharding").sharding)
  committed = property(lambda self: True)
  weak_type = False

  def __len__(self):
    shape = self.shape
    if not shape:
      raise PartixError("[Ref.__len__] len() of a 0-d Ref")
    return shape[0]

  def __iter__(self):  # (not numpy's fallback through __getitem__, which would never stop)
    v = _get(self, "Ref.__iter__")
    return iter(v)

  # ---- reads and writes ----
  def __getitem__(self, idx):
    v = _get(self, "Ref.__getitem__")
    return v if _whole(idx) else v[idx]

  def __setitem__(self, idx, value):
    api = "Ref.__setitem__"
    cur = _get(self, api)
    if _whole(idx):
      new = _coerce(value, cur.shape, cur.dtype, api)
    else:
      new = cur.at[idx].set(_coerce(value, _indexed_shape(cur, idx, api), cur.dtype, api))
    _put(self, new, api)

  def addupdate(self, x, idx=()):
    """ref[idx] += x, as jax.ref.addupdate (x of the shape and dtype of ref[idx])."""
    api = "Ref.addupdate"
    cur = _get(self, api)
    if _whole(idx):
      new = cur + _coerce(x, cur.shape, cur.dtype, api)
    else:
      new = cur.at[idx].add(_coerce(x, _indexed_shape(cur, idx, api), cur.dtype, api))
    _put(self, new, api)

  def unsafe_buffer_pointer(self):
    """The address of the first device buffer of the value the Ref holds (JAX's; a write
    under jit may give the Ref a new buffer, as partix functionalizes writes)."""
    return _get(self, "Ref.unsafe_buffer_pointer").unsafe_buffer_pointer()

  def __array__(self, *_, **__):
    raise PartixError(f"[Ref] {_describe(self)} is a mutable reference, not an array: read its "
                      "value with ref[...] (or jax.freeze(ref))")

  def __repr__(self):
    v = self._value
    if isinstance(v, Array) and not v._a.is_tracer() and not v._a.is_deleted():
      text = repr(v)
      return "Ref" + text[5:] if text.startswith("Array") else f"Ref({text})"
    return _describe(self)


def _describe(ref):
  """A Ref's type as text (never its values: safe while tracing)."""
  v = ref._value
  if isinstance(v, Array):
    return f"Ref{{{v._aval_str()}}}"
  return "Ref"


def _manual_axes():
  """The mesh axes the current trace is manual over (inside a shard_map body), else none."""
  if not _core.is_tracing():
    return frozenset()
  return frozenset(getattr(get_abstract_mesh(), "manual_axes", ()) or ())


# ---- the values a Ref stands for, per trace ----

class _Binding:
  """A Ref from outside a jit trace, bound to a traced value for the length of that trace."""
  __slots__ = ("ref", "value", "written", "manual")

  def __init__(self, ref, value):
    self.ref, self.value, self.written = ref, value, False
    self.manual = _manual_axes()


class _Scope:
  """One jit trace's bindings of the Refs its function closes over."""

  def __init__(self, refs, values):
    self.bindings = [_Binding(r, v) for r, v in zip(refs, values)]
    self.by_id = {id(b.ref): b for b in self.bindings}


def _binding(ref):
  for scope in reversed(_st.scopes):
    b = scope.by_id.get(id(ref))
    if b is not None and b.ref is ref:
      return b
  return None


def _get(ref, api):
  """The value ref stands for here: its own (eagerly, or a Ref made in this trace), the traced
  value a jit trace bound it to, or, in a trace nothing caches (grad, vmap or control flow
  called eagerly), its value now."""
  if not isinstance(ref, Ref):
    raise PartixError(f"[{api}] {ref!r:.80} ({type(ref).__name__}) is not a jax.Ref")
  if ref._local or not _core.is_tracing():
    return ref._value
  b = _binding(ref)
  if b is not None:
    return b.value
  if _st.catch:
    raise ClosedRefRead(ref)
  return ref._value


def _put(ref, value, api):
  """Writes value (already checked) into ref as seen here (see _get)."""
  if ref._local:
    _same_level(ref._manual, ref, api)
    ref._value, ref._written = value, True
    return
  if not _core.is_tracing():
    ref._value = _placed(value, ref._value, api)
    return
  b = _binding(ref)
  if b is not None:
    _same_level(b.manual, ref, api)
    b.value, b.written = value, True
    return
  if _st.catch:
    raise ClosedRefRead(ref)
  raise PartixError(f"[{api}] cannot write into {_describe(ref)}, a Ref made outside the "
                    "function being traced (by grad, vmap, checkpoint or control flow called "
                    "outside jit), whose traced values cannot leave that trace: call it inside "
                    "jit, or write the Ref after the transformation returns")


def _same_level(manual, ref, api):
  if _manual_axes() != manual:
    raise PartixError(f"[{api}] cannot write into {_describe(ref)} inside a shard_map body it "
                      "was not passed to (the Ref belongs to the trace around the shard_map): "
                      "pass the Ref to the shard_map as an argument")


def _placed(value, old, api):
  """An eager write keeps the Ref's placement: value moved onto the sharding old had."""
  if value._a.is_tracer():
    raise PartixError(f"[{api}] a traced value {value._aval_str()} cannot be written into a Ref "
                      "outside the trace it belongs to")
  if not isinstance(old, Array) or old._a.is_deleted():
    return value
  s = old.sharding
  if value.sharding == s:
    return value
  return device_put(value, s)


# ---- checks of the values written ----

def _whole(idx):
  return idx is Ellipsis or idx is None or (isinstance(idx, tuple) and (
      idx == () or (len(idx) == 1 and idx[0] is Ellipsis)))


def _basic(i):
  return i is None or i is Ellipsis or isinstance(i, slice) or (
      isinstance(i, (int, np.integer)) and not isinstance(i, bool))


def _indexed_shape(cur, idx, api):
  """The shape of cur[idx]: from the index alone for ints and slices, else traced."""
  items = idx if isinstance(idx, tuple) else (idx,)
  if all(_basic(i) for i in items):
    try:
      return np.broadcast_to(np.empty((), np.bool_), cur.shape)[idx].shape
    except IndexError as e:
      raise PartixError(f"[{api}] index {idx!r} does not fit the Ref's shape {cur.shape}: {e}")
  return tuple(cur[idx].shape)


def _coerce(value, shape, dtype, api):
  """value as an Array of exactly this shape and dtype: as JAX's ref_swap, a Python scalar (or
  an array of JAX's weak type) of the same kind (integer, floating) is cast, anything else must
  match."""
  if isinstance(value, Ref):
    raise PartixError(f"[{api}] cannot store a Ref ({_describe(value)}) into another Ref: read "
                      "its value with ref[...] first")
  scalar = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
      value, (bool, np.bool_)) and not isinstance(value, np.ndarray)
  if scalar and (dtypes.issubdtype(dtype, np.integer) and isinstance(value, (int, np.integer))
                 or dtypes.issubdtype(dtype, np.floating) and isinstance(value, float)):
    x = Array(core(value, dtype=dtype, api=api))  # a Python number of the Ref's kind
  else:
    x = value if isinstance(value, Array) else Array(core(value, api=api))
  if tuple(x.shape) != tuple(shape):
    raise PartixError(f"[{api}] the value written has shape {tuple(x.shape)}, but the Ref's "
                      f"place written has shape {tuple(shape)}: a Ref's writes keep its shape "
                      "(reshape or broadcast the value first)")
  if x.dtype != dtype:
    raise PartixError(f"[{api}] the value written has dtype {x.dtype}, but the Ref holds "
                      f"{dtype}: a Ref's writes keep its dtype (cast with .astype({dtype}) first)")
  return x


# ---- the public functions ----

def new_ref(init_val, *, memory_space=None, kind=None):
  """jax.new_ref: a Ref holding init_val (an array, numpy array or Python number). Made while
  tracing, it lives in that trace (jax.freeze gives its value as an array)."""
  api = "new_ref"
  if memory_space is not None:
    raise PartixError(f"[{api}] memory_space={memory_space!r}: partix keeps every array in "
                      "device memory; leave memory_space unset")
  if kind not in (None, "no_grad_no_remat"):
    raise PartixError(f"[{api}] kind={kind!r} is not one of None, 'no_grad_no_remat'")
  if isinstance(init_val, Ref):
    raise PartixError(f"[{api}] its initial value is a Ref ({_describe(init_val)}); pass an "
                      "array (read the Ref with ref[...])")
  x = init_val if isinstance(init_val, Array) else Array(core(init_val, api=api))
  core(x, api=api)  # a deleted (donated) array is refused here
  tracing = _core.is_tracing()
  if tracing and _in_eager_shard_map():
    raise PartixError(f"[{api}] Eager shard_map cannot return a `jax.Ref`. Please wrap your "
                      "shard_map in `jax.jit` (new_ref was called in the body of a shard_map "
                      "called outside jit)")
  return Ref._make(x, local=tracing)


def _in_eager_shard_map():
  return getattr(api._eager_bodies, "depth", 0) > 0 and not _st.inlined


def freeze(ref):
  """jax.freeze: the value ref holds, as an array (a Ref made inside jit leaves it so)."""
  return _get(ref, "freeze")


def empty_ref(ty, memory_space=None):
  """jax.empty_ref: a Ref of ty's shape and dtype (and sharding, when ty has one). partix fills
  it with zeros (JAX leaves it uninitialized)."""
  shape, dtype = getattr(ty, "shape", None), getattr(ty, "dtype", None)
  if shape is None or dtype is None:
    raise PartixError(f"[empty_ref] {ty!r:.80} has no shape and dtype: give a "
                      "ShapeDtypeStruct or jax.typeof(x)")
  x = jnp.zeros(tuple(shape), dtype)
  s = getattr(ty, "sharding", None)
  if s is not None and not _core.is_tracing():
    x = api.device_put(x, s)
  return new_ref(x, memory_space=memory_space)


def free_ref(ref):
  """jax.free_ref: declares the Ref no longer used (partix frees its value when nothing holds
  it); returns ()."""
  _get(ref, "free_ref")
  return ()


def ref_get(ref, idx=None):
  """jax.ref.get: ref[idx] (None: the whole value)."""
  return ref[... if idx is None else idx]


def ref_set(ref, idx, value):
  """jax.ref.set: ref[idx] = value (idx None: the whole value)."""
  ref[... if idx is None else idx] = value


def ref_swap(ref, idx, value):
  """jax.ref.swap: writes value at idx and returns what was there."""
  idx = ... if idx is None else idx
  old = ref[idx]
  ref[idx] = value
  return old


def ref_addupdate(ref, idx, x):
  """jax.ref.addupdate: ref[idx] += x."""
  ref.addupdate(x, () if idx is None else idx)


# ---- jit ----

class _Slot:
  """Stands in a jit's arguments where a Ref was: the Ref's position among them (part of the
  signature), its value passed separately."""
  __slots__ = ("k",)

  def __init__(self, k):
    self.k = k


tu.register_pytree_node(_Slot, lambda s: ((), s.k), lambda k, _: _Slot(k))


class _JitRefs:
  """A jitted function's Refs: those it closes over (found while tracing, kept in the order
  found) and its inner jits, which take the Refs' values as a hidden first argument."""

  def __init__(self):
    self.closed = []
    self.inner = {}


def _jit_state(jitted):
  st = jitted.__dict__.get("_refs_state")
  if st is None:
    st = jitted.__dict__["_refs_state"] = _JitRefs()
  return st


def involved(jitted, args, kwargs):
  """Whether a jit call takes the Ref path: a Ref among its arguments, or Refs the function was
  found to close over. Calls of Arrays alone cost one type check per argument."""
  st = jitted.__dict__.get("_refs_state")
  if st is not None and st.closed:
    return True
  if not kwargs and all(type(a) is Array for a in args):
    return False
  return any(isinstance(x, Ref) for x in tu.tree_leaves((args, kwargs)))


def catching(jitted, args, kwargs, call):
  """call(args, kwargs), a jit call with no Ref known: when its trace reads a Ref from the
  function's closure, the call is made again on the Ref path with that Ref."""
  if jitted.__dict__.get("_refs_inner"):  # an inner jit: its caller catches
    return call(args, kwargs)
  _st.catch += 1
  try:
    return call(args, kwargs)
  except ClosedRefRead as e:
    _jit_state(jitted).closed.append(e.ref)
  finally:
    _st.catch -= 1
  return call_jit(jitted, args, kwargs)


def inline_jit(jitted, args, kwargs):
  """A jit inlined into a trace (its function runs as part of the program around it)."""
  _st.inlined += 1
  try:
    return jitted._inline(args, kwargs)
  finally:
    _st.inlined -= 1


def _slotted(jitted, args, kwargs, api):
  """args and kwargs with each Ref in a dynamic argument replaced by a _Slot, and the Refs."""
  n = len(args)
  static = {a % n for a in jitted._static if -n <= a < n}
  refs, index = [], {}

  def slot(x):
    if not isinstance(x, Ref):
      return x
    if id(x) in index:
      raise PartixError(f"[{api}] the same Ref ({_describe(x)}) is passed twice; pass each Ref "
                        "once (two names for one Ref would each see the other's writes)")
    index[id(x)] = len(refs)
    refs.append(x)
    return _Slot(index[id(x)])

  def static_ok(where, a):
    if any(isinstance(x, Ref) for x in tu.tree_leaves(a)):
      raise PartixError(f"[{api}] static argument {where} holds a Ref; a Ref is mutable, so it "
                        "cannot be static: pass it as a dynamic argument")
    return a
  new_args = tuple(static_ok(i, a) if i in static else tu.tree_map(slot, a)
                   for i, a in enumerate(args))
  new_kwargs = {k: static_ok(k, v) if k in jitted._static_names else tu.tree_map(slot, v)
                for k, v in kwargs.items()}
  return new_args, new_kwargs, refs


def call_jit(jitted, args, kwargs):
  """A jit call on the Ref path: the Refs' values go in as a hidden argument (those passed,
  then those the function closes over), the values written come back as hidden results and are
  written into the Refs."""
  api = jitted._api
  st = _jit_state(jitted)
  new_args, new_kwargs, arg_refs = _slotted(jitted, args, kwargs, api)
  inner = st.inner.get(len(args))
  if inner is None:
    inner = st.inner[len(args)] = _inner_jit(jitted, st, new_args)
  while True:
    closed = list(st.closed)
    for r in closed:
      if any(r is a for a in arg_refs):
        raise PartixError(f"[{api}] the Ref {_describe(r)} is passed as an argument and also "
                          "read by the function from its closure; use one of the two")
    vals = (tuple(_get(r, api) for r in arg_refs), tuple(_get(r, api) for r in closed))
    _st.catch += 1
    try:
      out, finals = inner(vals, *new_args, **new_kwargs)
      break
    except ClosedRefRead as e:
      if any(e.ref is r for r in st.closed):
        raise PartixError(f"[{api}] internal error: {_describe(e.ref)} was bound and still "
                          "read as unbound") from None
      st.closed.append(e.ref)
    finally:
      _st.catch -= 1
  every = arg_refs + closed
  for k, v in finals.items():
    _put(every[k], v, api)
  return out


def _inner_jit(jitted, st, new_args):
  """The jit of _jit_body for jitted: its options, the argument numbers shifted past the hidden
  first argument (which in_shardings and out_shardings leave unconstrained)."""
  ins = jitted._in_shardings
  if isinstance(ins, (NamedSharding, PartitionSpec)):  # one sharding for every argument
    n = len(new_args)
    static = {a % n for a in jitted._static if -n <= a < n}
    ins = (None,) + (ins,) * (n - len(static))
  elif ins is not None:
    ins = (None,) + (tuple(ins) if isinstance(ins, (tuple, list)) else (ins,))
  outs = None if jitted._out_shardings is None else (jitted._out_shardings, None)

  def shift(nums):
    return tuple(a + 1 if a >= 0 else a for a in nums)
  inner = Jitted(_jit_body(jitted, st), ins, outs, shift(jitted._static), jitted._static_names,
                 shift(jitted._donate), jitted._donate_names, jitted._name, api=jitted._api)
  inner._device = jitted._device
  inner._placed_by_argument = jitted._placed_by_argument
  inner._compiler_options = getattr(jitted, "_compiler_options", {})
  inner._refs_inner = True
  return inner


def _jit_body(jitted, st):
  """The traced function of a jit on the Ref path: Refs over the traced values for the Refs
  passed, the closed-over Refs bound to theirs; returns the results and the values written
  (a dict by position among the Refs, so the result tree says which were written)."""
  fun, api = jitted._fun, jitted._api

  def body(vals, *args, **kwargs):
    arg_vals, closed_vals = vals
    locs = [Ref._make(v, local=True) for v in arg_vals]
    args, kwargs = tu.tree_map(lambda x: locs[x.k] if isinstance(x, _Slot) else x,
                               (args, kwargs), is_leaf=lambda x: isinstance(x, _Slot))
    scope = _Scope(st.closed[:len(closed_vals)], closed_vals)
    _st.scopes.append(scope)
    try:
      out = fun(*args, **kwargs)
    finally:
      _st.scopes.pop()
    refuse_results(out, api)
    finals = {k: r._value for k, r in enumerate(locs) if r._written}
    finals.update({len(locs) + k: b.value for k, b in enumerate(scope.bindings) if b.written})
    return out, finals
  return body


def refuse_results(out, api, eager_map=False):
  for x in tu.tree_leaves(out):
    if isinstance(x, Ref):
      if eager_map:
        raise PartixError(f"[{api}] Eager shard_map cannot return a `jax.Ref`. Please wrap "
                          f"your shard_map in `jax.jit` (it returned {_describe(x)})")
      raise PartixError(f"[{api}] the function returned a Ref ({_describe(x)}); return its "
                        "value instead (ref[...] or jax.freeze(ref))")


# ---- shard_map ----

def any_ref(leaves):
  return any(isinstance(x, Ref) for x in leaves)


# Per mapped function, the shard_maps of its bodies over Refs by signature (see _remapped),
# so an eager call with Refs is traced once per signature, as one without.
_map_cache = weakref.WeakKeyDictionary()


def map_with_refs(f, leaves, treedef, out_specs, specs_of, remap, key, api="shard_map"):
  """A shard_map call with Refs among its argument leaves: each Ref's value goes in with its
  in_spec, the body sees a Ref over its block, and the block's last value comes back with the
  same spec (an extra result) and is written into the Ref. specs_of(values) gives the per-leaf
  in_specs (None: passed through as it is); remap(body, in_specs, out_specs) the shard_map;
  key what else remap depends on (mesh, manual axes, check_vma)."""
  vals, seen = [], set()
  for x in leaves:
    if isinstance(x, Ref):
      if id(x) in seen:
        raise PartixError(f"[{api}] the same Ref ({_describe(x)}) is passed twice; pass each "
                          "Ref once")
      seen.add(id(x))
      vals.append(_get(x, api))
    else:
      vals.append(x)
  per = specs_of(vals)
  ref_at = tuple(i for i, x in enumerate(leaves) if isinstance(x, Ref) and per[i] is not None)
  given = [leaves[i] if per[i] is None else vals[i] for i in range(len(leaves))]
  mapped = _remapped(f, treedef, per, ref_at, out_specs, remap, key, api)
  out, finals = mapped(*tu.tree_unflatten(treedef, given))
  for i, v in zip(ref_at, finals):
    _put(leaves[i], v, api)
  return out


def _remapped(f, treedef, per, ref_at, out_specs, remap, key, api):
  """The shard_map of f's body over the Refs at ref_at, kept per signature while f lives."""
  eager = not _core.is_tracing()

  def make(keep=True):
    # A kept body holds f weakly: the cache's entry must not keep its own key alive.
    body = _MapBody(f, ref_at, api, eager, weak=not keep)
    return remap(body, tu.tree_unflatten(treedef, per),
                 (out_specs, tuple(per[i] for i in ref_at)))
  if not eager or any(per[i] is None for i in range(len(per))):
    return make()  # under a trace it is inlined (nothing to keep); statics may not hash
  try:
    sig = (treedef, tuple(per), ref_at, out_specs, key)
    hash(sig)
    per_f = _map_cache.setdefault(f, {})
  except TypeError:  # f not weakly referable, or a part of the signature not hashable
    return make()
  mapped = per_f.get(sig)
  if mapped is None:
    mapped = per_f[sig] = make(keep=False)
  return mapped


class _MapBody:
  """A shard_map body over Ref arguments: the leaves at ref_at become Refs over their blocks;
  returns f's results and those Refs' last values."""

  def __init__(self, f, ref_at, api, eager, weak=False):
    self.f = weakref.ref(f) if weak else (lambda: f)
    self.ref_at, self.api, self.eager = ref_at, api, eager
    self.__name__ = getattr(f, "__name__", "shard_map_body")

  def __call__(self, *args):
    leaves, treedef = tu.tree_flatten(args)
    locs = []
    for i in self.ref_at:
      locs.append(Ref._make(leaves[i], local=True))
      leaves[i] = locs[-1]
    out = self.f()(*tu.tree_unflatten(treedef, leaves))
    refuse_results(out, self.api, eager_map=self.eager)
    return out, tuple(r._value for r in locs)


def vmap_with_refs(fun, leaves, tree, axes, out_axes, remap, api="vmap"):
  """A vmap call with Refs among its argument leaves (tree: of (args, kwargs); axes: each
  leaf's in_axis): each Ref's value is mapped along its axis, the function sees a Ref over
  one example's slice, and the slices' last values come back stacked along the same axis (an
  extra result) and are written into the Ref. A Ref of in_axis None must not be written a
  per-example value (vmap refuses that result as unbatchable along None).
  remap(body, out_axes) is the vmap with the caller's options."""
  ref_at = [i for i, x in enumerate(leaves) if isinstance(x, Ref)]
  if len({id(leaves[i]) for i in ref_at}) < len(ref_at):
    raise PartixError(f"[{api}] the same Ref is passed twice; pass each Ref once")
  vals = [_get(x, api) if isinstance(x, Ref) else x for x in leaves]

  def body(*a, **k):
    ls = tu.tree_leaves((a, k))
    locs = []
    for i in ref_at:
      locs.append(Ref._make(ls[i], local=True))
      ls[i] = locs[-1]
    a2, k2 = tu.tree_unflatten(tree, ls)
    out = fun(*a2, **k2)
    refuse_results(out, api)
    return out, tuple(r._value for r in locs)
  a, k = tu.tree_unflatten(tree, vals)
  out, finals = remap(body, (out_axes, tuple(axes[i] for i in ref_at)))(*a, **k)
  for i, v in zip(ref_at, finals):
    _put(leaves[i], v, api)
  return out


api.set_ref_rules(sys.modules[__name__])
batching.set_ref_rules(vmap_with_refs)
