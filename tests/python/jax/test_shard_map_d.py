"""Mirrors JAX 0.10.2's tests/shard_map_test.py::ShardMapTest, methods 193-256 in file order
(test_no_mesh_context_error .. test_check_vma_false_unreduced_fwd_psum_on_bwd).

JAX's `jtu.with_explicit_mesh(sizes, names, axis_types)` is `explicit_mesh` below: a mesh of the
first devices (Explicit axes unless told otherwise), set as the current mesh for the case. JAX's
`x.aval.mat` (a tracer's type) is read here through the public `jax.typeof(x).mat`."""
import contextlib
from functools import partial

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
from jax.sharding import get_abstract_mesh

from conftest import create_mesh, assert_all_close, assert_arrays_equal

JAX_CLASS = "tests/shard_map_test.py::ShardMapTest"
LEFT_OUT = {
    "test_pvary_no_op_one_sized_mesh_axis":
        "asserts only that the jaxpr text of jit(pcast) has no 'pvary' equation (jaxpr "
        "internals), under a private config flag",
    "test_check_vma_false_reduced_fwd_no_psum_on_bwd":
        "calls the private jax._src.core.reduced_vary_cast (no public API does that cast with "
        "check_vma=False) and asserts the jaxpr text has no 'psum'",
}


@contextlib.contextmanager
def explicit_mesh(sizes, names, axis_types=None):
  """jtu.with_explicit_mesh: create_mesh (Explicit axes by default) set as the current mesh."""
  if isinstance(names, str):
    names = (names,)
  if axis_types is None:
    axis_types = (AxisType.Explicit,) * len(names)
  mesh = create_mesh(sizes, names, axis_types=axis_types)
  with jax.set_mesh(mesh):
    yield mesh


@contextlib.contextmanager
def config_flag(name, value, default):
  """JAX's `with config.<flag>(value):`, through the public jax.config.update."""
  old = getattr(jax.config, name, default)
  jax.config.update(name, value)
  try:
    yield
  finally:
    jax.config.update(name, old)


def assert_equal(x, y):
  """self.assertArraysEqual as JAX runs it (x64 off): the expected y's 64-bit numpy dtypes count
  as their 32-bit canonical ones."""
  y = np.asarray(y)
  canon = {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32,
           np.dtype(np.uint64): np.uint32, np.dtype(np.complex128): np.complex64}
  assert_arrays_equal(x, y.astype(canon.get(y.dtype, y.dtype)))


def varying(x):
  return jax.typeof(x).mat.varying


def test_no_mesh_context_error():
  # No mesh= and no current mesh: shard_map says the mesh is missing.
  with pytest.raises(Exception, match="mesh"):
    jax.shard_map(lambda x: x, in_specs=P(), out_specs=P())(np.arange(8))


def test_pvary_in_shmap_of_grad():
  mesh = create_mesh((2,), "x")

  def f(x):
    val, grad = jax.value_and_grad(lambda x: jnp.mean(x ** 2))(x)
    return jnp.atleast_1d(val), jnp.atleast_1d(grad)

  val, grad = jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(jnp.ones(2,))
  # JAX only checks this runs; its values are mean(1**2) = 1 and d/dx = 2 per device.
  assert_equal(val, np.ones(2, np.float32))
  assert_equal(grad, np.full(2, 2., np.float32))


def test_jnp_histogram():
  with explicit_mesh((2,), ("data",)):
    np_x = np.arange(8 * 4 * 2).reshape(8, 4, 2)
    x = jax.device_put(np_x, P("data"))

    def f(x, bin_edges):
      hist, _ = jax.vmap(lambda q: jnp.histogram(q, bins=bin_edges))(x)
      return hist

    bin_edges = jnp.histogram_bin_edges(x, bins=100)
    g = jax.shard_map(f, in_specs=(P("data"), P()), out_specs=P("data"))
    # JAX checks these run; the histograms are numpy's, row by row.
    expected = np.stack([np.histogram(r, bins=np.asarray(bin_edges))[0] for r in np_x])
    for out in (g(x, bin_edges), jax.jit(g)(x, bin_edges)):
      assert out.shape == (8, 100)
      np.testing.assert_array_equal(np.asarray(out), expected)


def _mean_sq(x):
  return jnp.mean(x ** 2)


def _lin_then_transpose(p, t, cast):
  if cast:
    p = jax.lax.pcast(p, "x", to="varying")  # makes p varying like t
  _, fwd = jax.linearize(_mean_sq, p)
  out_t = fwd(t)
  return jax.linear_transpose(fwd, p)(out_t)


def test_shmap_linearize_and_linearize_transpose_error():
  mesh = create_mesh((2,), ("x",))
  p = jnp.array([1.])
  # Linearizing at an invariant primal and applying to a varying tangent: JAX says to pcast.
  with pytest.raises(Exception,
                     match=r"applying `jax.lax.pcast\(..., \('x',\).*to the primal value passed"):
    jax.shard_map(partial(_lin_then_transpose, p, cast=False), mesh=mesh, in_specs=P("x"),
                  out_specs=P("x"))(jnp.ones((2,)))
  out = jax.shard_map(partial(_lin_then_transpose, p, cast=True), mesh=mesh, in_specs=P("x"),
                      out_specs=P("x"))(jnp.ones((2,)))
  assert_equal(out[0], np.full(2, 4., np.float32))  # JAX's value


def test_argmax_pvary():
  with explicit_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2):
    @jax.shard_map(in_specs=P("x", "y"), out_specs=P("x", "y"))
    def argmax_impl(x):
      return x.argmax(axis=-1, keepdims=1)

    x = jax.random.normal(jax.random.key(0), (1024, 1024))
    out = argmax_impl(x)
    # JAX checks it runs; each (512, 512) block gives its rows' argmax.
    blocks = np.asarray(x).reshape(1024, 2, 512)
    assert out.shape == (1024, 2)
    np.testing.assert_array_equal(np.asarray(out), blocks.argmax(axis=-1))


@pytest.mark.parametrize("jit", [False, True])
def test_smap(jit):
  mesh = create_mesh((2, 2, 2), ("x", "y", "z"))
  np_inp = np.arange(32.).reshape(4, 8)
  arr = jax.device_put(np_inp, NamedSharding(mesh, P("x", "y")))

  def g(x):
    assert get_abstract_mesh().manual_axes == ("x", "y")
    assert get_abstract_mesh().auto_axes == ("z",)
    assert varying(x) == {"x", "y"}
    out = x * x
    assert varying(out) == {"x", "y"}
    return out

  def h(x):
    assert get_abstract_mesh().manual_axes == ("x",)
    assert get_abstract_mesh().auto_axes == ("y", "z")
    assert varying(x) == {"x"}
    out = jax.smap(g, in_axes=0, out_axes=0, axis_name="y")(x)
    assert varying(out) == {"x"}
    return out

  def f(x):
    return jax.smap(h, in_axes=0, out_axes=0, axis_name="x")(x)

  if jit:
    f = jax.jit(f)
  with jax.set_mesh(mesh):
    assert_equal(f(arr), np_inp * np_inp)


@pytest.mark.parametrize("jit", [False, True])
def test_smap_explicit(jit):
  with explicit_mesh((2, 2, 2), ("x", "y", "z")):
    np_inp = np.arange(32.).reshape(4, 8)
    arr = jax.device_put(np_inp, P("x", "y"))

    def g(x):
      assert get_abstract_mesh().manual_axes == ("x", "y")
      assert get_abstract_mesh().explicit_axes == ("z",)
      assert varying(x) == {"x", "y"}
      out = x * x
      assert varying(out) == {"x", "y"}
      return out

    def h(x):
      assert get_abstract_mesh().manual_axes == ("x",)
      assert get_abstract_mesh().explicit_axes == ("y", "z")
      assert varying(x) == {"x"}
      out = jax.smap(g, in_axes=0, out_axes=0, axis_name="y")(x)
      assert varying(out) == {"x"}
      return out

    def f(x):
      return jax.smap(h, out_axes=0, axis_name="x")(x)  # in_axes inferred from arr

    if jit:
      f = jax.jit(f)
    assert_equal(f(arr), np_inp * np_inp)


@pytest.mark.parametrize("jit", [False, True])
def test_smap_replicated(jit):
  with explicit_mesh((2,), ("x",), axis_types=(AxisType.Auto,)) as mesh:
    @jax.smap(in_axes=None, out_axes=None, axis_name="x")
    def f(x):
      return x * 2

    out = f(np.arange(8))
    assert_equal(out, np.arange(8) * 2)
    assert out.sharding == NamedSharding(mesh, P())


@pytest.mark.parametrize("jit", [False, True])
def test_smap_replicated_sharded(jit):
  with explicit_mesh((2,), ("data",), axis_types=(AxisType.Auto,)) as mesh:
    @jax.smap(in_axes=(None, 0), out_axes=(None, 0), axis_name="data")
    def f(x, y):
      return x * 2, y * 2

    out1, out2 = f(np.arange(8), np.arange(8))
    assert_equal(out1, np.arange(8) * 2)
    assert out1.sharding == NamedSharding(mesh, P())
    assert_equal(out2, np.arange(8) * 2)
    assert out2.sharding == NamedSharding(mesh, P("data"))

    @jax.smap(in_axes=(None, 0), out_axes=0, axis_name="data")
    def g(x, y):
      return x + y

    out = g(np.arange(4), np.arange(8))
    assert out.sharding == NamedSharding(mesh, P("data"))


@pytest.mark.parametrize("jit", [False, True])
def test_smap_auto_error(jit):
  # in_axes left to inference over an Auto axis: JAX raises TypeError.
  with explicit_mesh((2,), ("x",), axis_types=(AxisType.Auto,)):
    with pytest.raises(TypeError, match="in_axes was not specified"):
      jax.smap(lambda x: x * 2, out_axes=0, axis_name="x")(np.arange(4))


@pytest.mark.parametrize("jit", [False, True])
def test_smap_auto_explicit(jit):
  with explicit_mesh((2, 2), ("x", "y"),
                     axis_types=(AxisType.Explicit, AxisType.Auto)) as mesh:
    def f(x):
      assert varying(x) == {"x"}
      return x * 2

    g = jax.smap(f, out_axes=0, axis_name="x")
    g = jax.jit(g) if jit else g
    out = g(jax.device_put(np.arange(4), P("x")))
    assert_equal(out, np.arange(4) * 2)
    assert out.sharding == NamedSharding(mesh, P("x"))

    def f2(x):
      assert varying(x) == {"y"}
      return x * 2

    g = jax.smap(f2, in_axes=0, out_axes=0, axis_name="y")
    g = jax.jit(g) if jit else g
    out = g(jax.device_put(np.arange(4), P("y")))
    assert_equal(out, np.arange(4) * 2)
    assert out.sharding == NamedSharding(mesh, P("y"))


# ---- eager reduced / unreduced ----

def test_eager_reduced_out():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(np.arange(8.), P("x"))

    @jax.shard_map(out_specs=P(reduced={"x"}))
    def f(x):
      return jax.lax.all_gather(x, "x", tiled=True, to="reduced")

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(reduced={"x"}))
    assert_equal(out, np.arange(8.))

    out_g = jax.grad(lambda x: f(x).sum())(arr)
    assert out_g.sharding == NamedSharding(mesh, P("x"))
    assert_equal(out_g, jnp.ones((8,)))


def test_eager_reduced_in():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(np.arange(8.), P(reduced={"x"}))

    @jax.shard_map(out_specs=P("x"))
    def f(x):
      return jax.lax.pcast(x, "x", to="varying")

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P("x"))
    assert_equal(out, np.concatenate([np.arange(8.), np.arange(8.)]))

    out_g = jax.grad(lambda x: f(x).sum())(arr)
    assert out_g.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    expected_g = jax.jit(jax.grad(lambda x: jax.jit(f)(x).sum()))(arr)
    assert_equal(jax.reshard(out_g, P()), jax.reshard(expected_g, P()))


def test_eager_unreduced_out():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(np.arange(8.), P("x"))

    @jax.shard_map(out_specs=P(unreduced={"x"}))
    def f(x):
      return jax.lax.pcast(x, "x", to="unreduced")

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(unreduced={"x"}))
    assert_equal(jax.reshard(out, P()), np.arange(4.) + np.arange(4., 8.))

    out_g = jax.grad(lambda x: f(x).sum())(arr)
    assert out_g.sharding == NamedSharding(mesh, P("x"))
    expected_g = jax.jit(jax.grad(lambda x: jax.jit(f)(x).sum()))(arr)
    assert_equal(out_g, expected_g)

    @jax.shard_map(out_specs=P(unreduced={"x"}))
    def g(x):
      return jnp.sin(jax.lax.pcast(x, "x", to="unreduced"))

    # sin of a partial sum is not a partial sum: JAX raises NotImplementedError.
    with pytest.raises(Exception, match="unreduced rule for sin is not implemented"):
      g(arr)


def test_eager_unreduced_in():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.reshard(jnp.arange(8.), P(unreduced={"x"}))

    @jax.shard_map(out_specs=P("x"))
    def f(x):
      return jax.lax.psum_scatter(x, "x", tiled=True)

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P("x"))
    assert_equal(out, np.arange(8.))

    out_g = jax.grad(lambda x: f(x).sum())(arr)
    assert out_g.sharding == NamedSharding(mesh, P(None, reduced={"x"}))
    assert_equal(out_g, jnp.ones((8,)))


# ---- nested smap ----

@pytest.mark.parametrize("jit", [False, True])
def test_smap_auto_explicit_nest(jit):
  with explicit_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Auto)):
    def g(b):
      assert varying(b) == {"x", "y"}
      return jnp.sin(b)

    def f(a):
      assert varying(a) == {"y"}
      return jax.smap(g, in_axes=1, out_axes=1, axis_name="x")(a * 2)

    np_arr = np.arange(16).reshape(8, 2)
    h = jax.smap(f, in_axes=0, out_axes=0, axis_name="y")
    h = jax.jit(h) if jit else h
    out = h(jax.device_put(np_arr, P("y")))
    assert_all_close(out, np.sin(np_arr * 2).astype(np.float32))  # JAX: runs


@pytest.mark.parametrize("jit", [False, True])
def test_smap_auto_explicit_nest_inner_none(jit):
  with explicit_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Auto)):
    def g(b):
      assert varying(b) == {"y"}
      return jnp.sin(b)

    def f(a):
      assert varying(a) == {"y"}
      # Manual over Explicit 'x' with in_axes inferred: b is unsharded, so None.
      return jax.smap(g, out_axes=1, axis_name="x")(a * 2)

    np_arr = np.arange(16).reshape(8, 2)
    h = jax.smap(f, in_axes=0, out_axes=0, axis_name="y")
    h = jax.jit(h) if jit else h
    h(jax.device_put(np_arr, P("y")))  # JAX checks only that it runs (and the asserts)


@pytest.mark.parametrize("jit", [False, True])
def test_smap_auto_explicit_nest_mesh_call_time(jit):
  with explicit_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Auto)):
    @jax.smap(in_axes=1, out_axes=1, axis_name="x")
    def g(b):
      return jnp.sin(b)

    @jax.smap(in_axes=0, out_axes=0, axis_name="y")
    def f(a):
      assert varying(a) == {"y"}
      return g(a * 2)

    f = jax.jit(f) if jit else f
    np_arr = np.arange(16).reshape(8, 2)
    out = f(jax.device_put(np_arr, P("y")))
    assert_all_close(out, np.sin(np_arr * 2).astype(np.float32))  # JAX: runs


@pytest.mark.parametrize("jit", [False, True])
def test_smap_nested_psum(jit):
  with explicit_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto)):
    @jax.smap(axis_name="x", in_axes=0, out_axes=0)
    def f(x):
      x = jnp.sin(x)

      @jax.smap(axis_name="y", in_axes=0, out_axes=None)
      def g(x):
        assert varying(x) == {"x", "y"}
        x = jax.lax.psum(x, "y")
        assert varying(x) == {"x"}
        return x

      x = g(x)
      assert varying(x) == {"x"}
      return x

    f = jax.jit(f) if jit else f
    f(jnp.arange(4.))  # the asserts are in f


def test_linalg_inv():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.random.uniform(jax.random.key(123), shape=(4, 5, 5), out_sharding=P("x"))

    @jax.shard_map(out_specs=P("x"))
    def f(x):
      return jax.lax.map(jnp.linalg.inv, x)

    out = f(arr)
    # JAX checks it runs; the result inverts each matrix.
    assert out.shape == (4, 5, 5)
    assert out.sharding == NamedSharding(mesh, P("x"))
    prod = np.asarray(arr) @ np.asarray(out)
    np.testing.assert_allclose(prod, np.broadcast_to(np.eye(5), prod.shape), atol=1e-3)


def test_mutable_array_arg_basic():
  with explicit_mesh((2,), "x"):
    x_ref = jax.new_ref(jnp.zeros(4, "float32", out_sharding=P("x")))

    @jax.jit
    @jax.shard_map(out_specs=None)
    def f(x_ref):
      x_ref[...] += jax.lax.axis_index("x").astype("float32")

    f(x_ref)
    assert_all_close(x_ref[...], jnp.array([0., 0., 1., 1.]), check_dtypes=False)


def test_mutable_array_internal_basic():
  with explicit_mesh((2,), "x"):
    x = jnp.arange(4, dtype="float32", out_sharding=P("x"))

    @jax.jit
    @jax.shard_map(out_specs=P("x"))
    def f(x):
      x_ref = jax.new_ref(jnp.zeros_like(x))
      x_ref[...] = x
      return x_ref[...]

    assert_all_close(f(x), x, check_dtypes=False)


def test_random_beta_vma():
  mesh = create_mesh((2,), "dp")
  f = jax.shard_map(
      lambda k, a, b: jax.random.beta(jax.lax.pcast(k, ("dp",), to="varying"), a, b),
      mesh=mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=P("dp"))
  res = f(jax.random.key(42), jnp.ones((64, 1)), jnp.ones((64, 1)))
  a, b = res.reshape(2, 32)
  assert_all_close(a, b, rtol=1e-6, atol=1e-6)  # the one key is reused on both devices

  # One key per device, from split keys: runs.
  g = jax.shard_map(lambda k, a, b: jax.random.beta(k[0], a, b), mesh=mesh,
                    in_specs=(P("dp"), P("dp"), P("dp")), out_specs=P("dp"))
  g(jax.random.split(jax.random.key(42), 2), jnp.ones((64, 1)), jnp.ones((64, 1)))
  h = jax.shard_map(lambda k, a, b: jax.random.beta(k[0], a, b), mesh=mesh,
                    in_specs=(P("dp"), P(), P()), out_specs=P("dp"))
  h(jax.random.split(jax.random.key(42), 2), jnp.ones((64, 1)), jnp.ones((64, 1)))


def test_pcast_to_unreduced():
  with explicit_mesh((2, 2), ("x", "y")):
    arr1 = jax.device_put(np.arange(8).reshape(4, 2), P("x", "y"))
    arr2 = jax.device_put(np.arange(8).reshape(2, 4), P("y", None))

    @jax.jit
    @jax.shard_map(out_specs=P("x", unreduced={"y"}))
    def f(x, y):
      return jax.lax.pcast(jnp.dot(x, y), "y", to="unreduced")

    f(arr1, arr2)  # runs

    @jax.jit
    @jax.shard_map(out_specs=P("x", unreduced={"y"}))
    def f2(x, y):
      a = jax.lax.pcast(jnp.dot(x, y), "y", to="unreduced")
      return jax.lax.pcast(a, ("x", "y"), to="reduced")

    # 'x' is varying, not invariant: JAX refuses to make it reduced.
    with pytest.raises(Exception, match="jax.lax.pcast can only accept axis_name which"):
      f2(arr1, arr2)


@pytest.mark.parametrize("out_spec,axis_name,aval_spec", [
    (P("x"), {"x"}, P(None, "y")),
    (P(None, "y"), {"y"}, P("x", None)),
])
def test_partial_manual_explicit_shmap(out_spec, axis_name, aval_spec):
  with explicit_mesh((2, 2), ("x", "y")):
    @jax.shard_map(out_specs=out_spec, axis_names=axis_name)
    def f(x):
      assert jax.typeof(x).sharding.spec == aval_spec  # the other axis stays Explicit
      return x * 2

    arr = jax.device_put(np.arange(16).reshape(8, 2), P("x", "y"))
    out = f(arr)
    out2 = jax.jit(f)(arr)
    assert out.sharding == out2.sharding


def test_axis_index_explicit_mesh_eager_shmap():
  with explicit_mesh((1, 2, 2), ("x", "y", "z")) as mesh:
    def f():
      return jnp.array([jax.lax.axis_index(n) for n in mesh.axis_names])

    # JAX checks these run; the values are JAX's: each device's (x, y, z) index, in order.
    expected = np.array([0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1])
    assert_equal(jax.shard_map(f, out_specs=P(mesh.axis_names))(), expected)
    assert_equal(jax.jit(jax.shard_map(f, out_specs=P(mesh.axis_names)))(), expected)
    # Unchecked P(): device 0's value.
    first = np.array([0, 0, 0])
    assert_equal(jax.shard_map(f, out_specs=P(), check_vma=False)(), first)
    assert_equal(jax.jit(jax.shard_map(f, out_specs=P(), check_vma=False))(), first)


def test_remove_one_sized_mesh_axis_from_vma():
  with config_flag("jax_remove_size_one_mesh_axis_from_type", True, False):
    with explicit_mesh((2, 1), ("x", "y")) as mesh:
      np_inp = np.arange(16).reshape(8, 2)
      arr = jax.device_put(np_inp, P("x", "y"))

      @jax.jit
      @jax.shard_map(in_specs=P("x", "y"), out_specs=P())
      def f(x):
        assert varying(x) == {"x"}  # the size-1 'y' is not in the type
        out = jax.lax.psum(x, "x")
        assert varying(out) == frozenset()
        return out

      out = f(arr)
      assert out.shape == (4, 2)
      assert out.sharding == NamedSharding(mesh, P(None, None))
      assert_equal(out, np_inp[:4, :] + np_inp[4:, :])


def test_varargs_error():
  with explicit_mesh((2,), ("x",)):
    @jax.shard_map(in_specs=jax.P("x"), out_specs=())
    def f(*foos, **kwargs):
      return ()

    # Size 3 does not split 2 ways: a proper error (ValueError in JAX), not an AssertionError.
    with pytest.raises(Exception) as e:
      f(jnp.arange(3.), jnp.arange(3.), jnp.arange(3.))
    assert not isinstance(e.value, AssertionError)


# ---- reduced inputs, unreduced cotangents ----

def test_reduced_vary_automatically_inserted():
  with explicit_mesh((2,), "x") as mesh:
    arr1 = jax.device_put(np.arange(8.).reshape(4, 2), P("x", None))
    arr2 = jax.device_put(np.arange(12.).reshape(2, 6), P(None, None, reduced={"x"}))

    @jax.jit
    @jax.shard_map(in_specs=(P("x", None), P(None, None, reduced={"x"})),
                   out_specs=P("x", None))
    def f(x, y):
      return jnp.dot(x, y)

    out = f(arr1, arr2)
    assert out.sharding == NamedSharding(mesh, P("x", None))
    assert_equal(out, np.arange(8.).reshape(4, 2) @ np.arange(12.).reshape(2, 6))

    out1, out2 = jax.jit(jax.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1)))(arr1, arr2)
    assert out1.sharding == arr1.sharding
    assert out2.sharding == NamedSharding(mesh, P(None, None, unreduced={"x"}))


def test_reduced_vary_automatically_inserted_psum():
  with explicit_mesh((2, 2), ("x", "y")) as mesh:
    arr1 = jax.device_put(np.arange(8.).reshape(4, 2), P("x", "y"))
    arr2 = jax.device_put(np.arange(12.).reshape(2, 6), P("y", None, reduced={"x"}))

    @jax.jit
    @jax.shard_map(in_specs=(P("x", "y"), P("y", None, reduced={"x"})),
                   out_specs=P("x", None))
    def f(x, y):
      assert varying(x) == {"x", "y"}
      assert varying(y) == {"y"}
      assert jax.typeof(y).mat.reduced == {"x"}
      z = jnp.dot(x, y)
      assert varying(z) == {"x", "y"}
      return jax.lax.psum(z, axis_name="y")

    out = f(arr1, arr2)
    assert out.sharding == NamedSharding(mesh, P("x", None))
    assert_equal(out, jnp.dot(arr1, arr2, out_sharding=P("x")))

    out1, out2 = jax.jit(jax.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1)))(arr1, arr2)
    assert out1.sharding == arr1.sharding
    assert out2.sharding == NamedSharding(mesh, P("y", None, unreduced={"x"}))


def test_astype_reduced_fwd_unreduced_bwd_shmap():
  # JAX runs it under numpy_dtype_promotion('standard'), its default.
  with explicit_mesh((2,), "x"):
    inputs = jax.device_put(np.ones((32, 64), dtype=jnp.bfloat16), P("x", None))
    params = jax.device_put(np.ones((64, 64), dtype=jnp.float32), P(None, None, reduced={"x"}))
    targets = jax.device_put(np.ones((32, 64), dtype=jnp.bfloat16), P("x", None))

    @jax.shard_map(in_specs=(P("x", None), P(None, None, reduced={"x"})),
                   out_specs=P("x", None))
    def dot(inputs, params):
      assert jax.typeof(params).mat.reduced == {"x"}
      params = params.astype(jnp.bfloat16)
      assert jax.typeof(params).mat.reduced == {"x"}  # astype keeps reduced
      return jnp.dot(inputs.astype(jnp.bfloat16), params)

    @jax.jit
    def loss_fn(inputs, params, targets):
      return jnp.mean(jnp.sum((dot(inputs, params) - targets) ** 2, axis=-1))

    jax.jit(jax.grad(loss_fn, argnums=1))(inputs, params, targets)  # runs


def test_transpose_unreduced_shmap():
  with explicit_mesh((2,), "x") as mesh:
    np1, np2 = np.arange(8.).reshape(2, 4), np.arange(12.).reshape(2, 6)
    arr1 = jax.device_put(np1, P(reduced={"x"}))
    arr2 = jax.device_put(np2, P(None, "x"))

    @jax.shard_map(out_specs=P(None, "x"))
    def f(x, y):
      return jnp.dot(x.T, y)

    @jax.jit
    def g(x, y):
      return f(x, y).sum()

    out = g(arr1, arr2)
    assert out.sharding == NamedSharding(mesh, P())
    assert_equal(out, (np1.T @ np2).sum())

    out1, out2 = jax.jit(jax.grad(g, argnums=(0, 1)))(arr1, arr2)
    assert out1.sharding == NamedSharding(mesh, P(None, None, unreduced={"x"}))
    assert out2.sharding == arr2.sharding


BINARY = [pytest.param("mul", np.multiply, id="mul"), pytest.param("add", np.add, id="add")]


@pytest.mark.parametrize("name,np_func", BINARY)
def test_one_input_sharded_another_reduced_shmap(name, np_func):
  func = getattr(jax.lax, name)
  with explicit_mesh((2,), "x") as mesh:
    np1, np2 = np.arange(16.), np.arange(8.)
    arr1 = jax.device_put(np1, P("x"))
    arr2 = jax.device_put(np2, P(None, reduced={"x"}))

    @jax.jit
    @jax.shard_map(out_specs=P())
    def f(x, y):
      return jax.lax.psum(func(x, y), "x")

    out = f(arr1, arr2)
    assert out.sharding == NamedSharding(mesh, P(None))
    assert_equal(out, np_func(np1[:8], np2) + np_func(np1[8:], np2))

    @jax.jit
    def g(x, y):
      return f(x, y).sum()

    out1, out2 = jax.jit(jax.grad(g, argnums=(0, 1)))(arr1, arr2)
    assert out1.sharding == NamedSharding(mesh, P("x"))
    assert out2.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))

    arr3 = jax.device_put(np2, P(None))
    ex_out1, ex_out2 = jax.jit(jax.grad(g, argnums=(0, 1)))(arr1, arr3)
    assert_equal(out1, ex_out1)
    assert_equal(jax.reshard(out2, P()), ex_out2)


def test_reduced_pcast_fwd_unreduced_bwd():
  with explicit_mesh((2,), "x") as mesh:
    np1 = np.arange(8.)
    arr = jax.device_put(np1, P(None, reduced={"x"}))

    @jax.jit
    @jax.shard_map(out_specs=P("x"))
    def f(x):
      return jax.lax.pcast(x, "x", to="varying")

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P("x"))
    assert_equal(out, np.concatenate([np1, np1], axis=0))

    @jax.jit
    def g(x):
      return f(x).sum()

    out = jax.jit(jax.grad(g))(arr)
    assert out.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    ex_out = jax.jit(jax.grad(g))(jax.device_put(np1, P(None)))
    assert_equal(jax.reshard(out, P()), ex_out)


@pytest.mark.parametrize("name,np_func", BINARY)
def test_one_input_sharded_another_reduced_shmap_no_psum(name, np_func):
  func = getattr(jax.lax, name)
  with explicit_mesh((2,), "x") as mesh:
    np1, np2 = np.arange(16.), np.arange(8.)
    arr1 = jax.device_put(np1, P("x"))
    arr2 = jax.device_put(np2, P(None, reduced={"x"}))

    @jax.jit
    @jax.shard_map(out_specs=P("x"))
    def f(x, y):
      return func(x, y)

    out = f(arr1, arr2)
    assert out.sharding == NamedSharding(mesh, P("x"))
    for s, e in zip(out.addressable_shards, [np_func(np1[:8], np2), np_func(np1[8:], np2)]):
      assert_equal(s.data, e)

    @jax.jit
    def g(x, y):
      return f(x, y).sum()

    out1, out2 = jax.jit(jax.grad(g, argnums=(0, 1)))(arr1, arr2)
    assert out1.sharding == NamedSharding(mesh, P("x"))
    assert out2.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))

    arr3 = jax.device_put(np2, P(None))
    ex_out1, ex_out2 = jax.jit(jax.grad(g, argnums=(0, 1)))(arr1, arr3)
    assert_equal(out1, ex_out1)
    assert_equal(jax.reshard(out2, P()), ex_out2)


def test_split_with_unused_result_in_shardmap():
  with explicit_mesh((2,), "x"):
    arr = jax.device_put(jnp.ones(8), P("x"))

    @jax.shard_map(in_specs=P("x"), out_specs=P("x"))
    def f(x):
      a, _ = jnp.split(x, 2, axis=0)  # one result unused
      return a

    def g(x):
      return (0.1 * f(x).mean(keepdims=True)).squeeze(0)

    out = jax.jit(jax.grad(g))(arr)
    # JAX checks it runs; its gradient is 0.1/4 on each device's first half, 0 elsewhere.
    assert_all_close(out, np.array([.025, .025, 0, 0, .025, .025, 0, 0], np.float32))


def test_shmap_primal_type_match_ct_type():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(np.arange(8.), P("x"))

    @jax.jit
    @jax.shard_map(in_specs=P("x"), out_specs=P("x"))
    def f(x):
      return x * 2

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P("x"))
    out_g = jax.jit(jax.grad(lambda x: f(x).sum()))(arr)
    assert out_g.sharding == NamedSharding(mesh, P("x"))
    assert_equal(out, np.arange(8.) * 2)
    assert_equal(out_g, np.full(8, 2.))


def test_mix_manual_explicit_partial():
  with explicit_mesh((2, 2), ("x", "y")) as mesh:
    np_arr = np.arange(16).reshape(8, 2)
    arr = jax.device_put(np_arr, P(("x", "y"), None))

    @jax.jit
    @jax.shard_map(out_specs=P("x"), axis_names={"x"})
    def f(x):
      assert x.shape == (4, 2)
      assert jax.typeof(x).sharding.spec == P("y", None)  # 'y' stays Explicit inside
      assert varying(x) == {"x"}
      return x * 2

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(("x", "y"), None))
    assert_equal(out, np_arr * 2)


@jax.custom_vjp
def _identity_zero_ct(x):
  return x


# The backward gives a None (symbolic zero) cotangent.
_identity_zero_ct.defvjp(lambda x: (x, None), lambda _, g: (None,))


def test_zero_cotangent_sharding():
  with explicit_mesh((2,), ("x",)):
    @jax.shard_map(out_specs=jax.P("x"), check_vma=False)
    def f(x):
      return _identity_zero_ct(x)

    x = jax.device_put(jnp.arange(8.), jax.P("x"))
    # JAX checks these run; the gradient is zero.
    assert_equal(jax.grad(lambda x: f(x).sum())(x), np.zeros(8, np.float32))
    assert_equal(jax.jit(jax.grad(lambda x: f(x).sum()))(x), np.zeros(8, np.float32))


def test_vmap_shmap_psum():
  with explicit_mesh((2, 2), ("x", "y")) as mesh:
    np_arr = np.arange(16).reshape(2, 8)
    arr = jax.device_put(jnp.arange(16).reshape(2, 8), P("x", "y"))

    @jax.shard_map(in_specs=P("y"), out_specs=P(None))
    def f(x):
      return jax.lax.psum(x, axis_name="y")

    expected = np_arr[:, :4] + np_arr[:, 4:]  # JAX's values
    out = jax.vmap(f)(arr)
    assert out.sharding == NamedSharding(mesh, P("x", None))
    assert_equal(out, expected.astype(np.int32))
    out = jax.jit(jax.vmap(f))(arr)
    assert out.sharding == NamedSharding(mesh, P("x", None))
    assert_equal(out, expected.astype(np.int32))


def test_shmap_empty_mesh_error():
  mesh = Mesh(np.empty((), dtype=object), ())  # JAX's empty_concrete_mesh

  @jax.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  def f(x):
    return x

  with pytest.raises(ValueError, match="shard_map requires a non-empty mesh"):
    f(jnp.arange(8))


def test_psum_reduced_input():
  with explicit_mesh((2, 2), ("x", "y")) as mesh:
    arr = jax.device_put(np.arange(32.).reshape(8, 4), P("x", "y"))

    @jax.shard_map(out_specs=P(reduced={"y"}))
    def f(x):
      seq_x = jax.lax.all_gather(x, "y", axis=1, tiled=True, to="reduced")
      return jax.lax.psum(jnp.sum(seq_x), "x")

    out = jax.jit(f)(arr)
    assert out.sharding == NamedSharding(mesh, P(reduced={"y"}))

    gout = jax.jit(jax.grad(f))(arr)
    assert gout.sharding == NamedSharding(mesh, P("x", "y"))
    assert_equal(gout, jax.jit(jax.grad(jnp.sum))(arr))


def test_axis_index_unmapped():
  with explicit_mesh((2,), "x"):
    arr = np.arange(8, dtype=np.int32)

    @jax.vmap
    def f(x):
      return jax.lax.axis_index("x")

    out = jax.jit(jax.shard_map(f, in_specs=P(), out_specs=P(), check_vma=False))(arr)
    assert_equal(out, np.zeros_like(arr, dtype=np.int32))


# ---- unreduced <-> replicated / sharded bitcasts ----

@pytest.mark.parametrize("grad", [True, False])
def test_replicated_unreduced_bitcast_check_vma_false(grad):
  with explicit_mesh((2,), "x") as mesh:
    np_arr = np.arange(8.)
    arr = jax.device_put(np_arr, P())

    @jax.jit
    @jax.shard_map(in_specs=P(), out_specs=P(unreduced={"x"}), check_vma=False)
    def f(x):
      return x

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    for s in out.addressable_shards:
      assert_equal(s.data, np_arr)  # each device's partial sum is the whole value
    if grad:
      out_g = jax.jit(jax.grad(lambda x: jax.reshard(f(x), P()).sum()))(arr)
      assert out_g.sharding == NamedSharding(mesh, P(None))

    @jax.jit
    @jax.shard_map(in_specs=P(unreduced={"x"}), out_specs=P(), check_vma=False)
    def g(x):
      assert jax.typeof(x).mat.unreduced == frozenset()
      return x

    out2 = g(out)
    assert out2.sharding == NamedSharding(mesh, P(None))
    for s in out2.addressable_shards:
      assert_equal(s.data, np_arr)
    if grad:
      out_g = jax.jit(jax.grad(lambda x: g(x).sum()))(out)
      assert out_g.sharding == NamedSharding(mesh, P(None, reduced={"x"}))


def test_unreduced_replicated_bitcast():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(np.arange(4), P("x"))

    @jax.jit
    @jax.shard_map(in_specs=P("x"), out_specs=P(unreduced={"x"}))
    def f(x):
      return x

    out = f(arr)
    assert out.shape == (2,)  # each device's block is a partial sum of a (2,) value
    assert out.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    for o, a in zip(out.addressable_shards, arr.addressable_shards):
      assert_equal(o.data, a.data)

    @jax.jit
    @jax.shard_map(in_specs=P(unreduced={"x"}), out_specs=P())
    def g1(x):
      return jax.lax.psum(x, "x")

    out2 = g1(out)
    assert out2.shape == (2,)
    assert out2.sharding == NamedSharding(mesh, P(None))
    for s in out2.addressable_shards:
      assert_equal(s.data, np.array([2, 4], dtype=s.data.dtype))

    @jax.jit
    @jax.shard_map(in_specs=P(unreduced={"x"}), out_specs=P(), check_vma=False)
    def g2(x):
      return x

    out3 = g2(out)
    assert out3.shape == (2,)
    assert out3.sharding == NamedSharding(mesh, P(None))
    for o, a in zip(out3.addressable_shards, arr.addressable_shards):
      assert_equal(o.data, a.data)


@pytest.mark.parametrize("grad", [True, False])
def test_sharded_unreduced_roundtrip_check_vma_false(grad):
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(np.arange(4.), P("x"))

    @jax.jit
    @jax.shard_map(in_specs=P("x"), out_specs=P(unreduced={"x"}), check_vma=False)
    def f(x):
      return x

    out = f(arr)
    assert out.shape == (2,)  # the global shape shrinks from (4,) to (2,)
    assert out.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    for o, a in zip(out.addressable_shards, arr.addressable_shards):
      assert_equal(o.data, a.data)
    if grad:
      out_g = jax.jit(jax.grad(lambda x: jax.reshard(f(x), P()).sum()))(arr)
      assert out_g.sharding == NamedSharding(mesh, P("x"))

    @jax.jit
    @jax.shard_map(in_specs=P(unreduced={"x"}), out_specs=P("x"), check_vma=False)
    def g(x):
      return x

    out2 = g(out)
    assert out2.shape == (4,)  # and grows back to (4,)
    assert out2.sharding == NamedSharding(mesh, P("x"))
    for o, a in zip(out2.addressable_shards, arr.addressable_shards):
      assert_equal(o.data, a.data)
    if grad:
      out_g = jax.jit(jax.grad(lambda x: g(x).sum()))(out)
      assert out_g.sharding == NamedSharding(mesh, P(None, reduced={"x"}))


def test_pvary_eager():
  with explicit_mesh((2,), "x") as mesh:
    inp = np.arange(8.)

    def f(x):
      return jax.lax.pcast(x, "x", to="varying")

    f_shmap = jax.shard_map(f, in_specs=P(), out_specs=P("x"))
    out = f_shmap(inp)
    assert_equal(out, np.concatenate([inp, inp]).astype(np.float32))
    assert out.sharding == NamedSharding(mesh, P("x"))

    out_g = jax.jit(jax.grad(lambda x: f_shmap(x).sum()))(inp)
    assert_equal(out_g, np.full(8, 2., np.float32))  # JAX checks it runs; its value

    # JAX: "pvary should be called under jax.shard_map".
    with pytest.raises(Exception, match="shard_map"):
      f(inp)


def test_pvary_explicit_axes_error():
  with explicit_mesh((2, 2), ("x", "y")):
    @jax.jit
    @jax.shard_map(in_specs=P(), out_specs=P("x"), axis_names={"x"}, check_vma=False)
    def f(x):
      return jax.lax.pcast(x, "y", to="varying")

    with pytest.raises(Exception, match="Found an unbound axis name"):  # NameError in JAX
      f(np.arange(8))


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
def test_slice_oob_shmap(axis_type):
  # (JAX's sharding checks compare axis_type with a tuple, so they never run: shapes only.)
  mesh = create_mesh((2,), "x", axis_types=(axis_type,))
  with jax.set_mesh(mesh):
    arr = jax.device_put(jnp.ones((32, 32)), P(None, "x"))

    def f(x):
      return x[:, 100:116]  # past the end: empty

    out = jax.jit(jax.shard_map(f, in_specs=P(None, "x"), out_specs=P(None, "x")))(arr)
    assert out.shape == (32, 0)
    out = jax.jit(f)(arr)
    assert out.shape == (32, 0)


def test_zero_unreduced():
  with explicit_mesh((2,), "x") as mesh:
    @jax.shard_map(out_specs=jax.P(reduced={"x"}))
    def f(x):
      return _identity_zero_ct(x)

    arr = jax.device_put(jnp.arange(8.), jax.P(reduced={"x"}))
    out = jax.jit(jax.grad(lambda x: f(x).sum()))(arr)
    assert out.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))


def test_unreduced_bwd_manual_reshard_op_shardy():
  with explicit_mesh((1, 2, 1), ("x", "y", "z")) as mesh:
    w = jax.device_put(np.ones((4, 32, 16)), P(None, None, "z", reduced={"x", "y"}))
    x = jax.device_put(np.ones((2, 2, 32)), P("y"))

    @jax.shard_map(out_specs=P("y"))
    def f(x, w):
      return jnp.einsum("btd,edh->bth", x, w)

    def loss(x, w):
      return f(x, jax.reshard(w, P())).sum()

    x_bar, w_bar = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    assert x_bar.sharding == NamedSharding(mesh, P("y", None, None))
    assert w_bar.sharding == NamedSharding(mesh, P(None, None, "z", unreduced={"x", "y"}))


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto])
def test_vmap_shmap_spmd_axis_name_scalar(axis_type):
  mesh = create_mesh((2, 2), ("x", "y"), axis_types=(axis_type,) * 2)
  with jax.set_mesh(mesh):
    arr = jax.device_put(jnp.ones((2, 4)), P("x", "y"))
    arr2 = jax.device_put(jnp.ones((2,)), P())

    @jax.jit
    @partial(jax.vmap, in_axes=(0, None), spmd_axis_name="x")
    @jax.shard_map(in_specs=(P("y"), P()), out_specs=P("y"))
    def f(x, y):
      return x * y

    @jax.jit
    @partial(jax.vmap, spmd_axis_name="x")
    @jax.shard_map(in_specs=P("y"), out_specs=P("y"))
    def g(x):
      return x * 2

    # JAX checks these run; the values and shardings are JAX's.
    out = f(arr, arr2)
    assert_equal(out, np.ones((2, 4), np.float32))
    assert out.sharding == NamedSharding(mesh, P("x", "y"))
    out = g(arr)
    assert_equal(out, np.full((2, 4), 2., np.float32))
    assert out.sharding == NamedSharding(mesh, P("x", "y"))


def test_mul_shmap_unreduced():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(jnp.arange(8.), P(unreduced={"x"}))
    arr2 = jax.device_put(jnp.arange(8.), P(reduced={"x"}))

    @jax.jit
    @jax.shard_map(out_specs=P(unreduced={"x"}))
    def f(x, y):
      return (x * y).sum()

    out1, out2 = jax.jit(jax.grad(f, argnums=(0, 1)))(arr, arr2)
    assert out1.sharding == NamedSharding(mesh, P(None, reduced={"x"}))
    assert out2.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))


def test_residual_reduced_preserved_via_nospec():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(jnp.arange(8.), P(reduced={"x"}))

    @jax.jit
    @jax.shard_map(out_specs=P(reduced={"x"}))
    def g(x):
      return jax.lax.sin(x).sum()

    out = jax.jit(jax.grad(g))(arr)
    assert out.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))


def test_reshape_reduced_fwd_unreduced_bwd():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(np.arange(8.), P(reduced={"x"}))

    @jax.jit
    @jax.shard_map(out_specs=P(reduced={"x"}))
    def f(x):
      out = jnp.reshape(x, (4, 2))
      assert jax.typeof(out).mat.reduced == {"x"}
      return out

    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(None, None, reduced={"x"}))
    assert_equal(out, np.arange(8.).reshape(4, 2).astype(np.float32))

    out_g = jax.jit(jax.grad(lambda x: f(x).sum()))(arr)
    assert out_g.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    # The unreduced cotangent is all on device 0.
    for s, es in zip(out_g.addressable_shards, [np.ones((8,)), np.zeros((8,))]):
      np.testing.assert_array_equal(np.asarray(s.data), es)

    @jax.jit
    @jax.shard_map(out_specs=P())
    def g(x):
      return jnp.reshape(x, (4, 2))

    expected = jax.jit(jax.grad(lambda x: g(x).sum()))(jax.device_put(np.arange(8.), P()))
    assert_equal(jax.reshard(out_g, P()), expected)


def test_eager_shmap_new_ref():
  with explicit_mesh((2,), "x"):
    x = jax.device_put(np.arange(8), P("x"))

    def f(x):
      return jax.freeze(jax.new_ref(x))

    with pytest.raises(Exception, match="Eager shard_map cannot return a `jax.Ref`"):
      jax.shard_map(f, out_specs=P("x"), check_vma=False)(x)
    # Under jit, new_ref + freeze returns a plain array.
    out = jax.shard_map(jax.jit(f), out_specs=P("x"), check_vma=False)(x)
    assert_equal(out, x)


def test_full_like_pvary_existing():
  with explicit_mesh((2,), "x"):
    @jax.shard_map(out_specs=P("x"))
    def f():
      res = jax.lax.pcast(jnp.array([10, 11]), "x", to="varying")
      fill_value = jax.lax.pcast(jnp.array(-1), "x", to="varying")
      return jnp.full_like(res, fill_value)

    # JAX checks these run; its value is -1 everywhere.
    assert_equal(f(), np.full(4, -1, np.int32))
    assert_equal(jax.jit(f)(), np.full(4, -1, np.int32))


def test_mat_invarying():
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(np.arange(8), P())
    assert jax.typeof(arr).mat.invarying(mesh) == frozenset()

    @jax.jit
    @jax.shard_map(out_specs=P())
    def f(x):
      am = get_abstract_mesh()
      assert jax.typeof(x).mat.invarying(am) == {"x"}
      out = x * 2
      assert jax.typeof(out).mat.invarying(am) == {"x"}
      return out

    f(arr)


def test_repeat_shmap_vmap_spmd_axis_names():
  mesh = create_mesh((4, 2), ("x", "y"))
  arr1 = np.arange(8).reshape((4, 2))
  arr2 = np.arange(8).reshape((4, 2))

  @jax.jit
  @partial(jax.vmap, spmd_axis_name="x")
  @jax.shard_map(mesh=mesh, in_specs=(P("y"), P("y")), out_specs=P("y"))
  def f(x, y):
    return jnp.repeat(x, y, total_repeat_length=10)

  out = f(arr1, arr2)
  # JAX checks it runs; its result: each (1,) block repeated into 10 (its value even for 0
  # repeats), the blocks of a row side by side.
  assert out.shape == (4, 20)
  assert_equal(out, np.repeat(np.arange(8), 10).reshape(4, 20).astype(np.int32))


@pytest.mark.parametrize("jit", [True, False])
def test_no_auto_pcast_config(jit):
  with explicit_mesh((2,), "i"):
    @jax.smap(in_axes=(0, None), out_axes=0, axis_name="i")
    def f(x, y):
      return x * y

    f = jax.jit(f) if jit else f
    x = jax.device_put(jnp.zeros((2, 2)), jax.P("i", None))
    y = jax.device_put(jnp.zeros((2, 2)), jax.P())
    # Without automatic pcast, varying * invariant is a type error.
    with pytest.raises(Exception, match="requires varying manual axes to match"):
      with config_flag("jax_auto_pcast", False, True):
        f(x, y)


def test_nested_shmap_innermost_no_axis_names():
  with explicit_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AxisType.Auto,) * 3):
    arr = jnp.ones((4,))

    def h(x):  # manual over the rest of the mesh ('z')
      return jax.shard_map(lambda y: y * 2, in_specs=P(), out_specs=P())(x)

    def g(x):
      return jax.shard_map(h, in_specs=P(), out_specs=P(), axis_names={"y"})(x)

    @jax.jit
    def f(x):
      return jax.shard_map(g, in_specs=P(), out_specs=P(), axis_names={"x"})(x)

    assert_equal(f(arr), arr * 2)


def test_check_vma_false_unreduced_fwd_psum_on_bwd():
  # JAX also asserts the grad's jaxpr has a psum (jaxpr text, not mirrored): the sharding is.
  with explicit_mesh((2,), "x") as mesh:
    arr = jax.device_put(jnp.arange(8, dtype=np.float32), P(unreduced={"x"}))

    @jax.jit
    @jax.shard_map(in_specs=P(unreduced={"x"}), out_specs=P("x"), check_vma=False)
    def f(x):
      return jax.lax.psum_scatter(x, "x", tiled=True)

    out_g = jax.jit(jax.grad(lambda x: f(x).sum()))(arr)
    assert out_g.sharding == NamedSharding(mesh, P(None, reduced={"x"}))
