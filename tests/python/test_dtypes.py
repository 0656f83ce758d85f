"""dtypes: JAX's promotion table (without x64) for partix's types, weakly typed Python scalars,
dtype objects and their errors."""
import itertools

import ml_dtypes
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp

B, I, H, BF, F = np.dtype(np.bool_), np.dtype(np.int32), np.dtype(np.float16), \
    np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
# jax.numpy.promote_types for these pairs (JAX's type lattice, x64 off).
TABLE = {(B, B): B, (B, I): I, (B, H): H, (B, BF): BF, (B, F): F, (I, I): I, (I, H): H,
         (I, BF): BF, (I, F): F, (H, H): H, (H, BF): F, (H, F): F, (BF, BF): BF, (BF, F): F,
         (F, F): F}


@pytest.mark.parametrize("a,b", list(itertools.product([B, I, H, BF, F], repeat=2)),
                         ids=lambda d: d.name)
def test_promotion_table(a, b):
  want = TABLE.get((a, b)) or TABLE[(b, a)]
  assert jnp.promote_types(a, b) == want
  assert jnp.result_type(a, b) == want
  x, y = jnp.ones(2, a), jnp.zeros(2, b)
  assert (x + y).dtype == want and jnp.maximum(x, y).dtype == want
  assert jnp.where(True, x, y).dtype == want
  assert jnp.concatenate([x, y]).dtype == want


# (array dtype, Python scalar) -> result dtype: the scalar is weakly typed.
WEAK = [(B, True, B), (B, 2, I), (B, 2.5, F), (I, True, I), (I, 2, I), (I, 2.5, F),
        (H, 2, H), (H, 2.5, H), (BF, 2, BF), (BF, 2.5, BF), (F, 2, F), (F, 2.5, F)]


@pytest.mark.parametrize("dt,scalar,want", WEAK, ids=[f"{d.name}-{s!r}" for d, s, _ in WEAK])
def test_weak_scalars(dt, scalar, want):
  x = jnp.ones(3, dt)
  for out in (x + scalar, scalar + x, jnp.multiply(x, scalar), jnp.maximum(scalar, x)):
    assert out.dtype == want, out.dtype
  np.testing.assert_allclose(np.asarray(x * scalar).astype(np.float64),
                             np.ones(3) * float(scalar))


def test_true_division_and_host_types():
  assert (jnp.arange(3) / 2).dtype == F
  assert (jnp.ones(3, BF) / 2).dtype == BF
  assert (jnp.ones(3, H) / jnp.ones(3, H)).dtype == H
  assert jnp.asarray(np.ones(2, np.float64)).dtype == F  # as JAX without x64
  assert jnp.asarray(np.ones(2, np.int64)).dtype == I
  # Narrow and unsigned host integers keep their type (uint8: 250 + 10 wraps to 4); uint64
  # becomes uint32, as in JAX without x64.
  assert jnp.asarray(np.ones(2, np.uint8)).dtype == np.uint8
  assert int((jnp.asarray(np.uint8(250)) + 10)) == 4
  assert jnp.asarray(np.ones(2, np.uint64)).dtype == np.uint32
  assert jnp.asarray(np.ones(2, np.uint8), dtype=jnp.int32).dtype == I
  assert jnp.asarray([1.0, 2]).dtype == F and jnp.asarray([1, 2]).dtype == I
  assert jnp.asarray(np.float64(1.5)).dtype == F
  assert (jnp.ones(2, BF) + np.float32(1)).dtype == F  # numpy scalars are not weak
  assert jnp.asarray(np.ones(2, np.float64), dtype=jnp.bfloat16).dtype == BF


def test_dtype_objects():
  assert jnp.float32 is np.float32 and jnp.bfloat16 is ml_dtypes.bfloat16
  assert jnp.dtype("bfloat16") == BF and jnp.dtype(jnp.int32) == I
  assert jnp.dtype(jnp.ones(2, BF)) == BF
  assert jnp.issubdtype(jnp.bfloat16, jnp.floating) and not jnp.issubdtype(jnp.int32,
                                                                           jnp.floating)
  assert jnp.issubdtype(jnp.int32, jnp.integer)
  assert jnp.finfo(jnp.bfloat16).eps == float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)
  assert jnp.finfo(jnp.float32).max == np.finfo(np.float32).max
  assert jnp.iinfo(jnp.int32).min == -2**31
  assert jnp.ones(2).astype("float16").dtype == H


@pytest.mark.parametrize("bad", [np.complex64, np.complex128, "foo", object])
def test_unsupported_dtypes(bad):
  for f, api in [(lambda: jnp.zeros(2, bad), "zeros"), (lambda: jnp.ones(2).astype(bad),
                                                        "astype"),
                 (lambda: jnp.asarray([1, 2], dtype=bad), "asarray"),
                 (lambda: jnp.full(2, 1, dtype=bad), "full")]:
    with pytest.raises(jax.PartixError, match=r"^\[" + api + r"\]"):
      f()


def test_64_bit_dtypes_asked_for_by_name_are_truncated_without_x64():
  # As JAX without x64 (its key-concepts tutorial: x.astype(float) next to float32 weights):
  # a 64-bit dtype asked for by name is the 32-bit one, with JAX's warning; x64 keeps it.
  import warnings
  x = jnp.arange(3)
  for make, want in [(lambda: x.astype(np.float64), np.float32),
                     (lambda: jnp.zeros(2, np.float64), np.float32),
                     (lambda: jnp.asarray(np.ones(2), dtype=np.float64), np.float32),
                     (lambda: jnp.array([1, 2], dtype=np.int64), np.int32),
                     (lambda: jax.jit(lambda v: v.astype(np.float64))(x), np.float32)]:
    with pytest.warns(UserWarning, match="Explicitly requested dtype .* truncated"):
      assert make().dtype == want
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert jnp.asarray(np.ones(2)).dtype == np.float32  # host data: no warning, as JAX
    # Python's float and int name the default dtypes (JAX warns for neither).
    assert x.astype(float).dtype == np.float32 and jnp.zeros(2, int).dtype == np.int32
    assert jax.random.poisson(jax.random.key(0), 3.0, (4,)).dtype == np.int32  # partix's own
  with jax.enable_x64():
    assert x.astype(float).dtype == np.float64
    assert jnp.zeros(2, np.int64).dtype == np.int64
