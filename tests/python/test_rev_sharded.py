"""Reversal along split dimensions (jnp.flip, x[::-1], lax.rev) keeps the split, as XLA does:
each device reverses its block and the blocks trade places. Values against numpy, eagerly,
under jit, on an Explicit mesh (the type keeps the split), through grad, on uneven splits
and inside shard_map, on 8 devices."""
import functools

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P


@pytest.fixture(scope="module")
def mesh():
  return jax.make_mesh((4, 2), ("x", "y"))


def _put(a, mesh, spec):
  return jax.device_put(a, NamedSharding(mesh, spec))


def test_flip_keeps_both_splits(mesh):
  a = np.arange(16 * 6, dtype=np.float32).reshape(16, 6)
  x = _put(a, mesh, P("x", "y"))
  for f, want in ((lambda v: v[::-1], a[::-1]), (lambda v: jnp.flip(v), np.flip(a)),
                  (lambda v: lax.rev(v, (1,)), a[:, ::-1])):
    out = jax.jit(f)(x)
    np.testing.assert_array_equal(np.asarray(out), want)
    assert out.sharding.spec == P("x", "y")
    np.testing.assert_array_equal(np.asarray(f(x)), want)  # eagerly


def test_flip_over_two_axes_of_one_dimension(mesh):
  a = np.arange(32, dtype=np.int32).reshape(16, 2)
  x = _put(a, mesh, P(("x", "y")))
  out = jax.jit(lambda v: jnp.flip(v, 0))(x)
  np.testing.assert_array_equal(np.asarray(out), a[::-1])
  assert out.sharding.spec == P(("x", "y"))


def test_uneven_split_is_still_right(mesh):
  a = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
  x = _put(a, mesh, P("x", "y"))
  out = jax.jit(lambda v: jnp.flip(v, (0, 1)) * 2)(x)
  np.testing.assert_array_equal(np.asarray(out), np.flip(a) * 2)


def test_explicit_mesh_types_keep_the_split():
  m = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
  a = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
  with jax.set_mesh(m):
    x = jax.device_put(a, P("x", "y"))
    seen = []

    @jax.jit
    def f(v):
      r = v[::-1, ::-1]
      seen.append(jax.typeof(r).sharding.spec)
      return r

    out = f(x)
  np.testing.assert_array_equal(np.asarray(out), a[::-1, ::-1])
  assert seen == [P("x", "y")]
  assert out.sharding.spec == P("x", "y")


def test_grad_through_flip(mesh):
  a = np.linspace(-1, 1, 16 * 2).astype(np.float32).reshape(16, 2)
  w = np.arange(32, dtype=np.float32).reshape(16, 2)
  x = _put(a, mesh, P("x", "y"))
  g = jax.jit(jax.grad(lambda v: (jnp.flip(v, 0) * w).sum()))(x)
  np.testing.assert_allclose(np.asarray(g), w[::-1])
  assert g.sharding.spec == P("x", "y")


def test_flip_inside_shard_map_reverses_each_block(mesh):
  a = np.arange(16, dtype=np.float32)

  @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  def f(v):
    return v[::-1]

  want = np.concatenate([blk[::-1] for blk in np.split(a, 4)])
  np.testing.assert_array_equal(np.asarray(jax.jit(f)(a)), want)


def test_flip_under_vmap_of_a_split_batch(mesh):
  a = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
  x = _put(a, mesh, P("x"))
  out = jax.jit(jax.vmap(lambda row: row[::-1]))(x)
  np.testing.assert_array_equal(np.asarray(out), a[:, ::-1])
  assert out.sharding.spec[0] == "x"
