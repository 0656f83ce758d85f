"""jit's caches as JAX's: wrappers of one function with equal options share traces and
programs; the counters of partix.test_util (and JAX's names for them); a committed argument
whose sharding places it as in_shardings does (an equivalent sharding) is taken as it is."""
import gc
import weakref

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import test_util as jtu
from partix.experimental.pjit import pjit
from partix.sharding import Mesh, NamedSharding, PartitionSpec as P


def test_wrappers_of_one_function_share_their_traces():
  traces = []

  def f(x):
    traces.append(1)
    return x * 2

  x = jnp.arange(4.)
  for _ in range(5):
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), np.arange(4.) * 2)
  assert len(traces) == 1
  # Other options are another cache: a new trace.
  jax.jit(f, static_argnums=())(x)  # the same options as none given: shared
  jax.jit(f, name="other")(x)
  jax.jit(f, donate_argnums=0)(jnp.arange(4.))
  assert len(traces) == 3


def test_fresh_lambdas_share_nothing():
  x = jnp.arange(4.)
  with jtu.count_jit_traces() as traces, jtu.count_jit_dispatch_misses() as misses:
    for _ in range(4):
      jax.jit(lambda y: y + 1)(x)
  assert traces() == 4 and misses() == 4


def test_in_shardings_list_and_tuple_prefixes_stay_distinct():
  mesh = jax.make_mesh((2,), ("x",))
  s = NamedSharding(mesh, P("x"))

  def f(a, b):
    return a + b

  x = jnp.arange(8.)
  with jtu.count_jit_traces() as traces:
    jax.jit(f, in_shardings=[s, s])(x, x)
    jax.jit(f, in_shardings=(s, s))(x, x)
    jax.jit(f, in_shardings=[s, s])(x, x)
  assert traces() == 2


def test_unhashable_options_keep_their_own_cache():
  mesh = jax.make_mesh((2,), ("x",))
  s = NamedSharding(mesh, P("x"))

  def f(d):
    return d["a"] * 3

  x = jnp.arange(8.)
  # A dict prefix is frozen into the key; the calls share one cache.
  with jtu.count_jit_traces() as traces:
    for _ in range(3):
      out = jax.jit(f, in_shardings=({"a": s},))({"a": x})
  assert traces() == 1
  np.testing.assert_array_equal(np.asarray(out), np.arange(8.) * 3)


def test_an_unhashable_callable_still_jits():
  class Scale:
    __hash__ = None  # unhashable: it cannot key the shared cache

    def __call__(self, x):
      return x * 5

  x = jnp.arange(3.)
  for _ in range(2):
    np.testing.assert_array_equal(np.asarray(jax.jit(Scale())(x)), np.arange(3.) * 5)


def test_the_shared_cache_dies_with_the_function():
  def make():
    def f(x):
      return x - 1
    return f

  f = make()
  jax.jit(f)(jnp.arange(3.))
  ref = weakref.ref(f)
  del f
  gc.collect()
  assert ref() is None  # the cache holds no reference to the function


def test_counters_read_after_the_block_are_the_blocks():
  @jax.jit
  def g(x):
    return x + 1

  with jtu.count_jit_dispatch_misses() as misses, jtu.count_jit_traces() as traces:
    g(np.arange(8))            # traces: a miss
    g(np.arange(8))            # host data, same signature: a hit
    g(jnp.arange(8))           # first all-Array call: the fast path's signature is new
    g(jnp.arange(8))
  g(jnp.arange(9))             # after the block: not counted
  assert (misses(), traces()) == (2, 1)
  # JAX's names are the same counters.
  assert jtu.count_pjit_cpp_cache_miss is jtu.count_jit_dispatch_misses
  assert jtu.count_jit_and_pmap_lowerings is jtu.count_jit_traces


def test_pjit_wrappers_share_under_a_recreated_mesh():
  traces = []

  def f(x):
    traces.append(1)
    return jnp.sin(x) * 2

  devices = np.array(jax.devices()[:4]).reshape(2, 2)
  x = np.arange(16, dtype=np.float32).reshape(4, 4)
  with Mesh(devices, ("x", "y")):
    pjit(f, in_shardings=P(("x", "y")), out_shardings=None)(x)
    pjit(f, in_shardings=P(("x", "y")), out_shardings=None)(x)
  with Mesh(devices, ("x", "y")):
    out = pjit(f, in_shardings=P(("x", "y")), out_shardings=None)(x)
  assert len(traces) == 1
  np.testing.assert_allclose(np.asarray(out), np.sin(x) * 2, rtol=1e-6)


# ---- arguments committed to an equivalent sharding ----

def test_a_one_device_axis_split_is_replicated():
  mesh = jax.make_mesh((1,), ("x",))
  a = jax.device_put(np.arange(16.).reshape(8, 2), NamedSharding(mesh, P("x")))
  f = jax.jit(lambda v: v * 2, in_shardings=NamedSharding(mesh, P()))
  np.testing.assert_array_equal(np.asarray(f(a)), np.arange(16.).reshape(8, 2) * 2)


def test_same_blocks_under_other_axis_names_are_taken():
  devs = jax.devices()[:4]
  m1 = Mesh(np.array(devs), ("a",))
  m2 = Mesh(np.array(devs), ("b",))
  a = jax.device_put(np.arange(8.), NamedSharding(m1, P("a")))
  f = jax.jit(lambda v: v + 1, in_shardings=NamedSharding(m2, P("b")))
  out = f(a)
  np.testing.assert_array_equal(np.asarray(out), np.arange(8.) + 1)
  assert out.sharding.spec == P("b")
  # under jit on 8 devices too
  g = jax.jit(lambda v: jnp.sum(v), in_shardings=NamedSharding(m2, P("b")))
  assert float(g(a)) == 28.0


def test_other_blocks_are_still_refused():
  devs = jax.devices()[:4]
  m1 = Mesh(np.array(devs), ("a",))
  m2 = Mesh(np.array(devs[::-1]), ("b",))  # the same devices holding other blocks
  a = jax.device_put(np.arange(8.), NamedSharding(m1, P("a")))
  f = jax.jit(lambda v: v + 1, in_shardings=NamedSharding(m2, P("b")))
  with pytest.raises(jax.PartixError, match=r"committed to .* differs from in_shardings"):
    f(a)
  # A replicated argument is not the split one either.
  r = jax.device_put(np.arange(8.), NamedSharding(m1, P()))
  with pytest.raises(jax.PartixError, match="differs from in_shardings"):
    jax.jit(lambda v: v, in_shardings=NamedSharding(m1, P("a")))(r)


# ---- jax.explain_cache_misses ----

def test_explain_cache_misses_names_the_argument_and_both_types(caplog):
  import logging
  mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))

  @jax.jit
  def f(a, b):
    return a * b

  host = np.arange(8, dtype=np.float32)
  f(host, host)
  with caplog.at_level(logging.WARNING, logger="partix.jit"):
    f(jax.device_put(host, NamedSharding(mesh, P("x"))), host)  # not explained: off
    assert not caplog.records
    with jax.explain_cache_misses(True):
      f(host, jax.device_put(host, NamedSharding(mesh, P("x"))))
  (rec,) = caplog.records
  msg = rec.getMessage()
  assert "different input types" in msg and "for f" in msg
  # The nearest earlier signature is the first (host, host): only b differs, a is not named.
  assert "at b, now f32[8]({Auto: ('x',)}) and before f32[8]({})" in msg
  assert "at a" not in msg


def test_explain_cache_misses_through_config_and_explicit_axes(caplog):
  import logging
  mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
  f = jax.jit(lambda v: v + 1)
  f(np.zeros((4, 2), np.float32))
  jax.config.update("jax_explain_cache_misses", True)
  try:
    with caplog.at_level(logging.WARNING, logger="partix.jit"):
      f(jax.device_put(np.zeros((4, 2), np.float32), NamedSharding(mesh, P("x"))))
  finally:
    jax.config.update("jax_explain_cache_misses", False)
  assert "now f32[4@x,2] and before f32[4,2]({}, {})" in caplog.records[0].getMessage()
