"""Mirrors JAX 0.10.2's tests/pjit_test.py::ArrayPjitTest, methods 1 to 100 in file order
(test_pjit_array_single_output .. test_with_sharding_constraint_with_two_meshes).

JAX's private names become their public equivalents: array.ArrayImpl is jax.Array,
`_committed` is `.committed`, `_value` is np.asarray, core.ShapedArray is
jax.ShapeDtypeStruct, make_single_device_sharding is jax.sharding.SingleDeviceSharding and
create_array builds with jax.make_array_from_callback. assertArraysEqual canonicalizes dtypes
(x64 off), so expected host values are compared in their canonical dtype (canon())."""
import logging
import math
from functools import partial

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental.pjit import pjit
from jax.test_util import check_grads
from jax import test_util as jtu
from conftest import create_mesh, with_mesh, assert_all_close, assert_arrays_equal

JAX_CLASS = "tests/pjit_test.py::ArrayPjitTest"

LEFT_OUT = {
    "test_pjit_mixed_device_cache_miss":
        "JAX skips it without a TPU ('Only a bug on TPU'); it counts C++ cache misses",
    "test_pjit_uncommitted_array_multi_devices":
        "builds an uncommitted multi-device array with the private ArrayImpl(committed=False) "
        "constructor; no public API makes one",
    "test_out_sharding_indices_id_cache_hit":
        "asserts hit counts of the private common_devices_indices_map cache",
    "test_abstract_device":
        "JAX skips it unless on TPU v3 (needs a TPU and a CPU mesh together)",
    "test_pjit_inline":
        "checks the jaxpr text for a pjit equation (jaxpr equation internals)",
}

_CANON = {np.dtype(np.int64): np.int32, np.dtype(np.uint64): np.uint32,
          np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}


def canon(x):
  """A host value in the dtype JAX gives it with x64 off (as assertArraysEqual compares)."""
  x = np.asarray(x)
  return x.astype(_CANON.get(x.dtype, x.dtype))


def create_array(global_shape, global_mesh, mesh_axes, global_data=None, dtype=np.float32):
  """pjit_test's create_array: arange data placed with make_array_from_callback."""
  if global_data is None:
    global_data = np.arange(math.prod(global_shape), dtype=dtype).reshape(global_shape)
  sharding = (mesh_axes if isinstance(mesh_axes, jax.sharding.Sharding)
              else NamedSharding(global_mesh, mesh_axes))
  return jax.make_array_from_callback(global_shape, sharding,
                                      lambda idx: global_data[idx]), global_data


def sds(shape, dtype):
  """core.ShapedArray(shape, dtype) as a public abstract value."""
  return jax.ShapeDtypeStruct(shape, dtype)


# JAX's message where arguments, shardings and constraints disagree on the devices; the cases
# whose substance is the disagreement itself assert just the ValueError, those that check how
# the message names the clashing arguments assert this too.
INCOMPATIBLE = r"(?s)Received incompatible devices for jitted computation"


def _check_shards(out, expected, shard_shape):
  assert out.addressable_shards[0].data.shape == shard_shape
  for s in out.addressable_shards:
    assert len(s.data.devices()) == 1
    assert_arrays_equal(s.data, canon(expected[s.index]))


# ---- outputs, inputs and shardings ----

SINGLE_OUTPUT = [pytest.param(P("x", "y"), (2, 4), id="fully_sharded_output"),
                 pytest.param(P(None), (8, 8), id="fully_replicated_output")]


@pytest.mark.parametrize("out_axis_resources,shard_shape", SINGLE_OUTPUT)
def test_pjit_array_single_output(out_axis_resources, shard_shape):
  mesh = create_mesh((4, 2), ("x", "y"))
  input_array, input_data = create_array((8, 2), mesh, P("x", "y"))
  f = pjit(lambda x: x @ x.T, out_shardings=NamedSharding(mesh, out_axis_resources))
  expected = input_data @ input_data.T
  out = f(input_array)
  assert isinstance(out, jax.Array)
  assert out.committed
  assert out.shape == (8, 8)
  _check_shards(out, expected, shard_shape)
  assert_arrays_equal(np.asarray(out), expected)


@pytest.mark.parametrize("out_axis_resources,shard_shape", SINGLE_OUTPUT)
def test_pjit_array_single_output_with_mesh_context_manager(out_axis_resources, shard_shape):
  mesh = create_mesh((4, 2), ("x", "y"))
  input_array, input_data = create_array((8, 2), mesh, P("x", "y"))
  with mesh:
    f = pjit(lambda x: x @ x.T, out_shardings=NamedSharding(mesh, out_axis_resources))
    expected = input_data @ input_data.T
    out = f(input_array)
    assert isinstance(out, jax.Array)
    assert out.shape == (8, 8)
    _check_shards(out, expected, shard_shape)
    assert_arrays_equal(np.asarray(out), expected)


def test_empty_mesh_to_out_sharding():
  # An out_sharding on the empty mesh is a ValueError naming the empty NamedSharding.
  empty = Mesh(np.empty((), dtype=object), ())
  sharding = jax.NamedSharding(empty, P())
  with pytest.raises(ValueError, match="got an empty NamedSharding"):
    jax.jit(lambda x: x, out_shardings=sharding)(jnp.ones((32,)))


def test_numpy_array_input_assume_fully_replicated():
  mesh = create_mesh((4, 2), ("x", "y"))
  input_data = np.arange(16).reshape((8, 2))
  f = pjit(lambda x: x, out_shardings=NamedSharding(mesh, P("x", "y")))
  out = f(input_data)
  assert isinstance(out, jax.Array)
  assert_arrays_equal(out, canon(input_data))
  for s in out.addressable_shards:
    assert s.data.shape == (2, 1)
    assert_arrays_equal(s.data, canon(input_data[s.index]))


def test_numpy_array_input():
  mesh = create_mesh((4, 2), ("x", "y"))
  input_data = np.arange(16, dtype=np.float32).reshape((8, 2))
  with mesh:
    f = pjit(lambda x: x, in_shardings=NamedSharding(mesh, P(None)),
             out_shardings=NamedSharding(mesh, P("x", "y")))
    out = f(input_data)
    assert isinstance(out, jax.Array)
    for s in out.addressable_shards:
      assert s.data.shape == (2, 1)
      assert_arrays_equal(s.data, input_data[s.index])
    assert_arrays_equal(np.asarray(out), input_data)


def _check_unspecified(out, input_data):
  assert isinstance(out, jax.Array)
  assert isinstance(out.sharding, NamedSharding)
  assert out.shape == (8, 2)
  _check_shards(out, input_data, (2, 1))
  assert_arrays_equal(np.asarray(out), input_data)


def test_unspecified_out_axis_resources():
  # Without out_shardings the output keeps the input's sharding, call after call.
  mesh = create_mesh((4, 2), ("x", "y"))
  input_array, input_data = create_array((8, 2), mesh, P("x", "y"))
  f = pjit(lambda x: x * 2)
  out = f(input_array)
  _check_unspecified(out, input_data * 2)
  out2 = f(out)
  _check_unspecified(out2, input_data * 4)


@pytest.mark.parametrize("mesh_shape,s1_shape,s2_shape,s3_shape,s4_shape", [
    pytest.param((4, 2), (2, 8), (2, 2), (1, 2), (8, 2), id="mesh1"),
    pytest.param((2, 2), (4, 8), (4, 2), (2, 2), (8, 2), id="mesh2"),
    pytest.param((2, 1), (4, 8), (4, 2), (4, 2), (8, 2), id="mesh3"),
])
def test_pjit_array_multi_input_multi_output(mesh_shape, s1_shape, s2_shape, s3_shape,
                                             s4_shape):
  mesh = create_mesh(mesh_shape, ("x", "y"))
  a1, input_data = create_array((8, 2), mesh, P("x", "y"))
  a2, _ = create_array((8, 2), mesh, P("x"))
  a3, _ = create_array((8, 2), mesh, P(("x", "y")))
  a4, _ = create_array((8, 2), mesh, P(None))
  f = pjit(lambda tree: tree)
  out_tree = f((a1 @ a1.T, (a2, (a3 * 2, a4))))
  (out1, out2, out3, out4), _ = jax.tree.flatten(out_tree)
  expected = [(out1, (8, 8), s1_shape, input_data @ input_data.T),
              (out2, (8, 2), s2_shape, input_data),
              (out3, (8, 2), s3_shape, input_data * 2),
              (out4, (8, 2), s4_shape, input_data)]
  for out, shape, shard_shape, value in expected:
    assert isinstance(out, jax.Array)
    assert out.shape == shape
    assert out.addressable_shards[0].data.shape == shard_shape
    for s in out.addressable_shards:
      assert_arrays_equal(s.data, value[s.index])


def test_sds_full_like():
  # zeros_like of a ShapeDtypeStruct keeps its sharding (jax issue 20390).
  mesh = create_mesh((2, 1), ("x", "y"))
  s = NamedSharding(mesh, P("x", "y"))
  x = jax.ShapeDtypeStruct((4, 4), jnp.float32, sharding=s)
  y = jnp.zeros_like(x)
  z = jnp.zeros_like(x, device=y.sharding)
  assert x.sharding == s
  assert y.sharding == s
  assert z.sharding == s


def test_in_axis_resources_mismatch_error():
  mesh = create_mesh((4, 2), ("x", "y"))
  input_array, _ = create_array((8, 2), mesh, P("x", "y"))
  with mesh:
    f = pjit(lambda x: x, in_shardings=NamedSharding(mesh, P("x")))
    # JAX: "Sharding passed to jit does not match the sharding on the respective arg".
    with pytest.raises(ValueError):
      f(input_array)


def test_in_axis_resources_same_as_array_sharding():
  mesh = create_mesh((4, 2), ("x", "y"))
  input_array, input_data = create_array((8, 2), mesh, P("x", "y"))
  with mesh:
    out = pjit(lambda x: x, in_shardings=NamedSharding(mesh, P("x", "y")))(input_array)
    assert isinstance(out, jax.Array)
    assert_arrays_equal(out, input_data)


def test_no_input_output():
  # pjit of a function without arguments or results is created without error.
  def f():
    pass
  assert callable(pjit(f))


def test_array_device_assignment_mismatch_with_mesh():
  mesh = create_mesh((4, 2), ("x", "y"))
  input_array, _ = create_array((8, 2), create_mesh((2, 2), ("x", "y")), P("x", "y"))
  with mesh:
    with pytest.raises(ValueError):  # JAX: incompatible devices for jitted computation
      pjit(lambda x: x)(input_array)


def test_array_lower_compile():
  mesh = create_mesh((4, 2), ("x", "y"))
  a1, input_data = create_array((8, 2), mesh, P("x", "y"))
  a2, _ = create_array((8, 2), mesh, P("x"))
  aval = sds((8, 2), np.float32)
  with mesh:
    f = pjit(lambda x, y, z, a, b, c: (x @ y.T, y, z, a, b, c),
             in_shardings=NamedSharding(mesh, P("x", "y")))
    compiled = f.lower(aval, aval, aval, aval, aval, aval).compile()
    out, *_ = compiled(a1, a1, a1, a1, a1, a1)
    assert isinstance(out, jax.Array)
    assert_arrays_equal(np.asarray(out), input_data @ input_data.T)
    # JAX: "Computation was compiled for input shardings ... that disagree with the
    # shardings ... of arguments passed to it".
    with pytest.raises(ValueError):
      compiled(a2, a2, a2, a2, a2, a2)
  with mesh:
    f = pjit(lambda a: a, in_shardings=NamedSharding(mesh, P("x", "y")))
    compiled = f.lower({"x": aval, "y": {"y1": aval}}).compile()
    compiled({"x": a1, "y": {"y1": a1}})
    with pytest.raises(ValueError):
      compiled({"x": a2, "y": {"y1": a2}})


# ---- typed PRNG keys made from a sharded seed array ----
# prng.random_seed(seeds, impl=threefry) is, through the public API, jax.random.key mapped over
# every seed.

def _make_keys(seeds):
  return jax.vmap(jax.vmap(lambda s: jax.random.key(s, impl="threefry2x32")))(seeds)


def _check_keys(out, input_shape):
  assert jax.dtypes.issubdtype(out.dtype, jax.dtypes.prng_key)
  assert out.shape == input_shape
  jax.random.key_data(out)  # doesn't crash


def test_globally_sharded_key_array_result_8x4_single_device():
  seeds = jnp.arange(32, dtype=np.uint32).reshape((8, 4))
  _check_keys(pjit(_make_keys)(seeds), (8, 4))


def test_globally_sharded_key_array_8x4_multi_device_with_out_sharding():
  mesh = create_mesh((4, 2), ("x", "y"))
  seeds, _ = create_array((8, 4), mesh, P("x", "y"), dtype=np.uint32)
  make_keys = pjit(_make_keys, out_shardings=NamedSharding(mesh, P("x", "y")))
  _check_keys(make_keys(seeds), (8, 4))


def test_globally_sharded_key_array_8x4_multi_device():
  mesh = create_mesh((4, 2), ("x", "y"))
  seeds, _ = create_array((8, 4), mesh, P("x", "y"), dtype=np.uint32)
  _check_keys(pjit(_make_keys)(seeds), (8, 4))


def test_array_device_assignment_mismatch_out_shardings():
  m1 = create_mesh((4, 2), ("x", "y"))
  m2 = create_mesh((2, 2), ("x", "y"))
  a1 = jnp.arange(16).reshape((8, 2))
  with m1:
    with pytest.raises(ValueError):  # JAX: incompatible devices for jitted computation
      pjit(lambda x, y: (x, y), out_shardings=(NamedSharding(m1, P("x", "y")),
                                               NamedSharding(m2, P("x", "y"))))(a1, a1)


def test_array_device_assignment_mismatch_in_and_out_shardings():
  m1 = create_mesh((4, 2), ("x", "y"))
  m2 = create_mesh((2, 2), ("x", "y"))
  a1 = jnp.arange(16).reshape((8, 2))
  with m1:
    with pytest.raises(ValueError):  # JAX: incompatible devices for jitted computation
      pjit(lambda x, y: (x, y), in_shardings=NamedSharding(m2, P("x", "y")),
           out_shardings=NamedSharding(m1, P("x", "y")))(a1, a1)


def test_mixed_inputs():
  # A committed argument whose sharding differs from in_shardings is an error.
  mesh = create_mesh((4, 2), ("x", "y"))
  a1, input_data = create_array((8, 2), mesh, P("x", "y"))
  with mesh:
    f = pjit(lambda x, y: (x, y), in_shardings=NamedSharding(mesh, P(None)))
    # JAX: "Sharding passed to jit does not match the sharding on the respective arg".
    with pytest.raises(ValueError):
      f(input_data, a1)


def test_pjit_array_same_sharding_aot():
  mesh = create_mesh((4, 2), ("x", "y"))
  a1, input_data = create_array((8, 2), mesh, P(None,))
  with mesh:
    f = pjit(lambda x: x, in_shardings=NamedSharding(mesh, P(None,)))
    compiled = f.lower(sds((8, 2), jnp.float32)).compile()
    assert_arrays_equal(compiled(a1), input_data)  # no error


# ---- single-device programs ----

def test_pjit_single_device_sharding_add():
  # Uncommitted inputs give uncommitted outputs, committed ones committed outputs (JAX also
  # counts lowering-cache hits here, a private cache).
  a = np.array([1, 2, 3], dtype=jnp.float32)
  b = np.array([4, 5, 6], dtype=jnp.float32)
  add = pjit(lambda x, y: x + y)
  out = add(a, b)
  assert isinstance(out, jax.Array)
  assert_arrays_equal(out, a + b)
  assert not out.committed
  out2 = add(out, out)
  assert isinstance(out2, jax.Array)
  assert_arrays_equal(out2, 2 * (a + b))
  assert not out2.committed
  c = jax.device_put(a, jax.devices()[0])
  out3 = add(c, c)
  assert_arrays_equal(out3, 2 * c)
  assert out3.committed
  out4 = add(out3, out3)
  assert_arrays_equal(out4, 4 * c)
  assert out4.committed


def test_pjit_single_device_sharding_mul():
  a = jnp.arange(16).reshape((8, 2))
  out = pjit(lambda x: x @ x.T)(a)
  assert isinstance(out, jax.Array)
  assert_arrays_equal(out, a @ a.T)


def test_cpu_bfloat16_to_tpu():
  # A bfloat16 array moved from a CPU device onto a mesh sums under jit (doesn't crash).
  mesh = create_mesh((1,), "x")
  np_inp = np.zeros((8, 2), dtype=jnp.bfloat16)
  arr_cpu = jax.device_put(np_inp, jax.devices("cpu")[0])
  arr_tpu = jax.device_put(arr_cpu, NamedSharding(mesh, P()))
  out = jax.jit(lambda x: jnp.sum(x))(arr_tpu)
  assert float(out) == 0.0


def test_pjit_different_device_recompilation():
  # The same function on arrays committed to two devices gives each its value (JAX also
  # counts two compilations, a private counter).
  if jax.device_count() < 2:
    pytest.skip("Requires 2 or more devices.")
  val1 = jnp.array([1, 2, 3], dtype=jnp.float32)
  a = jax.device_put(val1, jax.devices()[0])
  val2 = jnp.array([4, 5, 6], dtype=jnp.float32)
  b = jax.device_put(val2, jax.devices()[1])
  f = pjit(lambda x: x)
  out1 = f(a)
  out2 = f(b)
  assert_arrays_equal(out1, val1)
  assert_arrays_equal(out2, val2)


def test_grad_of_pjit_single_device_sharding():
  a = jnp.array(16, dtype=jnp.float32)
  f = lambda x: x * 3
  out = jax.grad(pjit(f))(a)
  assert isinstance(out, jax.Array)
  assert_arrays_equal(out, jax.grad(f)(a))


def test_autodiff_with_single_device_sharding():
  # A nested pjit closing over a constant, differentiated to second order.
  h = jnp.arange(4.)
  f = pjit(lambda x: x.sum(1) * h.sum())
  g = pjit(lambda x: f(jnp.sin(x * 4 + 2)))
  check_grads(g, (jnp.arange(16.).reshape((4, 4)) / 100,), order=2)


def test_fast_path_array():
  # An array assembled from per-device buffers on a mesh whose device order is not the
  # devices' order runs through jit with the right values and sharding.
  devices = jax.devices()
  if len(devices) < 8:
    pytest.skip("Test requires 8 global devices.")
  mesh_devices = np.array([[devices[0], devices[2]], [devices[3], devices[1]],
                           [devices[4], devices[6]], [devices[7], devices[5]]])
  shape = (8, 2)
  mesh = jax.sharding.Mesh(mesh_devices, ("x", "y"))
  s = NamedSharding(mesh, P("x", "y"))
  inp_data = np.arange(16, dtype=np.float32).reshape(shape)
  di_map = s.devices_indices_map(shape)
  bufs = [jax.device_put(inp_data[di_map[d]], d) for d in jax.local_devices()[:8]]
  arr = jax.make_array_from_single_device_arrays(shape, s, bufs)
  f = pjit(lambda x: x, out_shardings=s)
  out = f(arr)
  assert out.sharding.is_equivalent_to(arr.sharding, arr.ndim)
  assert_arrays_equal(out, inp_data)
  out2 = f(out)
  assert out2.sharding.is_equivalent_to(out.sharding, out.ndim)
  assert_arrays_equal(out2, inp_data)


def test_array_enabled_non_empty_mesh_with_pspec():
  arr = jnp.array([1, 2, 3])
  # JAX: RuntimeError "pjit requires a non-empty mesh in context ..."
  with pytest.raises(Exception, match=r"(?i)\bmesh\b"):
    pjit(lambda x: x, in_shardings=P("x"))(arr)
  # JAX: TypeError "in_shardings leaf specifications are expected to be PartitionSpec
  # instances or None, but got x"
  with pytest.raises(Exception, match=r"(?s)in_shardings.*\bx\b"):
    pjit(lambda x: x, in_shardings="x")


# ---- uncommitted and committed arguments ----

def test_pjit_uncommitted_array_reshard():
  arr = jnp.array([[1, 2, 3]])
  mesh = create_mesh((4, 2), ("x", "y"))
  with mesh:
    out = pjit(lambda x: x)(arr)
    assert_arrays_equal(out, arr)
    assert len(out.addressable_shards) == 8


def test_pjit_uncommitted_array_in_axis_resources_reshard():
  arr = jnp.arange(16).reshape(8, 2)
  mesh = create_mesh((4, 2), ("x", "y"))
  with mesh:
    out = pjit(lambda x: x, in_shardings=P("x", "y"))(arr)
    assert_arrays_equal(out, arr)
    assert len(out.addressable_shards) == 8
    for s in out.addressable_shards:
      assert_arrays_equal(s.data, np.asarray(arr)[s.index])
      assert s.replica_id == 0


def test_pjit_uncommitted_array_and_committed_array():
  uarr = jnp.arange(16, dtype=np.float32).reshape((8, 2))
  mesh = create_mesh((4, 2), ("x", "y"))
  carr, inp_data = create_array((8, 2), mesh, P("x", "y"))
  with mesh:
    out1, out2 = pjit(lambda x, y: (x, y))(uarr, carr)
    assert_arrays_equal(out1, inp_data)
    assert_arrays_equal(out2, inp_data)
    assert len(out1.addressable_shards) == 8
    assert len(out2.addressable_shards) == 8
    mul_out = pjit(lambda x, y: x @ y.T)(uarr, carr)
    assert mul_out.shape == (8, 8)
    assert len(mul_out.addressable_shards) == 8
  with create_mesh((2, 2), ("x", "y")):
    with pytest.raises(ValueError):  # JAX: incompatible devices for jitted computation
      pjit(lambda x, y: (x, y))(uarr, carr)


def test_pjit_committed_array_different_devices():
  if jax.device_count() < 2:
    pytest.skip("Test requires >= 2 devices")
  a = jax.device_put(np.array([1, 2, 3]), jax.devices()[0])
  b = jax.device_put(np.array([4, 5, 6]), jax.devices()[1])
  with pytest.raises(ValueError, match=INCOMPATIBLE + r". Got argument x of.*<lambda> with "
                     r"shape int.*\[3\] and.*device ids \[0\].*and argument y of.*<lambda> "
                     r"with shape int.*\[3\] and.*device ids \[1\]"):
    pjit(lambda x, y: (x, y))(a, b)


def test_pjit_committed_array_different_devices_variadic_args():
  if jax.device_count() < 2:
    pytest.skip("Test requires >= 2 devices")
  a = jax.device_put(np.array([1, 2, 3]), jax.devices()[0])
  b = jax.device_put(np.array([4, 5, 6]), jax.devices()[1])
  with pytest.raises(ValueError, match=INCOMPATIBLE + r". Got argument x\[0\] of.*<lambda> "
                     r"with shape int.*\[3\] and.*device ids \[0\].*and argument x\[1\] of.*"
                     r"<lambda> with shape int.*\[3\] and.*device ids \[1\]"):
    pjit(lambda *x: x)(a, b)


def test_jit_no_forwarding():
  # A donated argument that is also returned is not forwarded: the input is deleted, the
  # outputs are live. (JAX runs f's jaxpr through the private core.jaxpr_as_fun.)
  mesh = create_mesh((2,), ("x",))
  f = jax.jit(lambda x: (x, x * 2), donate_argnums=(0,))
  x = jax.device_put(jnp.zeros(64, dtype="int32"), NamedSharding(mesh, P()))
  y = f(x)
  assert x.is_deleted()
  assert not y[0].is_deleted()
  assert not y[1].is_deleted()
  assert_arrays_equal(y[0], np.zeros(64, np.int32))
  assert_arrays_equal(y[1], np.zeros(64, np.int32))


PYTREE_MSG = (INCOMPATIBLE + r". Got argument {} of.*<lambda> with shape int.*\[3\] and.*"
              r"device ids \[0\].*and argument {} of.*<lambda> with shape int.*\[8,2\] and.*"
              r"device ids")


def test_pjit_pytree_inp_device_assignment_mismatch():
  # The error names the two clashing arguments by their paths in the pytree.
  mesh = create_mesh((2, 2), ("x", "y"))
  a = jax.device_put(np.array([1, 2, 3]), jax.devices()[0])
  b = jax.device_put(np.array([4, 5, 6]), jax.devices()[1])
  c = jax.device_put(np.arange(16).reshape(8, 2), NamedSharding(mesh, P("x", "y")))
  with pytest.raises(ValueError, match=PYTREE_MSG.format(r"tuple_inp\[0\]",
                                                         r"tuple_inp\[1\]\[0\]")):
    pjit(lambda tuple_inp: tuple_inp)((a, (c, (b))))
  inp = {"d": a, "z": a, "a": {"f": a, "y": b, "b": {"g": c, "c": a}}}
  with pytest.raises(ValueError, match=PYTREE_MSG.format(r"dict_inp\['a'\]\['b'\]\['c'\]",
                                                         r"dict_inp\['a'\]\['b'\]\['g'\]")):
    pjit(lambda dict_inp: dict_inp)(inp)


def test_same_out_sharding_id():
  mesh = create_mesh((4, 2), ("x", "y"))
  arr, inp_data = create_array((8, 2), mesh, P("x", "y"))
  f = pjit(lambda x: x)
  out1 = f(arr)
  assert_arrays_equal(out1, inp_data)
  out2 = f(out1)
  assert_arrays_equal(out2, inp_data)
  out3 = f(out2)
  assert_arrays_equal(out3, inp_data)
  assert id(out1.sharding) == id(out2.sharding)
  assert id(out1.sharding) == id(out3.sharding)
  assert id(out2.sharding) == id(out3.sharding)


def test_aot_compile_in_tree_mismatch():
  f = jax.jit(lambda tree: tree)
  tree1 = {"a": {"c": 5, "d": 6}}
  tree2 = {"a": 1, "c": {"b": 5, "e": 7}}
  # JAX: TypeError "Function compiled with input pytree does not match the input pytree it
  # was called with"
  with pytest.raises(Exception, match=r"(?i)tree"):
    f.lower(tree1).compile()(tree2)


def test_device_put_sharding_prng():
  mesh = create_mesh((8,), ("x",))
  s = NamedSharding(mesh, P("x"))
  with jax.enable_custom_prng(True):
    x = jax.random.split(jax.random.PRNGKey(0), len(jax.devices()))
    y = jax.device_put(x, s)
    assert jax.dtypes.issubdtype(y.dtype, jax.dtypes.prng_key)
    assert y.sharding == s
    s1 = jax.sharding.SingleDeviceSharding(jax.devices()[1])
    z = jax.device_put(x, s1)
    assert jax.dtypes.issubdtype(z.dtype, jax.dtypes.prng_key)
    assert z.sharding == s1
    out_p = jax.pmap(lambda x: x)(np.arange(jax.device_count()))
    a = jax.device_put(x, out_p.sharding)
    assert jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
    assert a.sharding == out_p.sharding
    # JAX stops here under Shardy (its default): OpSharding/GSPMDSharding are not used.


def test_device_put_on_different_sharding():
  mesh = create_mesh((4, 2), ("x", "y"))
  x = jnp.arange(8).reshape(4, 2)
  s1 = NamedSharding(mesh, P("x"))
  a = jax.device_put(x, s1)
  assert a.sharding == s1
  s2 = NamedSharding(mesh, P("x", "y"))
  b = jax.device_put(a, s2)
  assert b.sharding == s2


# ---- with_sharding_constraint ----

def _sharded_zeros_check(jit_fn):
  # JAX compares HLO shardings; the public equivalent is is_equivalent_to at the output's rank.
  mesh = create_mesh((2, 2), ("x", "y"))

  def sharded_zeros(shape, pspec):
    out = jnp.zeros(shape, jnp.bfloat16)
    return lax.with_sharding_constraint(out, NamedSharding(mesh, pspec))
  out = jit_fn(sharded_zeros, static_argnums=(0, 1))((4096, 3072), P("x", "y"))
  out_s = NamedSharding(mesh, P("x", "y"))
  assert out.sharding.is_equivalent_to(out_s, out.ndim)


def test_with_sharding_constraint_jit():
  _sharded_zeros_check(jax.jit)


def test_with_sharding_constraint_pjit():
  _sharded_zeros_check(pjit)


@pytest.mark.xfail(strict=True, reason=(
    "partix inlines a jit inside a jit as constraints, so its incompatible-devices error names "
    "'sharding_constraint inside jit' where JAX says 'jit inside jit' (the first case, a "
    "constraint, matches JAX)"))
def test_jit_with_sharding_constraint_committed_inp_error():
  mesh = create_mesh((2, 2), ("x", "y"))
  s = NamedSharding(mesh, P("x", "y"))

  @jax.jit
  def sharded_inp(inp):
    return lax.with_sharding_constraint(inp, NamedSharding(mesh, P("x", "y")))

  committed_inp = jax.device_put(jnp.zeros((8, 2), jnp.bfloat16), jax.devices()[0])
  with pytest.raises(ValueError, match=INCOMPATIBLE + r". Got argument inp of.*sharded_inp "
                     r"with shape bfloat16\[8,2\] and.*device ids \[0\].*sharding_constraint "
                     r"inside jit with device ids"):
    sharded_inp(committed_inp)

  @pjit
  def my_nested_pjit(inp1, inp2, inp3):
    f = pjit(lambda x, y, z: (x * 2, y * 2, z * 2), in_shardings=(s, s, s),
             out_shardings=(s, s, s))
    return f(inp1, inp2, inp3)
  with pytest.raises(ValueError, match=INCOMPATIBLE + r". Got argument inp1 of.*my_nested_pjit"
                     r" with shape bfloat16\[8,2\] and.*device ids \[0\].*jit inside jit with "
                     r"device ids"):
    my_nested_pjit(committed_inp, committed_inp, committed_inp)


def test_jit_device_with_sharding_constraint_error():
  mesh = create_mesh((2, 2), ("x", "y"))

  @partial(jax.jit, static_argnums=(0, 1), device=jax.devices()[0])
  def sharded_zeros(shape, pspec):
    out = jnp.zeros(shape, jnp.bfloat16)
    return lax.with_sharding_constraint(out, NamedSharding(mesh, pspec))

  with pytest.raises(ValueError, match=INCOMPATIBLE + r". Got explicit output sharding with "
                     r"device ids \[0\].*sharding_constraint inside jit with device ids"):
    sharded_zeros((4096, 3072), P("x", "y"))


def test_wsc_eager_copy():
  # Placing on one device by constraint, jit out_shardings or device_put commits the result.
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  x = jnp.arange(10)
  y_wsc = lax.with_sharding_constraint(x, sharding)
  y_jit = jax.jit(lambda x: x, out_shardings=sharding)(x)
  y_dp = jax.device_put(x, sharding)
  assert y_wsc.committed
  assert y_jit.committed
  assert y_dp.committed


# ---- trivial computations ----

def test_trivial_computation():
  mesh = create_mesh((2, 2), ("x", "y"))
  inp_data = np.arange(16).reshape((8, 2))
  arr = jax.device_put(inp_data, NamedSharding(mesh, P("x", "y")))
  out = pjit(lambda x: x)(arr)
  assert_arrays_equal(out, canon(inp_data))


def test_trivial_computation_with_sharded_const():
  mesh = create_mesh((2, 1), ("x", "y"))
  const = jax.device_put(np.arange(16).reshape(8, 2), NamedSharding(mesh, P("x", "y")))
  with mesh:
    out = pjit(lambda: const)()
  assert isinstance(out, jax.Array)
  assert_arrays_equal(out, canon(np.arange(16).reshape(8, 2)))


def test_trivial_computation_with_sharded_const_using_transposed_mesh():
  mesh = create_mesh((2, 1), ("x", "y"))
  const = jax.device_put(np.arange(16).reshape(8, 2), NamedSharding(mesh, P("x", "y")))
  mesh2 = create_mesh((1, 2), ("x", "y"))
  with mesh2:
    out = pjit(lambda: const)()
  assert isinstance(out, jax.Array)
  assert_arrays_equal(out, canon(np.arange(16).reshape(8, 2)))


def test_trivial_computation_with_replicated_literal():
  mesh = create_mesh((2, 1), ("x", "y"))
  with mesh:
    out = pjit(lambda: 1)()
  assert out.sharding == NamedSharding(mesh, P())
  assert isinstance(out, jax.Array)
  assert out == 1


def test_multi_device_pjit_mul():
  mesh = create_mesh((4, 2), ("x", "y"))
  inp_data = np.arange(16).reshape((8, 2))
  arr1 = jax.device_put(inp_data, NamedSharding(mesh, P("x", "y")))
  arr2 = jax.device_put(inp_data, NamedSharding(mesh, P(None, "y")))
  out1, out2 = pjit(lambda x, y: (x @ x.T, y * 2))(arr1, arr2)
  assert_arrays_equal(out1, canon(inp_data @ inp_data.T))
  assert out1.shape == (8, 8)
  assert_arrays_equal(out2, canon(inp_data * 2))
  assert out2.shape == (8, 2)


def test_global_array_to_host_local_array_already_host_local():
  # On one process the array is already host-local: the same object comes back.
  from jax.experimental import multihost_utils
  mesh = create_mesh((4, 2), ("x", "y"))
  arr, _ = create_array((8, 2), mesh, P("x", "y"))
  out = multihost_utils.global_array_to_host_local_array(arr, mesh, P("x", "y"))
  assert id(arr) == id(out)


def testLowerCompileWithStaticArguments():
  with with_mesh((("x", 2), ("y", 2))):
    @partial(pjit, in_shardings=P(("x", "y"),), out_shardings=P(("x", "y"),),
             static_argnums=0)
    def f(c, x):
      return x if c == 0 else x + 1

    x = jnp.arange(64).reshape((8, 8))
    exe = f.lower(1, x).compile()
    assert_all_close(exe(x), x + 1, check_dtypes=False)


# ---- vmap / jvp through nested pjit ----

def _nested(wrap, n, **kw):
  def f_(x, n):
    if n == 0:
      return x * 2.
    return wrap(partial(f_, n=n - 1), **kw)(x - 1)
  return wrap(partial(f_, n=n), **kw)


def test_vmap_of_jvp_pjit_no_axis_resources():
  mesh = create_mesh((2, 2), ("x", "y"))
  pjit_inp1 = jax.device_put(jnp.arange(8.), NamedSharding(mesh, P("x")))
  pjit_inp2 = jax.device_put(jnp.arange(8.), NamedSharding(mesh, P(("x", "y"))))
  f = _nested(jax.jit, 5)
  jit_out1, jit_out2 = jax.vmap(lambda xs, ts: jax.jvp(f, xs, ts))(
      (jnp.arange(8.),), (jnp.arange(8.),))
  g = _nested(pjit, 5)
  pjit_out1, pjit_out2 = jax.vmap(lambda xs, ts: jax.jvp(g, xs, ts))(
      (pjit_inp1,), (pjit_inp2,))
  assert_arrays_equal(pjit_out1, jit_out1)
  assert_arrays_equal(pjit_out2, jit_out2)


def test_vmap_of_jvp_pjit_no_axis_resources_2d():
  mesh = create_mesh((2, 2), ("x", "y"))
  f_inp = jnp.arange(8.).reshape(2, 2, 2)
  # vmap of a pjit sharded P('x') puts the batch dimension first: P(None, 'x').
  g_inp = jax.device_put(f_inp, NamedSharding(mesh, P(None, "x")))
  f = _nested(pjit, 5, in_shardings=P("x"), out_shardings=P("x"))
  with mesh:
    f_out1, f_out2 = jax.vmap(lambda xs, ts: jax.jvp(f, xs, ts))((f_inp,), (f_inp,))
  g = _nested(pjit, 5)
  g_out1, g_out2 = jax.vmap(lambda xs, ts: jax.jvp(g, xs, ts))((g_inp,), (g_inp,))
  assert_arrays_equal(f_out1, g_out1)
  assert_arrays_equal(f_out2, g_out2)
  assert f_out1.sharding == g_out1.sharding
  assert f_out2.sharding == g_out2.sharding


def test_pjit_on_different_default_device_with_uncommitted_inputs():
  if jax.device_count() < 2:
    pytest.skip("Test requires >= 2 devices")
  f = pjit(lambda x, y: x + y)
  a = jnp.array([1, 2, 3], dtype=jnp.float32)
  assert not a.committed
  out = f(a, a)
  assert not out.committed
  assert out.devices() == {jax.devices()[0]}
  assert_arrays_equal(out, a * 2)
  with jax.default_device(jax.devices()[1]):
    b = jnp.array([4, 5, 6], dtype=jnp.float32)
    assert not b.committed
    out2 = f(b, b)
    assert not out2.committed
    assert out2.devices() == {jax.devices()[1]}
    assert_arrays_equal(out2, b * 2)


# ---- static arguments and keyword arguments ----

def test_pjit_with_static_argnames():
  def f(x: str) -> int:
    assert x == "foo"
    return 1

  f_nums = pjit(f, static_argnums=0)
  assert f_nums("foo") == 1
  assert f_nums(x="foo") == 1
  f_names = pjit(f, static_argnames="x")
  assert f_names("foo") == 1
  assert f_names(x="foo") == 1


def test_pjit_with_static_argnames_cpp_dispatch():
  # A static keyword reaches f through **kwargs (JAX also counts one C++ cache miss).
  seen = []

  def f(y, **kwargs):
    seen.append(kwargs)
    return y * y

  y = jnp.arange(8.)
  f_names = pjit(f, static_argnames="x")
  out1 = f_names(y, x="foo")
  out2 = f_names(y, x="foo")
  assert seen and all(k == {"x": "foo"} for k in seen)
  assert_arrays_equal(out1, np.arange(8., dtype=np.float32) ** 2)
  assert_arrays_equal(out2, np.arange(8., dtype=np.float32) ** 2)


def test_new_static_argnum_on_keyword_arguments():
  f = pjit(lambda x: x, static_argnums=0)
  y = f(x=4)
  assert y == 4


def test_new_static_argnum_with_default_arguments():
  f = pjit(lambda x=4: x, static_argnums=0)
  y = f()
  assert y == 4


def _tracer_probe():
  state = {"x": False, "y": False}

  def f(x, y):
    assert isinstance(x, jax.core.Tracer) == state["x"]
    assert isinstance(y, jax.core.Tracer) == state["y"]
    return 1
  return f, state


def test_pjit_with_mismatched_static_argnames():
  # With both static_argnums and static_argnames given, each is respected as written.
  f, state = _tracer_probe()
  cases = [
      (pjit(f, static_argnums=1, static_argnames=()),
       [((2, 3), {}, True, False), ((1,), {"y": 2}, True, True)]),
      (pjit(f, static_argnums=(), static_argnames="y"),
       [((2, 3), {}, True, True), ((1,), {"y": 3}, True, False)]),
      (pjit(f, static_argnums=(1,), static_argnames="x"),
       [((2, 3), {}, True, False), ((1,), {"y": 3}, True, True),
        ((), {"x": 2, "y": 3}, False, True)]),
  ]
  for g, calls in cases:
    for args, kwargs, x_tracer, y_tracer in calls:
      state["x"], state["y"] = x_tracer, y_tracer
      assert g(*args, **kwargs) == 1


def test_pjit_kwargs():
  # Keyword and positional calls give the same values (JAX also counts lowering-cache
  # misses, a private cache).
  a, b, c = jnp.arange(8.), jnp.arange(4.), jnp.arange(2.)
  f = pjit(lambda x, y, z: (x, y, z))
  for o1, o2, o3 in (f(a, y=b, z=c), f(x=a, y=b, z=c), f(a, b, c)):
    assert_arrays_equal(o1, a)
    assert_arrays_equal(o2, b)
    assert_arrays_equal(o3, c)


def test_pjit_kwargs_axis_resources_error():
  # JAX: "pjit does not support kwargs when in_shardings is specified."
  with pytest.raises(ValueError, match=r"(?s)(kwargs|keyword arguments).*in_shardings"):
    pjit(lambda x: x, in_shardings=jax.sharding.SingleDeviceSharding(
        jax.devices()[0]))(x=jnp.arange(8.))


def _check_unused(f, inp, unused_inp):
  out = f(unused_inp, unused_inp, unused_inp, unused_inp, unused_inp, inp)
  out_again = f(unused_inp, unused_inp, unused_inp, unused_inp, unused_inp, inp)
  assert_arrays_equal(out, inp @ inp.T)
  assert_arrays_equal(out_again, inp @ inp.T)
  compiled = f.lower(unused_inp, unused_inp, unused_inp, unused_inp, unused_inp, inp).compile()
  assert_arrays_equal(compiled(unused_inp, unused_inp, unused_inp, unused_inp, unused_inp, inp),
                      inp @ inp.T)


def test_pjit_keep_unused_true():
  # JAX also checks the private _executable._kept_var_idx ({0..5}) and in_avals (6).
  f = pjit(lambda x, y, z, a, b, c: c @ c.T, keep_unused=True)
  _check_unused(f, jnp.arange(4), jnp.arange(8))


def test_pjit_keep_unused_default_false():
  # JAX also checks the private _executable._kept_var_idx ({5}) and in_avals (1).
  f = pjit(lambda x, y, z, a, b, c: c @ c.T)
  _check_unused(f, jax.device_put(jnp.arange(4), jax.devices()[0]),
                jax.device_put(jnp.arange(8), jax.devices()[0]))


def test_pjit_relayout_multi_slice():
  mesh = create_mesh((2, 2), ("x", "y"))
  mul = jax.jit(lambda x: x @ x.T)
  x = jnp.arange(8).reshape(4, 2)
  y = jax.device_put(x, NamedSharding(mesh, P("x", "y")))
  compiled = mul.lower(jax.ShapeDtypeStruct(y.shape, y.dtype, sharding=y.sharding)).compile()
  out = compiled(y)
  assert_arrays_equal(out, x @ x.T)


# ---- device= and backend= ----

def _check_on_device(out, expected_device, expected_out):
  assert out.devices() == {expected_device}
  assert len(out.sharding.device_set) == 1
  assert_arrays_equal(out, expected_out @ expected_out.T)


def test_pjit_with_device_arg():
  mul = lambda x: x @ x.T
  mesh = create_mesh((2, 2), ("x", "y"))
  f = pjit(mul, device=jax.devices()[1])
  x = jnp.arange(8).reshape(4, 2)
  f_out = f(x)
  f_out2 = f(f_out)
  _check_on_device(f_out, jax.devices()[1], x)
  _check_on_device(f_out2, jax.devices()[1], f_out)
  y = jax.device_put(x, NamedSharding(mesh, P("x", "y")))
  _check_on_device(f(y), jax.devices()[1], y)
  h = pjit(mul, device=jax.devices()[-1])
  _check_on_device(h(y), jax.devices()[-1], y)
  compiled = f.lower(sds(y.shape, y.dtype)).compile()  # AOT
  _check_on_device(compiled(y), jax.devices()[1], y)


def test_pjit_with_device_arg_input_from_another_pjit():
  mesh = create_mesh((2, 2), ("x", "y"))
  inp = np.arange(8).reshape(4, 2)
  y = jax.device_put(inp, NamedSharding(mesh, P("x", "y")))
  out = pjit(lambda x: x * 2)(y)
  expected_device = jax.devices()[2]
  final_out = pjit(lambda x: x * 3, device=expected_device)(out)
  assert final_out.devices() == {expected_device}
  assert len(final_out.sharding.device_set) == 1
  assert_arrays_equal(final_out, canon(inp * 6))


def test_autodiff_with_device_arg():
  if jax.device_count() <= 1:
    pytest.skip("Test requires more >1 device.")
  h = jnp.arange(4.)
  f = pjit(lambda x: x.sum(1) * h.sum(), device=jax.devices()[1])
  g = pjit(lambda x: f(jnp.sin(x * 4 + 2)), device=jax.devices()[1])
  check_grads(g, (jnp.arange(16.).reshape((4, 4)) / 100,), order=2)


def test_pjit_device_backend_axis_resources_error():
  s = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  with pytest.raises(ValueError, match="If backend or device is specified on jit, then "
                     "in_shardings should not be specified."):
    pjit(lambda x: x, in_shardings=s, backend="cpu")
  with pytest.raises(ValueError, match="If backend or device is specified on jit, then "
                     "out_shardings should not be specified."):
    pjit(lambda x: x, out_shardings=s, device=jax.devices()[0])


def test_check_arg_error():
  sds_ = jax.ShapeDtypeStruct((4, 2), np.int32)
  inp = np.arange(8).reshape(4, 2)
  with pytest.raises(Exception, match=r"(?s)Argument 'x\['b'\]\['c'\]' of shape int32\[4,2\] "
                     r"of type.*ShapeDtypeStruct.*is not a valid JAX type"):
    jax.jit(lambda x: x)({"a": inp, "b": {"c": sds_}})


def test_pjit_device_backend_both_error():
  with pytest.raises(ValueError, match="can't specify both a device and a backend for jit"):
    pjit(lambda x: x, device=jax.devices()[0], backend="cpu")


def test_pjit_mesh_with_device_or_backend_error():
  mesh = create_mesh((1,), ("x",))
  with mesh:
    with pytest.raises(ValueError, match="Mesh context manager should not be used with jit "
                       "when backend or device is also specified as an argument to jit."):
      pjit(lambda x: x, device=jax.devices()[0])(jnp.arange(8))


def test_pjit_inline_literal():
  # jax issue 27545: an inlined pjit returning a literal keeps its shape ().
  shapes = []

  def foo(x):
    x = pjit(lambda x: jnp.array(1), inline=True)(x)
    shapes.append(x.shape)

  pjit(foo)(0)  # doesn't crash
  assert shapes == [()]


# ---- pmap outputs into pjit ----

def test_pmap_sharding_input_to_pjit_single_device():
  pmap_out = jax.pmap(lambda x: x)(jnp.arange(jax.device_count()))
  assert isinstance(pmap_out.sharding, NamedSharding)
  assert len(pmap_out.devices()) == jax.device_count()
  out = pjit(lambda x: x * 3)(pmap_out)
  assert_arrays_equal(out, pmap_out * 3)
  assert len(out.devices()) == jax.device_count()


def test_pmap_sharding_input_to_pjit_multi_device():
  if jax.device_count() < 4:
    pytest.skip("Requires at least 4 devices.")
  pmap_out = jax.pmap(lambda x, y: x, in_axes=(None, 0), out_axes=None)(
      jnp.arange(4), jnp.arange(4))
  inp2 = jnp.arange(4)
  assert isinstance(pmap_out.sharding, NamedSharding)
  out1, out2 = pjit(lambda x, y: (x * 2, y * 2))(pmap_out, inp2)
  assert_arrays_equal(out1, pmap_out * 2)
  assert_arrays_equal(out2, inp2 * 2)
  assert len(out1.devices()) == 4
  assert len(out2.devices()) == 4
  assert out1.is_fully_replicated
  assert out2.is_fully_replicated


def test_pmap_sharding_input_pjit_in_axis_resources():
  if jax.device_count() < 4:
    pytest.skip("Requires at least 4 devices.")
  mesh = create_mesh((4,), "x")
  pmap_out = jax.pmap(lambda x: x)(jnp.arange(4))
  assert isinstance(pmap_out.sharding, NamedSharding)
  out = pjit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("x")))(pmap_out)
  assert_arrays_equal(out, pmap_out * 2)
  assert len(out.devices()) == 4


# ---- nested pjit closing over tracers and constants ----

def test_nested_pjit_closing_over_tracer():
  @pjit
  def f(x):
    y = jnp.float32(2) * x

    @pjit
    def g(z):
      return jax.pmap(lambda x: x[jnp.newaxis] * y)(z)
    return g(x)

  for _ in range(2):  # the second call takes the dispatch fast path
    out = f(np.arange(1., dtype="float32").reshape((1, 1)))  # doesn't crash
    assert_arrays_equal(out, np.zeros((1, 1, 1), np.float32))


def test_aot_nested_pjit_closing_over_const_top_level():
  const = jnp.arange(8.)
  f = pjit(lambda x: const * 2 + x)
  inp = jnp.arange(8.)
  compiled = f.lower(inp).compile()
  assert_arrays_equal(compiled(inp), const * 2 + inp)


def test_nested_pjit_closing_over_const_top_level_and_tracer():
  const = jnp.arange(8.)

  @pjit
  def f(x):
    y = jnp.arange(8., 16.) * x + const

    @pjit
    def g(z):
      return z + y * 2 + const
    return g(x)

  x = np.arange(8., dtype=np.float32)
  expected = x + (np.arange(8., 16., dtype=np.float32) * x + x) * 2 + x
  for _ in range(2):  # doesn't crash; the second call takes the dispatch fast path
    assert_arrays_equal(f(jnp.arange(8.)), expected)


def test_nested_pjit_closing_over_top_level_const():
  const = jnp.arange(8.)

  @pjit
  def f(x):
    g = pjit(lambda z: z + const)
    return g(x)

  inp = jnp.arange(8., 16.)
  for _ in range(2):  # doesn't crash; the second call takes the dispatch fast path
    assert_arrays_equal(f(inp), np.arange(8., 16., dtype=np.float32) + np.arange(
        8., dtype=np.float32))


def test_pjit_sin_nested():
  mesh = create_mesh((4, 2), ("x", "y"))
  f = pjit(lambda x: jnp.sin(x))
  with mesh:
    inp = jnp.arange(8.)
    out = f(inp)
    assert_all_close(out, np.sin(np.asarray(inp)), rtol=1e-6, atol=1e-6)
    assert len(out.devices()) == 8


def test_jit_with_mesh_context_manager():
  mesh = create_mesh((1,), ("x",))
  with pytest.raises(Exception, match="jit requires a non-empty mesh in context"):
    with mesh:
      jax.jit(lambda x: x, in_shardings=P("x"), out_shardings=P("x"))(jnp.arange(8))


def test_pjit_nested_uncommitted_output():
  @pjit
  def f(x):
    return pjit(lambda y: y * 2)(x)

  out = f(jnp.arange(8))
  assert not out.committed
  assert_arrays_equal(out, canon(np.arange(8) * 2))


def test_pjit_disable_jit():
  sideeffect = []

  def f(x):
    sideeffect.append(None)
    return x + 1

  f = jax.jit(f)
  for _ in range(2):
    f(1)
    assert len(sideeffect) == 1
  with jax.disable_jit():
    f(1)
  assert len(sideeffect) == 2


def test_pmap_pjit_axis_index():
  @partial(jax.pmap, axis_name="data")
  def _pmapped_fun(inputs):
    del inputs
    return lax.axis_index("data")

  inputs = jnp.zeros(shape=[jax.device_count()])
  expected = np.arange(jax.device_count(), dtype=np.int32)
  assert_arrays_equal(pjit(_pmapped_fun)(inputs), expected)  # doesn't crash
  assert_arrays_equal(jax.jit(_pmapped_fun)(inputs), expected)  # doesn't crash


def test_cache_miss_explanations_sharding_mismatch(caplog):
  mesh = create_mesh((2,), ("x",))
  s = NamedSharding(mesh, P("x"))
  f = jax.jit(lambda x, y: x * y)
  np_inp = np.arange(8, dtype=np.float32)
  f(np_inp, jax.device_put(np_inp, s))
  y = jax.device_put(np_inp, s)
  with jax.explain_cache_misses(True):
    x_ = jax.device_put(np_inp, s)  # the sharding of x changes
    with caplog.at_level(logging.WARNING):
      f(x_, y)
  msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
  assert len(msgs) == 1
  assert "different input types" in msgs[0]
  assert "at x, now f32[8]({Auto: ('x',)}) and before f32[8]({})" in msgs[0]


# ---- constraints with spmd_axis_name and meshes ----

def test_with_sharding_constraint_spmd_axis_name():
  # vmap's spmd_axis_name shards the batch dimension over 'mdl' in the constraint: the output
  # is split [2, 2, 1, 1] ways (JAX reads that from the HLO sharding; here from shard_shape).
  mesh = create_mesh((2, 2, 2), ("replica", "data", "mdl"))
  shape = (8, 4, 2, 2)
  x = jnp.arange(math.prod(shape)).reshape(shape)

  def f(inp):
    return lax.with_sharding_constraint(inp, NamedSharding(mesh, P("data", None, None)))

  out = jax.vmap(jax.jit(f), spmd_axis_name="mdl")(x)
  assert out.sharding.shard_shape(out.shape) == (4, 2, 2, 2)

  def apply_with_scan(x):
    x, _ = lax.scan(lambda x, _: (f(x), None), x, None, length=1)
    return x

  out2 = jax.vmap(apply_with_scan, spmd_axis_name="mdl")(x)
  assert out2.sharding.shard_shape(out2.shape) == (4, 2, 2, 2)


# JAX's IndivisibleError (a ValueError) says the tiling factors should evenly divide the shape.
INDIVISIBLE = r"(?i)divid"


@pytest.mark.xfail(strict=True, reason=(
    "partix's device_put accepts uneven splits (a size-1 dimension over 2 devices gives "
    "blocks of 1 and 0 elements); JAX raises IndivisibleError"))
def test_device_put_sharding_nondivisible_sharding_error():
  mesh = create_mesh((2,), ("x",))
  s = NamedSharding(mesh, P("x"))
  x = jnp.ones((1,))
  with pytest.raises(ValueError, match=INDIVISIBLE):
    jax.device_put(x, s)
  y = jnp.ones((2,))
  with pytest.raises(ValueError, match=INDIVISIBLE):
    jax.device_put((y, x), s)
  with pytest.raises(ValueError, match=INDIVISIBLE):
    s2 = jax.pmap(lambda x: x, devices=list(mesh.devices.flat))(jnp.arange(2)).sharding
    jax.device_put(x, s2)
  out = jax.device_put(2., NamedSharding(mesh, P()))  # doesn't crash
  assert float(out) == 2.


def test_with_sharding_constraint_with_two_meshes():
  if jax.device_count() < 4:
    pytest.skip("Requires more than 4 devices.")
  dev0 = jax.devices()[:2]
  mesh0 = Mesh(dev0, ("x"))
  dev1 = jax.devices()[2:4]
  mesh1 = Mesh(dev1, ("x"))

  def f(x):
    y = x * 2
    y = lax.with_sharding_constraint(y, P("x"))
    return y + 2

  with mesh0:
    out0 = pjit(f)(np.ones((32, 4)))
    assert sorted(d.id for d in out0.devices()) == [d.id for d in dev0]
  with mesh1:
    out1 = pjit(f)(np.ones((32, 4)))
    assert sorted(d.id for d in out1.devices()) == [d.id for d in dev1]


# ---- the dispatch cache (jtu.count_pjit_cpp_cache_miss: calls that found no ready program) ----

def test_pjit_single_device_sharding_cache():
  a = jnp.arange(16).reshape((8, 2))
  f = pjit(lambda x: x)
  with jtu.count_pjit_cpp_cache_miss() as count:
    out = f(a)
    f(out)  # the result has the argument's type: the same program
  assert count() == 1


def test_single_device_pjit_cpp_dispatch():
  mesh = create_mesh((1,), ("x",))
  data = np.arange(16).reshape(8, 2)
  f = pjit(lambda x: x @ x.T, in_shardings=None, out_shardings=None)
  with jtu.count_pjit_cpp_cache_miss() as count:
    for _ in range(10):
      arr = jax.device_put(data, NamedSharding(mesh, P("x")))
      with mesh:
        f(arr)
  assert count() == 1


def test_single_device_add_single_compile():
  f = pjit(lambda x, y: x + y)
  a = jax.device_put(jnp.array([1, 2, 3], dtype=jnp.float32), jax.devices()[0])
  b = jax.device_put(jnp.array([4, 5, 6], dtype=jnp.float32), jax.devices()[0])
  with jtu.count_pjit_cpp_cache_miss() as count:
    for _ in range(2):
      f(a, b)
  assert count() == 1


def test_pjit_different_default_device():
  if jax.device_count() <= 1:
    pytest.skip("needs more than 1 device")
  system_default = list(jnp.add(1, 1).devices())[0]
  other = jax.devices()[-1]
  f = pjit(lambda x: x + 1)
  f(1)
  with jax.default_device(system_default):
    f(1)
  with jax.default_device(other):
    f(1)
  # Every default device has been seen: all four calls find their programs.
  with jtu.count_pjit_cpp_cache_miss() as count:
    f(1)
    with jax.default_device(system_default):
      f(1)
    with jax.default_device(other):
      f(1)
    with jax.default_device(other):
      with jax.default_device(system_default):
        f(1)
  assert count() == 0


def test_pjit_function_cache_cpp():
  def f(x):
    return x * 2

  inp = jnp.arange(3.)
  # A new pjit wrapper of the same function with the same options shares its cache.
  with jtu.count_pjit_cpp_cache_miss() as count:
    for _ in range(10):
      pjit(f)(inp)
  assert count() == 1


def test_pjit_no_global_cache_hit_axis_resources():
  mesh = create_mesh((1,), ("x",))
  s = NamedSharding(mesh, P("x"))
  inp = jnp.arange(8.0)
  # A new lambda each time is a new function: nothing to share.
  with jtu.count_pjit_cpp_cache_miss() as count:
    for _ in range(10):
      pjit(lambda x: x * 2, in_shardings=s, out_shardings=s)(inp)
  assert count() == 10
  with jtu.count_pjit_cpp_cache_miss() as count:
    for _ in range(10):
      pjit(lambda x: x * 2, device=jax.devices()[0])(inp)
  assert count() == 10
  pf = pjit(lambda x: x * 2, in_shardings=s, out_shardings=s)
  with jtu.count_pjit_cpp_cache_miss() as count:
    for _ in range(10):
      pf(inp)
  assert count() == 1
  pf1 = pjit(lambda x: x * 2, device=jax.devices()[0])
  with jtu.count_pjit_cpp_cache_miss() as count:
    for _ in range(10):
      pf1(inp)
  assert count() == 1
