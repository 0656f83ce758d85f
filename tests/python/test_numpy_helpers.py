"""numpy's building and functional helpers on partix, each against numpy itself (concrete
inputs; under jit where the function takes traced values)."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp

X = np.arange(12.0, dtype=np.float32).reshape(3, 4)


def close(a, b, **kw):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5, **kw)


def test_block_fromfunction_index_tricks():
  a, b = np.ones((2, 2), np.float32), np.zeros((2, 3), np.float32)
  close(jnp.block([[a, b], [b[:, :2], np.full((2, 3), 2.0, np.float32)]]),
        np.block([[a, b], [b[:, :2], np.full((2, 3), 2.0)]]))
  close(jnp.block([np.arange(2.0), np.arange(3.0)]), np.block([np.arange(2.0), np.arange(3.0)]))
  close(jnp.fromfunction(lambda i, j: i * 10 + j, (3, 4)),
        np.fromfunction(lambda i, j: i * 10 + j, (3, 4)))
  close(jnp.mgrid[0:3, 0:2], np.mgrid[0:3, 0:2])
  close(jnp.ogrid[0:3, 0:2][1], np.ogrid[0:3, 0:2][1])
  close(jnp.r_[1:4, 0, jnp.asarray([7.0, 8.0])], np.r_[1:4, 0, [7.0, 8.0]])
  close(jnp.c_[np.arange(3), np.arange(3)], np.c_[np.arange(3), np.arange(3)])


def test_functional_helpers():
  close(jnp.apply_along_axis(lambda v: v.sum() * 2, 1, X), np.apply_along_axis(
      lambda v: v.sum() * 2, 1, X))
  close(jnp.apply_along_axis(lambda v: v[::-1], 0, X), np.apply_along_axis(lambda v: v[::-1], 0,
                                                                            X))
  close(jnp.apply_over_axes(jnp.sum, X, [0, 1]), np.apply_over_axes(np.sum, X, [0, 1]))
  x = np.linspace(-2, 2, 9, dtype=np.float32)
  f = lambda v: jnp.piecewise(v, [v < 0, v >= 1], [lambda t: -t, lambda t: t * 10, 0.5])  # noqa
  close(f(x), np.piecewise(x, [x < 0, x >= 1], [lambda t: -t, lambda t: t * 10, 0.5]))
  close(jax.jit(f)(x), np.piecewise(x, [x < 0, x >= 1], [lambda t: -t, lambda t: t * 10, 0.5]))
  y = X ** 2
  for g, w in zip(jnp.gradient(y), np.gradient(y)):
    close(g, w)
  close(jnp.gradient(y, 0.5, axis=1), np.gradient(y, 0.5, axis=1))
  ph = np.cumsum(np.full(20, 0.9, np.float32)) % (2 * np.pi)
  close(jax.jit(jnp.unwrap)(ph), np.unwrap(ph))


def test_polynomials_windows_frexp_and_dtype_queries():
  close(jnp.poly(np.array([1.0, 2.0, -3.0], np.float32)), np.poly([1.0, 2.0, -3.0]))
  close(jnp.polyint(np.array([3.0, 2.0, 1.0], np.float32), m=2, k=[1.0, 2.0]),
        np.polyint([3.0, 2.0, 1.0], m=2, k=[1.0, 2.0]))
  close(jnp.kaiser(9, 4.0), np.kaiser(9, 4.0))
  v = np.array([0.0, 1.0, -3.5, 1e-3, 1024.0, 0.75], np.float32)
  m, e = jnp.frexp(v)
  m2, e2 = np.frexp(v)
  close(m, m2)
  np.testing.assert_array_equal(e, e2)
  assert jnp.can_cast(np.int32, np.float64) and not jnp.can_cast(np.float32, np.int32)
  assert jnp.isdtype(np.float32, "real floating") and jnp.iterable([1]) and jnp.double is np.float64
  assert "Array(" in jnp.array_repr(jnp.ones(2)) and jnp.array_str(jnp.ones(2)) == "[1. 1.]"
  with pytest.raises(jax.PartixError, match=r"^\[piecewise\]"):
    jnp.piecewise(np.ones(3), [np.ones(3, bool)], [1, 2, 3])


def test_result_type_treats_python_scalars_and_types_as_weak():
  # JAX's type lattice without x64: Python scalars and bool/int/float are weakly typed
  # (JAX's external-callbacks tutorial: z.astype(jnp.result_type(float, z.dtype))).
  assert jnp.result_type(float, jnp.float32) == np.float32
  assert jnp.result_type(float, jnp.bfloat16) == jnp.bfloat16
  assert jnp.result_type(jnp.bfloat16, 2.0) == jnp.bfloat16
  assert jnp.result_type(1.0, jnp.int32) == np.float32
  assert jnp.result_type(int, jnp.int8) == np.int8
  assert jnp.result_type(True, jnp.uint8) == np.uint8
  assert jnp.result_type(jnp.arange(3), 2) == np.int32
  assert jnp.result_type(float) == np.float32 and jnp.result_type(int) == np.int32
  assert jnp.result_type(bool) == np.bool_
  assert jnp.result_type(jnp.int8, jnp.uint8) == np.int16
  with pytest.raises(jax.PartixError, match="result_type"):
    jnp.result_type()
  with pytest.raises(jax.PartixError, match="complex"):
    jnp.result_type(complex, jnp.float32)
