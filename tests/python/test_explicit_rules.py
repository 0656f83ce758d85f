"""Explicit sharding in Python: per-op sharding rules at trace time, out_sharding=, auto_axes /
explicit_axes, grads typed like primals, and errors citing the user's source line.

The cases follow JAX's explicit-sharding tutorial (docs.jax.dev, "Explicit sharding") and the
sharding-in-types tests of JAX's tests/pjit_test.py (ShardingInTypesTest: binary ops, dot_general
with sharded contractions and out_sharding, reductions, auto_axes/explicit_axes, grads). Values
are checked against numpy; types against the strings JAX prints.
"""
import functools

import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P
from partix.sharding import auto_axes, explicit_axes, reshard

E, A = AxisType.Explicit, AxisType.Auto


@pytest.fixture(scope="module")
def xy(mesh8):
  return partix.make_mesh((2, 4), ("X", "Y"), axis_types=(E, E))


def ty(x):
  return str(partix.typeof(x))


def test_tutorial_binary_op_and_jit(xy):
  with partix.sharding.use_mesh(xy):
    arg0 = reshard(np.arange(4).reshape(4, 1), P("X", None))
    arg1 = reshard(np.arange(8).reshape(1, 8), P(None, "Y"))
    result = arg0 + arg1
    assert ty(arg0) == "int32[4@X,1]"
    assert ty(arg1) == "int32[1,8@Y]"
    assert ty(result) == "int32[4@X,8@Y]"
    seen = []

    @partix.jit
    def add_arrays(x, y):
      ans = x + y
      seen.extend([ty(x), ty(y), ty(ans)])
      return ans
    out = add_arrays(arg0, arg1)
    assert seen == ["int32[4@X,1]", "int32[1,8@Y]", "int32[4@X,8@Y]"]
    np.testing.assert_array_equal(np.asarray(out), np.arange(4).reshape(4, 1) +
                                  np.arange(8).reshape(1, 8))
    assert out.sharding.spec == P("X", "Y")


def test_axis_used_twice_cites_the_source_line(xy):
  with partix.sharding.use_mesh(xy):
    some_x = reshard(np.arange(16).reshape(4, 4), P("X", None))
    some_y = reshard(np.arange(16).reshape(4, 4), P(None, "X"))
    with pytest.raises(partix.PartixError) as e:
      some_x + some_y  # the line the error must cite
    msg = str(e.value)
    assert "[add]" in msg and "int32[4@X,4]" in msg and "int32[4,4@X]" in msg, msg
    assert "test_explicit_rules.py:" in msg, msg

    # The tutorial's fix: auto_axes with an out_sharding.
    @auto_axes
    def add_with_out_sharding_kwarg(x, y):
      return x + y
    result = add_with_out_sharding_kwarg(some_x, some_y, out_sharding=P("X", None))
    assert ty(result) == "int32[4@X,4]"
    np.testing.assert_array_equal(np.asarray(result), 2 * np.arange(16).reshape(4, 4))


def test_auto_axes_over_one_axis_under_jit(xy):
  with partix.sharding.use_mesh(xy):
    seen, inner_mesh = [], []

    @functools.partial(auto_axes, axes="X")
    def g(y):
      seen.append(ty(y))
      inner_mesh.append(str(partix.sharding.get_abstract_mesh()))
      return y * 2

    @partix.jit
    def f(arr1):
      x = jnp.sin(arr1)
      seen.append(ty(x))
      z = g(x, out_sharding=P("X", "Y"))
      seen.append(ty(z))
      return z + 1
    some_x = reshard(np.arange(16, dtype=np.float32).reshape(4, 4), P("X", "Y"))
    out = f(some_x)
    assert seen == ["float32[4@X,4@Y]", "float32[4,4@Y]", "float32[4@X,4@Y]"]
    assert inner_mesh == ["AbstractMesh('X': 2, 'Y': 4, axis_types=(Auto, Explicit))"]
    np.testing.assert_allclose(np.asarray(out), np.sin(np.arange(16).reshape(4, 4)) * 2 + 1,
                               rtol=1e-6)


def test_explicit_axes_from_auto(mesh8):
  auto_mesh = partix.make_mesh((2, 4), ("X", "Y"), axis_types=(A, A))
  seen = []

  @functools.partial(explicit_axes, axes=("X", "Y"))
  def explicit_g(y):
    z = y * 2
    seen.extend([ty(y), ty(z)])
    return z

  @partix.jit
  def f(arr1):
    x = jnp.sin(arr1)
    z = explicit_g(x, in_sharding=P("X", "Y"))
    seen.append(ty(z))
    return z + 1
  with partix.sharding.use_mesh(auto_mesh):
    some_x = partix.device_put(np.arange(16, dtype=np.float32).reshape(4, 4), P("X", "Y"))
    out = f(some_x)
  assert seen == ["float32[4@X,4@Y]", "float32[4@X,4@Y]", "float32[4,4]"]
  np.testing.assert_allclose(np.asarray(out), np.sin(np.arange(16).reshape(4, 4)) * 2 + 1,
                             rtol=1e-6)


def test_dot_general_rules_and_out_sharding(xy):
  # pjit_test: a contraction split in both operands needs out_sharding; with it, the result
  # is as asked, including unreduced partial sums inside jit.
  np_a = np.arange(128, dtype=np.float32).reshape(8, 16) / 64
  np_b = np.arange(64, dtype=np.float32).reshape(16, 4) / 32
  want = np_a @ np_b
  a = partix.device_put(np_a, NamedSharding(xy, P("X", "Y")))
  b = partix.device_put(np_b, NamedSharding(xy, P("Y", None)))
  with pytest.raises(partix.PartixError, match=r"out_sharding"):
    a @ b
  c = jnp.matmul(a, b, out_sharding=NamedSharding(xy, P("X", None)))
  assert ty(c) == "float32[8@X,4]"
  np.testing.assert_allclose(np.asarray(c), want, rtol=1e-5)
  seen = []

  @partix.jit
  def f(x, y):
    u = jnp.einsum("ij,jk->ik", x, y, out_sharding=P("X", None, unreduced={"Y"}))
    seen.append(ty(u))
    return reshard(u, P("X", None))
  with partix.sharding.use_mesh(xy):
    out = f(a, b)
    text = f.lower(a, b).compile().as_text()
  assert seen[0] == "float32[8@X,4]{U:Y}"
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5)
  assert text.count("all_reduce") == 1 and "all_gather" not in text, text
  # lax.dot_general with out_sharding, and a contraction split on one side only (allowed: the
  # result is replicated over that axis).
  d = partix.lax.dot_general(a, b, (([1], [0]), ([], [])),
                             out_sharding=NamedSharding(xy, P(None, "Y")))
  assert ty(d) == "float32[8,4@Y]"
  b_rep = partix.device_put(np_b, NamedSharding(xy, P()))
  e = a @ b_rep
  assert ty(e) == "float32[8@X,4]"
  np.testing.assert_allclose(np.asarray(e), want, rtol=1e-5)


def test_reductions_reshape_take_creation(xy):
  x = partix.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), NamedSharding(xy, P("X", "Y")))
  assert ty(jnp.sum(x, axis=0)) == "float32[4@Y]"
  assert ty(jnp.sum(x)) == "float32[]"
  assert ty(jnp.exp(x)) == "float32[8@X,4@Y]"
  r = jnp.reshape(x, (32,), out_sharding=NamedSharding(xy, P("X")))
  assert ty(r) == "float32[32@X]"
  np.testing.assert_array_equal(np.asarray(r), np.arange(32))
  t = jnp.take(x, jnp.asarray([3, 1]), axis=0, out_sharding=NamedSharding(xy, P(None, "Y")))
  assert ty(t) == "float32[2,4@Y]"
  np.testing.assert_array_equal(np.asarray(t), np.arange(32).reshape(8, 4)[[3, 1]])
  with partix.sharding.use_mesh(xy):
    z = jnp.zeros((8, 4), out_sharding=P(None, "X"))
    assert ty(z) == "float32[8,4@X]"
    with pytest.raises(partix.PartixError, match=r"\[add\]"):
      x + z


def test_grad_is_typed_like_primals(mesh8):
  m = partix.make_mesh((4, 2), ("data", "model"), axis_types=(E, E))
  np_x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(8, 6)
  np_w = np.linspace(-0.5, 0.5, 24, dtype=np.float32).reshape(6, 4)
  x = partix.device_put(np_x, NamedSharding(m, P("data", None)))
  w = partix.device_put(np_w, NamedSharding(m, P(None, "model")))

  def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w))
  seen = []

  @partix.jit
  def step(w, x):
    g = partix.grad(loss)(w, x)
    seen.append(ty(g))
    return g
  g = step(w, x)
  assert seen == ["float32[6,4@model]"]
  assert g.sharding.spec == P(None, "model")
  # Against finite differences of the unsharded loss.
  eps = 1e-3
  for (i, j) in [(0, 0), (3, 2), (5, 3)]:
    d = np.zeros_like(np_w)
    d[i, j] = eps
    fd = (np.sum(np.tanh(np_x @ (np_w + d))) - np.sum(np.tanh(np_x @ (np_w - d)))) / (2 * eps)
    assert abs(float(np.asarray(g)[i, j]) - fd) < 2e-3


def test_scan_carry_type_must_hold(xy):
  init = partix.device_put(np.arange(8, dtype=np.float32), NamedSharding(xy, P("X")))
  rep = partix.device_put(np.zeros(8, np.float32), NamedSharding(xy, P()))

  @partix.jit
  def ok(c0):
    return partix.lax.fori_loop(0, 3, lambda i, c: c + jnp.sin(c), c0)
  np.testing.assert_allclose(np.asarray(ok(init)), _np_fori(np.arange(8, dtype=np.float32)),
                             rtol=1e-5)

  @partix.jit
  def bad(c0):
    return partix.lax.fori_loop(0, 3, lambda i, c: c + init, c0)
  with pytest.raises(partix.PartixError, match=r"carry 0.*float32\[8\].*float32\[8@X\]"):
    bad(rep)


def _np_fori(c):
  for _ in range(3):
    c = c + np.sin(c)
  return c


def test_partition_spec_unreduced():
  p = P("X", None, unreduced={"Y"})
  assert p.unreduced == frozenset({"Y"})
  assert p != P("X", None)
  assert repr(p) == "P('X', None, unreduced={'Y'})"
  import pickle
  assert pickle.loads(pickle.dumps(p)) == p
  with pytest.raises(partix.PartixError, match=r"\[PartitionSpec\] unreduced"):
    P("X", unreduced={1})


def test_experimental_shard_names():
  from partix.experimental import shard
  assert shard.reshard is reshard and shard.auto_axes is auto_axes
  assert shard.explicit_axes is explicit_axes
  with pytest.raises(partix.PartixError, match=r"\[auto_axes\] axes"):
    auto_axes(lambda x: x, axes=3)
