"""partix.profiler: a Chrome/Perfetto trace with one track per device."""
import json
import os

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P


def _load(d):
  path = os.path.join(d, "partix.trace.json")
  with open(path) as f:
    t = json.load(f)
  return t["traceEvents"] if isinstance(t, dict) else t


def test_trace_has_a_track_per_device(mesh8, tmp_path):
  x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh8, P("x", "y")))
  with jax.profiler.trace(str(tmp_path)):
    r = jax.jit(lambda a: a @ a + 1)(x)
    r.block_until_ready()
  np.testing.assert_array_equal(np.asarray(r), np.full((8, 8), 9.0))
  ev = _load(tmp_path)
  names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and
           e.get("name") == "thread_name"}
  assert names == {d: f"device {d}" for d in range(8)}
  spans = [e for e in ev if e.get("ph") == "X"]
  for d in range(8):
    mine = [e for e in spans if e["tid"] == d]
    assert mine, d
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in mine)
  # The sharded matmul needs a collective on every device.
  assert {e["tid"] for e in spans if e.get("cat") == "collective"} == set(range(8))
  assert len(jax.profiler.spans()) == len(spans)


def test_start_stop_and_one_device(mesh1, tmp_path):
  jax.profiler.start_trace(str(tmp_path / "t"))
  jnp.arange(4.0).sum().block_until_ready()
  path = jax.profiler.stop_trace()
  assert os.path.exists(path)
  ev = _load(tmp_path / "t")
  assert any(e.get("ph") == "X" and e["tid"] == 0 for e in ev)
  # Nothing is recorded once stopped.
  n = len(jax.profiler.spans())
  jnp.arange(4.0).sum().block_until_ready()
  assert len(jax.profiler.spans()) == n


def test_trace_is_written_when_the_body_raises(tmp_path):
  with pytest.raises(ZeroDivisionError):
    with jax.profiler.trace(str(tmp_path)):
      jnp.ones(3).block_until_ready()
      raise ZeroDivisionError
  assert any(e.get("ph") == "X" for e in _load(tmp_path))
