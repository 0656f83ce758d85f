"""Ctrl-C during a long run: the program stops within about a second, KeyboardInterrupt reaches
Python, buffers stay consistent and the next program runs. Each case runs in a subprocess that
sends SIGINT to itself mid-run and reports back."""
import os
import subprocess
import sys
import textwrap

import pytest

_PRELUDE = """
import os, signal, sys, threading, time
import numpy as np
import partix as jax, partix.numpy as jnp
from partix import lax
from partix.sharding import NamedSharding, PartitionSpec as P

def interrupt_in(seconds):
  t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
  t.start()
  return time.time() + seconds

def body(i, x):
  return jnp.tanh(x @ x) * 0.5
"""


def _run(code, devices=8, timeout=60):
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES=str(devices))
  p = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code)], env=env,
                     capture_output=True, text=True, timeout=timeout)
  return p


def _check(p):
  assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
  lines = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
  assert lines.get("caught") == "KeyboardInterrupt", p.stdout + p.stderr
  # Stopped within about a second of the signal (well under it on an idle machine; the bound
  # leaves room for a suite that shares its cores with other tests).
  assert float(lines["late"]) < 2.5, lines
  return lines


def test_eager_fori_loop_is_interrupted():
  p = _run("""
    x = jnp.ones((96, 96), jnp.float32) * 0.01
    sent = interrupt_in(0.5)
    try:
      lax.fori_loop(0, 10**8, body, x).block_until_ready()
      print("caught=nothing")
    except KeyboardInterrupt:
      print("caught=KeyboardInterrupt"); print(f"late={time.time() - sent}")
    # The input is intact and the next program runs.
    np.testing.assert_allclose(np.asarray(x), np.full((96, 96), 0.01, np.float32))
    y = jax.jit(lambda a: a * 2 + 1)(jnp.arange(8.0))
    print("next=" + ",".join(str(int(v)) for v in np.asarray(y)))
  """, devices=1)
  lines = _check(p)
  assert lines["next"] == "1,3,5,7,9,11,13,15"


def test_sharded_jit_with_collectives_is_interrupted():
  # Every step of the loop is a sharded matmul with an all-reduce: the devices stop together
  # and none is left waiting in a collective.
  p = _run("""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    s = NamedSharding(mesh, P("x", "y"))
    x = jax.device_put(np.full((64, 64), 0.01, np.float32), s)
    f = jax.jit(lambda x: lax.fori_loop(0, 10**8, body, x))
    sent = interrupt_in(1.0)
    try:
      f(x).block_until_ready()
      print("caught=nothing")
    except KeyboardInterrupt:
      print("caught=KeyboardInterrupt"); print(f"late={time.time() - sent}")
    assert all(sh.data.shape == (16, 32) for sh in x.addressable_shards)
    np.testing.assert_allclose(np.asarray(x), np.full((64, 64), 0.01, np.float32))
    g = jax.jit(lambda a, b: a @ b + 1)
    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
    r = np.asarray(g(jax.device_put(a, s), x))
    np.testing.assert_allclose(r, a @ np.full((64, 64), 0.01, np.float32) + 1, rtol=1e-5)
    print("next=ok")
    # The same program again, this time to the end (fewer steps), after the interrupt.
    h = jax.jit(lambda x: lax.fori_loop(0, 3, body, x))
    np.testing.assert_allclose(np.asarray(h(x)), np.asarray(
        body(0, body(0, body(0, x)))), rtol=1e-5)
    print("again=ok")
  """)
  lines = _check(p)
  assert lines["next"] == "ok" and lines["again"] == "ok"


def test_uncaught_interrupt_exits_like_python():
  # Not caught: the interpreter ends with KeyboardInterrupt's traceback, no C++ error or crash.
  p = _run("""
    x = jnp.ones((96, 96), jnp.float32) * 0.01
    interrupt_in(0.5)
    lax.while_loop(lambda c: c[0] < 10**9, lambda c: (c[0] + 1, body(0, c[1])),
                   (jnp.zeros((), jnp.int32), x))
  """, devices=2)
  assert p.returncode in (1, -2, 130), (p.returncode, p.stderr)
  assert "KeyboardInterrupt" in p.stderr
  for bad in ("terminate called", "Segmentation", "Aborted", "PartixError"):
    assert bad not in p.stderr


def test_interrupt_between_runs_is_plain_python():
  # Outside partix's calls the signal is Python's as before; partix restores the handler.
  p = _run("""
    import signal
    before = signal.getsignal(signal.SIGINT)
    f = jax.jit(lambda a: a + 1)
    f(jnp.ones(4))
    assert signal.getsignal(signal.SIGINT) is before
    try:
      os.kill(os.getpid(), signal.SIGINT); time.sleep(1)
      print("caught=nothing")
    except KeyboardInterrupt:
      print("caught=KeyboardInterrupt"); print("late=0")
    print("next=" + str(float(np.asarray(f(jnp.ones(4)))[0])))
  """, devices=1)
  lines = _check(p)
  assert lines["next"] == "2.0"


def test_interrupts_at_many_moments():
  # Signals at different moments of compiling, tracing and running: each trial ends in
  # KeyboardInterrupt or a finished result, never anything else, and the next program runs.
  p = _run("""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    s = NamedSharding(mesh, P("x", "y"))
    x = jax.device_put(np.full((32, 32), 0.01, np.float32), s)
    outcomes = []
    for k, delay in enumerate([0.001, 0.01, 0.03, 0.07, 0.15, 0.3]):
      f = jax.jit(lambda x, k=k: lax.fori_loop(0, 20000 + k, body, x))
      outcome = None
      sent = time.time() + delay  # set first: a short timer may fire inside interrupt_in
      try:
        interrupt_in(delay)
        f(x).block_until_ready()
        outcome = "done"
        time.sleep(max(0.0, sent - time.time()) + 1.0)  # the signal lands here instead
      except KeyboardInterrupt:
        if outcome is None:
          outcome = "interrupted"
          assert time.time() - sent < 2.5
      outcomes.append(outcome)
      y = jax.jit(lambda a: a * 2 + 1)(x)
      np.testing.assert_allclose(np.asarray(y), np.full((32, 32), 1.02, np.float32), rtol=1e-6)
    print("outcomes=" + ",".join(outcomes))
    print("caught=KeyboardInterrupt"); print("late=0")
  """)
  lines = _check(p)
  assert set(lines["outcomes"].split(",")) <= {"done", "interrupted"}
  assert "interrupted" in lines["outcomes"]


def test_own_sigint_handler_is_left_alone():
  # A handler of the program's own that carries on: the run is not cancelled and finishes.
  p = _run("""
    import signal
    seen = []
    signal.signal(signal.SIGINT, lambda *a: seen.append(1))
    x = jnp.ones((64, 64), jnp.float32) * 0.01
    f = jax.jit(lambda x: lax.fori_loop(0, 300, body, x))
    expect = np.asarray(f(x))
    interrupt_in(0.01)
    t0 = time.time()
    out = f(x)
    time.sleep(0.2)
    np.testing.assert_array_equal(np.asarray(out), expect)
    print(f"seen={len(seen)}")
    print("caught=KeyboardInterrupt"); print("late=0")
  """, devices=1)
  lines = _check(p)
  assert lines["seen"] == "1"
