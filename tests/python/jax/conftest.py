"""Mirrors of JAX's own test cases (docs/jax_tests.md). Each file here runs as a JAX program
would: `import partix.as_jax` installs partix under JAX's module names, so the tests say
`import jax`, `jax.numpy`, `jax.sharding`, as JAX's own tests do. The helpers below restate
what JAX's test utilities (jax._src.test_util) do, so the mirrored cases read like JAX's."""
import contextlib
import math

import numpy as np
import pytest

import partix.as_jax  # noqa: F401  (installs partix as `jax` before any test imports it)
import jax
from jax.sharding import AxisType, Mesh


def create_mesh(mesh_shape, axis_names, iota_order=False, axis_types=None):
  """jtu.create_mesh: a mesh of the first prod(mesh_shape) devices, Auto axes by default;
  skips the test when there are too few devices, as JAX's does."""
  if isinstance(axis_names, str):
    axis_names = (axis_names,)
  size = math.prod(mesh_shape)
  if jax.device_count() < size:
    pytest.skip(f"needs {size} devices, found {jax.device_count()}")
  if iota_order:
    devices = sorted(jax.devices(), key=lambda d: d.id)[:size]
    return Mesh(np.array(devices).reshape(mesh_shape), axis_names, axis_types=axis_types)
  if axis_types is None:
    axis_types = (AxisType.Auto,) * len(mesh_shape)
  return jax.make_mesh(mesh_shape, axis_names, axis_types=axis_types)


@contextlib.contextmanager
def with_mesh(named_shape):
  """jtu.with_mesh: `with` a Mesh of the first devices, named_shape = (("x", 2), ...)."""
  names = tuple(n for n, _ in named_shape)
  shape = tuple(s for _, s in named_shape)
  size = math.prod(shape)
  if jax.device_count() < size:
    pytest.skip(f"needs {size} devices")
  with Mesh(np.array(jax.devices()[:size]).reshape(shape), names) as m:
    yield m


def assert_all_close(x, y, rtol=1e-5, atol=1e-5, check_dtypes=True):
  """self.assertAllClose: pytrees of arrays equal in shape (and dtype) and close in value."""
  xs, xt = jax.tree_util.tree_flatten(x)
  ys, yt = jax.tree_util.tree_flatten(y)
  assert xt == yt, (xt, yt)
  for a, b in zip(xs, ys):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    if check_dtypes:
      assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_allclose(a.astype(np.float64) if a.dtype.kind in "biuf" else a,
                               b.astype(np.float64) if b.dtype.kind in "biuf" else b,
                               rtol=rtol, atol=atol)


def assert_arrays_equal(x, y):
  """self.assertArraysEqual: same shape, dtype and every element."""
  a, b = np.asarray(x), np.asarray(y)
  assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
  np.testing.assert_array_equal(a, b)
