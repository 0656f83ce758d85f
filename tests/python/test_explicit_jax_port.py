"""Ports of JAX's sharding-in-types tests (tests/pjit_test.py, class ShardingInTypesTest).

Each test names the JAX test it follows. Meshes are as in JAX (mostly a (2, 2) mesh ('x', 'y')
with both axes Explicit). Values are checked against numpy and types against the strings JAX's
`jax.typeof` prints (`float32[8@x,2@y]`, `{U:y}` for unreduced axes). Where JAX raises a
ShardingTypeError, partix raises partix.PartixError whose message names the op and the operand
types. Where partix differs from JAX on purpose the test asserts partix's behaviour and its
docstring says how JAX differs; where partix falls short of JAX the test asserts JAX's behaviour
and is marked xfail with the reason.
"""
import functools
import math

import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix import lax
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P
from partix.sharding import auto_axes, explicit_axes, reshard

E, A = AxisType.Explicit, AxisType.Auto


def ty(x):
  return str(partix.typeof(x))


def put(x, mesh, spec):
  return partix.device_put(x, NamedSharding(mesh, spec))


@pytest.fixture(scope="module")
def m22(mesh8):
  return partix.make_mesh((2, 2), ("x", "y"), axis_types=(E, E))


@pytest.fixture(scope="module")
def m221(mesh8):
  return partix.make_mesh((2, 2, 1), ("x", "y", "z"), axis_types=(E, E, E))


@pytest.fixture(scope="module")
def m2(mesh8):
  return partix.make_mesh((2,), ("x",), axis_types=(E,))


@pytest.fixture(scope="module")
def m4(mesh8):
  return partix.make_mesh((4,), ("x",), axis_types=(E,))


@pytest.fixture(scope="module")
def m222(mesh8):
  return partix.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(E, E, E))


def np82(dtype=np.float32):
  return np.arange(16, dtype=dtype).reshape(8, 2)


# ----------------------------------------------------------------------------------------------
# Element-wise ops and broadcasting


def test_basic_mul(m22):
  """ShardingInTypesTest.test_basic_mul: the type survives x * 2 and x * x, eagerly and under
  jit, and the grad of a sum is typed like the primal."""
  np_inp = np82()
  arr = put(np_inp, m22, P("x", "y"))
  seen = []

  def f(x):
    seen.append(ty(x))
    x = x * 2
    seen.append(ty(x))
    x = x * x
    seen.append(ty(x))
    return x
  want = (np_inp * 2) * (np_inp * 2)
  out = f(arr)
  assert seen == ["float32[8@x,2@y]"] * 3
  assert out.sharding == NamedSharding(m22, P("x", "y"))
  np.testing.assert_array_equal(np.asarray(out), want)
  seen.clear()
  out = partix.jit(f)(arr)
  assert seen == ["float32[8@x,2@y]"] * 3
  assert out.sharding == NamedSharding(m22, P("x", "y"))
  np.testing.assert_array_equal(np.asarray(out), want)

  def g(x):
    return jnp.sum(partix.jit(f)(x))
  for grad in (partix.grad(g), partix.jit(partix.grad(g))):
    gx = grad(arr)
    assert gx.sharding == arr.sharding
    np.testing.assert_allclose(np.asarray(gx), 8 * np_inp, rtol=1e-6)


def test_fully_replicated_array_mul(m22):
  """ShardingInTypesTest.test_fully_replicated_array_mul: a replicated (or broadcast) operand
  agrees with any split; the same dimension split over different axes, or over one axis
  against two, is an error naming mul."""
  np1 = np.arange(16).reshape(8, 2).astype(np.int32)
  np2 = np.arange(2).reshape(1, 2).astype(np.int32)
  arr1 = put(np1, m22, P("x", "y"))
  seen = []

  @partix.jit
  def f(x, y):
    out = x * y
    seen.append(ty(out))
    return out
  for other, ref in [(put(np2, m22, P(None, None)), np1 * np2),
                     (put(np1, m22, P(("x",), ("y",))), np1 * np1),
                     (put(np2, m22, P()), np1 * np2)]:
    out = f(arr1, other)
    assert out.sharding == NamedSharding(m22, P("x", "y"))
    np.testing.assert_array_equal(np.asarray(out), ref)
  assert set(seen) == {"int32[8@x,2@y]"}

  g = partix.jit(lambda x, y: x * y)
  for spec, t in [(P("y", "x"), "int32[8@y,2@x]"), (P(("x", "y")), "int32[8@(x,y),2]")]:
    with pytest.raises(partix.PartixError) as e:
      g(arr1, put(np1, m22, spec))
    msg = str(e.value)
    assert "[mul]" in msg and "int32[8@x,2@y]" in msg and t in msg, msg


def test_integer_pow_sin_transpose_keep_types(m22, m221):
  """ShardingInTypesTest.test_integer_pow, test_sin_unop and test_lax_transpose_rule: unary
  ops keep the type; a transpose permutes it."""
  np_inp = np82()
  arr = put(np_inp, m22, P("x", "y"))
  seen = []

  @partix.jit
  def f(x):
    outs = [x ** 2, x ** 3, x ** 4, lax.sin(x)]
    seen.extend(ty(o) for o in outs)
    return outs
  outs = f(arr)
  assert seen == ["float32[8@x,2@y]"] * 4
  for o, ref in zip(outs, [np_inp ** 2, np_inp ** 3, np_inp ** 4, np.sin(np_inp)]):
    assert o.sharding == NamedSharding(m22, P("x", "y"))
    np.testing.assert_allclose(np.asarray(o), ref, rtol=1e-6)

  np3 = np.arange(16, dtype=np.int32).reshape(4, 2, 2)
  arr3 = put(np3, m221, P("x", "y", "z"))
  seen.clear()

  @partix.jit
  def t(x):
    y = jnp.transpose(x, (1, 2, 0))
    seen.append(ty(y))
    return y
  out = t(arr3)
  assert seen == ["int32[2@y,2@z,4@x]"]
  assert out.sharding.spec == P("y", "z", "x")
  np.testing.assert_array_equal(np.asarray(out), np.transpose(np3, (1, 2, 0)))


@pytest.mark.parametrize("axis,want", [(0, "int32[1,8@x,2@y]"), (1, "int32[8@x,1,2@y]"),
                                       (2, "int32[8@x,2@y,1]"), (-1, "int32[8@x,2@y,1]")])
def test_broadcast_in_dim(m22, axis, want):
  """ShardingInTypesTest.test_broadcast_in_dim: expand_dims inserts an unsplit dimension,
  eagerly and under jit."""
  np_inp = np82(np.int32)
  arr = put(np_inp, m22, P("x", "y"))
  assert ty(jnp.expand_dims(arr, axis)) == want
  seen = []

  @partix.jit
  def f(x):
    y = jnp.expand_dims(x, axis)
    seen.append(ty(y))
    return y
  out = f(arr)
  assert seen == [want]
  np.testing.assert_array_equal(np.asarray(out), np.expand_dims(np_inp, axis))


def test_no_op_broadcast_except_for_sharding_change(m2):
  """ShardingInTypesTest.test_no_op_broadcast_except_for_sharding_change: broadcast_in_dim to
  the same shape with out_sharding= only changes the type; the cotangent goes back to the
  operand's (replicated) type."""
  arr = jnp.arange(8.).reshape(4, 2)
  seen = []

  @partix.jit
  def f(x):
    out = lax.broadcast_in_dim(x, (4, 2), [0, 1], out_sharding=P("x"))
    seen.append(ty(out))
    return out
  with partix.sharding.use_mesh(m2):
    out = f(arr)
    assert seen == ["float32[4@x,2]"]
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.).reshape(4, 2))
    assert out.sharding == NamedSharding(m2, P("x", None))
    g = partix.jit(partix.grad(lambda x: f(x).sum()))(arr)
  assert g.sharding.spec in (P(), P(None, None))
  np.testing.assert_array_equal(np.asarray(g), np.ones((4, 2), np.float32))


def test_select(m22):
  """ShardingInTypesTest.test_select: select keeps the shared type; cases typed differently are
  an error."""
  np_inp = np82(np.int32)
  arr1 = put(np_inp, m22, P("x", "y"))
  arr2 = put(np_inp, m22, P("x", "y"))
  seen = []

  @partix.jit
  def f(pred, on_true, on_false):
    y = lax.select(pred, on_true, on_false)
    seen.append(ty(y))
    return y
  out = f(arr1 == arr2, arr1, arr2)
  assert seen == ["int32[8@x,2@y]"]
  np.testing.assert_array_equal(np.asarray(out), np_inp)
  arr3 = put(np_inp, m22, P("y", "x"))
  with pytest.raises(partix.PartixError) as e:
    f(arr1 == arr2, arr1, arr3)
  msg = str(e.value)
  assert "[select" in msg and "int32[8@y,2@x]" in msg, msg


def test_argminmax(m22):
  """ShardingInTypesTest.test_argminmax: reducing a split dimension leaves the other one's
  split."""
  np_inp = np82()
  arr = put(np_inp, m22, P("x", "y"))
  seen = []

  @partix.jit
  def f(x):
    z = jnp.argmax(x, axis=0)
    a = jnp.argmin(x, axis=1)
    seen.extend([ty(z), ty(a)])
    return z, a
  z, a = f(arr)
  assert seen == ["int32[2@y]", "int32[8@x]"]
  np.testing.assert_array_equal(np.asarray(z), np.argmax(np_inp, axis=0))
  np.testing.assert_array_equal(np.asarray(a), np.argmin(np_inp, axis=1))
  assert z.sharding.spec == P("y") and a.sharding.spec == P("x")


# ----------------------------------------------------------------------------------------------
# Reductions

REDUCE_CASES = [  # axis, input spec, result type, whether a cross-device reduction is needed
    (None, P("x", "y"), "float32[]", True),
    (0, P("x", "y"), "float32[2@y]", True),
    (1, P("x", "y"), "float32[8@x]", True),
    (0, P(("x", "y"), None), "float32[2]", True),
    (1, P(("x", "y"), None), "float32[8@(x,y)]", False),
]


def _reduce_under_jit(m22, reduce_fn, axis, in_spec, want, reduce):
  """Runs reduce_fn(x, axis=axis) under jit on np82() split as in_spec; checks the traced
  type, and whether the program reduces across devices. Returns (jitted, input, values)."""
  np_inp = np82()
  arr = put(np_inp, m22, in_spec)
  seen = []

  @partix.jit
  def f(x):
    y = reduce_fn(x, axis=axis)
    seen.append(ty(y))
    return y
  out = f(arr)
  assert seen == [want]
  assert ty(out) == want
  assert ("all_reduce" in f.lower(arr).compile().as_text()) == reduce
  return f, arr, np_inp, out


@pytest.mark.parametrize("axis,in_spec,want,reduce", REDUCE_CASES)
def test_reduce_sum(m22, axis, in_spec, want, reduce):
  """ShardingInTypesTest.test_reduce_sum: a reduced split dimension leaves the result
  replicated over its axes; the others keep theirs."""
  _, _, np_inp, out = _reduce_under_jit(m22, jnp.sum, axis, in_spec, want, reduce)
  np.testing.assert_array_equal(np.asarray(out), np.sum(np_inp, axis=axis))


@pytest.mark.parametrize("axis,in_spec,want,reduce", REDUCE_CASES)
def test_reduce_max(m22, axis, in_spec, want, reduce):
  """ShardingInTypesTest.test_reduce_max: as reduce_sum, and the grad of mean(max) is typed
  like the input."""
  f, arr, np_inp, out = _reduce_under_jit(m22, jnp.max, axis, in_spec, want, reduce)
  np.testing.assert_array_equal(np.asarray(out), np.max(np_inp, axis=axis))
  g = partix.jit(partix.grad(lambda x: jnp.mean(f(x))))(arr)
  assert g.sharding == arr.sharding
  ref = np.zeros_like(np_inp)
  if axis is None:
    ref[7, 1] = 1.0
  elif axis == 0:
    ref[7, :] = 1.0 / 2
  else:
    ref[:, 1] = 1.0 / 8
  np.testing.assert_allclose(np.asarray(g), ref, rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# dot_general / einsum / matmul


@pytest.mark.parametrize("spec1,spec2,want,gather", [
    (P("x", None), P(None, "y"), "float32[8@x,8@y]", False),
    (P("x", None), P(None, None), "float32[8@x,8]", False),
    (P("x", "y"), P(None, None), "float32[8@x,8]", False),  # contraction split on one side
    (P("x", None), P("x", None), "float32[8@x,8]", True),   # fsdp: rhs's x is gathered
    (P(None, "y"), P(None, "y"), "float32[8,8@y]", True),   # half tp: lhs's y is gathered
], ids=["x_y", "x_None", "contracting2", "fsdp", "half_tp"])
def test_dot_general(m22, spec1, spec2, want, gather):
  """ShardingInTypesTest.test_dot_general: x @ y's type from the operands' non-contracting
  splits, eagerly and under jit; grads are typed like the operands."""
  np_inp = np82()
  arr1 = put(np_inp, m22, spec1)
  arr2 = put(np_inp.T, m22, spec2)
  ref = np_inp @ np_inp.T
  out = arr1 @ arr2
  assert ty(out) == want
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-6)
  seen = []

  @partix.jit
  def f(x, y):
    out = x @ y
    seen.append(ty(out))
    return out
  out = f(arr1, arr2)
  assert seen == [want] and ty(out) == want
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-6)
  if gather:
    assert "all_gather" in f.lower(arr1, arr2).compile().as_text()

  g = partix.jit(partix.grad(lambda x, y: jnp.sum(f(x, y)), argnums=(0, 1)))
  gx, gy = g(arr1, arr2)
  assert gx.sharding == arr1.sharding and gy.sharding == arr2.sharding
  np.testing.assert_allclose(np.asarray(gx), np.ones((8, 8)) @ np_inp, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(gy), np_inp.T @ np.ones((8, 8)), rtol=1e-6)


@pytest.mark.parametrize("spec1,spec2,t1,t2", [
    (P("x", None), P(None, "x"), "int32[8@x,2]", "int32[2,8@x]"),   # x used twice
    (P("x", "y"), P("x", "y"), "int32[8@x,2@y]", "int32[2@x,8@y]"),
    (P("x", "y"), P("y", None), "int32[8@x,2@y]", "int32[2@y,8]"),  # needs out_sharding
    (P(None, "y"), P("y", None), "int32[8,2@y]", "int32[2@y,8]"),
], ids=["fail1", "fail2", "contracting1", "other_half_tp"])
def test_dot_general_error(m22, spec1, spec2, t1, t2):
  """ShardingInTypesTest.test_dot_general_error: an illegally split result, contraction dims
  split differently, or a contraction split in both operands (JAX: "Contracting dimensions
  are sharded") are errors naming dot_general and both operand types."""
  np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
  arr1 = put(np_inp, m22, spec1)
  arr2 = put(np_inp.T, m22, spec2)
  with pytest.raises(partix.PartixError) as e:
    partix.jit(lambda x, y: x @ y)(arr1, arr2)
  msg = str(e.value)
  assert "[dot_general]" in msg and t1 in msg and t2 in msg, msg


def test_dot_general_batch_error(m221):
  """ShardingInTypesTest.test_dot_general_batch_error: batch dims split differently in lhs and
  rhs are an error, through lax.dot_general and einsum."""
  arr1 = put(np.ones((8, 4, 2), np.float32), m221, P("x", "y", "z"))
  arr2 = put(np.ones((8, 2, 4), np.float32), m221, P("y", "z", "x"))
  with pytest.raises(partix.PartixError) as e:
    lax.dot_general(arr1, arr2, (([2], [1]), ([0], [0])))
  msg = str(e.value)
  assert "[dot_general]" in msg and "float32[8@x,4@y,2@z]" in msg, msg
  assert "float32[8@y,2@z,4@x]" in msg, msg
  with pytest.raises(partix.PartixError, match=r"\[(einsum|dot_general)\]"):
    jnp.einsum("abc,acz->abz", arr1, arr2)


@pytest.mark.parametrize("use_jit", [False, True])
def test_dot_general_out_sharding(m4, use_jit):
  """ShardingInTypesTest.test_dot_general_out_sharding: einsum with out_sharding= where the
  contraction is split in both operands; the sum is replicated; grads are typed like the
  operands."""
  np_inp = np82()
  arr1 = put(np_inp, m4, P("x", None))
  arr2 = put(np_inp.T, m4, P(None, "x"))
  seen = []

  def f(x, y):
    out = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", None))
    seen.append(ty(out))
    return jnp.sum(out)
  if use_jit:
    f = partix.jit(f)
  with partix.sharding.use_mesh(m4):
    out = f(arr1, arr2)
    assert seen[0] == "float32[8@x,8]"
    np.testing.assert_allclose(float(out), np.sum(np_inp @ np_inp.T), rtol=1e-6)
    assert ty(out) == "float32[]"
    gx, gy = partix.grad(f, argnums=(0, 1))(arr1, arr2)
  assert gx.sharding == arr1.sharding and gy.sharding == arr2.sharding
  np.testing.assert_allclose(np.asarray(gx), np.ones((8, 8)) @ np_inp, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(gy), np_inp.T @ np.ones((8, 8)), rtol=1e-6)


def test_einsum_with_out_sharding(m22):
  """ShardingInTypesTest.test_einsum_with_out_sharding: out_sharding as a NamedSharding and as
  a PartitionSpec; grads typed like the operands."""
  np_inp = np82()
  ref = np_inp @ np_inp.T
  arr1 = put(np_inp, m22, P("x", "y"))
  arr2 = put(np_inp.T, m22, P("y", "x"))
  seen = []

  @partix.jit
  def f(x, y):
    out = jnp.einsum("xy,yz->xz", x, y, out_sharding=NamedSharding(m22, P("x", None)))
    seen.append(ty(out))
    return out
  out = f(arr1, arr2)
  assert seen == ["float32[8@x,8]"]
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-6)
  assert out.sharding == NamedSharding(m22, P("x", None))

  @partix.jit
  def g(x, y):
    return jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", None))
  arr3 = put(np_inp, m22, P("x", "y"))
  arr4 = put(np_inp.T, m22, P("x", "y"))
  with partix.sharding.use_mesh(m22):
    out2 = g(arr3, arr4)
    np.testing.assert_allclose(np.asarray(out2), ref, rtol=1e-6)
    assert ty(out2) == "float32[8@x,8]"
    gx, gy = partix.jit(partix.grad(lambda x, y: jnp.sum(g(x, y)), argnums=(0, 1)))(arr3, arr4)
  assert gx.sharding == arr3.sharding and gy.sharding == arr4.sharding
  np.testing.assert_allclose(np.asarray(gx), np.ones((8, 8)) @ np_inp, rtol=1e-6)


def test_einsum_inverse(m22):
  """ShardingInTypesTest.test_einsum_inverse: a 3-d einsum with a 4-d out_sharding."""
  np_inp = np.arange(64, dtype=np.float32)
  spec = P("x", None, "y", None)
  seen = []

  @partix.jit
  def h(x, y):
    out = jnp.einsum("btd,dhq->bhtq", x, y, out_sharding=spec)
    seen.append(ty(out))
    return out
  a, b = np_inp.reshape(8, 4, 2), np_inp.reshape(2, 4, 8)
  arr1 = put(a, m22, P("x", "y", None))
  arr2 = put(b, m22, P(None, "x", "y"))
  with partix.sharding.use_mesh(m22):
    out = h(arr1, arr2)
  assert seen == ["float32[8@x,4,4@y,8]"]
  np.testing.assert_allclose(np.asarray(out), np.einsum("btd,dhq->bhtq", a, b), rtol=1e-6)


def test_einsum_inverse_grad(m22):
  """ShardingInTypesTest.test_einsum_inverse (its grads)."""
  a = np.arange(64, dtype=np.float32).reshape(8, 4, 2)
  b = np.arange(64, dtype=np.float32).reshape(2, 4, 8)
  arr1 = put(a, m22, P("x", None, None))
  arr2 = put(b, m22, P(None, "x", None))

  def loss(x, y):
    return jnp.sum(jnp.einsum("btd,dhq->bhtq", x, y, out_sharding=P("x", None, None, None)))
  with partix.sharding.use_mesh(m22):
    gx, gy = partix.grad(loss, argnums=(0, 1))(arr1, arr2)
  assert gx.sharding == arr1.sharding and gy.sharding == arr2.sharding
  # d/dx sum_{b,h,t,q} x[b,t,d] y[d,h,q] = sum_{h,q} y[d,h,q], broadcast over b, t.
  np.testing.assert_allclose(np.asarray(gx), np.broadcast_to(b.sum(axis=(1, 2)), (8, 4, 2)),
                             rtol=1e-6)


def test_jnp_dot_matmul_lax_dot_general_out_sharding(m22):
  """ShardingInTypesTest.test_jnp_dot / test_jnp_matmul: out_sharding on jnp.dot, jnp.matmul
  and lax.dot_general."""
  np_inp = np82()
  ref = np_inp @ np_inp.T
  arr1 = put(np_inp, m22, P("x", "y"))
  arr2 = put(np_inp.T, m22, P("y", None))
  for fn in (jnp.dot, jnp.matmul):
    out = partix.jit(lambda x, y: fn(x, y, out_sharding=P("x", None)))
    with partix.sharding.use_mesh(m22):
      r = out(arr1, arr2)
    assert ty(r) == "float32[8@x,8]"
    np.testing.assert_allclose(np.asarray(r), ref, rtol=1e-6)
  r = lax.dot_general(arr1, arr2, (([1], [0]), ([], [])),
                      out_sharding=NamedSharding(m22, P(None, "x")))
  assert ty(r) == "float32[8,8@x]"
  np.testing.assert_allclose(np.asarray(r), ref, rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# Unreduced


def test_unreduced_einsum_basic(m2):
  """ShardingInTypesTest.test_unreduced_einsum_basic: out_sharding with unreduced={'x'}: the
  type shows {U:x}; resharding to replicated sums the partial results."""
  np_inp = np.arange(4, dtype=np.float32).reshape(2, 2)
  x = put(np_inp, m2, P(None, "x"))
  y = put(np_inp, m2, P("x", None))
  seen = []

  @partix.jit
  def f(x, y):
    out = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(None, None, unreduced={"x"}))
    seen.append(ty(out))
    return reshard(out, P(None, None))
  with partix.sharding.use_mesh(m2):
    out = f(x, y)
  assert seen == ["float32[2,2]{U:x}"]
  np.testing.assert_array_equal(np.asarray(out), np_inp @ np_inp)
  assert ty(out) == "float32[2,2]"


def test_unreduced_einsum_add_basic(m22):
  """ShardingInTypesTest.test_unreduced_einsum_add_basic: two partial sums unreduced over the
  same axis add into an unreduced value, reduced once by reshard."""
  np_inp = np82()
  x = put(np_inp, m22, P("x", "y"))
  y = put(np_inp.T, m22, P("y", None))
  seen = []

  @partix.jit
  def f(x, y, a, b):
    m1 = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
    m2 = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x", unreduced={"y"}))
    s = m1 + m2
    out = reshard(s, P("x"))
    seen.extend([ty(m1), ty(m2), ty(s), ty(out)])
    return out
  with partix.sharding.use_mesh(m22):
    out = f(x, y, x, y)
    text = f.lower(x, y, x, y).compile().as_text()
  assert seen == ["float32[8@x,8]{U:y}"] * 3 + ["float32[8@x,8]"]
  np.testing.assert_allclose(np.asarray(out), 2 * (np_inp @ np_inp.T), rtol=1e-6)
  # The adds happen on the partial sums: one reduction, not two.
  assert text.count("all_reduce") == 1, text


def test_unreduced_multi_axes_einsum(m22):
  """ShardingInTypesTest.test_unreduced_multi_axes_einsum: a contraction split over (x, y)
  leaves a result unreduced over both."""
  npx = np82()
  npy = np.arange(8, dtype=np.float32)
  x = put(npx, m22, P(("x", "y"), None))
  y = put(npy, m22, P(("x", "y")))
  seen = []

  @partix.jit
  def f(x, y):
    out = jnp.einsum("ij,i->j", x, y, out_sharding=P(None, unreduced={"x", "y"}))
    seen.append(ty(out))
    return reshard(out, P(None))
  with partix.sharding.use_mesh(m22):
    out = f(x, y)
  assert seen == ["float32[2]{U:(x,y)}"]
  np.testing.assert_allclose(np.asarray(out), np.einsum("ij,i->j", npx, npy), rtol=1e-6)


def test_three_operand_einsum_unreduced(m22):
  """ShardingInTypesTest.test_three_operand_einsum_unreduced."""
  n1 = np.arange(2, dtype=np.float32)
  n2 = np.arange(8, dtype=np.float32).reshape(2, 4)
  n3 = np.arange(2, dtype=np.float32)
  a1, a2, a3 = put(n1, m22, P("x")), put(n2, m22, P("x", "y")), put(n3, m22, P("x"))
  seen = []

  @partix.jit
  def f(a, b, c):
    out = jnp.einsum("d,dh,d->h", a, b, c, out_sharding=P("y", unreduced={"x"}))
    seen.append(ty(out))
    return reshard(out, P("y"))
  with partix.sharding.use_mesh(m22):
    out = f(a1, a2, a3)
  assert seen == ["float32[4@y]{U:x}"]
  np.testing.assert_allclose(np.asarray(out), np.einsum("d,dh,d->h", n1, n2, n3), rtol=1e-6)
  assert ty(out) == "float32[4@y]"


def test_add_unreduced_error(m221):
  """ShardingInTypesTest.test_add_unreduced_error: adding values unreduced over different
  axes, or an unreduced to a reduced value, is an error naming add."""
  np_inp = np82()
  x = put(np_inp, m221, P("x", "y"))
  y = put(np_inp.T, m221, P("y", None))
  a = put(np_inp, m221, P("x", "z"))
  b = put(np_inp.T, m221, P("z", None))

  @partix.jit
  def f(x, y, a, b):
    m1 = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
    m2 = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x", unreduced={"z"}))
    return m1 + m2

  @partix.jit
  def g(x, y, a, b):
    m1 = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
    m2 = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x"))
    return m1 + m2
  with partix.sharding.use_mesh(m221):
    with pytest.raises(partix.PartixError) as e:
      f(x, y, a, b)
    msg = str(e.value)
    assert "[add]" in msg and "{U:y}" in msg and "{U:z}" in msg, msg
    with pytest.raises(partix.PartixError) as e:
      g(x, y, a, b)
    assert "[add]" in str(e.value) and "{U:y}" in str(e.value), str(e.value)


def test_dot_general_unreduced_error(m221):
  """ShardingInTypesTest.test_dot_general_unreduced_error, case 4: a value unreduced over y
  cannot enter another dot whose result would be split over y; the error names dot_general
  and shows the operand's {U:y}."""
  np_inp = np82()
  x = put(np_inp, m221, P("x", "y"))
  y = put(np_inp.T, m221, P("y", None))

  @partix.jit
  def k(a, b):
    z = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x", unreduced={"y"}))
    return jnp.einsum("xy,yz->xz", z, a)
  with partix.sharding.use_mesh(m221):
    with pytest.raises(partix.PartixError) as e:
      k(x, y)
  msg = str(e.value)
  assert "[dot_general]" in msg and "float32[8@x,8]{U:y}" in msg, msg


@pytest.mark.parametrize("lhs_spec,rhs_spec,unreduced,want", [
    (P("x", "y"), P("y", None), {"z"}, "float32[8@x,8]{U:z}"),   # JAX case 1
    (P("x", "y"), P(None, None), {"y"}, "float32[8@x,8]{U:y}"),  # JAX case 2
    (P("x", None), P(None, None), {"y"}, "float32[8@x,8]{U:y}"),  # JAX case 3
])
def test_dot_general_unreduced_divergence(m221, lhs_spec, rhs_spec, unreduced, want):
  """ShardingInTypesTest.test_dot_general_unreduced_error, cases 1-3.

  Divergence: JAX requires the unreduced axes to be exactly the axes the contraction is split
  over in both operands ("unreduced axes should be equal to the contracting specs", "lhs and
  rhs contracting dims should be sharded identically") and raises otherwise. partix accepts
  them: a contraction split on one side is computed on local slices and left unreduced, axes
  the contraction is not split over are marked unreduced by keeping one copy of the sum, and
  reshard then reduces to the right values."""
  np_inp = np82()
  x = put(np_inp, m221, lhs_spec)
  y = put(np_inp.T, m221, rhs_spec)
  seen = []

  @partix.jit
  def f(a, b):
    u = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x", unreduced=unreduced))
    seen.append(ty(u))
    return reshard(u + u, P("x"))
  with partix.sharding.use_mesh(m221):
    out = f(x, y)
  assert seen == [want]
  np.testing.assert_allclose(np.asarray(out), 2 * (np_inp @ np_inp.T), rtol=1e-6)


def test_unreduced_einsum_basic(m2):
  """ShardingInTypesTest.test_unreduced_einsum_basic: a jit returns the contraction's partial
  sums as an unreduced Array; each device holds its own partial product, and reshard sums."""
  np_inp = np.arange(4, dtype=np.float32).reshape(2, 2)
  x = put(np_inp, m2, P(None, "x"))
  y = put(np_inp, m2, P("x", None))

  @partix.jit
  def f(a, b):
    out = jnp.einsum("ab,bc->ac", a, b, out_sharding=P(None, None, unreduced={"x"}))
    assert ty(out) == "float32[2,2]{U:x}"
    return out

  with partix.sharding.use_mesh(m2):
    out = f(x, y)
    assert out.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
    assert out.shape == (2, 2) and out.sharding.shard_shape(out.shape) == (2, 2)
    shards = [np.asarray(s.data) for s in out.addressable_shards]
    np.testing.assert_array_equal(shards[0], [[0, 0], [0, 2]])
    np.testing.assert_array_equal(shards[1], [[2, 3], [6, 9]])
    np.testing.assert_array_equal(np.asarray(reshard(out, P(None, None))), np_inp @ np_inp)
    # Reading the value sums the partials; the text shows no values, as JAX's.
    np.testing.assert_array_equal(np.asarray(out), np_inp @ np_inp)
    assert "unreduced={'x'}" in repr(out) and "[[" not in repr(out)


def test_unreduced_einsum_eagerly(m221):
  """An eager op asked for unreduced partial sums gives an unreduced Array of the same value
  (one device of each group holds it): reshard reduces it back exactly."""
  np_inp = np82()
  x = put(np_inp, m221, P("x", "y"))
  y = put(np_inp.T, m221, P("y", None))
  with partix.sharding.use_mesh(m221):
    u = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
    assert u.sharding == NamedSharding(m221, P("x", unreduced={"y"}))
    np.testing.assert_allclose(np.asarray(reshard(u, P("x"))), np_inp @ np_inp.T, rtol=1e-6)
    with pytest.raises(partix.PartixError, match=r"\[sin\].*unreduced rule for sin"):
      jnp.sin(u)


# ----------------------------------------------------------------------------------------------
# Reshape


@pytest.mark.parametrize("fun", ["jnp", "lax"])
@pytest.mark.parametrize("src_shape,dst_shape,src_spec,dst_spec,use_arg", [
    ((16, 1), (1, 16, 1), P("x", None), P(None, "x", None), False),
    ((8, 2, 1), (1, 16, 1), P("x", None, None), P(None, "x", None), True),
    ((8, 1), (1, 4, 2), P("x", None), P(None, None, "x"), True),
    ((1, 4, 1, 6, 1), (1, 4, 6), P(None, "x", None, None, None), P(None, "x", None), False),
    ((8, 32), (8, 16, 2, 1, 1, 1, 1), P("x", None), P("x", None, None, None, None, None, None),
     False),
    ((8, 32), (8, 1, 1, 32), P(None, "x"), P(None, None, None, "x"), False),
    ((8, 16, 2, 1, 1, 1), (8, 32), P(None, "x", None, None, None, None), P(None, "x"), False),
])
def test_reshape(m2, fun, src_shape, dst_shape, src_spec, dst_spec, use_arg):
  """ShardingInTypesTest.test_reshape: the split follows the dimension it is on (or goes where
  out_sharding= says), jnp.reshape and lax.reshape; grads typed like the input."""
  np_inp = np.arange(math.prod(src_shape), dtype=np.float32).reshape(src_shape)
  arr = put(np_inp, m2, src_spec)
  fn = jnp.reshape if fun == "jnp" else lax.reshape
  new_s = dst_spec if use_arg else None
  specs = []

  @partix.jit
  def f(x):
    y = fn(x, dst_shape, out_sharding=new_s) if new_s is not None else fn(x, dst_shape)
    y = y * 2
    specs.append(partix.typeof(y).sharding.spec)
    return y
  with partix.sharding.use_mesh(m2):
    out = f(arr)
    np.testing.assert_array_equal(np.asarray(out), np_inp.reshape(dst_shape) * 2)
    assert out.shape == dst_shape
    assert NamedSharding(m2, specs[0]) == NamedSharding(m2, dst_spec)
    assert out.sharding == NamedSharding(m2, dst_spec)
    g = partix.jit(partix.grad(lambda x: jnp.square(jnp.sum(f(x)))))(arr)
  assert g.sharding == arr.sharding


@pytest.mark.parametrize("src_shape,dst_shape,src_spec,want", [
    ((4, 6, 8), (4, 2, 3, 8), P("x", None, "y"), "float32[4@x,2,3,8@y]"),
    ((4, 6, 8), (4, 2, 3, 8), P("x", "y", None), "float32[4@x,2@y,3,8]"),
    ((4, 12, 8), (4, 4, 3, 8), P(None, ("x", "y"), None), "float32[4,4@(x,y),3,8]"),
    ((10, 1), (2, 5, 1), P("x", None), "float32[2@x,5,1]"),
    ((4, 2, 3, 8), (4, 6, 8), P("x", None, None, "y"), "float32[4@x,6,8@y]"),
    ((2, 2, 6, 8), (4, 6, 8), P(None, None, "y", "x"), "float32[4,6@y,8@x]"),
    ((4, 4, 3, 8), (4, 12, 8), P(None, ("x", "y"), None, None), "float32[4,12@(x,y),8]"),
    ((2, 5, 1), (10, 1), P("x", None, None), "float32[10@x,1]"),
    ((16, 8, 4), (16, 32, 1), P("x", "y", None), "float32[16@x,32@y,1]"),
    ((16, 32, 1), (16, 8, 4), P("x", "y", None), "float32[16@x,8@y,4]"),
])
def test_reshape_split_merge_one_axis(m22, src_shape, dst_shape, src_spec, want):
  """ShardingInTypesTest.test_reshape_split_merge_one_axis (the supported cases): splitting a
  dim keeps its split on the major part; merging keeps the major dim's split."""
  np_inp = np.arange(math.prod(src_shape), dtype=np.float32).reshape(src_shape)
  arr = put(np_inp, m22, src_spec)
  seen = []

  @partix.jit
  def f(x):
    y = lax.reshape(x, dst_shape) * 2
    seen.append(ty(y))
    return y
  out = f(arr)
  assert seen == [want]
  np.testing.assert_array_equal(np.asarray(out), np_inp.reshape(dst_shape) * 2)
  g = partix.jit(partix.grad(lambda x: jnp.square(jnp.sum(f(x)))))(arr)
  assert g.sharding == arr.sharding


@pytest.mark.parametrize("src_shape,dst_shape,src_spec", [
    ((4, 6, 8), (4, 3, 2, 8), P("x", "y", None)),        # 6@y -> 3,2: 3 not divisible by 2
    ((4, 2, 3, 8), (4, 8, 6), P(None, "y", None, "x")),   # split dims regrouped
    ((12,), (3, 4), P(("x", "y"))),                       # test_reshape_split_merge_error
    ((4, 2, 6, 8), (4, 12, 8), P(None, None, "y", "x")),  # minor merged dim split
    ((2, 2, 2), (8,), P("x", None, "y")),                 # test_reshape_split_merge_error
])
def test_reshape_unsupported_errors(m22, src_shape, dst_shape, src_spec):
  """ShardingInTypesTest.test_reshape_split_merge_one_axis (error cases) and
  test_reshape_split_merge_error: reshapes that cannot keep the split raise naming reshape."""
  np_inp = np.arange(math.prod(src_shape), dtype=np.float32).reshape(src_shape)
  arr = put(np_inp, m22, src_spec)
  with pytest.raises(partix.PartixError) as e:
    partix.jit(lambda x: lax.reshape(x, dst_shape))(arr)
  assert "[reshape]" in str(e.value) and ty(arr) in str(e.value), str(e.value)


@pytest.mark.parametrize("src_shape,dst_shape,want", [
    ((4, 2, 3, 2, 4), (4, 6, 8), "float32[4@x,6,8]"),
    ((4, 6, 8), (4, 4, 2, 6), "float32[4@x,4,2,6]"),
    ((4, 8, 9), (4, 2, 2, 3, 3, 2), "float32[4@x,2,2,3,3,2]"),
])
def test_reshape_unsplit_regroup_divergence(m22, src_shape, dst_shape, want):
  """ShardingInTypesTest.test_reshape_split_merge_one_axis, three of its error cases: dim 0 is
  split over x and stays as it is while the unsplit dims after it are regrouped.

  Divergence: JAX raises "This reshape is not supported" for these, its rule handling only a
  split or a merge of single dims; partix's reshape rule keeps the untouched split dim 0 and
  only requires the regrouped dims to be unsplit, so the reshape is typed and local."""
  np_inp = np.arange(math.prod(src_shape), dtype=np.float32).reshape(src_shape)
  arr = put(np_inp, m22, P("x", *([None] * (len(src_shape) - 1))))
  out = partix.jit(lambda x: lax.reshape(x, dst_shape))(arr)
  assert ty(out) == want
  np.testing.assert_array_equal(np.asarray(out), np_inp.reshape(dst_shape))


@pytest.mark.parametrize("in_shape,in_spec,out_shape,want", [
    ((4,), P(("x", "y")), (2, 2), "float32[2@x,2@y]"),
    ((8,), P(("x", "y")), (2, 4), "float32[2@x,4@y]"),
    ((8,), P(("x", "y")), (4, 2), "float32[4@(x,y),2]"),
    ((2, 2), P("x", "y"), (4,), "float32[4@(x,y)]"),
    ((2, 4), P("x", "y"), (8,), "float32[8@(x,y)]"),
    ((4, 2), P(("x", "y"), None), (8,), "float32[8@(x,y)]"),
])
def test_reshape_split_merge_one_dim_multi_axes(m22, in_shape, in_spec, out_shape, want):
  """ShardingInTypesTest.test_reshape_split_one_dim_multi_axes and
  test_reshape_merge_one_dim_multi_axes: a dim split over (x, y) splits into dims over x and y
  (and back); grads typed like the input."""
  np_inp = np.arange(math.prod(in_shape), dtype=np.float32).reshape(in_shape)
  arr = put(np_inp, m22, in_spec)
  f = partix.jit(lambda x: jnp.reshape(x, out_shape))
  out = f(arr)
  assert ty(out) == want
  np.testing.assert_array_equal(np.asarray(out), np_inp.reshape(out_shape))
  g = partix.jit(partix.grad(lambda x: f(x).sum()))(arr)
  assert g.sharding == arr.sharding


@pytest.mark.parametrize("in_shape,in_spec,out_shape,want", [
    ((8,), P(("x", "y", "z")), (2, 2, 2), "float32[2@x,2@y,2@z]"),
    ((8,), P(("x", "y", "z")), (2, 4), "float32[2@x,4@(y,z)]"),
    ((8,), P(("x", "y", "z")), (4, 2), "float32[4@(x,y),2@z]"),
    ((4, 2), P(("x", "y"), "z"), (2, 2, 2), "float32[2@x,2@y,2@z]"),
    ((2, 2, 2), P("x", "y", "z"), (8,), "float32[8@(x,y,z)]"),
    ((2, 4), P("x", ("y", "z")), (8,), "float32[8@(x,y,z)]"),
    ((2, 2, 2), P("x", "y", "z"), (4, 2), "float32[4@(x,y),2@z]"),
])
def test_reshape_multi_axes_3_mesh_axes(m222, in_shape, in_spec, out_shape, want):
  """ShardingInTypesTest.test_reshape_split_one_dim_multi_axes_3_mesh_axes and
  test_reshape_merge_one_dim_multi_axes_3_mesh_axes on a (2, 2, 2) mesh."""
  np_inp = np.arange(math.prod(in_shape), dtype=np.float32).reshape(in_shape)
  arr = put(np_inp, m222, in_spec)
  f = partix.jit(lambda x: jnp.reshape(x, out_shape))
  out = f(arr)
  assert ty(out) == want
  np.testing.assert_array_equal(np.asarray(out), np_inp.reshape(out_shape))
  g = partix.jit(partix.grad(lambda x: f(x).sum()))(arr)
  assert g.sharding == arr.sharding


def test_reshape_merge_replicated(m22):
  """ShardingInTypesTest.test_reshape_merge_replicated: merging unsplit leading dims keeps the
  minor dim's split."""
  np_inp = np.arange(128, dtype=np.float32).reshape(8, 4, 4)
  with partix.sharding.use_mesh(m22):
    arr = partix.device_put(np_inp, P(None, None, "x"))
    out = jnp.reshape(arr, (-1, arr.shape[-1]))
  assert out.sharding == NamedSharding(m22, P(None, "x"))
  assert ty(out) == "float32[32,4@x]"
  np.testing.assert_array_equal(np.asarray(out), np_inp.reshape(32, 4))


def test_jnp_reshape_order_f_divergence(m2):
  """ShardingInTypesTest.test_jnp_reshape_order_F.

  Divergence: JAX reshapes in Fortran order with out_sharding=P(None, 'x'); partix's
  jnp.reshape supports only order='C' and says so."""
  with partix.sharding.use_mesh(m2):
    value = jnp.ones(16, out_sharding=P("x"))
    assert ty(value) == "float32[16@x]"
    with pytest.raises(partix.PartixError, match=r"\[reshape\] order='F'"):
      jnp.reshape(value, (-1, 4), order="F", out_sharding=P(None, "x"))


# ----------------------------------------------------------------------------------------------
# Creation ops, typeof strings


def test_creation_ops_out_sharding(m2):
  """ShardingInTypesTest.test_jnp_zeros_out_sharding, test_jnp_arange_out_sharding,
  test_jnp_like_functions, test_jnp_ones_mesh_context_eager and test_jnp_full."""
  s = NamedSharding(m2, P("x"))
  out = jnp.zeros((8,), jnp.float32, out_sharding=s)
  assert out.sharding == s
  np.testing.assert_array_equal(np.asarray(out), np.zeros(8))
  out = jnp.arange(8, dtype=jnp.float32, out_sharding=s)
  assert out.sharding == s
  np.testing.assert_array_equal(np.asarray(out), np.arange(8))
  with partix.sharding.use_mesh(m2):
    out = jnp.zeros((8,), jnp.float32, out_sharding=P("x"))
    assert out.sharding == s and ty(out) == "float32[8@x]"
    out = partix.jit(lambda x: jnp.zeros(x.shape, x.dtype, out_sharding=P("x")))(
        np.arange(8, dtype=np.float32))
    assert out.sharding == s
    np.testing.assert_array_equal(np.asarray(out), np.zeros(8))
    for kw, ref in [(dict(start=8, stop=16), np.arange(8, 16)),
                    (dict(start=8, stop=16, step=2), np.arange(8, 16, 2))]:
      out = jnp.arange(dtype=jnp.float32, out_sharding=P("x"), **kw)
      assert out.sharding == s
      np.testing.assert_array_equal(np.asarray(out), ref)
    out = partix.jit(lambda: jnp.arange(8, dtype=np.float32, out_sharding=P("x")))()
    assert out.sharding == s
    np.testing.assert_array_equal(np.asarray(out), np.arange(8))
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    for fn, ref in [(jnp.zeros_like, np.zeros_like(np_inp)), (jnp.ones_like, np.ones_like(np_inp))]:
      out = fn(np_inp, out_sharding=P("x"))
      assert out.sharding == NamedSharding(m2, P("x", None))
      assert ty(out) == "int32[8@x,2]"
      np.testing.assert_array_equal(np.asarray(out), ref)
    out = jnp.full((8, 2), 3.0, out_sharding=P("x"))
    assert ty(out) == "float32[8@x,2]"
    np.testing.assert_array_equal(np.asarray(out), np.full((8, 2), 3.0))
  out = jnp.ones((8, 2), dtype=jnp.int32, device=NamedSharding(m2, P("x", None)))
  assert out.sharding == NamedSharding(m2, P("x", None))
  np.testing.assert_array_equal(np.asarray(out), np.ones((8, 2)))


def test_jnp_array_out_sharding(m22):
  """ShardingInTypesTest.test_jnp_array_out_sharding and test_jnp_array: jnp.array/asarray
  with out_sharding; a dtype conversion under jit keeps the type."""
  np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
  with partix.sharding.use_mesh(m22):
    for fn in (jnp.array, jnp.asarray):
      out = fn(np_inp, dtype=jnp.int32, out_sharding=P("x"))
      assert out.sharding == NamedSharding(m22, P("x", None))
      np.testing.assert_array_equal(np.asarray(out), np_inp)
  seen = []

  @partix.jit
  def f(x):
    y = jnp.array(x, dtype=jnp.float32)
    seen.append(ty(y))
    return y
  f(put(np_inp, m22, P("x", "y")))
  assert seen == ["float32[8@x,2@y]"]


def test_aval_repr(mesh8):
  """ShardingInTypesTest.test_aval_repr: the type notation with axes named model and data."""
  m = partix.make_mesh((2, 2), ("model", "data"), axis_types=(E, E))
  x = np.zeros((128, 64), np.float32)
  for spec, want in [(P("model", "data"), "float32[128@model,64@data]"),
                     (P("model", None), "float32[128@model,64]"),
                     (P(None, "data"), "float32[128,64@data]"),
                     (P(None, None), "float32[128,64]"),
                     (P(("model", "data"), None), "float32[128@(model,data),64]")]:
    assert ty(put(x, m, spec)) == want


def test_explicit_mode_no_context_mesh(mesh8):
  """ShardingInTypesTest.test_explicit_mode_no_context_mesh: with no mesh set, jit's traced
  values carry the arguments' mesh and types, and a matmul's type follows."""
  m = partix.make_mesh((4, 2), ("x", "y"), axis_types=(E, E))
  np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
  arr = put(np_inp, m, P("x", None))
  arr2 = put(np_inp.T, m, P(None, "y"))
  seen = []

  @partix.jit
  def f(x, y):
    z = x @ y
    a = z * 2
    seen.extend([ty(x), ty(y), ty(z), ty(a)])
    assert partix.typeof(a).sharding.mesh == m.abstract_mesh  # as JAX's avals
    return a
  out = f(arr, arr2)
  assert seen == ["int32[8@x,2]", "int32[2,8@y]", "int32[8@x,8@y]", "int32[8@x,8@y]"]
  assert out.sharding == NamedSharding(m, P("x", "y"))
  np.testing.assert_array_equal(np.asarray(out), 2 * (np_inp @ np_inp.T))


def test_auto_mode_no_context_mesh(mesh8):
  """ShardingInTypesTest.test_auto_mode_no_context_mesh: on an all-Auto mesh the types carry
  no split, yet the output keeps the argument's sharding."""
  m = partix.make_mesh((4, 2), ("x", "y"), axis_types=(A, A))
  np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
  arr = put(np_inp, m, P("x", None))
  seen = []

  @partix.jit
  def f(x):
    a = x * 2
    seen.extend([ty(x), ty(a)])
    return a
  out = f(arr)
  assert seen == ["int32[8,2]", "int32[8,2]"]
  np.testing.assert_array_equal(np.asarray(out), 2 * np_inp)
  assert out.sharding == NamedSharding(m, P("x", None))


# ----------------------------------------------------------------------------------------------
# reshard, auto_axes, explicit_axes


def test_reshard_api(m22):
  """ShardingInTypesTest.test_reshard_api and test_reshard_eager_mode: reshard eagerly and
  under jit; its grad goes back to the input's type."""
  np_inp = np82()
  arr = put(np_inp, m22, P("x", "y"))
  seen = []

  def f(x):
    y = reshard(x, P("x", None))
    seen.append(ty(y))
    return y
  with partix.sharding.use_mesh(m22):
    out = f(arr)
    assert out.sharding == NamedSharding(m22, P("x", None))
    out = partix.jit(f)(arr)
    assert out.sharding == NamedSharding(m22, P("x", None))
    np.testing.assert_array_equal(np.asarray(out), np_inp)
    assert seen == ["float32[8@x,2]"] * 2
    for grad in (partix.grad(lambda x: jnp.sum(partix.jit(f)(x))),
                 partix.jit(partix.grad(lambda x: jnp.sum(partix.jit(f)(x))))):
      g = grad(arr)
      assert g.sharding == arr.sharding
      np.testing.assert_array_equal(np.asarray(g), np.ones((8, 2)))


def test_ndim_less_than_pspec_length_error(m2):
  """ShardingInTypesTest.test_ndim_less_than_pspec_length_error."""
  with partix.sharding.use_mesh(m2):
    with pytest.raises(partix.PartixError, match=r"\[reshard\].*4 entries.*rank 3"):
      reshard(np.zeros((8, 4, 2)), P(None, None, None, "x"))


def test_auto_axes_top_level(m22):
  """ShardingInTypesTest.test_auto_axes_top_level: a matmul whose operands would conflict runs
  with every axis Auto, and its result comes back typed as out_sharding says."""
  np_inp = np82()
  arr1 = put(np_inp, m22, P("x", "y"))
  arr2 = put(np_inp.T, m22, P("y", "x"))

  @functools.partial(auto_axes, out_sharding=P("x", None))
  def auto_matmul(a, b):
    return a @ b
  seen = []

  @partix.jit
  def f(a, b):
    z = auto_matmul(jnp.sin(a), b)
    seen.append(ty(z))
    return z + 1
  with partix.set_mesh(m22):
    out = f(arr1, arr2)
  assert seen == ["float32[8@x,8]"]
  assert out.sharding == NamedSharding(m22, P("x", None))
  np.testing.assert_allclose(np.asarray(out), np.sin(np_inp) @ np_inp.T + 1, rtol=1e-4)


def test_explicit_axes_top_level(mesh8):
  """ShardingInTypesTest.test_explicit_axes_top_level: on an Auto mesh, a function made
  Explicit sees its operands typed as in_sharding says."""
  m = partix.make_mesh((2, 2), ("x", "y"), axis_types=(A, A))
  np_inp = np82()
  seen = []

  @functools.partial(explicit_axes, in_sharding=(P("x", None), P("x", None)))
  def jax_matmul(a, b):
    out = a @ b
    seen.append(ty(out))
    return out

  @partix.jit
  def f(a, b):
    return jax_matmul(jnp.sin(a), b) + 1
  with partix.set_mesh(m):
    arr1 = partix.device_put(np_inp, P("x", "y"))
    arr2 = partix.device_put(np_inp.T, P("y", "x"))
    out = f(arr1, arr2)
  assert seen == ["float32[8@x,8]"]
  np.testing.assert_allclose(np.asarray(out), np.sin(np_inp) @ np_inp.T + 1, rtol=1e-4)
  assert ty(out) == "float32[8,8]"  # Auto again outside


def test_full_user_to_auto_user_mix(m22):
  """ShardingInTypesTest.test_full_user_to_auto_user_mix: inside, x is Auto and y Explicit; a
  value resharded to P(None, 'y') keeps its y split through sin, an einsum gives the asked
  type, and the result is resharded over x outside.

  JAX switches types with use_abstract_mesh(mesh.update_axis_types(...)); partix does it with
  auto_axes(axes='x')."""
  np_inp = np82()
  arr = put(np_inp, m22, P("x", "y"))
  seen = []

  @functools.partial(auto_axes, axes="x", out_sharding=P(None, None))
  def inner(y):
    y = reshard(y, P(None, "y"))
    z = jnp.sin(y)
    a = jnp.einsum("xy,yz->xz", z, z.T, out_sharding=P(None, None))
    seen.extend([ty(y), ty(z), ty(a)])
    return a

  @partix.jit
  def f(x):
    a = inner(x * 2)
    a = reshard(a, P("x", None))
    seen.append(ty(a))
    return a
  with partix.set_mesh(m22):
    out = f(arr)
  assert seen == ["float32[8,2@y]", "float32[8,2@y]", "float32[8,8]", "float32[8@x,8]"]
  s = np.sin(np_inp * 2)
  np.testing.assert_allclose(np.asarray(out), s @ s.T, rtol=1e-5)
  assert out.sharding == NamedSharding(m22, P("x", None))


def test_auto_axes_out_sharding_auto_axis_divergence(m4):
  """ShardingInTypesTest.test_dot_general_out_sharding (its error case).

  Divergence: JAX raises "PartitionSpec passed to einsum cannot contain axis names that are of
  type Auto or Manual" when, inside auto_axes, an einsum's out_sharding names x (Auto there);
  partix accepts it: the value is right and the type inside shows no split, x being Auto
  there."""
  np_inp = np82()
  arr1 = put(np_inp, m4, P("x", None))
  arr2 = put(np_inp.T, m4, P(None, "x"))

  seen = []

  def f(x, y):
    out = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", None))
    seen.append(ty(out))
    return jnp.sum(out)
  with partix.sharding.use_mesh(m4):
    out = auto_axes(f, out_sharding=P())(arr1, arr2)
  assert seen == ["float32[8,8]"]
  assert ty(out) == "float32[]"
  np.testing.assert_allclose(float(out), np.sum(np_inp @ np_inp.T), rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# Control flow


def test_scan(m22):
  """ShardingInTypesTest.test_scan: carry and xs slices keep their types across iterations,
  einsums inside give the asked types, stacked ys get an unsplit leading dim; grads typed like
  the primals."""
  np_c = np.arange(16, dtype=np.float32).reshape(2, 8) / 16
  np_xs = np.arange(128, dtype=np.float32).reshape(8, 8, 2) / 128
  carry = put(np_c, m22, P(None, "x"))
  arr = put(np_xs, m22, P(None, "x", "y"))
  seen = []

  @partix.jit
  def f(carry, xs):
    def g(c, x):
      y = jnp.einsum("xy,yz->xz", c, x, out_sharding=P(None, "y"))
      z = partix.nn.relu(y)
      a = jnp.einsum("xy,yz->xz", z, x.T, out_sharding=P(None, "x"))
      seen.extend([ty(c), ty(x), ty(y), ty(z), ty(a)])
      return a, y
    return lax.scan(g, carry, xs)
  with partix.sharding.use_mesh(m22):
    act, ys = f(carry, arr)
    assert seen[:5] == ["float32[2,8@x]", "float32[8@x,2@y]", "float32[2,2@y]",
                        "float32[2,2@y]", "float32[2,8@x]"]
    assert ty(act) == "float32[2,8@x]" and ty(ys) == "float32[8,2,2@y]"
    c, ys_ref = np_c, []
    for i in range(8):
      y = c @ np_xs[i]
      ys_ref.append(y)
      c = np.maximum(y, 0) @ np_xs[i].T
    np.testing.assert_allclose(np.asarray(act), c, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(ys), np.stack(ys_ref), rtol=1e-4)
    gc, gx = partix.jit(partix.grad(lambda c, x: jnp.sum(f(c, x)[0]), argnums=(0, 1)))(carry, arr)
  assert gc.sharding == carry.sharding and gx.sharding == arr.sharding


def test_scan_carry_shardings_diff_error(m2):
  """ShardingInTypesTest.test_scan_carry_shardings_diff_error: a body that reshards its carry
  changes the carry's type, an error naming the carry and both types."""
  @partix.jit
  def f(x):
    def g(carry, _):
      return reshard(carry, P()), None
    return lax.scan(g, x, None, length=1)[0]
  with partix.sharding.use_mesh(m2):
    arg = partix.device_put(np.arange(4, dtype=np.int32), P("x"))
    with pytest.raises(partix.PartixError) as e:
      f(arg)
  msg = str(e.value)
  assert "[scan]" in msg and "carry" in msg, msg
  assert "int32[4@x]" in msg and "int32[4]" in msg, msg


def test_fori_loop_and_cond_types(m22):
  """ShardingInTypesTest.test_cond_fori_reduced_fwd (typed carries through fori_loop and
  cond): the types hold through both; branches typed differently are an error."""
  np_inp = np82()
  arr = put(np_inp, m22, P("x", "y"))
  seen = []

  @partix.jit
  def f(x, p):
    y = lax.fori_loop(0, 3, lambda i, c: c * 2, x)
    z = lax.cond(p, lambda v: v + 1, lambda v: v - 1, y)
    seen.extend([ty(y), ty(z)])
    return z
  out = f(arr, True)
  assert seen == ["float32[8@x,2@y]"] * 2
  np.testing.assert_array_equal(np.asarray(out), np_inp * 8 + 1)
  assert out.sharding == arr.sharding
  np.testing.assert_array_equal(np.asarray(f(arr, False)), np_inp * 8 - 1)

  @partix.jit
  def bad(x, p):
    return lax.cond(p, lambda v: v, lambda v: reshard(v, P(None, None)), x)
  with partix.sharding.use_mesh(m22):
    with pytest.raises(partix.PartixError) as e:
      bad(arr, True)
  msg = str(e.value)
  assert "[cond]" in msg and "float32[8@x,2@y]" in msg and "float32[8,2]" in msg, msg


# ----------------------------------------------------------------------------------------------
# shard_map


def test_shard_map_full_manual(m22):
  """ShardingInTypesTest.test_shard_map_full_manual: inside shard_map every axis is Manual;
  the result is typed by out_specs."""
  np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
  arr = put(np_inp, m22, P("x", "y"))
  seen = []

  def g(x, y):
    seen.append(partix.get_abstract_mesh().axis_types)
    return x * y

  @partix.jit
  def f(x, y):
    z = partix.shard_map(g, mesh=m22, in_specs=(P("x", "y"), P("x", "y")),
                         out_specs=P("x", "y"))(x, y)
    out = z * 2
    seen.extend([ty(z), ty(out)])
    return out
  out = f(arr, arr)
  assert seen[0] == (AxisType.Manual, AxisType.Manual)
  assert seen[1:] == ["int32[8@x,2@y]"] * 2
  np.testing.assert_array_equal(np.asarray(out), np_inp * np_inp * 2)
  assert out.sharding == NamedSharding(m22, P("x", "y"))


def test_shard_map_dot(m22):
  """ShardingInTypesTest.test_shard_map_dot: all_gather and psum inside a Manual body; the
  result is typed by out_specs."""
  np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
  arr = put(np_inp, m22, P("x", "y"))
  arr2 = put(np_inp.T, m22, P("y", "x"))
  seen = []

  def g(x, y):
    yg = lax.all_gather(y, axis_name="x", axis=1, tiled=True)
    return lax.psum(x @ yg, axis_name="y")

  @partix.jit
  def f(x, y):
    z = partix.shard_map(g, mesh=m22, in_specs=(P("x", "y"), P("y", "x")),
                         out_specs=P("x", None))(x, y)
    out = z * 2
    seen.extend([ty(z), ty(out)])
    return out
  out = f(arr, arr2)
  assert seen == ["int32[8@x,8]"] * 2
  np.testing.assert_array_equal(np.asarray(out), (np_inp @ np_inp.T) * 2)
  assert out.sharding == NamedSharding(m22, P("x", None))


# ----------------------------------------------------------------------------------------------
# Mixed Auto / Explicit axes; slicing, padding, concatenation


@pytest.mark.parametrize("out_spec,inner_spec,want_inner,want", [
    (P("x", None), P(None, None), "float32[8,8]", "float32[8@x,8]"),
    (P("x", "y"), P(None, "y"), "float32[8,8@y]", "float32[8@x,8@y]"),
], ids=["auto_mode_mix", "dual_sharded_output"])
def test_auto_mode_mix(m22, out_spec, inner_spec, want_inner, want):
  """ShardingInTypesTest.test_auto_mode_mix and test_auto_mode_mix_dual_sharded_output:
  auto_axes(axes='x') leaves y Explicit inside, so the operand shows only its y split."""
  np_inp = np82()
  arr = put(np_inp, m22, P("x", "y"))
  seen = []

  @functools.partial(auto_axes, axes="x", out_sharding=out_spec)
  def h(y):
    z = jnp.sin(y)
    a = jnp.einsum("xy,yz->xz", z, z.T, out_sharding=inner_spec)
    seen.extend([ty(y), ty(z), ty(a)])
    return a

  @partix.jit
  def g(x):
    a = h(x * 2)
    seen.append(ty(a))
    return a
  with partix.set_mesh(m22):
    out = g(arr)
  assert seen == ["float32[8,2@y]", "float32[8,2@y]", want_inner, want]
  assert out.sharding == NamedSharding(m22, out_spec)
  s = np.sin(np_inp * 2)
  np.testing.assert_allclose(np.asarray(out), s @ s.T, rtol=1e-5)


def test_out_sharding_mix_axis_types(mesh8):
  """ShardingInTypesTest.test_out_sharding_mix_axis_types: on a mesh with x, y Explicit and z
  Auto, a split over Explicit x is in the type and survives x * 2."""
  m = partix.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(E, E, A))
  np_inp = np.arange(16, dtype=np.int32).reshape(4, 2, 2)
  arr = put(np_inp, m, P("x", None, None))
  seen = []

  @partix.jit
  def f(x):
    y = x * 2
    seen.append(ty(y))
    return y
  out = f(arr)
  assert seen == ["int32[4@x,2,2]"]
  assert out.sharding == NamedSharding(m, P("x", None, None))
  np.testing.assert_array_equal(np.asarray(out), np_inp * 2)
  # An Auto axis in the spec is not part of the type.
  z = put(np_inp, m, P("x", None, "z"))
  assert ty(z) == "int32[4@x,2,2]"


def test_where_with_scalar(m22):
  """ShardingInTypesTest.test_where_with_scalar: a scalar operand broadcasts to any type."""
  np_inp = np82()
  x = put(np_inp, m22, P("x", "y"))
  out = jnp.where(x > 0, x, 0)
  assert out.sharding == NamedSharding(m22, P("x", "y"))
  np.testing.assert_array_equal(np.asarray(out), np_inp)


def test_slice_and_squeeze(m22):
  """ShardingInTypesTest.test_slice and test_squeeze: slicing an unsplit dim and squeezing keep
  the type (grads too); slicing a split dim is an error naming slice."""
  np_inp = np.arange(16, dtype=np.float32).reshape(4, 4)
  arr = put(np_inp, m22, P("x", None))
  seen = []

  @partix.jit
  def f(x):
    y = lax.slice(x, (0, 0), (4, 3))
    seen.append(ty(y))
    return y
  out = f(arr)
  assert seen == ["float32[4@x,3]"]
  np.testing.assert_array_equal(np.asarray(out), np_inp[:, :3])
  g = partix.jit(partix.grad(lambda x: jnp.square(jnp.sum(f(x)))))(arr)
  assert g.sharding == arr.sharding
  ref = np.zeros((4, 4), np.float32)
  ref[:, :3] = 2 * np_inp[:, :3].sum()
  np.testing.assert_allclose(np.asarray(g), ref, rtol=1e-6)
  for spec, t in [(P("x", "y"), "float32[4@x,4@y]"), (P(None, ("x", "y")), "float32[4,4@(x,y)]")]:
    with pytest.raises(partix.PartixError) as e:
      f(put(np_inp, m22, spec))
    assert "[slice]" in str(e.value) and t in str(e.value), str(e.value)

  np3 = np_inp.reshape(4, 4, 1)
  arr3 = put(np3, m22, P("x", None, None))
  sq = partix.jit(lambda x: lax.squeeze(x, (2,)))
  out = sq(arr3)
  assert ty(out) == "float32[4@x,4]"
  np.testing.assert_array_equal(np.asarray(out), np_inp)
  g = partix.jit(partix.grad(lambda x: jnp.square(jnp.sum(sq(x)))))(arr3)
  assert g.sharding == arr3.sharding


def test_pad(m22):
  """ShardingInTypesTest.test_pad: padding that leaves a split dim's size alone (or none)
  keeps its type; padding a split dim to another size is an error naming pad."""
  np_inp = np.arange(8, dtype=np.float32)
  arr = put(np_inp, m22, P("x"))
  f = partix.jit(lambda x, cfg: lax.pad(x, 0., cfg), static_argnums=1)
  out = f(arr, ((0, 0, 0),))
  assert ty(out) == "float32[8@x]"
  np.testing.assert_array_equal(np.asarray(out), np_inp)
  for cfg in [((2, 3, 0),), ((0, 3, 0),)]:
    with pytest.raises(partix.PartixError) as e:
      f(arr, cfg)
    assert "[pad]" in str(e.value) and "float32[8@x]" in str(e.value), str(e.value)


def test_concatenate(mesh8, m22):
  """ShardingInTypesTest.test_concatenate: jnp and lax concatenate along an unsplit dim keep
  the common type (grads too); operands split differently are an error naming concatenate.

  Divergence: JAX's test concatenates along a dim split over y where y has size 1 (mesh
  (2, 1)), which JAX accepts; partix treats a split over a size-1 axis like any split of the
  concatenated dim and raises, so the values here put y on no dim."""
  m = partix.make_mesh((2, 1), ("x", "y"), axis_types=(E, E))
  np1 = np.arange(16, dtype=np.float32).reshape(4, 4)
  np2 = np.arange(4, dtype=np.float32).reshape(4, 1)
  ref = np.concatenate([np1, np2], axis=1)
  with pytest.raises(partix.PartixError) as e:
    partix.jit(lambda x, y: jnp.concatenate([x, y], axis=1))(put(np1, m, P("x", "y")),
                                                             put(np2, m, P("x", "y")))
  assert "[concatenate]" in str(e.value) and "float32[4@x,4@y]" in str(e.value)
  arr1 = put(np1, m22, P("x", None))
  arr2 = put(np2, m22, P("x", None))
  for fn in (lambda x, y: jnp.concatenate([x, y], axis=1),
             lambda x, y: lax.concatenate([x, y], dimension=1)):
    out = partix.jit(fn)(arr1, arr2)
    assert ty(out) == "float32[4@x,5]"
    np.testing.assert_array_equal(np.asarray(out), ref)
  with pytest.raises(partix.PartixError) as e:
    partix.jit(lambda x, y: jnp.concatenate([x, y], axis=1))(arr1, put(np2, m22, P("y", None)))
  msg = str(e.value)
  assert "[concatenate]" in msg and "float32[4@x,4]" in msg and "float32[4@y,1]" in msg, msg
  g = partix.jit(partix.grad(lambda x, y: jnp.square(jnp.sum(jnp.concatenate([x, y], axis=1))),
                             argnums=(0, 1)))(arr1, arr2)
  assert g[0].sharding == arr1.sharding and g[1].sharding == arr2.sharding
  np.testing.assert_allclose(np.asarray(g[1]), np.full((4, 1), 2 * ref.sum()), rtol=1e-6)
