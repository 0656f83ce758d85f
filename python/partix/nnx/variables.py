"""nnx.Variable and its kinds (Param, BatchStat, ...): a box holding one value (a partix array,
or any pytree) and a metadata dict. Variables are pytree nodes: the value is their one child,
the sorted metadata their static data, so they travel through every partix transformation
with their sharding annotations."""
import functools
import threading
import warnings

import numpy as np

from partix import tree_util as _tu
from partix._src.core import PartixError
from partix.nnx import partitioning as _partitioning

_MISSING = object()
_local = threading.local()


def _eager_stack():
  if not hasattr(_local, "eager"):
    _local.eager = []
  return _local.eager


_eager_default = [True]  # Flax 0.12's flax_always_shard_variable default


class use_eager_sharding:
  """use_eager_sharding(flag): sets whether annotated Variables are placed on their sharding
  when created. Called, it sets the default for the rest of the program; used in a `with`
  block, it applies inside the block only."""

  def __init__(self, value):
    if not isinstance(value, bool):
      raise PartixError(f"[nnx.use_eager_sharding] expects a bool, got {value!r}")
    self._prev = _eager_default[0]
    self._entered = False
    _eager_default[0] = value
    self._value = value

  def __enter__(self):
    _eager_default[0] = self._prev
    _eager_stack().append(self._value)
    self._entered = True
    return self

  def __exit__(self, *exc):
    _eager_stack().pop()


def using_eager_sharding():
  stack = _eager_stack()
  return stack[-1] if stack else _eager_default[0]


def _remap_sharding_names(metadata):
  """Flax 0.12 keeps a Variable's sharding annotation under 'out_sharding'; the older names
  'sharding' and 'sharding_names' are accepted and renamed (with Flax's deprecation warning)."""
  for old in ("sharding", "sharding_names"):
    if old in metadata:
      warnings.warn(f"'{old}' is deprecated, use 'out_sharding' instead.", DeprecationWarning,
                    stacklevel=4)
      metadata["out_sharding"] = metadata.pop(old)
  return metadata


class VariableMetadata:
  """An initializer's result with the metadata with_metadata attached; a Variable built from it
  takes both."""
  __slots__ = ("raw_value", "metadata")

  def __init__(self, raw_value, metadata):
    self.raw_value = raw_value
    self.metadata = dict(metadata)

  def __repr__(self):
    return f"VariableMetadata(raw_value={self.raw_value!r}, metadata={self.metadata!r})"


def with_metadata(initializer, **metadata):
  """An initializer whose result carries `metadata` (e.g. out_sharding=, sharding_rules=) into
  the Variable built from it."""
  if not callable(initializer):
    raise PartixError(f"[nnx.with_metadata] initializer {initializer!r} is not callable")
  metadata = _remap_sharding_names(dict(metadata))

  @functools.wraps(initializer)
  def init_with_metadata(*args, **kwargs):
    return VariableMetadata(initializer(*args, **kwargs), metadata)
  return init_with_metadata


def _flatten_with_keys(v):
  return ((_tu.GetAttrKey("value"), v._raw_value),), tuple(sorted(v._var_metadata.items()))


def _flatten(v):
  return (v._raw_value,), tuple(sorted(v._var_metadata.items()))


def _register(cls):
  _tu.register_pytree_with_keys(cls, _flatten_with_keys,
                                lambda aux, children: cls._new(children[0], dict(aux)),
                                _flatten)


def _value_of(x):
  return x._raw_value if isinstance(x, Variable) else x


def _binary(name, reflected=False):
  def op(self, other):
    a, b = (_value_of(other), self._raw_value) if reflected else (self._raw_value,
                                                                   _value_of(other))
    return getattr(a, f"__{name}__")(b)
  op.__name__ = f"__{'r' if reflected else ''}{name}__"
  return op


def _unary(name):
  def op(self):
    return getattr(self._raw_value, f"__{name}__")()
  op.__name__ = f"__{name}__"
  return op


class Variable:
  """A value and its metadata. v[...] (or v.get_value()) reads the value, v[...] = x (or
  v.set_value(x)) replaces it; metadata reads as attributes (v.out_sharding) and is changed
  with set_metadata. Arithmetic on a Variable is arithmetic on its value."""
  __slots__ = ("_raw_value", "_var_metadata")
  required_metadata = frozenset(["eager_sharding"])

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    _register(cls)

  def __init__(self, value, *, eager_sharding=None, **metadata):
    if isinstance(value, Variable):
      raise PartixError(f"[nnx.{type(self).__name__}] value is already a Variable "
                        f"({type(value).__name__}); pass its value (v[...])")
    if isinstance(value, VariableMetadata):
      meta = dict(value.metadata)
      if "eager_sharding" in meta:
        inner = meta.pop("eager_sharding")
        if eager_sharding is not None and eager_sharding != inner:
          raise ValueError("Cannot specify eager_sharding both in VariableMetadata and as an "
                           "argument to Variable constructor.")
        eager_sharding = inner
      metadata = {**metadata, **meta}
      value = value.raw_value
    metadata = _remap_sharding_names(metadata)
    if eager_sharding is None:
      eager_sharding = using_eager_sharding()
    metadata["eager_sharding"] = bool(eager_sharding)
    object.__setattr__(self, "_var_metadata", metadata)
    value = self.create_value(value)
    if eager_sharding and metadata.get("out_sharding"):
      value = _partitioning.shard_value(value, metadata["out_sharding"], metadata.get("sharding_rules"),
                               metadata.get("mesh"), what=f"nnx.{type(self).__name__}")
    object.__setattr__(self, "_raw_value", value)

  @classmethod
  def _new(cls, value, metadata):
    v = object.__new__(cls)
    object.__setattr__(v, "_raw_value", value)
    object.__setattr__(v, "_var_metadata", dict(metadata))
    return v

  def create_value(self, value):
    return value

  # ---- metadata ----
  def __getattr__(self, name):
    if name.startswith("__") or name in ("_raw_value", "_var_metadata"):
      raise AttributeError(name)
    meta = object.__getattribute__(self, "_var_metadata")
    if name in meta:
      return meta[name]
    return getattr(object.__getattribute__(self, "_raw_value"), name)

  def __setattr__(self, name, value):
    if name == "value":
      return self.set_value(value)
    raise AttributeError(f"Cannot set attribute {name}. To set Variable metadata use "
                         f"variable.set_metadata({name}=value)")

  @property
  def type(self):
    return type(self)

  @property
  def var_type(self):
    return type(self)

  def get_metadata(self, name=None, default=_MISSING, *, exclude_required=None):
    meta = dict(self._var_metadata)
    if name is None:
      if exclude_required:
        for k in self.required_metadata:
          meta.pop(k, None)
      return meta
    if name not in meta:
      if default is _MISSING:
        raise KeyError(name)
      return default
    return meta[name]

  def set_metadata(self, *args, **kwargs):
    if args and isinstance(args[0], dict) and len(args) == 1:
      new = _remap_sharding_names(dict(args[0]))
      new.setdefault("eager_sharding", self._var_metadata.get("eager_sharding", True))
      object.__setattr__(self, "_var_metadata", new)
      return
    if len(args) == 2:
      kwargs[args[0]] = args[1]
    elif args:
      raise TypeError(f"set_metadata takes a dict, a name and a value, or keywords; got {args}")
    self._var_metadata.update(_remap_sharding_names(kwargs))

  def has_metadata(self, name):
    return name in self._var_metadata

  def del_metadata(self, name):
    del self._var_metadata[name]

  # ---- value ----
  def get_value(self, *, index=_MISSING):
    v = self._raw_value
    return v if index is _MISSING or index is Ellipsis else v[index]

  def set_value(self, value, *, index=_MISSING):
    value = _value_of(value)
    if index is _MISSING or index is Ellipsis:
      object.__setattr__(self, "_raw_value", value)
    else:
      object.__setattr__(self, "_raw_value", self._raw_value.at[index].set(value))

  def get_raw_value(self):
    return self._raw_value

  def set_raw_value(self, value):
    object.__setattr__(self, "_raw_value", value)

  @property
  def value(self):
    return self.get_value()

  @property
  def raw_value(self):
    return self._raw_value

  def __getitem__(self, key):
    return self.get_value(index=key)

  def __setitem__(self, key, value):
    self.set_value(value, index=key)

  def copy_from(self, other):
    object.__setattr__(self, "_raw_value", other._raw_value)
    object.__setattr__(self, "_var_metadata", dict(other._var_metadata))

  def update_from_state(self, other):
    object.__setattr__(self, "_raw_value", _value_of(other))
    if isinstance(other, Variable):
      self._var_metadata.update(other._var_metadata)

  def replace(self, value=_MISSING, **metadata):
    """A new Variable of this type with this metadata (updated by `metadata`) and `value`."""
    meta = dict(self._var_metadata)
    meta.update(_remap_sharding_names(metadata))
    return type(self)._new(self._raw_value if value is _MISSING else _value_of(value), meta)

  def copy(self, value=_MISSING, **metadata):
    return self.replace(value, **metadata)

  def to_state(self):
    return self

  def __getstate__(self):
    return {"raw_value": self._raw_value, "metadata": dict(self._var_metadata)}

  def __setstate__(self, state):
    object.__setattr__(self, "_raw_value", state["raw_value"])
    object.__setattr__(self, "_var_metadata", dict(state["metadata"]))

  # ---- the value's protocols ----
  def __jax_array__(self):
    return self._raw_value

  def __array__(self, dtype=None, copy=None):
    a = np.asarray(self._raw_value)
    return a.astype(dtype) if dtype is not None else a

  def __len__(self):
    return len(self._raw_value)

  def __iter__(self):
    return iter(self._raw_value)

  def __call__(self, *args, **kwargs):
    return self._raw_value(*args, **kwargs)

  def __bool__(self):
    return bool(self._raw_value)

  def __float__(self):
    return float(self._raw_value)

  def __int__(self):
    return int(self._raw_value)

  def __hash__(self):
    return id(self)

  def __eq__(self, other):
    return self._raw_value == _value_of(other)

  def __ne__(self, other):
    return self._raw_value != _value_of(other)

  def _iop(self, name, other):
    object.__setattr__(self, "_raw_value", getattr(self._raw_value, f"__{name}__")(
        _value_of(other)))
    return self

  def __iadd__(self, other):
    return self._iop("add", other)

  def __isub__(self, other):
    return self._iop("sub", other)

  def __imul__(self, other):
    return self._iop("mul", other)

  def __itruediv__(self, other):
    return self._iop("truediv", other)

  def __repr__(self):
    meta = {k: v for k, v in self._var_metadata.items() if k != "eager_sharding"}
    extra = "".join(f", {k}={v!r}" for k, v in meta.items())
    return f"{type(self).__name__}(value={_short(self._raw_value)}{extra})"


def _short(v):
  shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
  if shape is not None and dtype is not None and not isinstance(v, (int, float)):
    if getattr(v, "size", 0) > 16 or type(v).__name__ == "ShapeDtypeStruct":
      return f"{type(v).__name__}(shape={tuple(shape)}, dtype={dtype})"
  return repr(v)


for _n in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "and", "or",
           "xor", "lshift", "rshift", "divmod"):
  setattr(Variable, f"__{_n}__", _binary(_n))
  setattr(Variable, f"__r{_n}__", _binary(_n, reflected=True))
for _n in ("lt", "le", "gt", "ge"):
  setattr(Variable, f"__{_n}__", _binary(_n))
for _n in ("neg", "pos", "abs", "invert"):
  setattr(Variable, f"__{_n}__", _unary(_n))
_register(Variable)


class Param(Variable):
  """A trainable parameter (what nnx.grad differentiates and nnx.Optimizer updates)."""
  __slots__ = ()


class BatchStat(Variable):
  """A running statistic (BatchNorm's mean and variance)."""
  __slots__ = ()


class Cache(Variable):
  """A cache (an attention layer's decoding cache)."""
  __slots__ = ()


class Intermediate(Variable):
  """A value a module kept while running (Module.sow)."""
  __slots__ = ()


class Perturbation(Intermediate):
  __slots__ = ()
