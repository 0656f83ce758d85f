"""The narrow and unsigned integers (int8, int16, uint8, uint16, uint32) across the Python
package: host data in and out, JAX's promotion and weak scalars, wrapping arithmetic, numpy's
reductions (sums in int32 / uint32, as JAX), jit with shardings on 8 devices, vmap, grad around
integer operands, shard_map collectives, random bits, checkpoints onto another mesh, and bad
input."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax, random
from partix.sharding import NamedSharding, PartitionSpec as P

NARROW = [np.int8, np.int16, np.uint8, np.uint16, np.uint32]
IDS = [np.dtype(d).name for d in NARROW]


def _host(dt, shape=(8, 6)):
  info = np.iinfo(dt)
  v = (np.arange(np.prod(shape)) * 37 - 90).reshape(shape)
  if info.bits == 64:
    return v.astype(dt)
  return (v % (int(info.max) - int(info.min) + 1) + int(info.min)).astype(dt)


@pytest.mark.parametrize("dt", NARROW, ids=IDS)
def test_host_round_trip_keeps_type_and_values(dt):
  h = _host(dt)
  x = jnp.asarray(h)
  assert x.dtype == np.dtype(dt)
  np.testing.assert_array_equal(np.asarray(x), h)
  assert np.asarray(x).dtype == np.dtype(dt)
  assert jnp.zeros(3, dt).dtype == np.dtype(dt) and jnp.ones((2,), dtype=dt).dtype == dt
  assert jnp.arange(5, dtype=dt).dtype == np.dtype(dt)
  assert jnp.iinfo(dt).max == np.iinfo(dt).max
  assert jnp.issubdtype(dt, jnp.integer)


@pytest.mark.parametrize("dt", NARROW, ids=IDS)
def test_arithmetic_matches_numpy_wrapping(dt):
  a, b = _host(dt), np.flip(_host(dt)).copy()
  x, y = jnp.asarray(a), jnp.asarray(b)
  with np.errstate(over="ignore"):
    for got, want in [(x + y, a + b), (x - y, a - b), (x * y, a * b),
                      (jnp.maximum(x, y), np.maximum(a, b)), (x < y, a < b), (-x, -a)]:
      assert got.dtype == want.dtype
      np.testing.assert_array_equal(np.asarray(got), want)
  nz = np.where(b == 0, 1, b).astype(dt)
  np.testing.assert_array_equal(np.asarray(x // jnp.asarray(nz)), a // nz)
  np.testing.assert_array_equal(np.asarray(x % jnp.asarray(nz)), a % nz)


def test_promotion_and_weak_scalars():
  u8, i8 = jnp.ones(2, jnp.uint8), jnp.ones(2, jnp.int8)
  assert (u8 + i8).dtype == np.int16  # JAX's lattice
  assert (jnp.ones(2, jnp.uint16) + i8).dtype == np.int32
  assert (jnp.ones(2, jnp.uint32) + jnp.ones(2, jnp.int32)).dtype == np.int32  # x64 off
  assert (u8 + jnp.ones(2, jnp.float16)).dtype == np.float16
  assert jnp.promote_types(jnp.uint8, jnp.int8) == np.int16
  assert (u8 + 3).dtype == np.uint8 and (3 * u8).dtype == np.uint8  # weak Python ints
  assert (u8 + 2.5).dtype == np.float32
  np.testing.assert_array_equal(np.asarray(jnp.asarray(np.uint8([250])) + 10), [4])
  with pytest.raises(jax.PartixError, match="300 does not fit"):
    u8 + 300


def test_reductions_as_jax():
  h = np.array([200, 100, 7], np.uint8)
  x = jnp.asarray(h)
  assert jnp.sum(x).dtype == np.uint32 and int(jnp.sum(x)) == 307  # no wrap at 256
  assert jnp.sum(jnp.asarray(np.int8([-100, -100]))).dtype == np.int32
  assert int(jnp.sum(jnp.asarray(np.int8([-100, -100])))) == -200
  # cumsum keeps the narrow type and wraps, as JAX's (200 + 100 = 44 in uint8)
  assert jnp.cumsum(x).dtype == np.uint8
  np.testing.assert_array_equal(np.asarray(jnp.cumsum(x)), [200, 44, 51])
  assert jnp.prod(jnp.asarray(np.int16([300, 300]))).dtype == np.int32
  assert jnp.mean(x).dtype == np.float32 and abs(float(jnp.mean(x)) - 307 / 3) < 1e-4
  assert int(jnp.max(x)) == 200 and jnp.max(x).dtype == np.uint8
  assert int(jnp.min(jnp.asarray(np.uint32([4000000000, 3000000000])))) == 3000000000
  assert int(jnp.argmax(jnp.asarray(np.uint32([5, 4000000000, 7])))) == 1
  assert int(jnp.max(jnp.zeros((0,), jnp.uint16), initial=0)) == 0


def test_conversions():
  f = jnp.asarray(np.float32([300.5, -5.0, 65.9]))
  np.testing.assert_array_equal(np.asarray(f.astype(jnp.uint8)), [255, 0, 65])
  i = jnp.asarray(np.int32([-1, 256]))
  np.testing.assert_array_equal(np.asarray(i.astype(jnp.uint32)),
                                np.array([-1, 256]).astype(np.uint32))
  np.testing.assert_array_equal(np.asarray(i.astype(jnp.uint8)), [255, 0])
  assert float(jnp.asarray(np.uint32([4294967295])).astype(jnp.float32)[0]) == 4294967296.0


def test_jit_with_shardings_equals_one_device(mesh8):
  for dt in NARROW:
    h = _host(dt)
    xs = jax.device_put(h, NamedSharding(mesh8, P("x", "y")))

    def f(a):
      return (a * a + a).T

    got = jax.jit(f, out_shardings=NamedSharding(mesh8, P("y", None)))(xs)
    with np.errstate(over="ignore"):
      want = (h * h + h).T
    assert got.dtype == np.dtype(dt)
    assert got.sharding == NamedSharding(mesh8, P("y", None))
    np.testing.assert_array_equal(np.asarray(got), want)


def test_shard_map_collectives(mesh8):
  for dt in NARROW:
    h = _host(dt)
    xs = jax.device_put(h, NamedSharding(mesh8, P("x", "y")))
    s = jax.jit(jax.shard_map(lambda b: lax.psum(b, "x"), mesh=mesh8, in_specs=P("x", "y"),
                              out_specs=P(None, "y")))(xs)
    with np.errstate(over="ignore"):
      want = h.reshape(4, 2, 6).sum(axis=0, dtype=dt)
    assert s.dtype == np.dtype(dt)
    np.testing.assert_array_equal(np.asarray(s), want)
    # all_gather's result still varies over 'x' in its type (as JAX's): check_vma=False.
    g = jax.shard_map(lambda b: lax.all_gather(b, "x", tiled=True), mesh=mesh8,
                      in_specs=P("x", "y"), out_specs=P(None, "y"), check_vma=False)(xs)
    np.testing.assert_array_equal(np.asarray(g), h)


def test_vmap_and_grad_around_integer_operands():
  idx = jnp.asarray(np.uint8([2, 0, 1]))
  w = jnp.asarray(np.float32([10.0, 20.0, 30.0]))
  assert np.asarray(jax.vmap(lambda i: i * 2)(idx)).dtype == np.uint8
  np.testing.assert_array_equal(np.asarray(jax.vmap(lambda i: w[i])(idx)), [30.0, 10.0, 20.0])
  g = jax.grad(lambda w, i: jnp.sum(w[i] * i.astype(jnp.float32)))(w, idx)
  np.testing.assert_allclose(np.asarray(g), [0.0, 1.0, 2.0])


def test_random_bits():
  k = random.key(3)
  b = random.bits(k, (64, 8), jnp.uint8)
  assert b.dtype == np.uint8
  v = np.asarray(b)
  assert v.min() < 8 and v.max() > 247
  w = random.bits(k, (1000,))
  assert w.dtype == np.uint32 and np.asarray(w).max() > 2**31
  # a raw uint32 key, as JAX's
  assert random.bits(jnp.array([0, 0], dtype="uint32"), (3,)).shape == (3,)
  with pytest.raises(jax.PartixError, match=r"\[random.bits\]"):
    random.bits(k, (2,), jnp.float32)


def test_checkpoint_onto_another_mesh(tmp_path, mesh8):
  from partix import ckpt
  tree = {str(np.dtype(dt)): jax.device_put(_host(dt), NamedSharding(mesh8, P("x", "y")))
          for dt in NARROW}
  ckpt.save(tmp_path, 1, tree)
  ckpt.wait()
  other = jax.make_mesh((8,), ("i",))
  target = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(other, P("i")))
            for k, v in tree.items()}
  out = ckpt.restore(tmp_path, 1, target)
  for k, v in tree.items():
    assert out[k].dtype == v.dtype
    assert out[k].sharding == NamedSharding(other, P("i"))
    np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(v))


@pytest.mark.parametrize("bad", [np.complex64, np.complex128])
def test_complex_still_refused(bad):
  with pytest.raises(jax.PartixError, match="not supported by partix"):
    jnp.zeros(2, bad)


@pytest.mark.parametrize("dt", NARROW + [np.int32, np.int64], ids=IDS + ["int32", "int64"])
def test_bitwise_ops_match_numpy(dt):
  # int64 is a dtype of its own with x64 on (as JAX's; without it int64 is truncated).
  with jax.enable_x64(dt == np.int64):
    _bitwise_ops_match_numpy(dt)


def _bitwise_ops_match_numpy(dt):
  a = _host(dt, (40,))
  b = np.flip(a).copy()
  x, y = jnp.asarray(a, dtype=dt), jnp.asarray(b, dtype=dt)
  for got, want in [(x & y, a & b), (x | y, a | b), (x ^ y, a ^ b), (~x, ~a),
                    (jnp.bitwise_and(x, 0x5A), a & np.array(0x5A, dt)),
                    (jnp.bitwise_count(x), np.bitwise_count(a))]:
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)
  width = np.dtype(dt).itemsize * 8
  mask = (1 << width) - 1
  s = (np.arange(40) % (width + 3)).astype(dt)  # shifts up to the width and past it
  sj = jnp.asarray(s, dtype=dt)
  signed = np.issubdtype(dt, np.signedinteger)
  bits = [int(v) & mask for v in a]  # each element's bits as a Python int
  vals = [int(v) for v in a]
  ks = [int(k) for k in s]
  want_shl = [(u << k) & mask if k < width else 0 for u, k in zip(bits, ks)]
  want_srl = [u >> k if k < width else 0 for u, k in zip(bits, ks)]
  want_sra = ([(v >> min(k, width - 1)) & mask for v, k in zip(vals, ks)] if signed
              else want_srl)

  def as_bits(arr):
    return [int(v) & mask for v in np.asarray(arr)]

  for got, want in [(lax.shift_left(x, sj), want_shl), (lax.shift_right_logical(x, sj), want_srl),
                    (lax.shift_right_arithmetic(x, sj), want_sra), (x >> sj, want_sra),
                    (x << sj, want_shl)]:
    assert got.dtype == np.dtype(dt)
    assert as_bits(got) == want
  assert as_bits(lax.population_count(x)) == [bin(u).count("1") for u in bits]
  assert as_bits(lax.clz(x)) == [width - u.bit_length() for u in bits]


def test_bitwise_on_bools_and_bad_input():
  t = jnp.asarray([True, False])
  np.testing.assert_array_equal(np.asarray(~t), [False, True])
  np.testing.assert_array_equal(np.asarray(t ^ True), [False, True])
  with pytest.raises(jax.PartixError, match="an integer or bool dtype"):
    jnp.bitwise_and(jnp.ones(2), jnp.ones(2))
  with pytest.raises(jax.PartixError, match="an integer dtype"):
    lax.shift_left(t, t)


def test_bitwise_under_jit_vmap_and_shardings(mesh8):
  h = _host(np.uint32, (8, 16))
  xs = jax.device_put(h, NamedSharding(mesh8, P("x", "y")))

  @jax.jit
  def mix(v):
    v = v ^ (v >> 7)
    return (v << 3) | lax.shift_right_logical(v, jnp.uint32(29))

  got = mix(xs)
  v = h ^ (h >> 7)
  np.testing.assert_array_equal(np.asarray(got), (v << 3) | (v >> 29))
  np.testing.assert_array_equal(np.asarray(jax.vmap(mix)(xs)), np.asarray(got))


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.int32])
def test_integer_products_with_a_float_result(dt):
  # Narrow integer operands with preferred_element_type=float32 were read as floats by the fast
  # matmul (garbage); they take the reference kernel, exact here.
  a = np.arange(6, dtype=dt).reshape(2, 3)
  b = np.arange(12, dtype=dt).reshape(3, 4)
  want = a.astype(np.float64) @ b.astype(np.float64)
  dims = (((1,), (0,)), ((), ()))
  for out in (np.float32, jnp.bfloat16, np.int32):
    got = lax.dot_general(a, b, dims, preferred_element_type=out)
    assert got.dtype == out
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64), want)
  got = jax.jit(lambda x, y: lax.dot_general(x, y, dims, preferred_element_type=np.float32))(
      a, b)
  np.testing.assert_array_equal(np.asarray(got), want)
