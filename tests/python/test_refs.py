"""jax.Ref (new_ref, freeze, ref[...] reads and writes): eagerly, as jit and shard_map
arguments (written back after the call), made inside a trace, closed over by a jitted function
(read afresh at every call, never a value kept in a compiled program), and bad input."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P


@pytest.fixture
def mesh_x():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


def test_eager_reads_and_writes():
  r = jax.new_ref(jnp.arange(4.0))
  assert r.shape == (4,) and r.dtype == np.float32 and r.ndim == 1 and len(r) == 4
  assert isinstance(r, jax.Ref) and isinstance(r, jax.ref.Ref)
  assert str(jax.typeof(r)) == "Ref{float32[4]}"
  assert jax.typeof(r).inner_aval.shape == (4,)
  assert repr(r) == "Ref([0., 1., 2., 3.], dtype=float32)"
  r[...] += 1
  np.testing.assert_array_equal(r[...], [1, 2, 3, 4])
  r[1] = 10.0  # a Python float into a float Ref is cast, as JAX's
  r[2:] = jnp.array([7.0, 8.0])
  r[...] = r[...] * 2
  np.testing.assert_array_equal(r[...], [2, 20, 14, 16])
  assert float(r[1]) == 20.0
  np.testing.assert_array_equal(r[1:3], [20, 14])
  r.addupdate(jnp.ones(2), slice(0, 2))
  np.testing.assert_array_equal(jax.freeze(r), [3, 21, 14, 16])
  assert int(jax.ref.swap(jax.new_ref(jnp.arange(3)), 1, 5)) == 1
  z = jax.empty_ref(jax.ShapeDtypeStruct((2, 3), jnp.int32))
  assert z.shape == (2, 3) and z.dtype == np.int32
  assert jax.free_ref(z) == ()


def test_scalar_ref():
  r = jax.new_ref(jnp.int32(5))
  r[()] = 7
  r[...] += 1
  assert int(r[...]) == 8 and r.shape == ()


def test_sharded_ref_keeps_its_sharding(mesh_x):
  s = NamedSharding(mesh_x, P("x"))
  r = jax.new_ref(jax.device_put(jnp.zeros((8, 2)), s))
  assert r.sharding == s
  r[...] = jnp.ones((8, 2))  # an unplaced value moves onto the Ref's sharding
  assert r.sharding == s and r[...].sharding == s
  r[3] = jnp.full(2, 5.0)
  r[...] += jax.device_put(jnp.ones((8, 2)), NamedSharding(mesh_x, P()))
  assert r.sharding == s
  want = np.full((8, 2), 2.0)
  want[3] = 6.0
  np.testing.assert_array_equal(r[...], want)


def test_ref_as_jit_argument():
  traces = []

  @jax.jit
  def step(acc, x, *, scale):
    traces.append(1)
    acc["sum"][...] += x * scale
    acc["count"][...] += 1
    return acc["sum"][...].sum()

  acc = {"sum": jax.new_ref(jnp.zeros(3)), "count": jax.new_ref(jnp.int32(0))}
  want = np.zeros(3, np.float32)
  for i in range(3):
    x = np.arange(3, dtype=np.float32) + i
    want += x * 2
    out = step(acc, x, scale=2.0)
    np.testing.assert_allclose(out, want.sum())
    np.testing.assert_allclose(acc["sum"][...], want)
  assert int(acc["count"][...]) == 3
  assert len(traces) == 1  # one signature: traced once


def test_jit_static_argument_and_read_only_ref():
  r = jax.new_ref(jnp.ones(4))
  scale = jax.jit(lambda ref, k: ref.__setitem__(..., ref[...] * k), static_argnums=1)
  scale(r, 3)
  scale(r, 3)
  np.testing.assert_array_equal(r[...], np.full(4, 9.0))
  peek = jax.jit(lambda ref: ref[...] + 1)
  before = r[...]
  np.testing.assert_array_equal(peek(r), np.full(4, 10.0))
  assert r[...] is before  # read only: nothing written back


def test_jit_keeps_sharded_ref_placement(mesh_x):
  s = NamedSharding(mesh_x, P("x"))
  r = jax.new_ref(jax.device_put(jnp.zeros(8), s))
  f = jax.jit(lambda ref, x: ref.__setitem__(..., ref[...] + x), out_shardings=None)
  f(r, np.arange(8, dtype=np.float32))
  f(r, np.arange(8, dtype=np.float32))
  assert r.sharding == s
  np.testing.assert_array_equal(r[...], np.arange(8) * 2)


def test_ref_in_shard_map_sees_blocks(mesh_x):
  s = NamedSharding(mesh_x, P("x"))
  r = jax.new_ref(jax.device_put(jnp.zeros(16), s))
  shapes = []

  def body(x_ref):
    shapes.append(x_ref.shape)
    x_ref[...] += lax.axis_index("x").astype(jnp.float32)
    x_ref[0] = x_ref[0] * 10

  f = jax.shard_map(body, mesh=mesh_x, in_specs=P("x"), out_specs=None)
  f(r)  # eagerly
  assert set(shapes) == {(2,)}
  want = np.repeat(np.arange(8, dtype=np.float32), 2)
  want[::2] *= 10
  np.testing.assert_array_equal(r[...], want)
  assert r.sharding == s
  jax.jit(f)(r)  # and under jit
  want2 = want + np.repeat(np.arange(8, dtype=np.float32), 2)
  want2[::2] = (want[::2] + np.arange(8)) * 10
  np.testing.assert_array_equal(r[...], want2)


def test_mirror_axis_index_write():
  if jax.device_count() < 2:
    pytest.skip("needs 2 devices")
  with jax.set_mesh(jax.make_mesh((2,), ("x",))):
    x_ref = jax.new_ref(jnp.zeros(4, "float32", out_sharding=P("x")))

    @jax.jit
    @jax.shard_map(out_specs=None)
    def f(x_ref):
      x_ref[...] += lax.axis_index("x").astype("float32")

    f(x_ref)
    f(x_ref)
    np.testing.assert_array_equal(x_ref[...], [0, 0, 2, 2])


def test_shard_map_nested_in_jit(mesh_x):
  s = NamedSharding(mesh_x, P("x"))
  r = jax.new_ref(jax.device_put(jnp.zeros(8), s))

  def body(block_ref, y):
    block_ref[...] = block_ref[...] + y
    return y * 2

  @jax.jit
  def outer(ref, y):
    ref[...] += 1.0
    out = jax.shard_map(body, mesh=mesh_x, in_specs=(P("x"), P("x")), out_specs=P("x"))(ref, y)
    ref[...] *= 3
    return out

  y = np.arange(8, dtype=np.float32)
  np.testing.assert_array_equal(outer(r, y), y * 2)
  np.testing.assert_array_equal(r[...], (1 + y) * 3)
  assert r.sharding == s


def test_ref_made_inside_traces(mesh_x):
  @jax.jit
  def f(x):
    ref = jax.new_ref(jnp.zeros_like(x))
    ref[...] = x
    ref[1] += 5.0
    return jax.freeze(ref) * 2

  np.testing.assert_array_equal(f(jnp.ones(3)), [2, 12, 2])

  def g(x):
    ref = jax.new_ref(jnp.zeros_like(x))
    ref[...] = x + lax.axis_index("x").astype(x.dtype)
    return ref[...]

  out = jax.jit(jax.shard_map(g, mesh=mesh_x, in_specs=P("x"), out_specs=P("x")))(jnp.zeros(8))
  np.testing.assert_array_equal(out, np.arange(8))


def test_closed_over_ref_is_read_at_every_call():
  c = jax.new_ref(jnp.ones(3))
  traces = []

  @jax.jit
  def f(x):
    traces.append(1)
    return x + c[...]

  np.testing.assert_array_equal(f(jnp.zeros(3)), np.ones(3))
  c[...] = jnp.full(3, 5.0)  # updated between calls of one jitted function
  np.testing.assert_array_equal(f(jnp.zeros(3)), np.full(3, 5.0))
  c[1] = 7.0
  np.testing.assert_array_equal(f(jnp.zeros(3)), [5, 7, 5])
  n = len(traces)
  f(jnp.zeros(3))
  assert len(traces) == n  # the Ref is an argument of the compiled program: no retrace


def test_closed_over_ref_written_in_jit():
  counter = jax.new_ref(jnp.int32(0))
  total = jax.new_ref(jnp.zeros(2))

  @jax.jit
  def bump(x):
    counter[...] += 1
    total[...] += x
    return counter[...]

  assert int(bump(jnp.ones(2))) == 1
  assert int(bump(jnp.ones(2))) == 2
  counter[...] = 10
  assert int(bump(jnp.ones(2))) == 11
  np.testing.assert_array_equal(total[...], [3, 3])


def test_closed_over_ref_in_eager_shard_map(mesh_x):
  c = jax.new_ref(jnp.ones(1))
  f = jax.shard_map(lambda x: x + c[...], mesh=mesh_x, in_specs=P("x"), out_specs=P("x"))
  np.testing.assert_array_equal(f(jnp.zeros(8)), np.ones(8))
  c[...] = jnp.full(1, 3.0)
  np.testing.assert_array_equal(f(jnp.zeros(8)), np.full(8, 3.0))


def test_closed_over_ref_outside_jit_uses_its_value_now():
  c = jax.new_ref(jnp.full(2, 3.0))
  g = jax.grad(lambda x: (x * c[...]).sum())
  np.testing.assert_array_equal(g(jnp.ones(2)), [3, 3])
  c[...] = jnp.full(2, 4.0)
  np.testing.assert_array_equal(g(jnp.ones(2)), [4, 4])


def test_disable_jit_runs_on_the_ref():
  r = jax.new_ref(jnp.zeros(2))
  f = jax.jit(lambda ref: ref.__setitem__(..., ref[...] + 1))
  with jax.disable_jit():
    f(r)
  f(r)
  np.testing.assert_array_equal(r[...], [2, 2])


def test_bad_input():
  r = jax.new_ref(jnp.zeros(4))
  with pytest.raises(jax.PartixError, match=r"\[Ref.__setitem__\].*shape \(3,\)"):
    r[...] = jnp.ones(3)
  with pytest.raises(jax.PartixError, match=r"\[Ref.__setitem__\].*dtype int32"):
    r[...] = jnp.ones(4, jnp.int32)
  with pytest.raises(jax.PartixError, match=r"\[Ref.__setitem__\].*dtype int32"):
    r[0] = 1  # a Python int into a float Ref: refused, as JAX's
  with pytest.raises(jax.PartixError, match=r"\[Ref.__setitem__\] cannot store a Ref"):
    r[...] = r
  with pytest.raises(jax.PartixError, match=r"\[Ref.__setitem__\] index 9"):
    r[9] = 1.0
  with pytest.raises(jax.PartixError, match=r"\[new_ref\] 'abc'"):
    jax.new_ref("abc")
  with pytest.raises(jax.PartixError, match=r"\[new_ref\] None"):
    jax.new_ref(None)
  with pytest.raises(jax.PartixError, match=r"\[freeze\] .* is not a jax.Ref"):
    jax.freeze(jnp.ones(2))
  with pytest.raises(jax.PartixError, match=r"\[grad\] argument is a jax.Ref"):
    jax.grad(lambda x: x[...].sum())(r)
  with pytest.raises(jax.PartixError, match=r"\[vmap\] the same Ref is passed twice"):
    jax.vmap(lambda x, y: x[...] + y[...])(r, r)
  with pytest.raises(jax.PartixError, match=r"\[Ref\] .* not an array"):
    np.asarray(r)


def test_bad_use_under_jit(mesh_x):
  r = jax.new_ref(jnp.zeros(2))
  with pytest.raises(jax.PartixError, match=r"\[jit\] the function returned"):
    jax.jit(lambda x: jax.new_ref(x))(jnp.ones(2))
  with pytest.raises(jax.PartixError, match=r"\[jit\] the function returned a Ref"):
    jax.jit(lambda ref: ref)(r)
  with pytest.raises(jax.PartixError, match=r"\[jit\] the same Ref"):
    jax.jit(lambda a, b: a[...] + b[...])(r, r)
  with pytest.raises(jax.PartixError, match=r"\[jit\] static argument 1 holds a Ref"):
    jax.jit(lambda x, k: x, static_argnums=1)(jnp.ones(2), r)
  with pytest.raises(jax.PartixError, match=r"passed as an argument and also read"):
    jax.jit(lambda a: a[...] + r[...])(r)
  c = jax.new_ref(jnp.ones(2))
  with pytest.raises(jax.PartixError, match=r"\[Ref.__setitem__\] cannot write into"):
    jax.grad(lambda x: (c.__setitem__(..., x), x.sum())[1])(jnp.ones(2))

  def writes_closed(x):
    r8[...] = x
    return x
  r8 = jax.new_ref(jnp.zeros(8))
  with pytest.raises(jax.PartixError, match=r"inside a shard_map body it was not passed to"):
    jax.jit(jax.shard_map(writes_closed, mesh=mesh_x, in_specs=P(), out_specs=P()))(
        jnp.ones(8))
  np.testing.assert_array_equal(r[...], [0, 0])  # nothing half-written


def test_eager_shard_map_cannot_make_a_ref(mesh_x):
  def f(x):
    return jax.freeze(jax.new_ref(x))
  with pytest.raises(jax.PartixError, match="Eager shard_map cannot return a `jax.Ref`"):
    jax.shard_map(f, mesh=mesh_x, in_specs=P("x"), out_specs=P("x"))(jnp.arange(8.0))
  out = jax.shard_map(jax.jit(f), mesh=mesh_x, in_specs=P("x"), out_specs=P("x"))(
      jnp.arange(8.0))
  np.testing.assert_array_equal(out, np.arange(8))


def test_eager_shard_map_with_refs_traces_once(mesh_x):
  traces = []

  def body(x_ref, y):
    traces.append(1)
    x_ref[...] += y

  r = jax.new_ref(jax.device_put(jnp.zeros(8), NamedSharding(mesh_x, P("x"))))
  f = jax.shard_map(body, mesh=mesh_x, in_specs=P("x"), out_specs=None)
  for _ in range(3):
    f(r, jnp.ones(8))
  np.testing.assert_array_equal(r[...], np.full(8, 3.0))
  assert len(traces) == 1
  assert list(jax.new_ref(jnp.arange(3))) == [0, 1, 2]


def test_unsafe_buffer_pointer_is_the_values():
  r = jax.new_ref(jnp.arange(3.0))
  assert r.unsafe_buffer_pointer() == r[...].unsafe_buffer_pointer()
  assert isinstance(r.unsafe_buffer_pointer(), int)


def test_vmap_over_ref_arguments():
  # JAX's array-refs page: a Ref mapped along an axis is written one slice per example.
  def dist(x, y, out_ref):
    assert x.ndim == y.ndim == 1 and out_ref.ndim == 0
    out_ref[...] = jnp.sum((x - y) ** 2)
  vecs = jnp.arange(12.0).reshape(3, 4)
  v = np.arange(12.0).reshape(3, 4)
  want = ((v[:, None, :] - v[None, :, :]) ** 2).sum(-1)
  out_ref = jax.new_ref(jnp.zeros((3, 3)))
  jax.vmap(jax.vmap(dist, (0, None, 0)), (None, 0, 0))(vecs, vecs, out_ref)
  np.testing.assert_array_equal(np.asarray(out_ref[...]), want)
  # Under jit, with the Ref a jit argument.
  r2 = jax.new_ref(jnp.zeros((3, 3)))
  jax.jit(lambda a, r: jax.vmap(jax.vmap(dist, (0, None, 0)), (None, 0, 0))(a, a, r))(vecs, r2)
  np.testing.assert_array_equal(np.asarray(r2[...]), want)
  # A Ref not mapped (in_axes None) may be read; a per-example write into it is refused.
  scale = jax.new_ref(jnp.full((), 2.0))
  got = jax.vmap(lambda x, s: x * s[...], (0, None))(vecs, scale)
  np.testing.assert_array_equal(np.asarray(got), v * 2)

  def write(x, s):
    s[...] = x.sum()
  with pytest.raises(jax.PartixError):
    jax.vmap(write, (0, None))(vecs, scale)
  assert float(scale[...]) == 2.0
