"""Devices, memory and partix.debug: the sharding table is the C++ one and shows the layout the
mesh implies; shard data stays on its device; np.asarray gathers a sharded array."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import _core
from partix.sharding import NamedSharding, PartitionSpec as P


def _cells(table):
  """The device lists of a table's cells, row by row."""
  rows = []
  for line in table.splitlines():
    if line.startswith("│"):
      rows.append([c.strip() for c in line.strip("│").split("│")])
  return rows


@pytest.mark.parametrize("spec,expect", [
    (P("x", "y"), [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"], ["CPU 4", "CPU 5"],
                   ["CPU 6", "CPU 7"]]),
    (P(None, "y"), [["CPU 0,2,4,6", "CPU 1,3,5,7"]]),
    (P("y", "x"), [["CPU 0", "CPU 2", "CPU 4", "CPU 6"], ["CPU 1", "CPU 3", "CPU 5", "CPU 7"]]),
])
def test_visualize_array_sharding_matches_cpp_table(mesh8, capsys, spec, expect):
  x = jax.device_put(np.zeros((8, 8), np.float32), NamedSharding(mesh8, spec))
  jax.debug.visualize_array_sharding(x)
  out = capsys.readouterr().out
  assert out == _core.visualize_sharding(x._a) + "\n"
  # Mesh (4, 2) over devices 0..7 row-major: device (i, j) is 2 * i + j.
  assert _cells(out) == expect


def test_visualize_sharding_one_device_and_bad_input(mesh1, capsys):
  jax.debug.visualize_array_sharding(jnp.ones((4, 4)))
  assert _cells(capsys.readouterr().out) == [["CPU 0"]]
  jax.debug.visualize_sharding((8, 8), NamedSharding(mesh1, P()))
  assert _cells(capsys.readouterr().out) == [["CPU 0"]]
  with pytest.raises(jax.PartixError, match=r"^\[visualize_array_sharding\]"):
    jax.debug.visualize_array_sharding(np.ones(3))


def test_shard_data_stays_on_device(mesh8):
  a = np.arange(64, dtype=np.float32).reshape(8, 8)
  x = jax.device_put(a, NamedSharding(mesh8, P("x", "y")))
  before = [_core.memory_stats(d)["bytes_in_use"] for d in range(8)]
  shards = x.addressable_shards
  assert len(shards) == 8
  datas = [s.data for s in shards]
  # No copy was made on any device by taking the shards' data.
  assert [_core.memory_stats(d)["bytes_in_use"] for d in range(8)] == before
  for s, d in zip(shards, datas):
    assert d.shape == (2, 4)
    assert {dev.id for dev in d.sharding.device_set} == {s.device.id}
    np.testing.assert_array_equal(np.asarray(d), a[s.index])
  # np.asarray of the sharded array gathers the whole of it.
  np.testing.assert_array_equal(np.asarray(x), a)


def test_asarray_one_device_and_replicated(mesh1, mesh8):
  a = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
  x = jax.device_put(a, NamedSharding(mesh1, P()))
  np.testing.assert_array_equal(np.asarray(x), a)
  r = jax.device_put(a, NamedSharding(mesh8, P()))
  assert len(r.addressable_shards) == 8
  for s in r.addressable_shards:
    np.testing.assert_array_equal(np.asarray(s.data), a)
  np.testing.assert_array_equal(np.asarray(r), a)


def test_devices_and_memory_stats():
  assert jax.device_count() == 8 and jax.local_device_count() == 8
  assert [d.id for d in jax.devices()] == list(range(8))
  assert jax.process_index() == 0 and jax.process_count() == 1
  n0 = _core.memory_stats(5)["bytes_in_use"]
  y = jax.device_put(np.ones((256,), np.float32), jax.devices()[5])
  assert _core.memory_stats(5)["bytes_in_use"] >= n0 + 1024
  del y
  assert _core.memory_stats(5)["bytes_in_use"] == n0


def test_dispatch_fast_path_matches_general_path(mesh8):
  # Calls with Arrays only take the fast path; pytrees, numpy inputs and kwargs the general one.
  # Both give numpy's results, trace once per signature and reject bad arguments.
  calls = []

  def f(x, y):
    calls.append(1)
    return x * y + 1

  g = jax.jit(f)
  a = np.arange(8, dtype=np.float32)
  x = jnp.asarray(a)
  np.testing.assert_array_equal(np.asarray(g(x, x)), a * a + 1)
  np.testing.assert_array_equal(np.asarray(g(x, x)), a * a + 1)
  np.testing.assert_array_equal(np.asarray(g(a, a)), a * a + 1)  # numpy leaves
  np.testing.assert_array_equal(np.asarray(g(x, y=x)), a * a + 1)  # a keyword
  assert len(calls) == 2  # numpy inputs have the Arrays' signature (as JAX); a keyword does not
  s = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh8, P("x", "y")))
  r = g(s, s)
  np.testing.assert_array_equal(np.asarray(r), np.full((8, 4), 2.0))
  assert r.sharding.spec == P("x", "y")
  assert len(calls) == 3  # a new shape and sharding: traced once more
  g(s, s)
  assert len(calls) == 3
  h = jax.jit(lambda *xs: {"sum": xs[0] + xs[-1], "n": xs[1]})
  out = h(x, x, x)
  np.testing.assert_array_equal(np.asarray(out["sum"]), 2 * a)
  np.testing.assert_array_equal(np.asarray(out["n"]), a)
  with pytest.raises(jax.PartixError, match="not an array"):
    g(x, "seven")
  with pytest.raises(jax.PartixError):
    g(x, jnp.ones(3))  # shapes do not broadcast


def _peak_growth(fn):
  """What fn adds to each device's peak bytes over what the device held before."""
  before = [_core.memory_stats(i)["bytes_in_use"] for i in range(8)]
  _core.reset_peak_memory_stats()
  out = fn()
  peaks = [_core.memory_stats(i)["peak_bytes_in_use"] - before[i] for i in range(8)]
  return out, peaks


def test_host_data_goes_straight_to_its_devices(mesh8):
  """device_put, jit's in_shardings and make_array_from_callback copy host data straight onto
  each device's block: no device (device 0 in particular) holds the whole array on the way."""
  s = NamedSharding(mesh8, P("x", "y"))
  h = np.arange(512 * 256, dtype=np.float32).reshape(512, 256)  # 512 KiB, 64 KiB per device
  block = h.nbytes // 8
  x, peaks = _peak_growth(lambda: jax.device_put(h, s))
  assert max(peaks) <= block, peaks
  np.testing.assert_array_equal(np.asarray(x), h)
  assert x.sharding == s
  f = jax.jit(lambda v: v * 2, in_shardings=s, out_shardings=s)
  f(h)  # compiled once; the call below places and runs only
  y, peaks = _peak_growth(lambda: f(h))
  # The placed copy is the call's own: the program writes its result over it (a scalar aside).
  assert max(peaks) <= block + 1024, peaks
  np.testing.assert_array_equal(np.asarray(y), 2 * h)
  z, peaks = _peak_growth(lambda: jax.make_array_from_callback(h.shape, s, lambda i: h[i]))
  assert max(peaks) <= block, peaks
  np.testing.assert_array_equal(np.asarray(z), h)
  # Lowering copies nothing, and lowers onto an abstract mesh as before.
  before = [_core.memory_stats(i)["bytes_in_use"] for i in range(8)]
  text = jax.jit(lambda v: v + 1, in_shardings=s).lower(h).as_text()
  assert "add" in text
  assert [_core.memory_stats(i)["bytes_in_use"] for i in range(8)] == before
  am = jax.sharding.AbstractMesh((4, 2), ("x", "y"))
  assert jax.jit(lambda v: v + 1, in_shardings=NamedSharding(am, P("x", "y"))).trace(h).lower(
      lowering_platforms=("cpu",))
  # One device: only that device holds it.
  d5, peaks = _peak_growth(lambda: jax.device_put(h, jax.devices()[5]))
  assert peaks[5] >= h.nbytes and max(peaks[:5] + peaks[6:]) == 0, peaks
  np.testing.assert_array_equal(np.asarray(d5), h)
  # Replicated: every device its own whole copy, as before.
  r = jax.device_put(h, NamedSharding(mesh8, P()))
  np.testing.assert_array_equal(np.asarray(r), h)
  # Uneven blocks (padding) and a pytree with mixed leaves.
  u = np.arange(7 * 9, dtype=np.float32).reshape(7, 9)
  tree = jax.device_put({"u": u, "a": jnp.ones((8,))}, NamedSharding(mesh8, P("x")))
  np.testing.assert_array_equal(np.asarray(tree["u"]), u)
  np.testing.assert_array_equal(np.asarray(tree["a"]), np.ones(8, np.float32))
  assert tree["u"].sharding == tree["a"].sharding == NamedSharding(mesh8, P("x"))
  n = jax.device_put(3.0, NamedSharding(mesh8, P()))
  assert float(n) == 3.0 and n.sharding == NamedSharding(mesh8, P())
  # Bad input names the API and the value.
  with pytest.raises(jax.PartixError, match=r"P\('x', 'y'\) has 2 entries .*shape \[6\]"):
    jax.device_put(np.ones((6,), np.float32), NamedSharding(mesh8, P("x", "y")))
  with pytest.raises(jax.PartixError, match="make_array_from_callback"):
    jax.make_array_from_callback(h.shape, s, lambda i: h)  # the whole array for each block


def test_read_only_host_arrays_are_accepted(mesh8):
  """np.asarray of an Array is a read-only view (as JAX's); it converts back everywhere."""
  x = jax.device_put(np.arange(16, dtype=np.float32), NamedSharding(mesh8, P()))
  v = np.asarray(x)
  assert not v.flags.writeable
  ro = np.frombuffer(np.arange(16, dtype=np.float32).tobytes(), np.float32)
  assert not ro.flags.writeable
  for host in (v, ro):
    np.testing.assert_array_equal(np.asarray(jnp.asarray(host)), np.arange(16))
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: a + 1)(host)), np.arange(16) + 1)
    np.testing.assert_array_equal(
        np.asarray(jax.device_put(host, NamedSharding(mesh8, P("x")))), np.arange(16))
    np.testing.assert_array_equal(np.asarray(x + host), 2 * np.arange(16))
