"""jax.vmap: results against a Python loop over the examples (the examples of JAX's automatic
vectorization tutorial and api_test's vmap cases, re-expressed), in_axes/out_axes trees,
nesting, jit both ways, per-example gradients, grad of vmap, a sharded batch, and bad input."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P


def loop(f, *args, in_axes=0):
  axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
  n = next(np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None)
  outs = [np.asarray(f(*[a if ax is None else np.take(a, i, axis=ax)
                         for a, ax in zip(args, axes)])) for i in range(n)]
  return np.stack(outs)


def convolve(x, w):  # the tutorial's first example: a 1-D convolution of one example
  output = []
  for i in range(1, len(x) - 1):
    output.append(jnp.dot(x[i - 1:i + 2], w))
  return jnp.stack(output)


def test_tutorial_convolution_batched():
  xs = np.arange(10.0, dtype=np.float32).reshape(2, 5)
  ws = np.array([[2., 3., 4.], [1., -1., 0.5]], np.float32)
  want = loop(convolve, xs, ws)
  np.testing.assert_allclose(np.asarray(jax.vmap(convolve)(xs, ws)), want, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(convolve))(xs, ws)), want, rtol=1e-6)
  # Only the inputs batched; the weights shared.
  np.testing.assert_allclose(np.asarray(jax.vmap(convolve, in_axes=(0, None))(xs, ws[0])),
                             loop(convolve, xs, ws[0], in_axes=(0, None)), rtol=1e-6)
  # The batch along axis 1 of the inputs and of the result.
  got = jax.vmap(convolve, in_axes=1, out_axes=1)(xs.T, ws.T)
  np.testing.assert_allclose(np.asarray(got), want.T, rtol=1e-6)


def test_in_axes_trees_kwargs_and_nesting():
  p = {"a": np.arange(6.0, dtype=np.float32).reshape(3, 2), "b": np.float32(2.0)}
  x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
  f = lambda p, x: jnp.sum(p["a"] * p["b"]) + x
  got = jax.vmap(f, in_axes=({"a": 1, "b": None}, 0))(p, x)
  want = np.stack([(p["a"][:, i] * 2.0).sum() + x[i] for i in range(2)])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
  # Nested: an outer product by two vmaps, and a vmap of a jitted function.
  u, v = np.arange(3.0, dtype=np.float32), np.arange(4.0, dtype=np.float32)
  outer = jax.vmap(jax.vmap(lambda a, b: a * b, in_axes=(None, 0)), in_axes=(0, None))
  np.testing.assert_allclose(np.asarray(outer(u, v)), np.outer(u, v))
  np.testing.assert_allclose(np.asarray(jax.vmap(jax.jit(jnp.sin))(v)), np.sin(v), rtol=1e-6)
  # Results as a tree, one of them unmapped with out_axes None.
  r = jax.vmap(lambda a: {"s": a * 2, "c": jnp.float32(1.0)}, out_axes={"s": 0, "c": None})(v)
  np.testing.assert_allclose(np.asarray(r["s"]), v * 2)
  assert float(r["c"]) == 1.0
  # axis_size with nothing mapped: every example the same.
  np.testing.assert_allclose(np.asarray(jax.vmap(lambda: jnp.ones(2), axis_size=3)()),
                             np.ones((3, 2)))


def test_per_example_gradients_and_grad_of_vmap():
  rng = np.random.default_rng(0)
  w = rng.standard_normal((4, 2)).astype(np.float32)
  xs = rng.standard_normal((6, 4)).astype(np.float32)
  ys = rng.standard_normal((6, 2)).astype(np.float32)

  def loss(w, x, y):
    return jnp.sum((jnp.tanh(x @ w) - y) ** 2)
  per = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))
  want = loop(lambda x, y: jax.grad(loss)(w, x, y), xs, ys)
  np.testing.assert_allclose(np.asarray(per(w, xs, ys)), want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(jax.jit(per)(w, xs, ys)), want, rtol=1e-5, atol=1e-6)
  total = jax.grad(lambda w: jnp.sum(jax.vmap(loss, in_axes=(None, 0, 0))(w, xs, ys)))(w)
  np.testing.assert_allclose(np.asarray(total), want.sum(0), rtol=1e-4, atol=1e-5)


def test_sharded_batch_keeps_its_sharding(mesh8):
  s = NamedSharding(mesh8, P("x"))
  x = jax.device_put(np.linspace(-2, 2, 48, dtype=np.float32).reshape(8, 6), s)
  w = jax.device_put(np.ones((6, 3), np.float32), NamedSharding(mesh8, P()))
  f = jax.jit(jax.vmap(lambda a, b: jnp.tanh(a @ b) * jnp.sum(a), in_axes=(0, None)))
  r = f(x, w)
  assert r.sharding == s
  np.testing.assert_allclose(np.asarray(r), loop(lambda a: np.tanh(a @ np.ones((6, 3))) * a.sum(),
                                                 np.asarray(x)), rtol=1e-5)


def test_bad_input_names_vmap():
  x = jnp.ones((3, 2))
  with pytest.raises(jax.PartixError, match=r"^\[vmap\] in_axes has 2 entries for 1"):
    jax.vmap(jnp.sin, in_axes=(0, 0))(x)
  with pytest.raises(jax.PartixError, match=r"inconsistent sizes"):
    jax.vmap(lambda a, b: a + b)(x, jnp.ones((4, 2)))
  with pytest.raises(jax.PartixError, match=r"^\[vmap\] in_axes 2 is out of range"):
    jax.vmap(jnp.sin, in_axes=2)(x)
  with pytest.raises(jax.PartixError, match=r"out_axes is None for an output that depends"):
    jax.vmap(jnp.sin, out_axes=None)(x)
  with pytest.raises(jax.PartixError, match=r"^\[vmap\] in_axes must be an int, None"):
    jax.vmap(jnp.sin, in_axes="0")(x)
  with pytest.raises(jax.PartixError, match=r"^\[vmap\] in_axes entries must be ints"):
    jax.vmap(jnp.sin, in_axes=(1.5,))(x)
  with pytest.raises(jax.PartixError, match=r"^\[vmap\] axis_name must be a non-empty str"):
    jax.vmap(jnp.sin, axis_name=3)
  with pytest.raises(jax.PartixError, match=r"^\[vmap\] spmd_axis_name must be a mesh axis"):
    jax.vmap(jnp.sin, spmd_axis_name=("x", 2))
