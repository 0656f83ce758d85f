"""jax.clear_caches, jax.live_arrays, jax.ensure_compile_time_eval, jax.closure_convert,
jax.custom_batching (custom_vmap, sequential_vmap), jax.version, and the new modules under
partix.as_jax."""
import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P


def test_clear_caches_retraces():
  traces = []

  def double(x):
    traces.append(1)
    return x * 2
  f = jax.jit(double)
  f(jnp.ones(3))
  f(jnp.ones(3))
  assert len(traces) == 1 and f.trace_count == 1
  jax.clear_caches()
  assert f.trace_count == 0
  assert f(jnp.ones(3)).tolist() == [2.0, 2.0, 2.0]
  assert len(traces) == 2 and f.trace_count == 1
  g = jax.jit(double)  # another wrapper of the same function shares the (new) trace
  g(jnp.ones(3))
  assert len(traces) == 2


def test_live_arrays():
  a = jnp.arange(5.0)
  live = jax.live_arrays()
  assert any(x is a for x in live)
  assert all(isinstance(x, jax.Array) for x in live)
  a.delete()
  assert not any(x is a for x in jax.live_arrays())
  assert jax.live_arrays("tpu") == []


def test_ensure_compile_time_eval():
  with jax.ensure_compile_time_eval():
    y = jnp.sin(jnp.asarray(3.0))  # eager: a concrete value
    assert isinstance(float(y), float)

  @jax.jit
  def f(x):
    with jax.ensure_compile_time_eval():
      c = jnp.arange(4.0) * 2  # under a trace partix still records it (same values)
    return x + c
  assert f(jnp.ones(4)).tolist() == [1.0, 3.0, 5.0, 7.0]
  assert "records" in jax.ensure_compile_time_eval.__doc__


def test_closure_convert_outside_transformations():
  w = jnp.asarray([1.0, 2.0, 3.0])
  f, consts = jax.closure_convert(lambda x: jnp.sum(jnp.sin(w * x)), 1.0)
  assert consts == []  # concrete captured arrays stay closed over, as in JAX
  assert float(f(2.0)) == pytest.approx(float(jnp.sum(jnp.sin(w * 2.0))))
  g, consts = jax.closure_convert(lambda t: {"a": t[0] * w, "b": t[1]}, (1.0, jnp.ones(2)))
  out = g((2.0, jnp.zeros(2)))
  assert out["a"].tolist() == [2.0, 4.0, 6.0] and out["b"].tolist() == [0.0, 0.0]
  with pytest.raises(TypeError, match="structure of the example arguments"):
    g(2.0)
  with pytest.raises(jax.PartixError, match=r"converted for float32\[2\]"):
    g((2.0, jnp.zeros(3)))


def test_closure_convert_hoists_traced_values_for_custom_vjp():
  """JAX's docstring example: a higher-order custom_vjp function gets the closed-over traced
  values as arguments, so their derivatives flow through its rule."""
  @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
  def apply(fn, x, *args):
    return fn(x, *args)

  def fwd(fn, x, *args):
    return fn(x, *args), (x, args)

  def bwd(fn, res, g):
    x, args = res
    _, vjp = jax.vjp(fn, x, *args)
    return vjp(g)
  apply.defvjp(fwd, bwd)

  def loss(p, x):
    fn = lambda v: jnp.sin(p * v)  # noqa: E731 (p is a traced closure value)
    converted, consts = jax.closure_convert(fn, x)
    assert len(consts) == 1
    return apply(converted, x, *consts)
  gp = jax.grad(loss)(0.5, 2.0)
  assert float(gp) == pytest.approx(2.0 * np.cos(1.0), rel=1e-6)
  gp = jax.jit(jax.grad(loss, argnums=(0, 1)))(0.5, 2.0)
  assert [float(v) for v in gp] == pytest.approx([2.0 * np.cos(1.0), 0.5 * np.cos(1.0)],
                                                 rel=1e-6)


def test_custom_vmap_uses_its_rule():
  @jax.custom_batching.custom_vmap
  def f(x, y):
    return x + y

  @f.def_vmap
  def rule(axis_size, in_batched, xs, ys):
    assert axis_size == 3 and in_batched == [True, True]
    return xs * ys, True
  xs, ys = jnp.arange(3.0), jnp.arange(1.0, 4.0)
  assert jax.vmap(f)(xs, ys).tolist() == [0.0, 2.0, 6.0]  # JAX's docstring example
  assert float(f(2.0, 3.0)) == 5.0  # outside vmap: the function itself
  assert jax.jit(jax.vmap(f))(xs, ys).tolist() == [0.0, 2.0, 6.0]
  assert float(jax.grad(f)(2.0, 3.0)) == 1.0


def test_custom_vmap_axes_and_trees():
  seen = []

  @jax.custom_batching.custom_vmap
  def f(tree, s):
    return {"sum": tree["a"] + tree["b"], "s": s}

  @f.def_vmap
  def rule(axis_size, in_batched, tree, s):
    seen.append(in_batched)
    return {"sum": tree["a"] - tree["b"], "s": s}, {"sum": True, "s": False}
  a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
  out = jax.vmap(f, in_axes=({"a": 1, "b": None}, None), out_axes={"sum": 1, "s": 0})(
      {"a": a, "b": 1.0}, 7.0)
  assert seen[-1] == [{"a": True, "b": False}, False]
  np.testing.assert_array_equal(np.asarray(out["sum"]), a - 1.0)
  assert out["s"].tolist() == [7.0, 7.0, 7.0]  # unbatched: broadcast along the batch
  out = jax.vmap(f, in_axes=(0, None), out_axes={"sum": 0, "s": None})(
      {"a": a, "b": a}, 7.0)
  assert out["s"].shape == () and out["sum"].tolist() == [[0.0] * 3] * 2
  # Nested vmaps: the innermost applies the rule, the outer batches its operations.
  rows = jax.vmap(jax.vmap(f, in_axes=(0, None)), in_axes=(0, None))(
      {"a": np.ones((4, 2, 3), np.float32), "b": np.ones((4, 2, 3), np.float32)}, 1.0)
  assert rows["sum"].shape == (4, 2, 3) and float(jnp.max(jnp.abs(rows["sum"]))) == 0.0


def test_custom_vmap_sharded_batch():
  mesh = jax.make_mesh((8,), ("x",))

  @jax.custom_batching.custom_vmap
  def norm(v):
    return jnp.sqrt(jnp.sum(v * v))

  @norm.def_vmap
  def rule(axis_size, in_batched, vs):
    return jnp.sqrt(jnp.sum(vs * vs, axis=1)), True
  x = np.random.RandomState(0).randn(16, 5).astype(np.float32)
  xs = jax.device_put(x, NamedSharding(mesh, P("x")))
  got = jax.vmap(norm)(xs)
  np.testing.assert_allclose(np.asarray(got), np.linalg.norm(x, axis=1), rtol=1e-6)
  assert got.sharding.spec[0] == "x"


def test_custom_vmap_errors():
  @jax.custom_batching.custom_vmap
  def f(x):
    return x

  with pytest.raises(AttributeError, match="no batching rule defined for f"):
    f(1.0)
  with pytest.raises(jax.PartixError, match="def_vmap"):
    jax.vmap(f)(jnp.ones(3))

  @f.def_vmap
  def rule(axis_size, in_batched, xs):
    return xs, (True, True)
  with pytest.raises(jax.PartixError, match="out_batched of structure"):
    jax.vmap(f)(jnp.ones(3))
  g = jax.custom_batching.custom_vmap(lambda x: x)
  g.def_vmap(lambda n, b, xs: xs)
  with pytest.raises(jax.PartixError, match="must return a pair"):
    jax.vmap(g)(jnp.ones(3))
  with pytest.raises(jax.PartixError, match="is not callable"):
    jax.custom_batching.custom_vmap(3)


def test_sequential_vmap():
  calls = []

  @jax.custom_batching.sequential_vmap
  def f(x, y):
    calls.append(tuple(x.shape))
    return jnp.sum(x) * y
  x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
  out = jax.vmap(f, in_axes=(0, None))(x, 2.0)
  assert out.tolist() == (x.sum(axis=1) * 2).tolist()
  assert calls and all(c == (4,) for c in calls)  # one example at a time
  assert float(f(jnp.ones(4), 3.0)) == 12.0


def test_version_module():
  assert jax.version.__version__ == "0.10.2"
  assert jax.version.__version_info__ == (0, 10, 2)


def test_new_modules_under_as_jax(tmp_path):
  (tmp_path / "prog.py").write_text(textwrap.dedent("""
    import jax, jax.numpy as jnp
    import jax.ops, jax.image, jax.errors, jax.custom_batching, jax.version
    from jax.errors import ConcretizationTypeError
    from jax.image import ResizeMethod
    print("seg", jax.ops.segment_sum(jnp.arange(5), jnp.array([0, 0, 1, 1, 2])).tolist())
    print("img", jax.image.resize(jnp.ones((2, 2)), (4, 4), ResizeMethod.LINEAR).shape)
    try:
      jax.jit(lambda x: int(x))(jnp.ones(()))
    except ConcretizationTypeError:
      print("caught")
    with jax.enable_x64(), jax.numpy_rank_promotion("raise"):
      print("x64", jax.config.jax_enable_x64)
    print("version", jax.version.__version__, jax.__version__)
  """))
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="8")
  p = subprocess.run([sys.executable, "-m", "partix.as_jax", "prog.py"], env=env,
                     capture_output=True, text=True, timeout=120, cwd=tmp_path)
  assert p.returncode == 0, p.stdout + p.stderr
  assert "seg [1, 5, 4]" in p.stdout and "img (4, 4)" in p.stdout
  assert "caught" in p.stdout and "x64 True" in p.stdout
  assert "version 0.10.2 0.10.2" in p.stdout
