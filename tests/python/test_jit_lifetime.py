"""A jit's traces and compiled programs die with the jitted function: many distinct jitted
functions, each called and dropped, leave the process no larger (the Python side keeps each
jit's result trees on the jit object, the C++ side its programs)."""
import gc
import weakref

import numpy as np

import partix as jax
import partix.numpy as jnp
from partix._src import api


def _rss_mb():
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024.0
  raise AssertionError("no VmRSS in /proc/self/status")


def _one(x, i):
  f = jax.jit(lambda v: v * float(i) + 1.0)  # i is a constant: a new program each time
  np.testing.assert_array_equal(np.asarray(f(x)), np.full((4, 4), i + 1.0, np.float32))
  return weakref.ref(f)


def test_dead_jits_free_their_traces_and_programs():
  x = jnp.ones((4, 4))
  for i in range(500):  # warm-up: the allocators reach their steady state
    _one(x, i)
  gc.collect()
  before, one_shot = _rss_mb(), len(api._trees)
  refs = [_one(x, i) for i in range(500, 10500)]
  gc.collect()
  grown = _rss_mb() - before
  assert all(r() is None for r in refs)  # nothing keeps a dead jit alive
  assert len(api._trees) == one_shot  # no result tree left behind per trace
  # 10,000 programs kept alive would hold far more than this (each holds its plan, buffers
  # and trees); what remains is allocator noise.
  assert grown < 40, f"the process grew by {grown:.1f} MB over 10,000 dead jits"
