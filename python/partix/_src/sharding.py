"""Device, Mesh, PartitionSpec, NamedSharding, AxisType and the current-mesh context, with
JAX's names and behaviour, over partix._core."""
import contextlib
import functools
import enum
import math
import threading
import weakref

import numpy as np

from partix import _core
from partix._src.errors import PartixError, PartixTypeError


class Device:
  """One device of the job (a virtual CPU device): id, process_index, platform."""
  __slots__ = ("_d",)

  def __init__(self, d):
    self._d = d

  @classmethod
  def _wrap(cls, d):
    return cls(d)

  id = property(lambda self: self._d.id)
  process_index = property(lambda self: self._d.process_index)
  platform = property(lambda self: self._d.platform)
  device_kind = property(lambda self: self._d.platform)
  host_id = process_index

  def __eq__(self, other):
    return isinstance(other, Device) and other._d.id == self._d.id

  def __hash__(self):
    return hash(("partix.Device", self._d.id))

  def __repr__(self):
    return f"CpuDevice(id={self.id})" if self.platform == "cpu" else \
        f"Device(id={self.id}, platform={self.platform!r})"

  def memory_stats(self):
    return _core.memory_stats(self.id)


class AxisType(enum.Enum):
  Auto = "Auto"
  Explicit = "Explicit"
  Manual = "Manual"

  def __repr__(self):  # as JAX prints it inside a tuple: (Explicit, Auto)
    return self.name

  def _core(self):
    return getattr(_core.AxisType, self.value)


# Equal PartitionSpecs and Meshes are one object (JAX interns both); specs are tuples, which
# cannot be weakly referenced, so their table is bounded instead.
_MAX_INTERNED = 4096
_interned_specs = {}
_interned_meshes = weakref.WeakValueDictionary()
_interned_shardings = weakref.WeakValueDictionary()


class _Unconstrained:
  """P.UNCONSTRAINED: a dimension whose sharding the compiler may choose."""
  __slots__ = ()

  def __repr__(self):
    return "UNCONSTRAINED"

  def __reduce__(self):
    return "_UNCONSTRAINED"


_UNCONSTRAINED = _Unconstrained()


class PartitionSpec(tuple):
  """One entry per leading array dimension: None, a mesh axis name, or a tuple of names
  (major to minor). As jax.sharding.PartitionSpec (a tuple; printed P(...), as JAX 0.10)."""
  UNCONSTRAINED = _UNCONSTRAINED

  def __init_subclass__(cls, **kwargs):
    raise TypeError("Subclassing `jax.P` is prohibited (PartitionSpec cannot be subclassed)")

  def __new__(cls, *entries, unreduced=None, reduced=None):
    for e in entries:
      if not (e is None or e is _UNCONSTRAINED or isinstance(e, str) or (
          isinstance(e, (tuple, list)) and all(isinstance(n, str) for n in e))):
        raise PartixError(f"[PartitionSpec] entry {e!r} is not None, a mesh axis name or a "
                          "tuple of names")
    unreduced, reduced = _axis_set(unreduced, "unreduced"), _axis_set(reduced, "reduced")
    # As JAX: an empty tuple is None and a one-name tuple is the name (P(()) == P(None),
    # P(('x',)) == P('x')).
    def canonical(e):
      e = tuple(e) if isinstance(e, list) else e
      if isinstance(e, tuple) and len(e) <= 1:
        return e[0] if e else None
      return e
    self = super().__new__(cls, tuple(canonical(e) for e in entries))
    used = {n for e in self if e is not _UNCONSTRAINED
            for n in ((e,) if isinstance(e, str) else e or ())}
    if used & unreduced:
      raise PartixError(f"[PartitionSpec] partitions cannot overlap with unreduced axes passed "
                        f"to PartitionSpec. Got partitions: {tuple(self)} and unreduced axes: "
                        f"{set(sorted(unreduced))}")
    if used & reduced:
      raise PartixError(f"[PartitionSpec] partitions cannot overlap with reduced axes passed to "
                        f"PartitionSpec. Got partitions: {tuple(self)} and reduced axes: "
                        f"{set(sorted(reduced))}")
    if unreduced & reduced:
      raise PartixError("[PartitionSpec] `unreduced` and `reduced` argument to PartitionSpec "
                        f"cannot overlap. Got unreduced: {set(sorted(unreduced))} and reduced: "
                        f"{set(sorted(reduced))}")
    # Interned as JAX's: equal specs are one object (P(None, 'x') is P((), 'x')).
    key = (tuple(self), unreduced, reduced)
    known = _interned_specs.get(key)
    if known is not None:
      return known
    # Axes over which the value holds partial sums (JAX's P(..., unreduced={'x'})), and those
    # over which it is replicated but reduced (its gradient comes back unreduced): shardings,
    # out_sharding= and shard_map's specs take both (docs/concepts.md).
    self.unreduced, self.reduced = unreduced, reduced
    if len(_interned_specs) >= _MAX_INTERNED:  # a bound, not a cache policy: equality holds
      _interned_specs.clear()
    _interned_specs[key] = self
    return self

  def __repr__(self):
    body = ", ".join(repr(e) for e in self)
    if len(self) == 1 and not (self.unreduced or self.reduced):
      body += ","  # as a tuple prints, and JAX's P
    for name in ("unreduced", "reduced"):
      axes = getattr(self, name)
      if axes:
        body += (", " if len(self) else "") + f"{name}={set(sorted(axes))}"
    return "P(" + body + ")"

  __str__ = __repr__

  def __eq__(self, other):
    return tuple.__eq__(self, other) and (not isinstance(other, PartitionSpec) or (
        self.unreduced == other.unreduced and self.reduced == other.reduced))

  def __ne__(self, other):
    return not self.__eq__(other)

  __hash__ = tuple.__hash__

  def __add__(self, other):
    if not isinstance(other, tuple):
      return NotImplemented
    if isinstance(other, PartitionSpec):
      return PartitionSpec(*tuple(self), *tuple(other), unreduced=self.unreduced | other.unreduced,
                           reduced=self.reduced | other.reduced)
    if self.unreduced or self.reduced:  # as JAX: a plain tuple would silently drop them
      raise PartixTypeError("[PartitionSpec] unreduced in `__add__` of PartitionSpec: "
                            f"{self!r} + a tuple; add a PartitionSpec instead")
    return PartitionSpec(*tuple(self), *tuple(other))

  def __radd__(self, other):
    if not isinstance(other, tuple):
      return NotImplemented
    if self.unreduced or self.reduced:
      raise PartixTypeError("[PartitionSpec] unreduced in `__radd__` of PartitionSpec: a tuple "
                            f"+ {self!r}; add a PartitionSpec instead")
    return PartitionSpec(*tuple(other), *tuple(self))

  def _entries(self):
    if any(e is _UNCONSTRAINED for e in self):
      raise PartixError(f"[NamedSharding] Unconstrained dims are not allowed in {self!r}: "
                        "partix's shardings (jit's in_shardings and out_shardings, "
                        "device_put, with_sharding_constraint) name every dimension's axes; "
                        "P.UNCONSTRAINED, which lets the compiler choose, is not supported")
    out = []
    for e in self:
      out.append([] if e is None else [e] if isinstance(e, str) else list(e))
    return out

  def _core(self):
    return _core.PartitionSpec(self._entries())

  def _core_free(self):
    """The core spec with each P.UNCONSTRAINED entry unsplit."""
    return _core.PartitionSpec([[] if e is _UNCONSTRAINED else
                                [] if e is None else [e] if isinstance(e, str) else list(e)
                                for e in self])

  def __reduce__(self):
    if self.unreduced or self.reduced:
      return (functools.partial(PartitionSpec, unreduced=set(self.unreduced),
                                reduced=set(self.reduced)), tuple(self))
    return (PartitionSpec, tuple(self))


def _axis_set(axes, what):
  if axes is None:
    return frozenset()
  if isinstance(axes, str):
    return frozenset({axes})
  if any(n is None for n in axes):
    raise PartixError(f"[PartitionSpec] {what} cannot contain None: {what}={axes!r} must name "
                      "mesh axes only")
  if not all(isinstance(n, str) for n in axes):
    raise PartixError(f"[PartitionSpec] {what}={axes!r} is not a set of mesh axis names")
  return frozenset(axes)


P = PartitionSpec


def _spec_from_core(s):
  return PartitionSpec(*[None if not e else e[0] if len(e) == 1 else tuple(e) for e in s.entries])


class Mesh:
  """An N-D grid of devices with named axes (jax.sharding.Mesh). Mesh(devices, axis_names)
  takes an array of devices; `with mesh:` makes it the current mesh. Mesh(np.empty((),
  object), ()) is JAX's empty mesh: no axes and no device (size 0, empty)."""
  _empty = False

  def __new__(cls, *args, **kwargs):
    key = _mesh_key(*args, **kwargs) if cls is Mesh and (args or kwargs) else None
    known = _interned_meshes.get(key) if key is not None else None
    if known is not None:
      return known
    self = super().__new__(cls)
    if key is not None:
      _interned_meshes[key] = self
    return self

  def __init__(self, devices, axis_names, axis_types=None):
    if getattr(self, "_m", None) is not None:  # an interned mesh, already made
      return
    if isinstance(axis_names, str):
      axis_names = (axis_names,)
    axis_names = tuple(axis_names)
    for a in axis_names:
      if not isinstance(a, str):
        raise PartixError(f"[Mesh] axis name {a!r} ({type(a).__name__}) is not a string; mesh "
                          f"axes are named by strings, got axis_names {axis_names}")
    devs = np.asarray(devices, dtype=object)
    if devs.ndim != len(axis_names):
      raise PartixError(f"[Mesh] devices of shape {devs.shape} for {len(axis_names)} axis "
                        f"names {axis_names}: give one array dimension per name")
    if _is_empty_devices(devs, axis_names):
      # The core's mesh without axes stands behind it; the Python side says it is empty.
      self._devices, self._empty = devs, True
      self._init(_core.Mesh([], [], []), axis_types)
      return
    for d in devs.flat:
      if not isinstance(d, Device):
        raise PartixError(f"[Mesh] {d!r} is not a partix Device (use partix.devices())")
    self._devices = devs
    self._init(_core.Mesh(list(devs.shape), list(axis_names), [d._d for d in devs.flat]),
               axis_types)

  def _axes_of(self, t):
    return tuple(n for n, ty in zip(self.axis_names, self.axis_types) if ty is t)

  manual_axes = property(lambda self: self._axes_of(AxisType.Manual))
  auto_axes = property(lambda self: self._axes_of(AxisType.Auto))
  explicit_axes = property(lambda self: self._axes_of(AxisType.Explicit))

  def _auto_core(self):
    """The core mesh with every axis Auto: for the model library, which lays out its
    parameters and activations itself (by propagation) whatever types the user's axes have."""
    return self._m.with_axis_types([_core.AxisType.Auto] * len(self._m.axis_names))

  def _init(self, m, axis_types):
    self._m = m
    n = len(m.axis_names)
    if axis_types is None:
      axis_types = (AxisType.Auto,) * n
    elif isinstance(axis_types, AxisType):  # one type names one axis, as JAX reads it
      if n != 1:
        raise PartixError(f"[Mesh] Number of axis names should match the number of axis_types: "
                          f"{n} names {tuple(m.axis_names)} but one axis type {axis_types}")
      axis_types = (axis_types,)
    if not isinstance(axis_types, (tuple, list)) or not all(isinstance(t, AxisType)
                                                            for t in axis_types):
      raise PartixTypeError(f"[Mesh] axis_types {axis_types!r} must be of type AxisType, one "
                            f"per axis ({n})")
    axis_types = tuple(axis_types)
    if len(axis_types) != n:
      raise PartixError(f"[Mesh] Number of axis names should match the number of axis_types: "
                        f"{n} names {tuple(m.axis_names)} but axis_types {axis_types}")
    if any(t is not AxisType.Auto for t in axis_types):
      m = m.with_axis_types([t._core() for t in axis_types])
      self._m = m
    self.axis_types = axis_types

  @classmethod
  def _wrap(cls, m):
    types = tuple(AxisType(t.name) for t in m.axis_types)
    if m.is_abstract():  # the core's meshes of abstract devices are AbstractMeshes
      return AbstractMesh(tuple(m.axis_sizes), tuple(m.axis_names), types)
    self = cls.__new__(cls)
    self._devices = None
    self._empty = False
    self._init(m, types)
    return self

  @property
  def devices(self):
    if self._devices is None:
      flat = [Device(d) for d in self._m.devices]
      arr = np.empty(len(flat), dtype=object)
      arr[:] = flat
      self._devices = arr.reshape(tuple(self._m.axis_sizes)) if flat else arr
    return self._devices

  axis_names = property(lambda self: tuple(self._m.axis_names))
  axis_sizes = property(lambda self: tuple(self._m.axis_sizes))
  size = property(lambda self: 0 if self._empty else self._m.size)
  devices_flat = property(lambda self: [] if self._empty else list(self.devices.flat))

  @property
  def shape(self):
    return dict(zip(self.axis_names, self.axis_sizes))

  @property
  def device_ids(self):
    if self._empty:
      raise PartixError(f"[Mesh.device_ids] {self} is the empty mesh: it has no devices")
    return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

  @property
  def empty(self):
    """Whether this is the empty mesh (no axes and no device; size 0), as JAX's."""
    return self.size == 0

  @property
  def abstract_mesh(self):
    """This mesh without its devices: an AbstractMesh of the same axis sizes, names and types
    (equal for every mesh of that shape and types, whatever its devices), as JAX's."""
    return AbstractMesh(self.axis_sizes, self.axis_names, self.axis_types)

  @property
  def shape_tuple(self):
    return tuple(zip(self.axis_names, self.axis_sizes))

  def __enter__(self):
    # The open contexts are the entering thread's (one Mesh may be entered on several threads).
    ctx = use_mesh(self)
    ctx.__enter__()
    ctx.legacy_depth = len(_mesh_stack())  # the stack depth this `with mesh:` set
    _mesh_contexts().append(ctx)
    return self

  def __exit__(self, *exc):
    _mesh_contexts().pop().__exit__(*exc)

  def __call__(self, f):
    """@mesh as a decorator: f runs with this mesh as the current one (as `with mesh:`)."""
    if not callable(f):
      raise PartixError(f"[Mesh] a Mesh decorates a function, got {f!r}")

    @functools.wraps(f)
    def run(*args, **kwargs):
      with self:
        return f(*args, **kwargs)
    return run

  def __eq__(self, other):
    return isinstance(other, Mesh) and self._empty == other._empty and self._m == other._m

  def __hash__(self):
    return hash(self._m)

  def __repr__(self):  # as JAX 0.10 writes it
    if self._empty and type(self) is Mesh:
      return "Mesh(axis_sizes=(), axis_names=())"
    return (f"{type(self).__name__}(axis_sizes={self.axis_sizes}, axis_names={self.axis_names}, "
            f"axis_types=({', '.join(t.name for t in self.axis_types)}{',' if len(self.axis_types) == 1 else ''}))")

  def __str__(self):  # JAX's short form, as in NamedSharding's repr
    if self._empty and type(self) is Mesh:
      return "Mesh()"
    axes = ", ".join(f"{n!r}: {k}" for n, k in zip(self.axis_names, self.axis_sizes))
    types = ", ".join(t.name for t in self.axis_types) + ("," if len(self.axis_types) == 1 else "")
    return f"{type(self).__name__}({axes + ', ' if axes else ''}axis_types=({types}))"


def _is_empty_devices(devs, names):
  """Whether Mesh(devs, names) asks for the empty mesh: a 0-d array holding None, no names."""
  return devs.ndim == 0 and not names and devs.item() is None


def _axis_types_key(axis_types, n):
  """axis_types as a tuple for an interning key (None: not a form worth interning)."""
  if axis_types is None:
    return (AxisType.Auto,) * n
  if isinstance(axis_types, AxisType):
    return (axis_types,)
  if isinstance(axis_types, (tuple, list)):
    return tuple(axis_types)
  return None


def _check_axis_names(api, sizes, names):
  """Raises unless names are strings, one per axis size."""
  for a in names:
    if not isinstance(a, str):
      raise PartixError(f"[{api}] axis name {a!r} ({type(a).__name__}) is not a string; mesh "
                        f"axes are named by strings, got axis_names {names}")
  if len(sizes) != len(names):
    raise PartixError(f"[{api}] {len(sizes)} axis sizes {sizes} for {len(names)} axis names "
                      f"{names}: give one size per name")


def _mesh_key(devices, axis_names, axis_types=None):
  """What makes two Mesh(...) calls the same mesh (None: arguments Mesh will refuse or that
  are not worth interning)."""
  names = (axis_names,) if isinstance(axis_names, str) else axis_names
  try:
    names = tuple(names)
    devs = np.asarray(devices, dtype=object)
  except (TypeError, ValueError):
    return None
  if _is_empty_devices(devs, names) and not axis_types:
    return ("empty",)
  if not all(isinstance(n, str) for n in names) or devs.ndim != len(names) or not all(
      isinstance(d, Device) for d in devs.flat):
    return None
  types = _axis_types_key(axis_types, len(names))
  if types is None:
    return None
  if not all(isinstance(t, AxisType) for t in types):
    return None
  return (devs.shape, tuple(d.id for d in devs.flat), names, types)


class AbstractMesh(Mesh):
  """jax.sharding.AbstractMesh: axis sizes, names and types, and no devices (partix's core
  holds it as a mesh of abstract devices). Programs trace and lower on it without devices;
  where devices are needed (placing values, running, shard_map's eager call) it stands for the
  concrete mesh of its shape in context (set_mesh) or the arguments' mesh. Equal abstract
  meshes are one object (interned, as JAX's), so they compare and hash alike."""

  def __new__(cls, axis_sizes=(), axis_names=(), axis_types=None):
    key = _abstract_key(axis_sizes, axis_names, axis_types)
    known = _interned_meshes.get(key) if key is not None else None
    if known is not None:
      return known
    self = object.__new__(cls)
    if key is not None:
      _interned_meshes[key] = self
    return self

  def __init__(self, axis_sizes, axis_names, axis_types=None):
    if getattr(self, "_m", None) is not None:  # an interned mesh, already made
      return
    if isinstance(axis_names, str):
      axis_names = (axis_names,)
    axis_sizes, axis_names = tuple(axis_sizes), tuple(axis_names)
    _check_axis_names("AbstractMesh", axis_sizes, axis_names)
    self._devices = None
    self._empty = not axis_sizes  # as JAX's: no axes is the empty mesh, of size 0
    self._init(_core.make_abstract_mesh(list(axis_sizes), list(axis_names)), axis_types)

  @property
  def abstract_mesh(self):
    return self

  def update(self, axis_sizes=None, axis_names=None, axis_types=None):
    """A copy with some of axis_sizes, axis_names and axis_types replaced (as JAX's)."""
    return AbstractMesh(self.axis_sizes if axis_sizes is None else axis_sizes,
                        self.axis_names if axis_names is None else axis_names,
                        self.axis_types if axis_types is None else axis_types)

  def update_axis_types(self, name_to_type):
    """A copy whose axes named in name_to_type ({name: AxisType}) have those types."""
    unknown = sorted(set(name_to_type) - set(self.axis_names))
    if unknown:
      raise PartixError(f"[AbstractMesh.update_axis_types] {unknown[0]!r} is not an axis of "
                        f"{self}")
    return self.update(axis_types=tuple(name_to_type.get(n, t) for n, t in
                                        zip(self.axis_names, self.axis_types)))

  # As JAX's: an abstract mesh has no devices, and is no context of its own (use_abstract_mesh
  # sets it; set_mesh takes a Mesh).
  def _no(self, what):
    raise PartixError(f"[AbstractMesh] AbstractMesh does not implement {what}: {self} has no "
                      "devices (use a Mesh, e.g. jax.make_mesh, where devices are needed)")

  devices = property(lambda self: self._no("devices"))
  device_ids = property(lambda self: self._no("device_ids"))
  devices_flat = property(lambda self: self._no("devices"))
  local_devices = property(lambda self: self._no("local_devices"))
  local_mesh = property(lambda self: self._no("local_mesh"))
  is_multi_process = property(lambda self: self._no("is_multi_process"))

  def __enter__(self):
    self._no("__enter__")

  def __exit__(self, *exc):
    self._no("__exit__")

  def __call__(self, f):
    self._no("use as a decorator")

  def __reduce__(self):
    return (AbstractMesh, (self.axis_sizes, self.axis_names, self.axis_types))

  def __repr__(self):  # as JAX writes it: AbstractMesh('x': 2, axis_types=(Auto,))
    return str(self)

  def __str__(self):
    if not self.axis_names:
      return "AbstractMesh((), axis_types=())"
    return Mesh.__str__(self)


def _abstract_key(axis_sizes, axis_names, axis_types):
  """What makes two AbstractMesh(...) calls the same mesh (None: arguments it will refuse)."""
  try:
    names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    sizes = tuple(int(n) for n in axis_sizes)
  except (TypeError, ValueError):
    return None
  if not all(isinstance(n, str) for n in names) or len(names) != len(sizes) or any(
      isinstance(n, bool) or n < 1 for n in sizes):
    return None
  types = _axis_types_key(axis_types, len(names))
  if types is None:
    return None
  if len(types) != len(names) or not all(isinstance(t, AxisType) for t in types):
    return None
  return ("abstract", sizes, names, types)


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
  """A mesh of the first prod(axis_shapes) devices, row-major (jax.make_mesh). Its axes are
  Explicit unless axis_types says otherwise, as in JAX 0.10 (Mesh(...) defaults to Auto)."""
  axis_shapes, axis_names = tuple(axis_shapes), tuple(axis_names)
  _check_axis_names("make_mesh", axis_shapes, axis_names)
  if isinstance(axis_types, AxisType):
    axis_types = (axis_types,)
  if axis_types is not None:
    if not isinstance(axis_types, (tuple, list)) or not all(isinstance(t, AxisType)
                                                            for t in axis_types):
      raise PartixTypeError(f"[make_mesh] axis_types {axis_types!r} must be of type AxisType, "
                            f"one per axis name {axis_names}")
    axis_types = tuple(axis_types)
    if len(axis_types) != len(axis_names):
      raise PartixError(f"[make_mesh] Number of axis names should match the number of "
                        f"axis_types: axis_types {axis_types} must be one AxisType per axis "
                        f"name {axis_names}")
  for a in axis_shapes:
    if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or a < 1:
      raise PartixError(f"[make_mesh] axis sizes {axis_shapes} must be positive integers "
                        f"(got {a!r})")
  if axis_types is None:
    axis_types = (AxisType.Explicit,) * len(axis_names)
  n = math.prod(axis_shapes)
  devs = list(devices) if devices is not None else [Device(d) for d in _core.devices()]
  if n > len(devs) or n <= 0:
    raise PartixError(f"[make_mesh] a mesh of shape {axis_shapes} needs {n} devices; "
                      f"there are {len(devs)} (set PARTIX_NUM_CPU_DEVICES)")
  arr = np.empty(n, dtype=object)
  arr[:] = devs[:n]
  return Mesh(arr.reshape(axis_shapes), axis_names, axis_types)


class Sharding:
  """Base of partix's shardings (jax.sharding.Sharding)."""


class NamedSharding(Sharding):
  """How a global array splits over a mesh: a PartitionSpec over the mesh's axes."""
  __slots__ = ("_c", "_free", "_mesh", "_spec", "_kind")

  def __init__(self, mesh, spec=None, *, memory_kind=None):
    if spec is None:
      spec = PartitionSpec()
    if not isinstance(mesh, Mesh):
      raise PartixError(f"[NamedSharding] mesh {mesh!r} is not a partix Mesh")
    self._kind = _memory_kind(memory_kind, "NamedSharding", mesh)
    if not isinstance(spec, PartitionSpec):
      if isinstance(spec, (tuple, list)):
        spec = PartitionSpec(*spec)
      else:
        raise PartixError(f"[NamedSharding] spec {spec!r} is not a PartitionSpec")
    unreduced = getattr(spec, "unreduced", frozenset())
    reduced = getattr(spec, "reduced", frozenset())
    unknown = sorted(a for a in unreduced if a not in mesh.axis_names)
    if unknown:
      raise PartixError(f"[NamedSharding] Unreduced axes of {spec} not found in mesh axis_names "
                        f"{mesh.axis_names}: unreduced axis {unknown[0]!r} is not in {mesh}" +
                        "".join(f", nor is {a!r}" for a in unknown[1:]))
    # Partial sums are a type only Explicit axes carry (as JAX).
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    bad = sorted(a for a in reduced if a not in types or types[a] is not AxisType.Explicit)
    if bad:  # reduced axes are a type, also only of Explicit axes
      raise PartixError(f"[NamedSharding] Reduced axes can only refer to mesh axes of type "
                        f"Explicit ({mesh}): reduced axis {bad[0]!r} of {spec} is not")
    implicit = sorted(a for a in unreduced if types[a] is not AxisType.Explicit)
    if implicit:
      raise PartixError(f"[NamedSharding] Unreduced axes can only refer to mesh axes of type "
                        f"Explicit ({mesh}): unreduced axis {implicit[0]!r} of {spec} is "
                        f"{types[implicit[0]].name}" +
                        "".join(f", {a!r} is {types[a].name}" for a in implicit[1:]) +
                        "; unreduced axes must be Explicit")
    # P.UNCONSTRAINED entries: unsplit in the core's sharding, listed in _free; only
    # with_sharding_constraint takes them (the `_s` property refuses them elsewhere).
    self._free = tuple(d for d, e in enumerate(spec) if e is _UNCONSTRAINED)
    core_spec = spec._core_free() if self._free else spec._core()
    self._c = (_core.NamedSharding(mesh._m, core_spec, set(unreduced), set(reduced)) if reduced
               else _core.NamedSharding(mesh._m, core_spec, set(unreduced)) if unreduced
               else _core.NamedSharding(mesh._m, core_spec))
    self._mesh, self._spec = mesh, spec

  @property
  def _s(self):
    """The core sharding that places an array: refused while a dimension is unconstrained."""
    if self._free:
      raise PartixError(f"[NamedSharding] Unconstrained dims are not allowed in {self._spec}: "
                        "only with_sharding_constraint takes P.UNCONSTRAINED (the compiler "
                        "then splits those dimensions as the values around it are); jit's "
                        "in_shardings and out_shardings, device_put and reshard name every "
                        "dimension's axes")
    return self._c

  @classmethod
  def _wrap(cls, s):
    self = cls.__new__(cls)
    self._c, self._mesh, self._spec, self._kind, self._free = s, None, None, None, ()
    return self

  @classmethod
  def _interned(cls, s):
    """The wrapper of core sharding s, one object while it lives for equal shardings: arrays
    placed alike share their .sharding, as the outputs of one JAX jit do. (The core's text
    tells shardings apart: mesh, device order, axis types, spec and unreduced axes.)"""
    key = (cls, s.to_string())
    known = _interned_shardings.get(key)
    if known is None:
      known = cls._wrap(s)
      _interned_shardings[key] = known
    return known

  @property
  def mesh(self):
    if self._mesh is None:
      self._mesh = Mesh._wrap(self._c.mesh)
    return self._mesh

  @property
  def spec(self):
    if self._spec is None:
      spec = _spec_from_core(self._c.spec)
      # The core keeps unreduced and reduced axes on the sharding, JAX on the spec.
      unreduced, reduced = self._c.unreduced, self._c.reduced
      self._spec = (PartitionSpec(*spec, unreduced=set(unreduced) or None,
                                  reduced=set(reduced) or None)
                    if unreduced or reduced else spec)
    return self._spec

  def _abstract(self, what):
    """Raises, as JAX: a sharding on an AbstractMesh has no devices to tell about."""
    if self._c.mesh.is_abstract():
      raise PartixError(f"[NamedSharding] {what} is not implemented for "
                        f"`jax.sharding.AbstractMesh`: {self} has no devices (a NamedSharding "
                        "on a Mesh has)")

  @property
  def device_set(self):
    self._abstract("device_set")
    return set(self.mesh.devices.flat)

  @property
  def addressable_devices(self):
    self._abstract("addressable_devices")
    return {d for d in self.device_set if d.process_index == _core.process_index()}

  @property
  def is_fully_replicated(self):
    return self._c.is_fully_replicated()

  @property
  def is_fully_addressable(self):
    self._abstract("is_fully_addressable")
    return all(d.process_index == _core.process_index() for d in self.device_set)

  @property
  def num_devices(self):
    return 0 if self._on_empty_mesh() else self._c.mesh.size

  def _on_empty_mesh(self):
    # Only a Mesh made in Python is the empty mesh (the core's meshes always hold devices).
    return self._mesh is not None and self._mesh.empty

  @property
  def memory_kind(self):
    """JAX's memory kind: as given, else the devices' default, 'device' (None on an abstract
    or empty mesh, which has no devices). partix's devices are CPU devices whose memory is
    host memory, so every kind holds the array the same way."""
    if self._kind is not None:
      return self._kind
    return None if self._c.mesh.is_abstract() or self._on_empty_mesh() else "device"

  def _check_even(self, shape, api):
    """Raises unless every dimension of shape the spec splits divides evenly (as JAX)."""
    if len(self.spec) > len(shape):
      raise PartixError(f"[{api}] {self.spec} has {len(self.spec)} entries for shape {shape}")
    sizes = self.mesh.shape
    for dim, entry in enumerate(self.spec):
      names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
      n = math.prod(sizes[a] for a in names)
      if shape[dim] % n:
        raise PartixError(f"[{api}] {self.spec} splits dimension {dim} of shape {shape} {n} "
                          f"ways, which does not divide {shape[dim]}: every sharded dimension "
                          "must divide evenly")

  def shard_shape(self, global_shape):
    """The shape of every shard; as in JAX, each sharded dimension must divide evenly."""
    shape = tuple(int(d) for d in global_shape)
    self._check_even(shape, "NamedSharding.shard_shape")
    return tuple(self._c.shard_shape(list(shape)))

  def check_compatible_aval(self, aval_shape):
    """As JAX's: raises unless the spec fits a value of this shape (a scalar takes only P(),
    any other value a spec no longer than its rank)."""
    shape = tuple(int(d) for d in aval_shape)
    if not shape and any(e is not None for e in self.spec):
      raise PartixError(f"[NamedSharding.check_compatible_aval] For scalars the PartitionSpec "
                        f"should be P(), but got {self.spec} for {self}")
    if len(self.spec) > len(shape):
      raise PartixError(f"[NamedSharding.check_compatible_aval] Sharding {self} is only valid "
                        f"for values of rank at least {len(self.spec)}, but was applied to a "
                        f"value of rank {len(shape)}")

  def devices_indices_map(self, global_shape):
    """Each device's block of an array of shape global_shape (a tuple of slices); as in JAX,
    each sharded dimension must divide evenly."""
    self._abstract("devices_indices_map")
    devs = list(self.mesh.devices.flat)
    shape = tuple(int(d) for d in global_shape)
    self._check_even(shape, "NamedSharding.devices_indices_map")
    return {d: tuple(slice(None) if a == 0 and b == n else slice(a, b)
                     for (a, b), n in zip(idx, shape))
            for d, idx in zip(devs, self._c.devices_indices_map(list(global_shape)))}

  def addressable_devices_indices_map(self, global_shape):
    """devices_indices_map restricted to this process's devices."""
    me = _core.process_index()
    return {d: idx for d, idx in self.devices_indices_map(global_shape).items()
            if d.process_index == me}

  def with_spec(self, spec):
    return NamedSharding(self.mesh, spec, memory_kind=self._kind)

  def _placement(self, ndim):
    """Which block of an array of rank ndim each device holds (by device id), for a shape
    every mesh axis divides."""
    k = 720720  # divisible by every axis size up to 16 and their products that matter here
    self._check_even((k,) * ndim, "NamedSharding.is_equivalent_to")
    # By the core's device ids (an abstract mesh's are its positions 0..n-1).
    return {d.id: tuple(idx) for d, idx in zip(
        self._c.mesh.devices, self._c.devices_indices_map([k] * ndim))}

  def is_equivalent_to(self, other, ndim):
    """Whether self and other place an array of rank ndim identically (as JAX's): every
    device holds the same block, whatever the meshes' axis names (P('x') is P('x', None) at
    rank 2; a one-device mesh's sharding is that device's SingleDeviceSharding)."""
    if not isinstance(other, NamedSharding):
      return False
    if getattr(self.spec, "unreduced", None) != getattr(other.spec, "unreduced", None):
      return False
    pad = lambda sp: tuple(sp) + (None,) * (ndim - len(tuple(sp)))
    if self.mesh is not None and self.mesh == other.mesh and pad(self.spec) == pad(other.spec):
      return True
    try:
      return self._placement(ndim) == other._placement(ndim)
    except PartixError:
      return False

  def __eq__(self, other):
    return isinstance(other, NamedSharding) and self._c == other._c and (
        self.memory_kind == other.memory_kind) and self._free == other._free

  def __hash__(self):
    return hash((self._c, self._free))

  def __repr__(self):
    kind = self.memory_kind
    return (f"NamedSharding(mesh={self.mesh}, spec={self.spec!r}" +
            (f", memory_kind={kind})" if kind is not None else ")"))


_MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")


def _memory_kind(kind, api, mesh=None):
  """memory_kind= of a sharding, checked: None (the devices' default) or a kind partix's
  devices hold."""
  if kind is None:
    return None
  if not isinstance(kind, str):
    raise PartixTypeError(f"[{api}] memory_kind={kind!r} is not a string: give one of "
                          f"{', '.join(_MEMORY_KINDS)}")
  if kind not in _MEMORY_KINDS:
    where = "" if mesh is None else f" on {mesh}"
    raise PartixError(f"[{api}] Got invalid memory kind: memory_kind={kind!r}{where} is none of "
                      f"the kinds partix's devices hold ({', '.join(_MEMORY_KINDS)})")
  return kind


class SingleDeviceSharding(NamedSharding):
  def __init__(self, device, *, memory_kind=None):
    s = _core.single_device_sharding(device._d)
    self._c, self._mesh, self._spec, self._free = s, None, None, ()
    self._kind = _memory_kind(memory_kind, "SingleDeviceSharding")
    self._device = device

  def __repr__(self):
    return f"SingleDeviceSharding(device={self._device!r}, memory_kind={self.memory_kind})"


# ---- the current mesh (jax.set_mesh / jax.sharding.use_mesh / use_abstract_mesh) ----

# Per thread, as JAX's: a program one thread traces never sees another thread's mesh.
_mesh_state = threading.local()


class _Context:
  """One entry of the thread's mesh stack: the concrete mesh in context (JAX's concrete mesh;
  None when there is none), the abstract mesh in context, and the mesh PartitionSpecs resolve
  against (the concrete mesh with the abstract mesh's names and types, or the abstract mesh
  where no concrete mesh has its size)."""
  __slots__ = ("concrete", "abstract", "effective")

  def __init__(self, concrete, abstract, effective):
    self.concrete, self.abstract, self.effective = concrete, abstract, effective


def _mesh_contexts():
  """This thread's open `with mesh:` contexts, innermost last."""
  ctxs = getattr(_mesh_state, "contexts", None)
  if ctxs is None:
    ctxs = _mesh_state.contexts = []
  return ctxs


def _mesh_stack():
  stack = getattr(_mesh_state, "stack", None)
  if stack is None:
    stack = _mesh_state.stack = []
  return stack


def _entry_for(mesh):
  """The context set_mesh(mesh) / use_mesh(mesh) makes. (An AbstractMesh there is partix's
  own: a context with no devices, for planning, as use_abstract_mesh.)"""
  if isinstance(mesh, AbstractMesh):
    return _Context(None, mesh, mesh)
  return _Context(mesh, mesh.abstract_mesh, mesh)


def _set_core_mesh(entry):
  m = None if entry is None else entry.effective
  if m is None or m.empty:  # the empty mesh in context is no mesh
    _core.clear_thread_mesh()
  else:
    _core.set_thread_mesh(m._m)


@contextlib.contextmanager
def _pushed(entry):
  stack = _mesh_stack()
  stack.append(entry)
  _set_core_mesh(entry)
  try:
    yield
  finally:
    stack.pop()
    _set_core_mesh(stack[-1] if stack else None)


@contextlib.contextmanager
def use_mesh(mesh):
  if not isinstance(mesh, Mesh):
    raise PartixError(f"[use_mesh] {mesh!r} is not a partix Mesh")
  with _pushed(_entry_for(mesh)):
    yield mesh


@contextlib.contextmanager
def use_abstract_mesh(mesh):
  """jax.sharding.use_abstract_mesh: `mesh` (an AbstractMesh) is the abstract mesh in context:
  get_abstract_mesh() returns it and programs traced inside see its axis names and types.
  The concrete mesh in context, if any, stays (its devices, the abstract mesh's names and
  types); without one, jit(f).trace(...).lower() lowers onto the abstract mesh (partix has
  one platform, which the abstract mesh stands for). It cannot change the mesh's size."""
  if not isinstance(mesh, AbstractMesh):
    raise PartixError("[use_abstract_mesh] Expected mesh of type `jax.sharding.AbstractMesh`. "
                      f"Got type: {type(mesh)} ({mesh!r:.100}); use set_mesh for a Mesh, or "
                      "pass mesh.abstract_mesh")
  stack = _mesh_stack()
  prev = stack[-1] if stack else None
  if prev is not None and not prev.abstract.empty and not mesh.empty and (
      prev.abstract.size != mesh.size):
    raise PartixError(f"[use_abstract_mesh] use_abstract_mesh cannot change the size of the "
                      f"mesh. Got new mesh: {mesh} with size={mesh.size} and prev mesh: "
                      f"{prev.abstract} with size={prev.abstract.size}")
  concrete = prev.concrete if prev is not None else None
  if mesh.empty:
    effective = mesh
  elif concrete is not None and not concrete.empty and concrete.size == mesh.size:
    effective = _on_devices(mesh, concrete)
  else:
    effective = mesh
  with _pushed(_Context(concrete, mesh, effective)):
    yield mesh


class _SetMesh:
  """set_mesh(mesh) sets this thread's current mesh for the rest of its program; used as a
  context manager it restores the previous one on exit (as jax.set_mesh)."""

  def __init__(self, mesh):
    if not isinstance(mesh, Mesh):
      raise PartixError(f"[set_mesh] Expected mesh of type `jax.sharding.Mesh`. Got "
                        f"{type(mesh)} ({mesh!r:.100})")
    stack = _mesh_stack()
    self.prev = list(stack)
    entry = _entry_for(mesh)
    stack[:] = [entry]
    _set_core_mesh(entry)

  def __enter__(self):
    top = _mesh_stack()[-1]
    return top.concrete if top.concrete is not None else top.abstract

  def __exit__(self, *exc):
    stack = _mesh_stack()
    stack[:] = self.prev
    _set_core_mesh(stack[-1] if stack else None)


def set_mesh(mesh):
  return _SetMesh(mesh)


def legacy_mesh_only():
  """Whether the current mesh comes from a `with mesh:` block alone, with no set_mesh /
  use_mesh inside it: JAX 0.10's jit does not read such a mesh (pjit does)."""
  ctxs = _mesh_contexts()
  return bool(ctxs) and getattr(ctxs[-1], "legacy_depth", -1) == len(_mesh_stack())


def get_mesh():
  """The concrete mesh in context (set_mesh / use_mesh), or None: none set, or the empty
  mesh. (use_abstract_mesh leaves it as it is, as in JAX.)"""
  stack = _mesh_stack()
  m = stack[-1].concrete if stack else None
  return m if m is not None and not m.empty else None


def context_mesh():
  """The mesh PartitionSpecs resolve against outside shard_map bodies: the one set_mesh /
  use_mesh set, with the names and types use_abstract_mesh gives it; an AbstractMesh where
  the context has no devices (use_abstract_mesh alone); None without a mesh."""
  stack = _mesh_stack()
  m = stack[-1].effective if stack else None
  return m if m is not None and not m.empty else None


def get_abstract_mesh():
  """The abstract mesh in context (jax.sharding.get_abstract_mesh): an AbstractMesh with the
  current axis types, inside auto_axes / explicit_axes / shard_map the C++ side's (axes retyped
  for the region, Manual in a shard_map body); AbstractMesh((), ()) without a mesh."""
  if _core.has_current_mesh():
    return Mesh._wrap(_core.current_mesh()).abstract_mesh
  stack = _mesh_stack()
  return stack[-1].abstract if stack else AbstractMesh((), ())


def concrete_context_mesh():
  """The concrete mesh in context where values live: inside a shard_map body (or auto_axes /
  explicit_axes) the C++ side's current mesh, with its Manual axes; else the one set_mesh /
  use_mesh set (with use_abstract_mesh's names and types); None if there is none."""
  if _core.has_current_mesh():
    m = _core.current_mesh()
    if not m.is_abstract():
      return Mesh._wrap(m)
  m = context_mesh()
  return m if m is not None and not isinstance(m, AbstractMesh) else None


def _on_devices(mesh, devices):
  """An abstract mesh's axes (sizes, names, types) laid over concrete devices in order (a
  Mesh, or a flat sequence of Devices), as JAX concretizes an AbstractMesh onto a device
  assignment. A Mesh of the same shape keeps its arrangement."""
  if isinstance(devices, Mesh):
    if devices.shape_tuple == mesh.shape_tuple and devices.axis_types == mesh.axis_types:
      return devices
    devices = list(devices.devices.flat)
  arr = np.empty(len(devices), dtype=object)
  arr[:] = list(devices)
  return Mesh(arr.reshape(mesh.axis_sizes), mesh.axis_names, mesh.axis_types)


def resolve_mesh(mesh, api, what=None):
  """The concrete mesh `mesh` stands for where devices are needed: a Mesh is itself; an
  AbstractMesh is the concrete mesh in context of its shape (its names and sizes), with the
  abstract mesh's axis types. Raises, naming the API and the mesh, where there is none."""
  if not isinstance(mesh, AbstractMesh):
    return mesh
  ctx = concrete_context_mesh()
  if ctx is not None and ctx.shape_tuple == mesh.shape_tuple:
    return _on_devices(mesh, ctx)
  where = (f"the mesh in context is {ctx}, of another shape" if ctx is not None else
           "no concrete mesh is in context")
  raise PartixError(f"[{api}] {what or mesh} is on an AbstractMesh, which has no devices, and "
                    f"{where}: set a mesh of shape {dict(mesh.shape_tuple)} with "
                    "jax.set_mesh(mesh), or give a NamedSharding on a Mesh (jax.make_mesh)")


def concrete_sharding(s, api):
  """s (a NamedSharding) on devices: a sharding on an AbstractMesh moves onto the concrete mesh
  in context of its shape (resolve_mesh); others are as they are."""
  if isinstance(s, NamedSharding) and s._s.mesh.is_abstract():
    mesh = resolve_mesh(s.mesh, api, what=s)
    return NamedSharding(mesh, s.spec, memory_kind=s._kind)
  return s


def to_sharding(s, api, shape=None):
  """A NamedSharding from a NamedSharding, a PartitionSpec (on the current mesh), a Device,
  or None."""
  if s is None:
    return None
  if isinstance(s, NamedSharding):
    return s
  if isinstance(s, PartitionSpec):
    m = context_mesh()
    if m is None and _core.has_current_mesh():  # the core's: inside shard_map, its mesh
      m = Mesh._wrap(_core.current_mesh())
    if m is None:
      raise PartixError(f"[{api}] a PartitionSpec {s!r} needs a current mesh: pass a "
                        "NamedSharding, or use `with partix.set_mesh(mesh):`")
    return NamedSharding(m, s)
  if isinstance(s, Device):
    return SingleDeviceSharding(s)
  raise PartixError(f"[{api}] {s!r} is not a sharding (NamedSharding, PartitionSpec or Device)")
