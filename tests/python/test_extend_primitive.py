"""jax.extend.core.Primitive (partix.extend.core.Primitive): a user primitive's implementation
runs eagerly, and as a host call under jit, shard_map (8 devices) and vmap; the abstract
evaluation types its results; differentiation and missing rules are refused by name."""
import functools

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.extend import core as jex_core
from partix.sharding import PartitionSpec as P


def _square_plus():
  p = jex_core.Primitive("square_plus")
  p.def_impl(lambda x, *, c: np.asarray(x) ** 2 + c)
  p.def_abstract_eval(lambda a, *, c: jax.ShapeDtypeStruct(a.shape, a.dtype))
  return p


def test_eager_bind_runs_the_implementation():
  p = _square_plus()
  x = np.arange(4.0, dtype=np.float32)
  np.testing.assert_allclose(np.asarray(p.bind(x, c=1.0)), x ** 2 + 1)
  assert repr(p) == "square_plus"


def test_bind_under_jit_and_vmap():
  p = _square_plus()
  x = jnp.arange(6.0).reshape(2, 3)
  want = np.arange(6.0).reshape(2, 3) ** 2 + 2
  got = jax.jit(lambda v: p.bind(v, c=2.0) * 1.0)(x)
  np.testing.assert_allclose(np.asarray(got), want)
  got = jax.vmap(lambda v: p.bind(v, c=2.0))(x)
  np.testing.assert_allclose(np.asarray(got), want)


def test_bind_inside_shard_map_on_each_block():
  p = _square_plus()
  mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))

  @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
  def f(x):
    return p.bind(x, c=0.5)

  x = jnp.arange(16.0)
  want = np.arange(16.0) ** 2 + 0.5
  np.testing.assert_allclose(np.asarray(f(x)), want)
  np.testing.assert_allclose(np.asarray(jax.jit(f)(x)), want)


def test_multiple_results():
  p = jex_core.Primitive("split2")
  p.multiple_results = True
  p.def_impl(lambda x: [np.asarray(x) + 1, np.asarray(x) * 2])
  p.def_abstract_eval(lambda a: [a, a])
  a, b = jax.jit(lambda v: tuple(p.bind(v)))(jnp.ones(3))
  np.testing.assert_allclose(np.asarray(a), np.full(3, 2.0))
  np.testing.assert_allclose(np.asarray(b), np.full(3, 2.0))


def test_no_operands_no_results_under_check_vma_false():
  p = jex_core.Primitive("nothing")
  p.multiple_results = True
  p.def_impl(lambda: [])
  p.def_abstract_eval(lambda: [])
  mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])

  @functools.partial(jax.shard_map, mesh=mesh, in_specs=(), out_specs=None, check_vma=False)
  def f():
    p.bind()

  assert f() is None
  assert jax.jit(f)() is None


def test_missing_rules_and_bad_input_are_refused():
  p = jex_core.Primitive("bare")
  with pytest.raises(jax.PartixError, match="bare has no implementation"):
    p.bind(np.ones(2))
  p.def_impl(lambda x: x)
  with pytest.raises(jax.PartixError, match="abstract evaluation"):
    jax.jit(lambda v: p.bind(v))(jnp.ones(2))
  with pytest.raises(jax.PartixError, match="non-empty str"):
    jex_core.Primitive("")
  with pytest.raises(jax.PartixError, match="takes a function"):
    p.def_impl(3)
  with pytest.raises(jax.PartixError, match="operand 0"):
    p.bind("text")
  q = _square_plus()
  with pytest.raises(jax.PartixError):
    jax.grad(lambda v: q.bind(v, c=1.0).sum())(jnp.ones(3))
