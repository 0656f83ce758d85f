"""The GIL is released while programs run: two Python threads run programs at once, a thread
doing pure-Python work progresses meanwhile, and errors raised in traced Python functions come
back as themselves without deadlock."""
import tempfile
import threading
import time

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import NamedSharding, PartitionSpec as P


def _body(i, x):
  return jnp.tanh(x @ x) * 0.5


def _slow_program(steps):
  return jax.jit(lambda x: lax.fori_loop(0, steps, _body, x))


def _timed(f, x):
  t0 = time.perf_counter()
  f(x).block_until_ready()
  return time.perf_counter() - t0


def _steps_for(f_of_steps, x, seconds):
  """Loop steps that make f run about `seconds` (measured here, so the test fits the machine)."""
  f = f_of_steps(20)
  f(x).block_until_ready()  # compile
  t = _timed(f, x)
  return max(20, int(20 * seconds / max(t, 1e-4)))


def _run_in_threads(fns):
  results, errors = [None] * len(fns), []

  def work(k):
    try:
      results[k] = np.asarray(fns[k]())
    except Exception as e:  # reported below
      errors.append(e)

  threads = [threading.Thread(target=work, args=(k,)) for k in range(len(fns))]
  t0 = time.perf_counter()
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=120)
  assert not any(t.is_alive() for t in threads)
  assert not errors, errors
  return results, time.perf_counter() - t0


def test_two_threads_run_programs_at_once():
  # Two one-device programs on different devices: a device runs its programs in order (as a
  # stream does), different devices at once, so without the GIL the pair takes about as long as
  # one. Held, it would take twice as long.
  devs = jax.devices()[:2]
  if len(devs) < 2:
    pytest.skip("needs 2 devices")
  xs = [jax.device_put(np.full((64, 64), 0.01, np.float32), d) for d in devs]
  steps = _steps_for(_slow_program, xs[0], 0.5)
  f = _slow_program(steps)
  expect = [np.asarray(f(x)) for x in xs]  # also compiles for each device
  alone = min(_timed(f, xs[0]) for _ in range(2))
  with tempfile.TemporaryDirectory() as d, jax.profiler.trace(d):
    results, both = _run_in_threads([lambda: f(xs[0]), lambda: f(xs[1])])
  for r, e in zip(results, expect):
    np.testing.assert_array_equal(r, e)
  # The two devices' instructions interleave in time (the OS shares whatever cores there
  # are); run one after the other, their spans would not overlap at all.
  spans = jax.profiler.spans()
  ranges = []
  for dev in devs:
    mine = [(s[3], s[3] + s[4]) for s in spans if s[0] == dev.id]
    assert mine, dev
    ranges.append((min(a for a, _ in mine), max(b for _, b in mine)))
  overlap = min(ranges[0][1], ranges[1][1]) - max(ranges[0][0], ranges[1][0])
  shorter = min(b - a for a, b in ranges)
  assert overlap > 0.5 * shorter, (ranges, both, alone)
  assert both < 3 * alone, (both, alone)  # and no hang


def test_two_threads_share_the_8_devices(mesh8):
  # Sharded programs from two threads on the same devices: both complete with the right
  # values (no deadlock between their collectives).
  s = NamedSharding(mesh8, P("x", "y"))
  a = np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
  x = jax.device_put(a, s)
  f = jax.jit(lambda x: lax.fori_loop(0, 30, _body, x))
  g = jax.jit(lambda x: (x @ x.T).sum(axis=0))
  expect_f, expect_g = np.asarray(f(x)), a @ a.T
  results, _ = _run_in_threads([lambda: f(x), lambda: g(x)] * 2)
  np.testing.assert_array_equal(results[0], expect_f)
  np.testing.assert_array_equal(results[2], expect_f)
  np.testing.assert_allclose(results[1], expect_g.sum(axis=0), rtol=1e-4, atol=1e-3)
  np.testing.assert_array_equal(results[1], results[3])


def test_python_thread_progresses_while_a_program_runs(mesh1):
  x = jnp.full((64, 64), 0.01, jnp.float32)
  steps = _steps_for(_slow_program, x, 0.5)
  f = _slow_program(steps)
  f(x).block_until_ready()
  ticks = []
  stop = threading.Event()

  def spin():
    while not stop.is_set():
      ticks.append(sum(range(1000)))  # pure Python: needs the GIL

  t = threading.Thread(target=spin)
  t.start()
  time.sleep(0.05)
  before = len(ticks)
  f(x).block_until_ready()
  during = len(ticks) - before
  stop.set()
  t.join()
  assert during > 50, during  # a held GIL would allow almost none


class MyError(RuntimeError):
  pass


def test_exception_in_traced_function_propagates():
  def bad(x):
    raise MyError("the model is unhappy about 3")
  with pytest.raises(MyError, match="unhappy about 3"):
    jax.jit(bad)(jnp.ones(4))
  with pytest.raises(KeyError):
    jax.jit(lambda d: d["missing"])({"a": jnp.ones(2)})
  # No deadlock and nothing left held: programs still run, from threads too.
  out = []
  th = threading.Thread(target=lambda: out.append(np.asarray(jax.jit(lambda a: a * 3)(
      jnp.ones(3)))))
  th.start()
  th.join(timeout=30)
  assert not th.is_alive()
  np.testing.assert_array_equal(out[0], [3, 3, 3])


def test_exception_in_loop_body_and_shard_map(mesh8):
  def body(i, x):
    raise ZeroDivisionError("body says no")
  with pytest.raises(ZeroDivisionError, match="body says no"):
    lax.fori_loop(0, 3, body, jnp.ones(2))
  with pytest.raises(ZeroDivisionError, match="body says no"):
    jax.jit(lambda x: lax.fori_loop(0, 3, body, x))(jnp.ones(2))

  def local(x):
    raise IndexError("shard says no")
  x = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh8, P("x", "y")))
  with pytest.raises(IndexError, match="shard says no"):
    jax.shard_map(local, mesh=mesh8, in_specs=P("x", "y"), out_specs=P("x", "y"))(x)
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: a + 1)(x)), np.full((8, 4), 2))


def test_exceptions_in_threads_at_once():
  # Each thread's error reaches that thread only.
  errs = {}

  def work(k):
    def f(x):
      if k % 2:
        raise ValueError(f"thread {k}")
      return x + k
    try:
      errs[k] = float(np.asarray(jax.jit(f)(jnp.zeros(())))[()])
    except ValueError as e:
      errs[k] = str(e)

  ts = [threading.Thread(target=work, args=(k,)) for k in range(6)]
  for t in ts:
    t.start()
  for t in ts:
    t.join(timeout=60)
  assert errs == {0: 0.0, 1: "thread 1", 2: 2.0, 3: "thread 3", 4: 4.0, 5: "thread 5"}
