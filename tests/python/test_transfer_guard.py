"""jax.transfer_guard and its per-direction forms: implicit and explicit host-to-device
transfers, device-to-device moves by device_put, levels, nesting and bad input (cases after
JAX's tests/transfer_guard_test.py, written anew)."""
import logging

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P


def test_host_to_device_implicit_and_explicit():
  with jax.transfer_guard_host_to_device("disallow"):
    jax.device_put(np.ones(10))  # explicit: allowed
    with pytest.raises(jax.PartixError, match=r"\[transfer_guard\] Disallowed host-to-device "
                                              r"transfer \(implicit\)"):
      jax.jit(lambda x: x)(np.ones(1))
    with pytest.raises(jax.PartixError, match="implicit"):
      jnp.asarray(np.arange(3))
  with jax.transfer_guard("disallow_explicit"):
    with pytest.raises(jax.PartixError, match=r"transfer \(explicit\)"):
      jax.device_put(np.ones(10))
  # Outside the guard everything is allowed again.
  np.testing.assert_array_equal(jax.jit(lambda x: x + 1)(np.ones(2)), [2.0, 2.0])


def test_arrays_on_devices_and_python_scalars_pass_the_guard():
  x = jax.device_put(np.arange(4.0))
  with jax.transfer_guard("disallow"):
    y = jax.jit(lambda a: a * 2 + 1)(x)  # no host data moves
    np.testing.assert_array_equal(jax.device_get(y), [1.0, 3.0, 5.0, 7.0])  # CPU: no transfer
    assert float(y[1]) == 3.0


def test_device_to_device():
  if jax.device_count() < 2:
    pytest.skip("needs 2 devices")
  d = jax.devices()
  x = jax.device_put(np.arange(8.0), d[0])
  with jax.transfer_guard_device_to_device("disallow_explicit"):
    with pytest.raises(jax.PartixError, match="device-to-device transfer"):
      jax.device_put(x, d[1])
  if jax.device_count() >= 4:
    m1 = jax.sharding.Mesh(np.array(d[:4]).reshape(2, 2), ("x", "y"))
    m2 = jax.sharding.Mesh(np.array(d[:4][::-1]).reshape(2, 2), ("x", "y"))
    a = jax.device_put(np.arange(16.0).reshape(8, 2), NamedSharding(m1, P("x", "y")))
    with jax.transfer_guard("disallow_explicit"):  # the same devices: a reshard, not a transfer
      b = jax.device_put(a, NamedSharding(m2, P("x")))
    np.testing.assert_array_equal(b, np.arange(16.0).reshape(8, 2))
    assert b.sharding == NamedSharding(m2, P("x"))


def test_log_levels_warn_and_allow(caplog):
  with caplog.at_level(logging.WARNING, logger="partix"):
    with jax.transfer_guard("log"):
      jax.jit(lambda x: x)(np.ones(3))  # implicit: logged, allowed
      jax.device_put(np.ones(3))  # explicit: not logged at 'log'
    with jax.transfer_guard("log_explicit"):
      jax.device_put(np.ones(5))
  texts = [r.getMessage() for r in caplog.records]
  assert sum("implicit" in t for t in texts) == 1
  assert sum("explicit" in t and "implicit" not in t for t in texts) == 1


def test_nesting_restores_and_bad_levels():
  with jax.transfer_guard("disallow"):
    with jax.transfer_guard_host_to_device("allow"):
      jnp.asarray(np.ones(2))
    with pytest.raises(jax.PartixError):
      jnp.asarray(np.ones(2))
  jnp.asarray(np.ones(2))
  with pytest.raises(jax.PartixError, match=r"\[transfer_guard\] unknown transfer guard level "
                                            r"'forbid'"):
    with jax.transfer_guard("forbid"):
      pass
