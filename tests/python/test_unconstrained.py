"""P.UNCONSTRAINED in with_sharding_constraint: the free dimensions are split as the values
around the constraint are (propagation decides, as XLA's does for JAX), the others as the
constraint says; vmap leaves the batch dimension free; eagerly a free dimension keeps the
operand's split. Anywhere else (jit's in_shardings/out_shardings, device_put, reshard) an
unconstrained dimension is refused, as JAX refuses it."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P

U = P.UNCONSTRAINED


@pytest.fixture
def mesh():
  return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def test_named_sharding_holds_unconstrained_entries(mesh):
  s = NamedSharding(mesh, P(U, "y"))
  assert s.spec == P(U, "y")
  assert "UNCONSTRAINED" in repr(s)
  assert s == NamedSharding(mesh, P(U, "y")) and s != NamedSharding(mesh, P(None, "y"))
  assert hash(s) == hash(NamedSharding(mesh, P(U, "y")))


def test_free_dimension_keeps_the_operands_split_under_jit(mesh):
  x = jax.device_put(jnp.arange(128.).reshape(16, 8), NamedSharding(mesh, P("x")))
  f = jax.jit(lambda a: lax.with_sharding_constraint(a * 2, NamedSharding(mesh, P(U, "y"))) + 1)
  out = f(x)
  np.testing.assert_array_equal(np.asarray(out), np.arange(128.).reshape(16, 8) * 2 + 1)
  assert out.sharding == NamedSharding(mesh, P("x", "y"))
  assert "all_gather" not in f.lower(x).compile().as_text()
  fixed = jax.jit(lambda a: lax.with_sharding_constraint(a * 2, NamedSharding(mesh, P(None, "y"))))
  assert fixed(x).sharding == NamedSharding(mesh, P(None, "y"))
  assert "all_gather" in fixed.lower(x).compile().as_text()


def test_pytree_of_constraints_with_free_dimensions(mesh):
  # JAX's pjit_test.py testShardingConstraintPyTreeWithUnconstrainedDimsWithJit, on 4x2.
  v = np.arange(4 * 8 * 8).reshape((4, 8, 8)).astype(np.float32)
  f = jax.jit(lambda t: lax.with_sharding_constraint(
      t, [NamedSharding(mesh, P(U, "y", None)), NamedSharding(mesh, P("x", U, None))]))
  a, b = f([{"a": v, "b": v * 2}, v * 3])
  np.testing.assert_array_equal(np.asarray(a["a"]), v)
  np.testing.assert_array_equal(np.asarray(b), v * 3)
  assert {s.data.shape[1] for s in a["a"].addressable_shards} == {4}
  assert {s.data.shape[0] for s in b.addressable_shards} == {1}


def test_vmap_leaves_the_batch_dimension_free(mesh):
  x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x")))
  per = lambda r: lax.with_sharding_constraint(r * 2, NamedSharding(mesh, P("y")))
  f = jax.jit(jax.vmap(per))
  out = f(x)
  assert out.sharding == NamedSharding(mesh, P("x", "y"))
  assert "all_gather" not in f.lower(x).compile().as_text()
  g = jax.jit(jax.vmap(lambda r: lax.with_sharding_constraint(r, NamedSharding(mesh, P(U))),
                       spmd_axis_name="x"))
  out = g(jnp.ones((8, 10)))
  assert out.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 2)


def test_eager_free_dimension_keeps_its_split_and_grad_flows(mesh):
  x = jax.device_put(jnp.arange(128.).reshape(16, 8), NamedSharding(mesh, P("x")))
  y = lax.with_sharding_constraint(x, NamedSharding(mesh, P(U, "y")))
  assert y.sharding == NamedSharding(mesh, P("x", "y"))
  g = jax.jit(jax.grad(lambda a: (lax.with_sharding_constraint(
      a * a, NamedSharding(mesh, P(U, "y")))).sum()))(x)
  np.testing.assert_array_equal(np.asarray(g), 2 * np.arange(128.).reshape(16, 8))


def test_shard_map_and_loops_with_a_free_constraint(mesh):
  x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("x")))

  def body(c, _):
    return lax.with_sharding_constraint(c * 2, NamedSharding(mesh, P(U, "y"))), None
  out = jax.jit(lambda a: lax.scan(body, a, None, length=3)[0])(x)
  np.testing.assert_array_equal(np.asarray(out), np.full((16, 8), 8.))
  # Inside a shard_map manual over 'x', the free dimension may not be given 'x'.
  f = jax.jit(jax.shard_map(
      lambda b: lax.with_sharding_constraint(b + 1, NamedSharding(mesh, P(U, "y"))), mesh=mesh,
      in_specs=P("x"), out_specs=P("x"), axis_names=frozenset({"x"})))
  np.testing.assert_array_equal(np.asarray(f(x)), np.full((16, 8), 2.))


def test_unconstrained_is_refused_outside_constraints(mesh):
  s = NamedSharding(mesh, P(U, "y"))
  with pytest.raises(jax.PartixError, match="Unconstrained dims are not allowed"):
    jax.jit(lambda a: a, in_shardings=s)(jnp.ones((8, 8)))
  with pytest.raises(jax.PartixError, match="Unconstrained dims are not allowed"):
    jax.jit(lambda a: a, out_shardings=s)(jnp.ones((8, 8)))
  with pytest.raises(jax.PartixError, match="Unconstrained dims are not allowed"):
    jax.device_put(jnp.ones((8, 8)), s)
