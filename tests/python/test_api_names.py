"""JAX names programs reach for beside the core transformations, each as JAX's tests use it
(array_test's device_get / make_array_from_single_device_arrays / addressable_data cases,
sharding_test's is_equivalent_to, tree_util_test's register_static, pjit_test's pjit under a
mesh context), with bad input."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.experimental.pjit import pjit
from partix.sharding import NamedSharding, PartitionSpec as P


@pytest.fixture
def mesh():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  return jax.make_mesh((4, 2), ("x", "y"))


def test_device_get_and_addressable_data(mesh):
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  x = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
  got = jax.device_get({"x": x, "n": 3, "h": a})
  assert isinstance(got["x"], np.ndarray) and got["n"] == 3
  np.testing.assert_array_equal(got["x"], a)
  for i, shard in enumerate(x.addressable_shards):
    np.testing.assert_array_equal(x.addressable_data(i), a[shard.index])


def test_make_array_from_single_device_arrays(mesh):
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  s = NamedSharding(mesh, P("x"))
  blocks = [jax.device_put(a[idx], d) for d, idx in s.devices_indices_map(a.shape).items()]
  x = jax.make_array_from_single_device_arrays(a.shape, s, blocks)
  assert x.sharding == s
  np.testing.assert_array_equal(x, a)
  np.testing.assert_array_equal(jax.jit(lambda v: v * 2)(x), a * 2)
  with pytest.raises(jax.PartixError, match=r"Expected 8 per-device arrays"):
    jax.make_array_from_single_device_arrays(a.shape, s, blocks[:3])
  with pytest.raises(jax.PartixError, match=r"has shape \(1, 4\), but the device's block"):
    jax.make_array_from_single_device_arrays(a.shape, s, [b[:1] for b in blocks])


def test_is_equivalent_to(mesh):
  s = NamedSharding(mesh, P("x"))
  assert s.is_equivalent_to(NamedSharding(mesh, P("x", None)), 2)
  assert not s.is_equivalent_to(NamedSharding(mesh, P("y")), 2)
  assert not s.is_equivalent_to(NamedSharding(jax.make_mesh((8,), ("x",)), P("x")), 2)


def test_register_static():
  @jax.tree_util.register_static
  class Config:
    def __init__(self, k):
      self.k = k

    def __eq__(self, other):
      return isinstance(other, Config) and other.k == self.k

    def __hash__(self):
      return hash(self.k)
  tree = {"w": np.ones(2, np.float32), "c": Config(3)}
  assert len(jax.tree_util.tree_leaves(tree)) == 1
  # A static node passes through jit as part of the structure, not as an argument.
  out = jax.jit(lambda t: t["w"] * t["c"].k)(tree)
  np.testing.assert_array_equal(out, [3, 3])


def test_pjit_under_a_mesh_context(mesh):
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  with mesh:
    f = pjit(lambda v: jnp.sin(v) * 2, in_shardings=P("x", "y"), out_shardings=P("x"))
    y = f(a)
  assert y.sharding == NamedSharding(mesh, P("x"))
  np.testing.assert_allclose(y, np.sin(a) * 2, rtol=1e-6)


def test_reprs_and_indices_as_jax_writes_them(mesh):
  # JAX 0.10: an empty tuple entry is None, a one-name tuple the name.
  assert P(()) == P(None) and P(("x",)) == P("x") and hash(P(())) == hash(P(None))
  assert P(None) != P()
  # make_mesh's axes are Explicit by default (JAX 0.10).
  assert repr(mesh) == ("Mesh(axis_sizes=(4, 2), axis_names=('x', 'y'), axis_types=(Explicit, "
                        "Explicit))")
  assert str(mesh) == "Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit))"
  s = NamedSharding(mesh, P("x"))
  assert repr(s) == ("NamedSharding(mesh=Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)), "
                     "spec=P('x',), memory_kind=device)")
  # A dimension a device holds whole is slice(None), in shards and in devices_indices_map.
  x = jax.device_put(np.ones((8, 4), np.float32), s)
  assert x.addressable_shards[0].index == (slice(0, 2), slice(None))
  assert s.devices_indices_map((8, 4))[jax.devices()[0]] == (slice(0, 2), slice(None))


def test_traced_jaxpr():
  t = jax.jit(lambda x, n: x * n + 1, static_argnums=1).trace(np.ones(3, np.float32), 2)
  text = str(t.jaxpr)
  assert "mul(" in text and "add(" in text and "f32[3]" in text, text
  assert t.out_info.shape == (3,)


def test_copy_is_a_new_buffer_that_survives_donation(mesh):
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  x = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
  y = x.copy()
  z = jnp.copy(x)
  assert y.sharding == x.sharding and z.sharding == x.sharding
  jax.jit(lambda v: v * 2, donate_argnums=0)(x)
  assert x.is_deleted()
  np.testing.assert_array_equal(y, a)
  np.testing.assert_array_equal(z, a)
  np.testing.assert_array_equal(jnp.copy(np.ones(3, np.float32)), np.ones(3))


def test_like_of_a_shape_dtype_struct_keeps_its_sharding(mesh):
  s = NamedSharding(mesh, P("x"))
  sds = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=s)
  for f in (jnp.zeros_like, jnp.ones_like, lambda a: jnp.full_like(a, 3.0), jnp.empty_like):
    r = f(sds)
    assert r.shape == (8, 4) and r.dtype == np.float32 and r.sharding == s
  np.testing.assert_array_equal(jnp.full_like(sds, 3.0), np.full((8, 4), 3.0))
  assert jnp.zeros_like(jax.ShapeDtypeStruct((2,), jnp.int32)).dtype == np.int32


def test_disable_jit_and_process_names():
  seen = []

  @jax.jit
  def f(v):
    seen.append(type(v).__name__)
    return v * 2
  x = np.ones(3, np.float32)
  f(x)
  with jax.disable_jit():
    np.testing.assert_array_equal(f(x), x * 2)
    np.testing.assert_array_equal(f(x), x * 2)
  with jax.disable_jit(False):
    f(x)
  # Traced once (a tracer), then run op by op twice (the argument as given), never again traced.
  assert len(seen) == 3 and seen[1] == seen[2] == "ndarray", seen
  assert jax.host_count() == jax.process_count() and jax.host_id() == jax.process_index()
  assert jax.process_indices() == list(range(jax.process_count()))
  assert jax.Shard is not None
  assert jax.float0.itemsize == 0
  from partix.custom_derivatives import custom_gradient, custom_jvp, custom_vjp
  assert custom_vjp is jax.custom_vjp and custom_jvp is jax.custom_jvp
  assert custom_gradient is jax.custom_gradient
