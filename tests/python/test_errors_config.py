"""jax.errors' classes (raised by partix where JAX raises them, each also a PartixError) and
JAX's configuration options as context managers (jax.enable_x64, jax.numpy_rank_promotion,
jax.debug_nans, ...)."""
import operator
import threading
import warnings

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix._src import config_states

E = jax.errors


def test_error_classes_are_jaxs_and_partixs():
  assert issubclass(E.TracerBoolConversionError, E.ConcretizationTypeError)
  assert issubclass(E.ConcretizationTypeError, E.JAXTypeError)
  for cls in (E.TracerArrayConversionError, E.TracerIntegerConversionError,
              E.UnexpectedTracerError, E.KeyReuseError, E.JaxprTypeError):
    assert issubclass(cls, E.JAXTypeError) and issubclass(cls, TypeError)
  assert issubclass(E.NonConcreteBooleanIndexError, E.JAXIndexError)
  assert issubclass(E.JAXIndexError, IndexError)
  assert issubclass(E.JaxRuntimeError, RuntimeError)
  for name in E.__all__:
    assert issubclass(getattr(E, name), jax.PartixError), name
  assert str(E.ConcretizationTypeError("a message")) == "a message"
  assert "context" in str(E.ConcretizationTypeError(jnp.ones(2), "context"))
  with pytest.raises(AttributeError, match="partix does not provide jax.errors.Nope"):
    E.Nope


CONVERSIONS = [
    (bool, E.TracerBoolConversionError, r"Array.__bool__"),
    (int, E.ConcretizationTypeError, r"Array.__int__"),
    (float, E.ConcretizationTypeError, r"Array.__float__"),
    (operator.index, E.TracerIntegerConversionError, r"Array.__index__"),
    (np.asarray, E.TracerArrayConversionError, r"Array.__array__"),
    (lambda x: x.tolist(), E.ConcretizationTypeError, r"Array.tolist"),
    (lambda x: x.item(), E.ConcretizationTypeError, r"Array.item"),
]


@pytest.mark.parametrize("convert,error,where", CONVERSIONS)
def test_traced_conversions_raise_jaxs_errors(convert, error, where):
  x = jnp.ones((), jnp.int32)
  transforms = {"jit": jax.jit, "vmap": lambda f: jax.vmap(f, axis_size=1, in_axes=None),
                "grad": lambda f: jax.grad(lambda v: f(v) * 0.0)}
  for name, transform in transforms.items():
    arg = x if name == "jit" else jnp.ones(())
    if convert is operator.index and name != "jit":
      continue  # a float tracer is no index at all (as in JAX)
    if name == "grad" and where in ("Array.__bool__", "Array.__int__"):
      # As JAX 0.10: an eager grad converts with the concrete primal value (bool, int, index).
      assert float(transform(lambda v: convert(v))(arg)) == 0.0
      continue
    with pytest.raises(error, match=where):
      transform(lambda v: convert(v))(arg)
    with pytest.raises(jax.PartixError):  # also partix's own error
      transform(lambda v: convert(v))(arg)
  # A Python `if` on a traced value: TracerBoolConversionError is a ConcretizationTypeError.
  with pytest.raises(E.ConcretizationTypeError, match="used as a Python __bool__"):
    jax.jit(lambda v: 1 if v > 0 else 2)(jnp.ones(()))
  # Concrete values convert as before.
  assert convert(jnp.ones((), jnp.int32)) is not None


def test_traced_boolean_mask_index():
  with pytest.raises(E.NonConcreteBooleanIndexError, match="traced boolean mask"):
    jax.jit(lambda v: v[v > 0])(jnp.arange(3.0))
  with pytest.raises(IndexError):
    jax.jit(lambda v: v[v > 0])(jnp.arange(3.0))
  assert jnp.arange(3.0)[np.array([True, False, True])].tolist() == [0.0, 2.0]


def test_catching_the_error_as_jax_programs_do():
  def f(x):
    try:
      return int(x)
    except jax.errors.ConcretizationTypeError:
      return -1
  assert jax.jit(f)(jnp.ones(())) == -1
  assert f(jnp.full((), 4.0)) == 4


# ---- configuration options ----

def test_options_read_set_and_restore():
  for name, new in [("numpy_rank_promotion", "warn"), ("numpy_dtype_promotion", "strict"),
                    ("default_matmul_precision", "float32"), ("enable_checks", True),
                    ("check_tracer_leaks", True), ("softmax_custom_jvp", True),
                    ("jax2tf_associative_scan_reductions", True),
                    ("default_prng_impl", "threefry2x32")]:
    option = getattr(jax, name)
    before = option.value
    assert getattr(jax.config, f"jax_{name}") == before
    with option(new):
      assert option.value == new and getattr(jax.config, f"jax_{name}") == new
    assert option.value == before
    assert option.name == f"jax_{name}" and option.__doc__

    @option(new)
    def read():
      return option.value
    assert read() == new and option.value == before
  with jax.checking_leaks():
    assert jax.check_tracer_leaks.value is True
  assert jax.check_tracer_leaks.value is False
  with jax.enable_checks():  # a bool option's context means True without an argument
    assert jax.enable_checks.value is True
  with pytest.raises(TypeError, match="read enable_checks.value"):
    bool(jax.enable_checks)


def test_options_are_per_thread_and_global_through_config_update():
  seen = {}

  def other():
    seen["value"] = jax.numpy_rank_promotion.value
  with jax.numpy_rank_promotion("raise"):
    t = threading.Thread(target=other)
    t.start()
    t.join()
  assert seen["value"] == "allow"
  jax.config.update("jax_numpy_rank_promotion", "warn")
  try:
    assert jax.numpy_rank_promotion.value == "warn"
    with jax.numpy_rank_promotion("allow"):
      assert jax.config.jax_numpy_rank_promotion == "allow"
    assert jax.config.jax_numpy_rank_promotion == "warn"
  finally:
    jax.config.update("jax_numpy_rank_promotion", "allow")
  assert jax.numpy_rank_promotion.value == "allow"


def test_bad_option_values():
  with pytest.raises(jax.PartixError, match=r"numpy_rank_promotion\] unknown value 'sometimes'"):
    jax.numpy_rank_promotion("sometimes")
  with pytest.raises(jax.PartixError, match=r"unknown value 'fp99'"):
    jax.config.update("jax_default_matmul_precision", "fp99")
  assert jax.default_matmul_precision.value is None
  with pytest.raises(jax.PartixError, match=r"default_prng_impl\] unknown value 'rbg'.*"
                     r"'threefry2x32'"):
    jax.default_prng_impl("rbg")
  with pytest.raises(jax.PartixError, match=r"needs the new value"):
    jax.numpy_dtype_promotion()
  with pytest.raises(jax.PartixError, match=r"debug_nans\] expects a bool, got 'yes'"):
    jax.debug_nans("yes")


def test_rank_promotion_is_checked():
  a, b = jnp.ones(3), jnp.ones((2, 3))
  with jax.numpy_rank_promotion("raise"):
    with pytest.raises(ValueError, match=r"\[add\] operands of shapes \(3,\) and \(2, 3\).*"
                       r"jax_numpy_rank_promotion='raise'"):
      a + b
    with pytest.raises(jax.PartixError, match=r"\[multiply\]"):
      jax.jit(lambda x, y: x * y)(a, b)
    # Same ranks broadcast, scalars and Python numbers combine with anything.
    assert (jnp.ones((3, 1)) + jnp.ones((1, 3))).shape == (3, 3)
    assert (a + jnp.ones(())).shape == (3,) and (b * 2.0).shape == (2, 3)
  with jax.numpy_rank_promotion("warn"):
    with pytest.warns(UserWarning, match="implicit rank promotion"):
      assert (a - b).shape == (2, 3)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert (a + b).shape == (2, 3)  # 'allow' again: silent


def test_strict_dtype_promotion_is_checked():
  f32, i32 = jnp.ones(3), jnp.ones(3, jnp.int32)
  with jax.numpy_dtype_promotion("strict"):
    with pytest.raises(jax.dtypes.TypePromotionError, match=r"dtypes float32 and int32"):
      f32 + i32
    with pytest.raises(jax.dtypes.TypePromotionError, match=r"dtypes int8 and int16"):
      jnp.ones(2, jnp.int8) * jnp.ones(2, jnp.int16)
    with pytest.raises(jax.dtypes.TypePromotionError, match=r"Python float and an array of "
                       r"dtype int32"):
      i32 + 1.5
    with pytest.raises(ValueError):
      jax.jit(lambda x, y: x + y)(f32, i32)
    assert (i32 + 1).dtype == jnp.int32 and (f32 * 2).dtype == jnp.float32
    assert (f32 + 0.5).dtype == jnp.float32 and (f32 + f32).dtype == jnp.float32
    assert (jnp.ones(2, bool) & True).dtype == jnp.bool_
  assert (f32 + i32).dtype == jnp.float32  # standard promotion again


def test_enable_x64_context():
  key = jax.random.key_data(jax.random.PRNGKey(2**33 + 1))
  assert np.asarray(key).tolist() == np.asarray(jax.random.key_data(
      jax.random.PRNGKey(1))).tolist()  # without x64 a seed is 32 bits
  with jax.enable_x64():
    assert jax.enable_x64.value and jax.config.jax_enable_x64
    wide = jax.random.key_data(jax.random.PRNGKey(2**33 + 1))
  assert np.asarray(wide).tolist() != np.asarray(key).tolist()
  assert jax.enable_x64.value is False and jax.config.jax_enable_x64 is False
  with jax.enable_x64(False):
    assert jax.enable_x64.value is False


def test_process_wide_options_restore():
  assert jax.auto_pcast.value is True
  with jax.auto_pcast(False):
    assert jax.config.jax_auto_pcast is False
  assert jax.config.jax_auto_pcast is True
  with jax.remove_size_one_mesh_axis_from_type(True):
    assert jax.remove_size_one_mesh_axis_from_type.value is True
  assert jax.remove_size_one_mesh_axis_from_type.value is False


def test_unchecked_options_say_so_once():
  config_states._warned.clear()
  for option, value in [(jax.debug_nans, True), (jax.debug_infs, True),
                        (jax.log_compiles, True), (jax.no_tracing, True),
                        (jax.no_execution, True), (jax.thread_guard, True),
                        (jax.debug_key_reuse, True), (jax.allow_f16_reductions, False),
                        (jax.legacy_prng_key, "error"),
                        (jax.array_garbage_collection_guard, "fatal")]:
    with pytest.warns(UserWarning, match=f"partix does not check {option.name}={value!r}"):
      with option(value):
        assert option.value == value
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      with option(value):  # once per option
        pass
    assert "accepted and read back" in option.__doc__, option.name  # the docstring says so
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    with jax.debug_nans(False), jax.legacy_prng_key("allow"):  # the defaults: nothing to say
      pass
  # debug_nans is accepted but checks nothing: a NaN result is returned as it is.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    with jax.debug_nans(True):
      assert np.isnan(float(jnp.log(-jnp.ones(()))))


def test_default_matmul_precision_leaves_results():
  a = np.random.RandomState(0).randn(4, 5).astype(np.float32)
  want = np.asarray(jnp.matmul(a, a.T))
  for p in ("bfloat16", "tensorfloat32", "float32", "highest", "BF16_BF16_F32"):
    with jax.default_matmul_precision(p):
      np.testing.assert_array_equal(np.asarray(jnp.matmul(a, a.T)), want)
