"""Host callbacks (jax.pure_callback, jax.experimental.io_callback, jax.debug.callback and
jax.debug.print) across the product: eager, jit on 8 devices with sharded arguments,
shard_map (once per device, with its blocks), loops and branches (once per iteration run),
vmap's methods, grad, dead-code elimination, dtypes, and bad input: a wrong result shape or a
failing function is a PartixError naming the API, and the runtime stays usable. Behaviour
checked against JAX 0.10.2."""
import threading

import ml_dtypes
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.experimental import io_callback
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P


@pytest.fixture
def mesh():
  return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


class Calls:
  """Records the values a callback was called with (callbacks may run on device threads)."""

  def __init__(self):
    self.values = []
    self.lock = threading.Lock()

  def __call__(self, *args):
    with self.lock:
      self.values.append(tuple(np.asarray(a).copy() for a in args))


def test_eager_calls_at_once_and_returns_arrays():
  out = jax.pure_callback(lambda x: np.sin(x), jax.ShapeDtypeStruct((3,), jnp.float32),
                          jnp.arange(3.))
  assert isinstance(out, jax.Array)
  np.testing.assert_allclose(np.asarray(out), np.sin(np.arange(3.)), rtol=1e-6)
  seen = Calls()
  jax.debug.callback(seen, jnp.arange(2))
  assert len(seen.values) == 1 and seen.values[0][0].tolist() == [0, 1]


def test_debug_print_in_jit_prints_values_on_every_run(capsys):
  @jax.jit
  def f(x):
    jax.debug.print("x={x} y={}", x * 2, x=x)
    return x + 1

  f(jnp.arange(3))
  f(jnp.arange(3) + 10)
  out = capsys.readouterr().out
  assert out == "x=[0 1 2] y=[0 2 4]\nx=[10 11 12] y=[20 22 24]\n"


def test_effect_kept_though_its_function_returns_nothing(capsys):
  @jax.jit
  def f(x):
    jax.debug.print("hello {}", x.sum())

  f(jnp.arange(4))
  assert capsys.readouterr().out == "hello 6\n"


def test_sharded_jit_prints_once_with_the_whole_value(mesh, capsys):
  x = jax.device_put(jnp.arange(16.), NamedSharding(mesh, P("x")))

  @jax.jit
  def f(x):
    jax.debug.print("{}", x.reshape(2, 8).sum(1))
    return jnp.sin(x)

  f(x)
  assert capsys.readouterr().out == "[28. 92.]\n"


def test_pure_callback_under_jit_on_8_devices(mesh):
  x = jax.device_put(jnp.arange(16.).reshape(8, 2), NamedSharding(mesh, P("x")))

  @jax.jit
  def f(x):
    y = jax.pure_callback(lambda v: (v * 3).astype(np.float32),
                          jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return y + 1

  out = f(x)
  np.testing.assert_array_equal(np.asarray(out), np.arange(16.).reshape(8, 2) * 3 + 1)


def test_io_callback_with_results_runs_once_and_every_device_gets_them(mesh):
  x = jax.device_put(jnp.arange(8.), NamedSharding(mesh, P("x")))
  calls = Calls()

  def read(v):
    calls(v)
    return np.full((2,), len(calls.values), np.int32)

  @jax.jit
  def f(x):
    r = io_callback(read, jax.ShapeDtypeStruct((2,), jnp.int32), x)
    return r, x * 2

  r, _ = f(x)
  assert len(calls.values) == 1
  assert calls.values[0][0].tolist() == list(range(8))
  for s in r.addressable_shards:
    assert np.asarray(s.data).tolist() == [1, 1]
  r, _ = f(x)
  assert len(calls.values) == 2 and np.asarray(r).tolist() == [2, 2]


def test_shard_map_calls_once_per_device_with_its_block(mesh, capsys):
  @jax.jit
  def f(x):
    def body(b):
      i = lax.axis_index("x")
      jax.debug.print("instance {i} has x={b}", i=i, b=b)
      return jax.pure_callback(lambda v: v + 100, jax.ShapeDtypeStruct(b.shape, b.dtype), b)
    return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)

  out = f(jnp.arange(16))
  np.testing.assert_array_equal(np.asarray(out), np.arange(16) + 100)
  lines = sorted(capsys.readouterr().out.splitlines())
  assert lines == sorted(f"instance {i} has x=[{2 * i} {2 * i + 1}]" for i in range(8))


def test_io_callback_without_results_under_shard_map():
  # JAX's pjit_test.py::test_empty_io_callback_under_shard_map, with a count of the calls.
  mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
  calls = Calls()

  def _f(x, y):
    io_callback(lambda v: calls(v), (), x, ordered=True)
    return x + y[..., jnp.newaxis]

  f = jax.jit(jax.shard_map(_f, mesh=mesh, in_specs=(P(None, "i"), P(None)),
                            out_specs=P(None, "i")))
  out = f(jnp.zeros((2, 16)), jnp.ones(2))
  np.testing.assert_array_equal(np.asarray(out), np.ones((2, 16)))
  assert len(calls.values) == 4 and all(v[0].shape == (2, 4) for v in calls.values)


def test_loops_and_branches_call_once_per_run_taken(capsys):
  @jax.jit
  def f(x):
    def body(i, c):
      jax.debug.print("i={}", i)
      return c + i
    c = lax.fori_loop(0, 3, body, x)
    return lax.cond(c > 100, lambda c: (jax.debug.print("big"), c)[1],
                    lambda c: (jax.debug.print("small {}", c), c)[1], c)

  f(jnp.int32(1))
  assert capsys.readouterr().out == "i=0\ni=1\ni=2\nsmall 4\n"

  def step(c, x):
    jax.debug.print("x={}", x)
    return c + x, c
  jax.jit(lambda xs: lax.scan(step, 0., xs))(jnp.arange(2.))
  assert capsys.readouterr().out == "x=0.0\nx=1.0\n"


def test_vmap_methods():
  calls = Calls()

  def f(x, y):
    calls(x, y)
    return x + y

  spec = jax.ShapeDtypeStruct((3,), jnp.float32)
  xs, y = jnp.arange(6.).reshape(2, 3), jnp.ones(3)
  seq = jax.vmap(lambda x: jax.pure_callback(f, spec, x, y, vmap_method="sequential"))(xs)
  np.testing.assert_array_equal(np.asarray(seq), np.arange(6.).reshape(2, 3) + 1)
  assert [tuple(v.shape for v in c) for c in calls.values] == [((3,), (3,))] * 2

  calls.values.clear()
  exp = jax.vmap(lambda x: jax.pure_callback(f, spec, x, y, vmap_method="expand_dims"))(xs)
  np.testing.assert_array_equal(np.asarray(exp), np.arange(6.).reshape(2, 3) + 1)
  assert [tuple(v.shape for v in c) for c in calls.values] == [((2, 3), (1, 3))]

  calls.values.clear()
  jax.vmap(lambda x: jax.pure_callback(f, spec, x, y, vmap_method="broadcast_all"))(xs)
  assert [tuple(v.shape for v in c) for c in calls.values] == [((2, 3), (2, 3))]

  with pytest.raises(jax.PartixError, match=r"\[pure_callback\] vmap of pure_callback needs "
                     r"vmap_method="):
    jax.vmap(lambda x: jax.pure_callback(f, spec, x, y))(xs)
  with pytest.raises(jax.PartixError, match=r"vmap_method='bogus' is not one of"):
    jax.pure_callback(f, spec, xs[0], y, vmap_method="bogus")


def test_debug_print_under_vmap_prints_each_example(capsys):
  jax.jit(jax.vmap(lambda x: (jax.debug.print("v={}", x), x)[1]))(jnp.arange(3))
  assert capsys.readouterr().out == "v=0\nv=1\nv=2\n"


def test_grad_prints_the_primal_and_refuses_a_pure_callback_on_the_path(capsys):
  def loss(w):
    jax.debug.print("w={}", w)
    return (w * w).sum()

  g = jax.jit(jax.grad(loss))(jnp.array([1., 2.]))
  np.testing.assert_array_equal(np.asarray(g), [2., 4.])
  assert capsys.readouterr().out == "w=[1. 2.]\n"

  def bad(w):
    return jax.pure_callback(np.sin, jax.ShapeDtypeStruct((2,), jnp.float32), w).sum()
  with pytest.raises(jax.PartixError, match=r"\[pure_callback\] pure_callback cannot be "
                     r"differentiated; give it a custom_jvp"):
    jax.jit(jax.grad(bad))(jnp.array([1., 2.]))

  def off_path(w):  # no gradient reaches the callback's result
    s = jax.pure_callback(lambda v: np.float32(v.sum()), jax.ShapeDtypeStruct((), jnp.float32),
                          lax.stop_gradient(w))
    return (w * lax.stop_gradient(s)).sum()
  np.testing.assert_array_equal(np.asarray(jax.grad(off_path)(jnp.array([1., 2.]))), [3., 3.])


def test_custom_jvp_around_a_pure_callback_is_differentiable():
  @jax.custom_jvp
  def host_sin(x):
    return jax.pure_callback(lambda v: np.sin(v).astype(v.dtype),
                             jax.ShapeDtypeStruct(x.shape, x.dtype), x)

  @host_sin.defjvp
  def _(primals, tangents):
    (x,), (t,) = primals, tangents
    return host_sin(x), jnp.cos(x) * t

  g = jax.jit(jax.grad(lambda x: host_sin(x).sum()))(jnp.array([0., 1.]))
  np.testing.assert_allclose(np.asarray(g), np.cos([0., 1.]), rtol=1e-6)


def test_unused_pure_callback_is_dropped_and_an_effect_is_not():
  pure, effect = Calls(), Calls()

  @jax.jit
  def f(x):
    jax.pure_callback(lambda v: (pure(v), v)[1], jax.ShapeDtypeStruct((2,), jnp.float32), x)
    io_callback(lambda v: effect(v), (), x)
    return x

  f(jnp.ones(2))
  assert len(pure.values) == 0 and len(effect.values) == 1


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.int32, jnp.bool_, jnp.uint8])
def test_dtypes_round_trip(dtype):
  x = jnp.arange(6).reshape(2, 3).astype(dtype)
  out = jax.jit(lambda x: jax.pure_callback(lambda v: v[::-1], jax.ShapeDtypeStruct(
      x.shape, x.dtype), x))(x)
  assert out.dtype == x.dtype
  np.testing.assert_array_equal(np.asarray(out).astype(np.float32),
                                np.asarray(x)[::-1].astype(np.float32))
  if dtype == jnp.bfloat16:
    assert np.asarray(out).dtype == ml_dtypes.bfloat16


def test_bad_results_and_failing_functions_are_errors_and_the_runtime_survives(mesh):
  x = jnp.arange(4.)
  spec = jax.ShapeDtypeStruct((4,), jnp.float32)
  with pytest.raises(jax.PartixError, match=r"\[pure_callback\] result 0 of the callback has "
                     r"shape \(3,\); result_shape_dtypes declares \(4,\)"):
    jax.jit(lambda x: jax.pure_callback(lambda v: v[:3], spec, x))(x)
  with pytest.raises(jax.PartixError, match=r"result 0 of the callback has dtype float64"):
    jax.jit(lambda x: jax.pure_callback(lambda v: v.astype(np.float64), spec, x))(x)
  with pytest.raises(jax.PartixError, match=r"returned 2 values where result_shape_dtypes "
                     r"declares 1"):
    jax.jit(lambda x: jax.pure_callback(lambda v: (v, v), spec, x))(x)

  def boom(v):
    raise RuntimeError("disk full")
  with pytest.raises(jax.PartixError, match=r"\[io_callback\] the callback raised "
                     r"RuntimeError: disk full"):
    xs = jax.device_put(jnp.arange(8.), NamedSharding(mesh, P("x")))
    jax.jit(lambda x: io_callback(boom, spec, x[:4]) + 1)(xs)

  def body(b):  # one device fails; the others go on to a collective
    jax.debug.callback(lambda i: boom(i) if i == 3 else None, lax.axis_index("x"))
    return lax.psum(b, "x")
  with pytest.raises(jax.PartixError, match=r"disk full"):
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P()))(jnp.arange(8.))

  with pytest.raises(jax.PartixError, match=r"cannot give the 64-bit dtype float64"):
    jax.pure_callback(np.sin, jax.ShapeDtypeStruct((4,), np.float64), x)
  with pytest.raises(jax.PartixError, match=r"has no shape and dtype"):
    jax.pure_callback(np.sin, 3, x)
  # The runtime still runs programs and callbacks.
  out = jax.jit(lambda x: jax.pure_callback(lambda v: v * 2, spec, x))(x)
  np.testing.assert_array_equal(np.asarray(out), np.arange(4.) * 2)


def test_a_callback_that_runs_partix_programs_is_an_error_not_a_hang():
  # Its own program holds the devices until it returns: numpy is the callback's language.
  def host(v):
    return np.asarray(jnp.asarray(v) * 2 + 1)

  with pytest.raises(jax.PartixError, match=r"a callback's function cannot run partix "
                     r"programs"):
    jax.jit(lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct((3,), jnp.float32),
                                        x))(jnp.arange(3.))
  out = jax.jit(lambda x: x * 2)(jnp.arange(3.))
  np.testing.assert_array_equal(np.asarray(out), [0., 2., 4.])


def test_effects_barrier_and_names():
  jax.effects_barrier()
  assert jax.debug.callback is not None and jax.experimental.io_callback is io_callback
