"""JAX's configuration options as context managers (jax.enable_x64, jax.debug_nans,
jax.numpy_rank_promotion, ...), each the same option jax.config.update sets.

An option is read through `.value`: the innermost `with option(v):` of this thread, else the
global value (jax.config.update). What each does in partix is in its docstring; an option
partix does not act on says so there, and one that asks for a check partix does not make
warns once when it is turned on, instead of pretending to check.

A leaf module: core.py reads the promotion options from here."""
import functools
import threading
import warnings

from partix._src import dtypes
from partix._src.errors import PartixError
from partix._src.jax_errors import TypePromotionError

_local = threading.local()
_lock = threading.Lock()
_NO_VALUE = object()

# The options, by JAX's flag name.
STATES = {}

# Whether any promotion check (numpy_rank_promotion, numpy_dtype_promotion) may be on in some
# thread: core.promote_pair looks here before reading the options themselves.
PROMOTION_CHECKS = [False]
_nondefault_contexts = [0]  # active promotion contexts with a non-default value
_warned = set()


def _overrides():
  o = getattr(_local, "overrides", None)
  if o is None:
    o = _local.overrides = {}
  return o


class State:
  """One option: `with jax.<option>(value):` sets it for this thread inside the block (as a
  decorator, for every call of the function); `.value` reads it."""

  def __init__(self, name, default, doc, *, choices=None, optional=False, boolean=False,
               process_wide=None, unchecked=None):
    self._name = name
    self.__name__ = name[4:] if name.startswith("jax_") else name
    self.__doc__ = doc
    self._default = default
    self._global = default
    self._choices = choices
    self._optional = optional
    self._boolean = boolean
    # process_wide(value): applies the value to partix's own process-wide flag (the context
    # then sets it for every thread, and restores it on exit).
    self._process_wide = process_wide
    # unchecked(value) -> True where the value asks for a check partix does not make.
    self._unchecked = unchecked
    STATES[name] = self

  @property
  def name(self):
    return self._name

  def _parse(self, value):
    if self._boolean:
      if not isinstance(value, (bool, int)) or isinstance(value, float):
        raise PartixError(f"[{self.__name__}] expects a bool, got {value!r}")
      return bool(value)
    if value is None and self._optional:
      return None
    if self._choices is not None:
      v = getattr(value, "value", value)  # an enum member of JAX's (NumpyDtypePromotion)
      if not isinstance(v, str) or v not in self._choices:
        raise PartixError(f"[{self.__name__}] unknown value {value!r}: expected one of "
                          f"{', '.join(repr(c) for c in self._choices)}"
                          + (" or None" if self._optional else ""))
      return v
    return value

  @property
  def value(self):
    o = getattr(_local, "overrides", None)
    if o:
      v = o.get(self._name, _NO_VALUE)
      if v is not _NO_VALUE:
        return v
    return self._global

  def get_global(self):
    return self._global

  def _set_global(self, value):
    """jax.config.update(name, value) (the caller applies a process-wide flag itself)."""
    value = self._parse(value)
    self._global = value
    self._note(value)
    _refresh_promotion_checks()

  def _note(self, value):
    if self._unchecked is not None and self._unchecked(value) and self._name not in _warned:
      _warned.add(self._name)
      warnings.warn(f"partix does not check {self._name}={value!r}: the option is accepted and "
                    "read back, but partix makes no such check (see "
                    f"partix.{self.__name__}.__doc__)", UserWarning, stacklevel=4)

  def __bool__(self):
    raise TypeError(f"bool() of the option {self.__name__}: read {self.__name__}.value")

  def __call__(self, new_val=_NO_VALUE):
    if new_val is _NO_VALUE:
      if not self._boolean:
        raise PartixError(f"[{self.__name__}] the context manager needs the new value, e.g. "
                          f"{self.__name__}({self._choices[0] if self._choices else '...'!r})")
      new_val = True
    return _StateContext(self, self._parse(new_val))

  def __repr__(self):
    return f"<partix option {self._name}={self.value!r}>"


class _StateContext:
  __slots__ = ("state", "new_val", "prev")

  def __init__(self, state, new_val):
    self.state, self.new_val = state, new_val

  def __enter__(self):
    s = self.state
    s._note(self.new_val)
    if s._process_wide is not None:
      self.prev = s._global
      s._process_wide(self.new_val)
      s._global = self.new_val
      return
    o = _overrides()
    self.prev = o.get(s._name, _NO_VALUE)
    o[s._name] = self.new_val
    if s._name in _PROMOTION and self.new_val != s._default:
      with _lock:
        _nondefault_contexts[0] += 1
      _refresh_promotion_checks()

  def __exit__(self, *exc):
    s = self.state
    if s._process_wide is not None:
      s._process_wide(self.prev)
      s._global = self.prev
      return
    o = _overrides()
    if self.prev is _NO_VALUE:
      o.pop(s._name, None)
    else:
      o[s._name] = self.prev
    if s._name in _PROMOTION and self.new_val != s._default:
      with _lock:
        _nondefault_contexts[0] -= 1
      _refresh_promotion_checks()

  def __call__(self, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
      with _StateContext(self.state, self.new_val):
        return func(*args, **kwargs)
    return wrapper


def set_global(name, value):
  """jax.config.update's hook: records an option's global value (validated)."""
  state = STATES.get(name)
  if state is not None:
    state._set_global(value)


def _bool_state(name, doc, default=False, **kw):
  return State(name, default, doc, boolean=True, **kw)


def _on(value):
  return bool(value)


def _x64(value):
  dtypes.set_x64(value)


# jax.config.update, set by the package once its config exists (partix/__init__.py): the
# options it already acts on are applied through it.
CONFIG_UPDATE = [None]


def _via_config(name):
  """A flag partix's jax.config.update already acts on: the context applies it the same way."""
  def apply(value):
    CONFIG_UPDATE[0](name, value)
  return apply


enable_x64 = _bool_state(
    "jax_enable_x64",
    "jax.enable_x64: the jax_enable_x64 flag (as jax.config.update sets it). In partix it "
    "makes uint64 a type of its own (instead of uint32), seeds take 64 bits, and int64 and "
    "float64 asked for by dtype= are held (without it they become 32-bit, with JAX's warning); "
    "host data of 64-bit types still becomes 32-bit (see docs/python.md). partix's flag is "
    "process-wide: inside the block every thread sees it.",
    process_wide=_x64)

enable_checks = _bool_state(
    "jax_enable_checks",
    "jax.enable_checks: JAX's internal invariant checks. partix checks every program as it "
    "traces it whatever the setting, so the option is accepted and read back only.")

check_tracer_leaks = _bool_state(
    "jax_check_tracer_leaks",
    "jax.check_tracer_leaks: checking for traced values that escape their trace. partix always "
    "catches an escaped traced value when it is next used (a PartixError naming the "
    "operation), whatever the setting.")

checking_leaks = functools.partial(check_tracer_leaks, True)
checking_leaks.__doc__ = "jax.checking_leaks(): check_tracer_leaks(True) as a context."

debug_key_reuse = _bool_state(
    "jax_debug_key_reuse",
    "jax.debug_key_reuse: JAX tracks the use of typed keys and raises KeyReuseError on reuse. "
    "partix does not track key use: the option is accepted and read back, and turning it on "
    "warns once that nothing is checked.", unchecked=_on)

debug_nans = _bool_state(
    "jax_debug_nans",
    "jax.debug_nans: JAX checks every result for NaNs and raises FloatingPointError. partix "
    "makes no such check: the option is accepted and read back, and turning it on warns once "
    "that nothing is checked (test results with jnp.isnan instead).", unchecked=_on)

debug_infs = _bool_state(
    "jax_debug_infs",
    "jax.debug_infs: JAX checks every result for infinities. partix makes no such check: the "
    "option is accepted and read back, and turning it on warns once that nothing is checked.",
    unchecked=_on)

log_compiles = _bool_state(
    "jax_log_compiles",
    "jax.log_compiles: JAX logs each compilation. partix does not log its compilations (its "
    "cache misses are explained by jax.explain_cache_misses): the option is accepted and read "
    "back, and turning it on warns once that nothing is logged.", unchecked=_on)

no_tracing = _bool_state(
    "jax_no_tracing",
    "jax.no_tracing: JAX refuses to trace inside the block. partix does not enforce it (count "
    "traces with partix.test_util's counters or jit(f).trace_count): the option is accepted "
    "and read back, and turning it on warns once that nothing is refused.", unchecked=_on)

no_execution = _bool_state(
    "jax_no_execution",
    "jax.no_execution: JAX refuses to run programs inside the block. partix does not enforce "
    "it: the option is accepted and read back, and turning it on warns once that nothing is "
    "refused.", unchecked=_on)

thread_guard = _bool_state(
    "jax_thread_guard",
    "jax.thread_guard: JAX refuses multi-process operations from another thread than the one "
    "that set the guard. partix does not enforce it: the option is accepted and read back, and "
    "turning it on warns once that nothing is refused.", unchecked=_on)

softmax_custom_jvp = _bool_state(
    "jax_softmax_custom_jvp",
    "jax.softmax_custom_jvp: which of JAX's two derivative rules nn.softmax uses (their "
    "values agree). partix's softmax has one rule: the option is accepted and read back only.")

allow_f16_reductions = _bool_state(
    "jax_allow_f16_reductions",
    "jax.allow_f16_reductions: with False, JAX refuses sums of float16/bfloat16 values. partix "
    "does not refuse them: the option is accepted and read back, and turning it off warns once "
    "that nothing is refused.", default=True, unchecked=lambda v: not v)

jax2tf_associative_scan_reductions = _bool_state(
    "jax_jax2tf_associative_scan_reductions",
    "jax.jax2tf_associative_scan_reductions: how jax2tf converts cumulative reductions. partix "
    "has no jax2tf: the option is accepted and read back only.")

remove_size_one_mesh_axis_from_type = _bool_state(
    "jax_remove_size_one_mesh_axis_from_type",
    "jax.remove_size_one_mesh_axis_from_type: mesh axes of size 1 left out of arrays' types "
    "(shardings and varying axes), as jax.config.update sets it. partix's flag is "
    "process-wide: inside the block every thread sees it.",
    process_wide=_via_config("jax_remove_size_one_mesh_axis_from_type"))

auto_pcast = _bool_state(
    "jax_auto_pcast",
    "jax.auto_pcast: inside shard_map, simple operations on values that vary over different "
    "manual axes insert pvary themselves, as jax.config.update sets it. partix's flag is "
    "process-wide: inside the block every thread sees it.", default=True,
    process_wide=_via_config("jax_auto_pcast"))

numpy_rank_promotion = State(
    "jax_numpy_rank_promotion", "allow",
    "jax.numpy_rank_promotion: 'allow' (numpy's implicit rank promotion), 'warn' or 'raise' "
    "when a binary operation broadcasts operands of different non-zero ranks. partix checks "
    "it in its elementwise binary operations (jnp.add, the operators, ...), as JAX's "
    "jax.numpy functions do ('raise': a PartixError, a ValueError).",
    choices=("allow", "warn", "raise"))

numpy_dtype_promotion = State(
    "jax_numpy_dtype_promotion", "standard",
    "jax.numpy_dtype_promotion: 'standard' (JAX's promotion lattice) or 'strict', which "
    "refuses implicit promotion between different dtypes (a Python int still combines with "
    "any integer or float array, a Python float with a float array). partix checks it in its "
    "elementwise binary operations (a TypePromotionError, a PartixError).",
    choices=("standard", "strict"))

_MATMUL_PRECISIONS = (
    "default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
    "ANY_F8_ANY_F8_F32", "ANY_F8_ANY_F8_F32_FAST_ACCUM", "ANY_F8_ANY_F8_ANY",
    "ANY_F8_ANY_F8_ANY_FAST_ACCUM", "F16_F16_F16", "F16_F16_F32", "BF16_BF16_BF16",
    "BF16_BF16_F32", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "BF16_BF16_F32_X9",
    "TF32_TF32_F32", "TF32_TF32_F32_X3", "F32_F32_F32", "F64_F64_F64")

default_matmul_precision = State(
    "jax_default_matmul_precision", None,
    "jax.default_matmul_precision: the precision of matmuls and convolutions on 32-bit inputs "
    "that name none. partix's CPU matmuls and convolutions compute float32 products at every "
    "setting (as JAX's CPU backend), so the value is validated and read back only.",
    choices=_MATMUL_PRECISIONS, optional=True)

default_prng_impl = State(
    "jax_default_prng_impl", "threefry2x32",
    "jax.default_prng_impl: the random bit generator keys use by default. partix implements "
    "threefry2x32 only: that value is accepted, any other is refused with a PartixError "
    "(never drawing other bits than the program asked for).",
    choices=("threefry2x32",))

legacy_prng_key = State(
    "jax_legacy_prng_key", "allow",
    "jax.legacy_prng_key: what JAX does when raw (uint32[2]) keys reach jax.random: 'allow', "
    "'warn' or 'error'. partix accepts raw keys at every setting: the option is accepted and "
    "read back, and 'warn'/'error' warn once that nothing is checked.",
    choices=("allow", "warn", "error"), unchecked=lambda v: v != "allow")

array_garbage_collection_guard = State(
    "jax_array_garbage_collection_guard", None,
    "jax.array_garbage_collection_guard: what JAX does when an Array is freed by the garbage "
    "collector instead of by reference counting ('allow', 'log', 'fatal'). partix does not "
    "watch for it: the option is accepted and read back, and 'log'/'fatal' warn once that "
    "nothing is checked.", choices=("allow", "log", "fatal"), optional=True,
    unchecked=lambda v: v in ("log", "fatal"))

_PROMOTION = ("jax_numpy_rank_promotion", "jax_numpy_dtype_promotion")


def _refresh_promotion_checks():
  PROMOTION_CHECKS[0] = (numpy_rank_promotion._global != "allow" or
                         numpy_dtype_promotion._global != "standard" or
                         _nondefault_contexts[0] > 0)


def check_promotion(x, y, a, b, weak_x, weak_y, api):
  """The checks of numpy_rank_promotion and numpy_dtype_promotion for a binary operation on x
  and y (as given), whose core operands before promotion are a and b (None for a Python
  number)."""
  rank = numpy_rank_promotion.value
  if rank != "allow" and a is not None and b is not None:
    sa, sb = tuple(a.shape), tuple(b.shape)
    if sa and sb and len(sa) != len(sb):
      if rank == "raise":
        raise PartixError(f"[{api}] operands of shapes {sa} and {sb} would be broadcast by "
                          "implicit rank promotion, which jax_numpy_rank_promotion='raise' "
                          "refuses; reshape or broadcast_to one of them explicitly")
      warnings.warn(f"[{api}] implicit rank promotion of operands of shapes {sa} and {sb} "
                    "(jax_numpy_rank_promotion='warn'); set it to 'allow' to silence this",
                    UserWarning, stacklevel=4)
  if numpy_dtype_promotion.value != "strict":
    return
  ints = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
  floats = ("f16", "bf16", "f32", "f64")
  if a is not None and b is not None:
    if a.dtype != b.dtype:
      raise TypePromotionError(
          f"[{api}] operands of dtypes {_name(a.dtype)} and {_name(b.dtype)} have no implicit "
          "promotion under jax_numpy_dtype_promotion='strict'; cast one with .astype, or set "
          "it to 'standard'")
    return
  arr, num = (a, y) if a is not None else (b, x)
  if arr is None:
    return
  ok = (arr.dtype == "bool" if isinstance(num, bool) else
        arr.dtype in ints + floats if isinstance(num, int) else arr.dtype in floats)
  if not ok:
    raise TypePromotionError(
        f"[{api}] a Python {type(num).__name__} and an array of dtype {_name(arr.dtype)} have "
        "no implicit promotion under jax_numpy_dtype_promotion='strict'; cast the array with "
        ".astype, or set it to 'standard'")


def _name(core_dtype):
  try:
    return str(dtypes.from_core(core_dtype))
  except KeyError:
    return str(core_dtype)
