"""Typed PRNG keys (jax.random.key): dtype key<fry>, the key's own shape, the same bits as
raw keys (random.PRNGKey), and through jit, vmap, scan, shard_map, device_put and constraints
on 8 devices. Key data checked against JAX 0.10.2 (x64 off): key(0) = [0, 0],
key(-1) = [0, 4294967295], key(2**40 + 5) = [0, 5]; vmap(key) over uint32 seeds [0, s]."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import ckpt
from partix import lax
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P


def data(k):
  return np.asarray(jax.random.key_data(k)).view(np.uint32)


def test_key_dtype_shape_and_data_as_jax():
  k = jax.random.key(0)
  assert k.shape == () and k.ndim == 0 and str(k.dtype) == "key<fry>"
  assert jax.dtypes.issubdtype(k.dtype, jax.dtypes.prng_key)
  assert jax.dtypes.issubdtype(k.dtype, jax.dtypes.extended)
  assert not jax.dtypes.issubdtype(k.dtype, np.integer)
  assert not jax.dtypes.issubdtype(np.float32, jax.dtypes.prng_key)
  np.testing.assert_array_equal(data(k), [0, 0])
  np.testing.assert_array_equal(data(jax.random.key(-1)), [0, 4294967295])
  np.testing.assert_array_equal(data(jax.random.key(2**40 + 5)), [0, 5])
  assert "dtype=key<fry>" in repr(k)


def test_raw_and_typed_keys_draw_the_same_numbers():
  raw, typed = jax.random.PRNGKey(42), jax.random.key(42)
  np.testing.assert_array_equal(np.asarray(raw), np.asarray(jax.random.key_data(typed)))
  for f in (lambda k: jax.random.normal(k, (5,)), lambda k: jax.random.uniform(k, (3, 2)),
            lambda k: jax.random.randint(k, (4,), 0, 100), lambda k: jax.random.gamma(k, 2.0)):
    np.testing.assert_array_equal(np.asarray(f(raw)), np.asarray(f(typed)))
  ks = jax.random.split(typed, 4)
  assert isinstance(ks, type(typed)) and ks.shape == (4,)
  np.testing.assert_array_equal(data(ks), np.asarray(jax.random.split(raw, 4)).view(np.uint32))
  assert jax.random.split(typed, (2, 3)).shape == (2, 3)
  f = jax.random.fold_in(typed, 7)
  assert f.shape == ()
  np.testing.assert_array_equal(data(f), np.asarray(jax.random.fold_in(raw, 7)).view(np.uint32))
  # A raw key stays raw.
  assert jax.random.split(raw).shape == (2, 2)


def test_indexing_reshape_transpose_keep_the_key_axis():
  ks = jax.random.split(jax.random.key(0), 8)
  np.testing.assert_array_equal(data(ks[3]), data(ks)[3])
  np.testing.assert_array_equal(data(ks[2:5]), data(ks)[2:5])
  r = ks.reshape(4, 2)
  assert r.shape == (4, 2)
  np.testing.assert_array_equal(data(r.T), data(r).transpose(1, 0, 2))
  np.testing.assert_array_equal(data(r[..., 1]), data(r)[:, 1])
  assert [k.shape for k in r] == [(2,)] * 4 and len(r) == 4
  assert r.ravel().shape == (8,)
  eq = ks == ks
  assert eq.shape == (8,) and bool(jnp.all(eq))


def test_key_data_round_trip_and_bad_input():
  ks = jax.random.split(jax.random.key(3), 3)
  back = jax.random.wrap_key_data(jax.random.key_data(ks))
  np.testing.assert_array_equal(data(back), data(ks))
  back = jax.random.wrap_key_data(data(ks))  # uint32 words, as JAX's key_data gives them
  np.testing.assert_array_equal(data(back), data(ks))
  with pytest.raises(jax.PartixError, match=r"wrap_key_data.*not key data"):
    jax.random.wrap_key_data(np.zeros((3, 4), np.uint32))
  with pytest.raises(TypeError, match="key_data"):
    np.asarray(jax.random.key(0))
  with pytest.raises(jax.PartixError, match=r"random.key.*not an int"):
    jax.random.key(1.5)
  with pytest.raises(TypeError, match="scalar seed"):
    jax.random.key(jnp.arange(3))


def test_traced_seeds_under_vmap_and_jit():
  seeds = jnp.arange(6, dtype=np.uint32).reshape(2, 3)
  ks = jax.jit(jax.vmap(jax.vmap(jax.random.key)))(seeds)
  assert ks.shape == (2, 3) and jax.dtypes.issubdtype(ks.dtype, jax.dtypes.prng_key)
  want = np.stack([np.zeros((2, 3), np.uint32), np.arange(6, dtype=np.uint32).reshape(2, 3)], -1)
  np.testing.assert_array_equal(data(ks), want)
  # the same keys as key(int) seed by seed
  np.testing.assert_array_equal(data(ks[1, 2]), data(jax.random.key(5)))


def test_keys_through_jit_scan_and_sharding():
  mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
  s = NamedSharding(mesh, P("x"))
  ks = jax.random.split(jax.random.key(1), 8)
  put = jax.device_put(ks, s)
  assert put.sharding == s and put.shape == (8,)
  assert jax.random.key_data(put).sharding.spec in (P("x"), P("x", None))
  draws = jax.jit(jax.vmap(lambda k: jax.random.normal(k, ())))(put)
  np.testing.assert_allclose(np.asarray(draws),
                             [float(jax.random.normal(k, ())) for k in ks], rtol=1e-6)
  out = jax.jit(lambda k: lax.with_sharding_constraint(jax.random.split(k[0], 8), s))(put)
  assert out.shape == (8,) and out.sharding.spec == P("x")

  def body(k, _):
    k, sub = jax.random.split(k)
    return k, jax.random.uniform(sub, ())
  last, xs = lax.scan(body, jax.random.key(2), None, length=4)
  assert last.shape == () and xs.shape == (4,)
  k, want = jax.random.key(2), []
  for _ in range(4):
    k, sub = jax.random.split(k)
    want.append(float(jax.random.uniform(sub, ())))
  np.testing.assert_allclose(np.asarray(xs), want, rtol=1e-6)


def test_keys_into_shard_map():
  mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
  ks = jax.random.split(jax.random.key(4), 8)
  f = jax.shard_map(lambda k: jax.random.normal(k[0], (1,)), mesh=mesh, in_specs=P("x"),
                    out_specs=P("x"))
  out = np.asarray(f(ks))
  np.testing.assert_allclose(out, [float(jax.random.normal(k, (1,))[0]) for k in ks], rtol=1e-6)


def test_keys_in_a_checkpoint_restore_onto_another_mesh(tmp_path):
  m8 = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
  m2 = jax.make_mesh((2,), ("y",), axis_types=(AxisType.Auto,))
  ks = jax.device_put(jax.random.split(jax.random.key(9), 8), NamedSharding(m8, P("x")))
  ckpt.save(tmp_path, 1, {"rng": ks, "w": jnp.ones(3)})
  ckpt.wait()
  target = {"rng": jax.device_put(jax.random.split(jax.random.key(0), 8),
                                  NamedSharding(m2, P("y"))),
            "w": jnp.zeros(3)}
  back = ckpt.restore(tmp_path, 1, target)
  assert back["rng"].shape == (8,) and back["rng"].sharding.spec == P("y")
  np.testing.assert_array_equal(data(back["rng"]), data(ks))


def test_traced_64_bit_seeds_key_as_python_ints_under_x64():
  seed = 2**40 + 5
  jax.config.update("jax_enable_x64", True)
  try:
    traced = jax.jit(jax.random.key)(jnp.asarray(seed, dtype=jnp.int64))
    np.testing.assert_array_equal(data(traced), data(jax.random.key(seed)))
    np.testing.assert_array_equal(data(traced), [256, 5])
  finally:
    jax.config.update("jax_enable_x64", False)
  np.testing.assert_array_equal(data(jax.jit(jax.random.key)(np.uint32(0xFFFFFFFF))),
                                [0, 0xFFFFFFFF])
