"""An eager shard_map's body converts invariant traced values to Python values (bool, int,
float, numpy, an index) and prints each device's block, as JAX's eager shard_map does."""
import functools

import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix import lax
from partix.sharding import PartitionSpec as P

AUTO = (partix.sharding.AxisType.Auto,)


def _mesh(shape, names):
  return partix.make_mesh(shape, names, axis_types=AUTO * len(shape))


def _sign_body(x):
  total = lax.psum(x.sum(), ("x", "y"))
  return x if total > 0 else -x


def test_python_if_on_a_psum_takes_the_branch_of_the_value():
  mesh = _mesh((2, 2), ("x", "y"))
  f = partix.shard_map(_sign_body, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
  x = np.arange(16.).reshape(4, 4)
  np.testing.assert_array_equal(np.asarray(f(x)), x)
  # The same signature with the other sign: the value-dependent trace was not cached.
  np.testing.assert_array_equal(np.asarray(f(-x - 1)), x + 1)
  np.testing.assert_array_equal(np.asarray(f(x + 1)), x + 1)


def test_int_float_index_and_numpy_of_invariant_values():
  mesh = _mesh((4,), ("x",))

  @functools.partial(partix.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  def f(x):
    n = int(lax.psum(1 + 0 * x[0], "x"))     # 4, as a Python int
    scale = float(lax.pmax(x.max(), "x"))     # 7.0
    host = np.asarray(lax.all_gather(x, "x", tiled=True, to="invarying"))
    assert host.shape == (8,)
    out = x * scale + n
    for _ in range(int(lax.psum(jnp.int32(1), "x")) - 3):  # a Python loop of one step
      out = out + 1
    return out + jnp.arange(8.)[int(lax.pmin(jnp.int32(2), "x"))]

  x = np.arange(8.)
  np.testing.assert_allclose(np.asarray(f(x)), x * 7 + 4 + 1 + 2)


def test_varying_values_have_no_python_value():
  mesh = _mesh((4,), ("x",))

  def body(x):
    return x if x.sum() > 0 else -x  # x's sum differs per device

  f = partix.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  with pytest.raises(partix.errors.TracerBoolConversionError):
    f(np.arange(8.))


def test_no_python_values_without_check_vma():
  mesh = _mesh((4,), ("x",))

  def body(x):
    return x if lax.psum(x.sum(), "x") > 0 else -x

  f = partix.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
  with pytest.raises(partix.errors.TracerBoolConversionError):
    f(np.arange(8.))


def test_str_shows_every_devices_block_with_its_coordinates():
  mesh = _mesh((2, 2), ("x", "y"))
  seen = []

  @functools.partial(partix.shard_map, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
  def f(x):
    seen.append(str(x))
    return x

  f(np.arange(16.).reshape(4, 4))
  text = seen[-1]
  for i, (coords, block) in enumerate([((0, 0), "[[0. 1.]\n [4. 5.]]"),
                                       ((1, 1), "[[10. 11.]\n [14. 15.]]")]):
    assert f"at mesh coordinates (x, y,) = {coords}:\n{block}" in text, text
  assert text.count("at mesh coordinates") == 4


def test_partial_manual_body_and_nested_jit():
  mesh = _mesh((2, 2), ("x", "y"))

  @functools.partial(partix.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                     axis_names={"x"})
  def f(x):
    total = partix.jit(lambda v: lax.psum(v.sum(), "x"))(x)
    return x * 2 if total > 100 else x * 3

  x = np.arange(8.)
  np.testing.assert_array_equal(np.asarray(f(x)), x * 3)
  np.testing.assert_array_equal(np.asarray(f(x * 10)), x * 20)


def test_under_jit_the_body_is_traced_and_refuses_conversions():
  mesh = _mesh((4,), ("x",))

  @functools.partial(partix.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  def f(x):
    return x if lax.psum(x.sum(), "x") > 0 else -x

  with pytest.raises(partix.errors.TracerBoolConversionError):
    partix.jit(f)(np.arange(8.))


def test_a_value_of_an_inner_trace_keeps_the_usual_error():
  mesh = _mesh((4,), ("x",))

  def body(x):
    def inner(c, v):
      if v > 0:  # a scan body's value: traced even in an eager shard_map, as in JAX
        return c, v
      return c, -v
    return lax.scan(inner, 0.0, x)[1]

  f = partix.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  with pytest.raises(partix.errors.TracerBoolConversionError):
    f(np.arange(8.))
