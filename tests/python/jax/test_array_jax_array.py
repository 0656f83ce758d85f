"""Mirrors JAX 0.10.2's tests/array_test.py, class JaxArrayTest: jax.Array's shards, indices,
deletion, placement, iteration and indexing of sharded arrays, the buffer protocol, and the
make_array_from_* constructors."""
import math
import warnings

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
from jax.sharding import SingleDeviceSharding

from conftest import create_mesh

JAX_CLASS = "tests/array_test.py::JaxArrayTest"

LEFT_OUT = {
    "test_mismatch_dtype": "checks the private ArrayImpl constructor's own dtype check (int32 "
                           "buffers for a float32 aval); through the public "
                           "make_array_from_single_device_arrays the mismatch is caught "
                           "earlier with another message, mirrored as "
                           "test_make_array_from_single_device_arrays_bad_dtype_error",
}

# jtu.dtypes.all on CPU without x64 (bfloat16, float16, float32, int8, int16, int32, uint8,
# uint16, uint32, complex64, bool), split into the dtypes partix holds and those it does not;
# jtu.dtypes.custom_floats on CPU is bfloat16 alone.
HELD = [jnp.bfloat16, np.float16, np.float32, np.int8, np.int16, np.int32, np.uint8, np.uint16,
        np.uint32, np.bool_]
NOT_HELD = [np.complex64]


def create_array(shape, sharding, global_data=None):
  """The array of `sharding` whose blocks a callback cuts from global_data (arange by
  default); returns it with global_data."""
  if global_data is None:
    global_data = np.arange(math.prod(shape)).reshape(shape)
  return jax.make_array_from_callback(shape, sharding, lambda idx: global_data[idx]), global_data


_CANON = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.uint64): np.dtype(np.uint32),
          np.dtype(np.float64): np.dtype(np.float32),
          np.dtype(np.complex128): np.dtype(np.complex64)}


def _canon(x):
  d = np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype
  return _CANON.get(d, d)


def assert_equal(actual, desired):
  """self.assertArraysEqual: dtypes match once canonicalized (x64 off, as JAX's tests run),
  then every element."""
  assert _canon(actual) == _canon(desired), (_canon(actual), _canon(desired))
  np.testing.assert_array_equal(np.asarray(actual), np.asarray(desired))


def _mesh42():
  return create_mesh((4, 2), ("x", "y"))


@pytest.mark.xfail(strict=True, reason="partix's concrete array type is named Array, not ArrayImpl")
def test_array_impl_name():
  # JAX's concrete array class is named ArrayImpl.
  assert type(jnp.arange(3)).__name__ == "ArrayImpl"


MESH_AXES = [("mesh_x_y", P("x", "y")), ("mesh_x", P("x")), ("mesh_y", P("y")),
             ("mesh_none_y", P(None, "y")), ("mesh_xy", P(("x", "y"))),
             ("mesh_fully_replicated", P())]


@pytest.mark.parametrize("mesh_axes", [pytest.param(a, id=n) for n, a in MESH_AXES])
def test_jax_array_value(mesh_axes):
  arr, global_data = create_array((8, 2), NamedSharding(_mesh42(), mesh_axes))
  for s in arr.addressable_shards:
    assert s.data.sharding.num_devices == 1
    assert_equal(s.data, global_data[s.index])
  assert_equal(np.asarray(arr), global_data)


TWO_D = [
    ("mesh_x_y", P("x", "y"), ((slice(0, 2), slice(0, 1)), (slice(0, 2), slice(1, 2))),
     (2, 1), [0, 0, 0, 0, 0, 0, 0, 0], False),
    ("mesh_x", P("x"), ((slice(0, 2), slice(None)), (slice(0, 2), slice(None))),
     (2, 2), [0, 1, 0, 1, 0, 1, 0, 1], False),
    ("mesh_y", P("y"), ((slice(0, 4), slice(None)), (slice(4, 8), slice(None))),
     (4, 2), [0, 0, 1, 1, 2, 2, 3, 3], False),
    ("mesh_none_y", P(None, "y"), ((slice(None), slice(0, 1)), (slice(None), slice(1, 2))),
     (8, 1), [0, 0, 1, 1, 2, 2, 3, 3], False),
    ("mesh_xy", P(("x", "y")), ((slice(0, 1), slice(None)), (slice(1, 2), slice(None))),
     (1, 2), [0, 0, 0, 0, 0, 0, 0, 0], False),
    ("mesh_fully_replicated", P(), ((slice(None), slice(None)), (slice(None), slice(None))),
     (8, 2), [0, 1, 2, 3, 4, 5, 6, 7], True),
]


@pytest.mark.parametrize("mesh_axes,expected_index,expected_shard_shape,expected_replica_ids,"
                         "expected_is_fully_replicated",
                         [pytest.param(*c[1:], id=c[0]) for c in TWO_D])
def test_array_2d_shard(mesh_axes, expected_index, expected_shard_shape, expected_replica_ids,
                        expected_is_fully_replicated):
  mesh = create_mesh((4, 2), ("x", "y"), iota_order=True)
  arr, data = create_array((8, 2), NamedSharding(mesh, mesh_axes))
  assert arr.ndim == 2 and arr.size == 16
  shards = arr.addressable_shards
  assert shards[0].index == expected_index[0]
  assert shards[1].index == expected_index[1]
  assert [s.replica_id for s in shards] == expected_replica_ids
  assert [s.device.id for s in shards] == list(range(8))
  assert arr.is_fully_replicated == expected_is_fully_replicated
  for i, s in enumerate(shards):
    t = jax.typeof(s.data)
    assert (tuple(t.shape), t.dtype) == (expected_shard_shape, s.data.dtype)
    assert_equal(s.data, data[s.index])
    assert_equal(s.data, arr.addressable_data(i))
  assert len(arr.global_shards) == len(shards)
  for g, l in zip(arr.global_shards, shards):
    assert (g.device, g.index, g.replica_id) == (l.device, l.index, l.replica_id)
    assert (g.data.shape, g.data.dtype) == (l.data.shape, l.data.dtype)
    assert_equal(g.data, l.data)


def test_addressable_data():
  arr, data = create_array((8, 2), NamedSharding(_mesh42(), P(None)))
  for i in range(len(arr)):
    assert_equal(data, arr.addressable_data(i))


def test_array_delete():
  arr, _ = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  arr.delete()
  assert arr.is_deleted()
  # JAX: RuntimeError 'Array has been deleted.' on any use of it.
  with pytest.raises(Exception, match="deleted"):
    np.asarray(arr)


def test_single_device_array_usage_after_delete():
  x = jnp.array([1, 2, 3])
  x.delete()
  with pytest.raises(Exception, match="deleted"):
    _ = x + 1


LOCAL_DATA = [("no_global_shape", np.arange(10).reshape(2, 5), None),
              ("global_shape_prefix", {"a": np.arange(10).reshape(2, 5)}, (2, 5)),
              ("global_shape_full", {"a": np.arange(10).reshape(2, 5)}, {"a": (2, 5)})]


@pytest.mark.parametrize("data,global_shape", [
    pytest.param(d, g, id=n) for n, d, g in LOCAL_DATA])
def test_array_from_local_data_single_host(data, global_shape):
  out = jax.make_array_from_process_local_data(jax.devices()[0], data, global_shape)
  jax.tree.map(assert_equal, data, out)


# JAX: ValueError, "... global_shape should be None or equal to local_data.shape ..." for a
# wrong shape, a pytree structure error for a global_shape with an extra key.
BAD_GLOBAL = [("global_shape_prefix", {"a": np.arange(10).reshape(2, 5)}, (2, 8), "global_shape"),
              ("global_shape_full", {"a": np.arange(10).reshape(2, 5)}, {"a": (2, 6)},
               "global_shape"),
              ("global_shape_extra", {"a": np.arange(10).reshape(2, 5)},
               {"a": (2, 5), "b": (3, 5)}, "structure")]


@pytest.mark.parametrize("data,global_shape,phrase",
                         [pytest.param(d, g, m, id=n) for n, d, g, m in BAD_GLOBAL])
def test_array_from_local_data_single_host_invalid_global_shape(data, global_shape, phrase):
  with pytest.raises(Exception, match=phrase):
    jax.make_array_from_process_local_data(jax.devices()[0], data, global_shape)


def test_multi_device_array_usage_after_delete():
  arr = jax.device_put(np.arange(16, dtype=np.int32), NamedSharding(_mesh42(), P("x")))
  arr.delete()
  # JAX: 'Array has been deleted with shape=int32[16].'
  with pytest.raises(Exception, match=r"deleted.*int32\[16\]|int32\[16\].*deleted"):
    _ = arr + 1


def test_device_put():
  numpy_array = np.array([1, 2, 3])
  arr = jax.device_put(numpy_array, jax.devices()[0])
  assert arr.sharding == SingleDeviceSharding(jax.devices()[0])
  assert_equal(arr, numpy_array)
  assert arr.committed is True
  for s in arr.addressable_shards:
    assert_equal(s.data, numpy_array)
    assert s.device == jax.devices()[0]
    assert s.index == (slice(None),)
    assert s.replica_id == 0


def test_device_put_array_delete():
  arr = jax.device_put(np.array([1, 2, 3]), jax.devices()[0])
  arr.delete()
  assert arr.is_deleted()
  with pytest.raises(Exception, match="deleted"):
    np.asarray(arr)


def test_device_put_to_cpu():
  mesh = Mesh(jax.devices(), "x")
  mesh_cpu = Mesh(jax.devices("cpu"), "x")
  x = np.zeros(16)
  y = jax.device_put(x, NamedSharding(mesh, P("x")))
  z = jax.device_put(y, NamedSharding(mesh_cpu, P("x")))
  for s in z.addressable_shards:
    assert_equal(s.data, x[s.index])


def test_array_device_get():
  arr, data = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  assert_equal(jax.device_get(arr), data)


def test_repr():
  arr, _ = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  assert repr(arr).startswith("Array(")


def test_empty_repr():
  x = jnp.empty((0, 5), "float32")
  assert repr(x) == "Array([], shape=(0, 5), dtype=float32)"


def test_jnp_array():
  arr = jnp.array([1, 2, 3])
  assert isinstance(arr, jax.Array)
  assert arr.sharding.num_devices == 1
  assert arr.committed is False
  assert not arr.weak_type


def _check_single_device_sum(arr):
  assert isinstance(arr, jax.Array)
  assert_equal(arr, np.array([5, 7, 9]))
  assert arr.sharding == SingleDeviceSharding(jax.devices()[0])


def test_jnp_array_jit_add():
  a, b = jnp.array([1, 2, 3]), jnp.array([4, 5, 6])
  _check_single_device_sum(jax.jit(lambda x, y: x + y)(a, b))


def test_jnp_array_jnp_add():
  _check_single_device_sum(jnp.add(jnp.array([1, 2, 3]), jnp.array([4, 5, 6])))


def test_jnp_array_normal_add():
  _check_single_device_sum(jnp.array([1, 2, 3]) + jnp.array([4, 5, 6]))


def test_array_sharded_astype():
  arr, data = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  out = arr.astype(jnp.float32)
  assert out.dtype == np.float32
  assert_equal(out, data.astype(np.float32))
  assert len(out.addressable_shards) == 8
  for s in out.addressable_shards:
    assert_equal(s.data, data[s.index].astype(np.float32))


def test_jnp_array_astype():
  arr = jnp.array([1, 2, 3])
  out = arr.astype(jnp.float32)
  assert out.dtype == np.float32
  assert_equal(out, np.asarray(arr).astype(np.float32))


def test_array_delete_idempotent():
  mesh = create_mesh((2,), ("x",))
  arr = jax.device_put(np.arange(8), NamedSharding(mesh, P("x")))
  arr.delete()
  assert arr.is_deleted()
  arr.delete()  # a second delete is fine
  assert arr.is_deleted()


def test_sharded_add():
  mesh = _mesh42()
  a, data = create_array((8, 2), NamedSharding(mesh, P("x", "y")))
  b, _ = create_array((8, 2), NamedSharding(mesh, P("x")))
  out = a + b
  expected = data + data
  assert_equal(out, expected)
  assert len(out.addressable_shards) == 8
  for s in out.addressable_shards:
    assert_equal(s.data, expected[s.index])


def test_sharded_zeros_like():
  a, data = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  out = jnp.zeros_like(a)
  expected = jnp.zeros(data.shape, dtype=a.dtype)
  assert_equal(out, expected)
  assert len(out.addressable_shards) == 8
  for s in out.addressable_shards:
    assert_equal(s.data, np.asarray(expected)[s.index])


def test_zeros_like():
  a = jnp.array([1, 2, 3], dtype=np.int32)
  out = jnp.zeros_like(a)
  assert_equal(out, np.zeros(a.shape, dtype=np.int32))
  assert out.sharding.num_devices == 1


# JAX builds these through the private ArrayImpl constructor; the public
# make_array_from_single_device_arrays runs the same checks with the same messages.

def _blocks(shape, sharding, devices, dtype=np.float32):
  data = np.arange(math.prod(shape), dtype=dtype).reshape(shape)
  di = sharding.devices_indices_map(shape)
  return [jax.device_put(data[di[d]], d) for d in devices]


def test_wrong_num_arrays():
  if jax.device_count() < 4:
    pytest.skip("Requires more than 4 devices")
  shape = (8, 2)
  mesh = create_mesh((1, 2), ("x", "y"))
  s = NamedSharding(mesh, P("x", "y"))
  bufs = _blocks(shape, s, jax.local_devices()[:2])
  msg = (r"Expected 2 per-device arrays \(this is how many devices are addressable by the "
         r"sharding\), but got {}")
  with pytest.raises(Exception, match=msg.format(1)):
    jax.make_array_from_single_device_arrays(shape, s, bufs[:1])
  for buf, d in zip(list(bufs), jax.local_devices()[2:4]):
    bufs.append(jax.device_put(buf, d))
  with pytest.raises(Exception, match=msg.format(4)):
    jax.make_array_from_single_device_arrays(shape, s, bufs)


def test_arrays_not_in_device_assignment():
  if jax.device_count() < 4:
    pytest.skip("Requires more than 4 devices")
  shape = (8, 2)
  mesh = create_mesh((1, 2), ("x", "y"))
  s = NamedSharding(mesh, P("x"))  # devices {0, 1}
  data = np.arange(16, dtype=np.float32).reshape(shape)
  bufs = [jax.device_put(data, d) for d in jax.devices()[2:4]]  # devices {2, 3}
  with pytest.raises(Exception, match=(
      "Addressable devices and per-device arrays devices do not match. Sharding contains "
      "devices {0, 1} that are not present in per-device arrays. Per-device arrays contain "
      "devices {2, 3} that are not present in the sharding.")):
    jax.make_array_from_single_device_arrays(shape, s, bufs)


def test_different_devices_in_arrays_than_sharding():
  if jax.device_count() < 3:
    pytest.skip("Requires more than 3 devices")
  shape = (8, 2)
  mesh = Mesh(np.array([jax.devices()[1], jax.devices()[2]]), ("x"))
  s = NamedSharding(mesh, P("x"))  # devices {1, 2}
  data = np.arange(16, dtype=np.float32).reshape(shape)
  bufs = [jax.device_put(data, d) for d in jax.devices()[:2]]  # devices {0, 1}
  with pytest.raises(Exception, match=(
      r"Addressable devices and per-device arrays devices do not match. Sharding contains "
      r"devices \{2\} that are not present in per-device arrays. Per-device arrays contain "
      r"devices \{0\} that are not present in the sharding.")):
    jax.make_array_from_single_device_arrays(shape, s, bufs)


def test_duplicated_devices_in_arrays():
  shape = (8, 2)
  mesh = create_mesh((1, 2), ("x", "y"))
  s = NamedSharding(mesh, P("x"))
  data = np.arange(16, dtype=np.float32).reshape(shape)
  bufs = [jax.device_put(data, jax.devices()[0]) for _ in range(2)]  # devices {0, 0}
  with pytest.raises(Exception, match=(
      "When making an array from single-device arrays, the input arrays must be from "
      "distinct devices")):
    jax.make_array_from_single_device_arrays(shape, s, bufs)


SHARD_SHAPES = [("mesh_x_y", P("x", "y"), (2, 2)), ("mesh_x", P("x"), (2, 4)),
                ("mesh_y", P("y"), (4, 4)), ("mesh_none_y", P(None, "y"), (8, 2)),
                ("mesh_none_x", P(None, "x"), (8, 1)), ("mesh_xy", P(("x", "y")), (1, 4)),
                ("mesh_replicated", P(()), (8, 4))]


@pytest.mark.parametrize("pspec,expected_shard_shape",
                         [pytest.param(p, e, id=n) for n, p, e in SHARD_SHAPES])
def test_shard_shape_mismatch_with_buffer_shape(pspec, expected_shard_shape):
  mps = NamedSharding(_mesh42(), pspec)
  inp_data = np.arange(5)
  shape_re = str(expected_shard_shape).replace("(", r"\(").replace(")", r"\)")
  with pytest.raises(Exception, match=f"Expected shard shape {shape_re} doesn't match the "
                                      "single device array shape"):
    jax.make_array_from_callback((8, 4), mps, lambda idx: inp_data)


def test_array_iter_pmap_sharding_last_dim_sharded():
  if jax.device_count() < 2:
    pytest.skip("Test requires >= 2 devices.")
  x = jnp.array([[1., 0., 0.], [0., 2., 3.]])
  y = jax.pmap(jnp.sin, out_axes=1)(x)
  rows = list(iter(y))
  assert len(rows) == 3
  for i, j in zip(rows, iter(np.sin(np.asarray(x)).T)):
    np.testing.assert_allclose(np.asarray(i), j, rtol=1e-6, atol=1e-6)
    assert i.shape == j.shape


def test_array_iter_mesh_pspec_sharding_multi_device():
  arr, data = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  rows = list(iter(arr))
  assert len(rows) == 8
  for i, j in zip(rows, iter(data)):
    assert isinstance(i, jax.Array)
    assert_equal(i, j)


def test_array_iter_replicated_multi_device():
  arr, data = create_array((8, 2), NamedSharding(_mesh42(), P(None)))
  rows = list(iter(arr))
  assert len(rows) == 8
  for i, j in zip(rows, iter(data)):
    assert isinstance(i, jax.Array)
    assert_equal(i, j)
    assert len(i.sharding.device_set) == 8
    # JAX: the same HLO sharding (replicated over the 8 devices) as arr.
    assert arr.sharding.is_equivalent_to(i.sharding, i.ndim)


def test_array_getitem_mesh_pspec_sharding_multi_device():
  arr, data = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  s = arr[2:4, 0:1]
  assert isinstance(s, jax.Array)
  assert_equal(s, data[2:4, 0:1])
  p = arr[:2]
  assert isinstance(p, jax.Array)
  assert_equal(p, data[:2])


def test_array_getitem_compile_multi_device_sharding():
  mesh = create_mesh((2, 2, 2), ("x", "y", "z"))
  arr, np_inp = create_array((4, 4, 2), NamedSharding(mesh, P("x", "y", "z")))

  def check(out, inp, shard_shape):
    assert_equal(out, inp)
    assert out.sharding.shard_shape(out.shape) == shard_shape
    assert len(out.sharding.device_set) == 8

  check(arr[:, -1, :], np_inp[:, -1, :], (2, 1))
  check(arr[0, 0, 0], np_inp[0, 0, 0], ())
  check(arr[-1, -1, :], np_inp[-1, -1, :], (1,))
  check(arr[:, 1, 0], np_inp[:, 1, 0], (2,))
  check(arr[:, :, :], np_inp[:, :, :], (2, 2, 1))
  check(arr[3, :, :], np_inp[3, :, :], (2, 1))
  check(arr[-1, -1, -1], np_inp[-1, -1, -1], ())
  check(arr[2, -1, :], np_inp[2, -1, :], (1,))
  check(arr[2, 3, 1], np_inp[2, 3, 1], ())
  check(arr[-1], np_inp[-1], (2, 1))
  check(arr[:], np_inp[:], (2, 2, 1))
  check(arr[np.array(0), :, :], np_inp[np.array(0), :, :], (2, 1))
  check(arr[jnp.array(0), :, :], np_inp[jnp.array(0), :, :], (2, 1))
  check(arr[0, :2, 1], np_inp[0, :2, 1], (2,))
  check(arr[:, 1::2], np_inp[:, 1::2], (2, 2, 1))
  check(arr[:, -1:, :], np_inp[:, -1:, :], (2, 1, 1))
  check(arr[0:6:1], np_inp[0:6:1], (2, 2, 1))
  check(arr[:4], np_inp[:4], (2, 2, 1))
  check(arr[::-1], np_inp[::-1], (2, 2, 1))
  check(arr[1], np_inp[1], (2, 1))


def test_array_getitem_replicated_multi_device():
  arr, data = create_array((8, 2), NamedSharding(_mesh42(), P(None)))
  s = arr[2:4, 0:1]
  assert isinstance(s, jax.Array)
  assert_equal(s, np.array([[4], [6]]))
  assert len(s.sharding.device_set) == 8
  # JAX: the same HLO sharding (replicated over the 8 devices) as arr.
  assert arr.sharding.is_equivalent_to(s.sharding, s.ndim)
  p = arr[:2]
  assert isinstance(p, jax.Array)
  assert_equal(p, data[:2])
  assert len(s.sharding.device_set) == 8
  assert arr.sharding.is_equivalent_to(s.sharding, s.ndim)


def test_array_iter_mesh_pspec_sharding_single_device():
  if jax.device_count() < 2:
    pytest.skip("Test requires >= 2 devices.")
  single_dev = jax.devices()[1:2]
  mesh = Mesh(np.array(single_dev), ("x"))
  arr, data = create_array((8, 2), NamedSharding(mesh, P("x")))
  rows = list(arr)
  assert len(rows) == 8
  for i, j in zip(rows, iter(data)):
    assert_equal(i, j)
    assert i.devices() == {single_dev[0]}


def test_array_shards_committed():
  if jax.device_count() < 2:
    pytest.skip("Test requires >= 2 devices.")
  x = jnp.array([1, 2, 3])
  for s in x.addressable_shards:
    assert s.data.committed == x.committed
    assert not s.data.committed
  y = jax.device_put(x, jax.devices()[1])
  for s in y.addressable_shards:
    assert s.data.committed == y.committed
    assert s.data.committed


def test_array_jnp_array_copy_multi_device():
  arr, _ = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  c_arr = jnp.array(arr, copy=True)
  assert_equal(arr, c_arr)
  assert arr.committed == c_arr.committed
  pairs = list(zip(arr.addressable_shards, c_arr.addressable_shards))
  assert len(pairs) == len(arr.addressable_shards) == len(c_arr.addressable_shards)
  for a, c in pairs:
    assert_equal(a.data, c.data)
    assert (a.index, a.replica_id, a.device) == (c.index, c.replica_id, c.device)
    # a copy: distinct buffers
    assert a.data.unsafe_buffer_pointer() != c.data.unsafe_buffer_pointer()


def test_array_addressable_shards():
  arr, _ = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  for a in arr.addressable_shards:
    assert isinstance(a.data, jax.Array)
  x = jnp.array([1, 2, 3])
  assert isinstance(x.addressable_data(0), jax.Array)


def test_array_not_hashable():
  x = jnp.arange(4)
  with pytest.raises(TypeError, match="unhashable type"):
    hash(x)
  with pytest.raises(TypeError, match="unhashable type"):
    jax.jit(hash)(x)
  with pytest.raises(TypeError, match="unhashable type"):
    jax.vmap(hash)(x)


def test_shape_dtype_struct_sharding_jit():
  mesh = create_mesh((8,), ("x"))
  s = NamedSharding(mesh, P("x"))
  x_dummy = jax.ShapeDtypeStruct(shape=(16,), dtype=jnp.dtype("float32"), sharding=s)
  c = jax.jit(lambda x: x * 2).lower(x_dummy).compile()
  input_shardings, output_shardings = c.input_shardings, c.output_shardings
  # (positional arguments' shardings, keyword arguments' shardings)
  assert len(input_shardings) == 2
  assert input_shardings[1] == {}
  # JAX compares HLO shardings: the same placement of a rank-1 value.
  assert input_shardings[0][0].is_equivalent_to(s, x_dummy.ndim)
  assert output_shardings.is_equivalent_to(s, x_dummy.ndim)


def test_on_device_size_in_bytes():
  a, _ = create_array((8, 2), NamedSharding(_mesh42(), P("x", "y")))
  shard_size = a.addressable_shards[0].data.on_device_size_in_bytes()
  assert shard_size >= 4 * 2
  assert shard_size * len(a.global_shards) == a.on_device_size_in_bytes()


def test_array_is_ready():
  x = jax.device_put(jnp.arange(8.), jax.devices()[0])
  x.is_ready()  # doesn't crash
  assert_equal(x, np.arange(8, dtype=np.float32))


def test_process_allgather_single_host():
  from jax.experimental import multihost_utils
  x = jnp.arange(8.)
  out = multihost_utils.process_allgather(x, tiled=True)
  assert out.shape == x.shape
  assert_equal(out, x)
  out = multihost_utils.process_allgather(x)
  assert out.shape == (1, x.shape[0])
  assert_equal(out, np.expand_dims(np.asarray(x), axis=0))


def test_broadcast_one_to_all_single_host():
  from jax.experimental import multihost_utils
  x = jnp.arange(8, dtype=jnp.uint8)
  out = multihost_utils.broadcast_one_to_all(x)
  assert out.shape == x.shape
  assert out.dtype == x.dtype
  assert_equal(out, x)


def _rand(rng, shape, dtype):
  """jtu.rand_default: values of moderate size in dtype."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if dtype.kind in "iu":
    return rng.integers(0 if dtype.kind == "u" else -5, 6, size=shape).astype(dtype)
  vals = rng.standard_normal(shape) * 3
  if dtype.kind == "c":
    vals = vals + 1j * rng.standard_normal(shape) * 3
  return np.asarray(vals).astype(dtype)


@pytest.mark.parametrize("shape", [(), 10, (2, 3)], ids=["scalar", "10", "2x3"])
@pytest.mark.parametrize("dtype", [
    pytest.param(d, id=np.dtype(d).name, marks=pytest.mark.xfail(strict=True, reason=(
        "partix's Array has no Python buffer protocol (memoryview(Array) raises TypeError)")))
    for d in HELD] + [
    pytest.param(d, id=np.dtype(d).name, marks=pytest.mark.xfail(strict=True, reason=(
        "partix holds no complex dtypes, and its Array has no Python buffer protocol")))
    for d in NOT_HELD])
def test_buffer_protocol(dtype, shape):
  x = _rand(np.random.default_rng(0), shape, dtype)
  y = jax.device_put(x)
  if np.dtype(dtype) == np.dtype(jnp.bfloat16):
    with pytest.raises(BufferError, match="Buffers of type BF16 are not supported by the "
                                          "Python buffer protocol."):
      memoryview(y)
    return
  assert memoryview(x).tobytes() == memoryview(y).tobytes()


@pytest.mark.xfail(strict=True, reason=(
    "partix's Array has no Python buffer protocol (memoryview(Array) raises TypeError)"))
def test_buffer_protocol_donation():
  @jax.jit(donate_argnums=(0,))
  def add_one(x):
    return x + 1

  x = _rand(np.random.default_rng(0), (64, 64), np.float32)
  y = jax.device_put(x)
  _ = memoryview(y)  # holds a reference to y's buffer
  assert_equal(add_one(y), x + 1)  # doesn't crash


@pytest.mark.xfail(strict=True, reason=(
    "partix's Array has no Python buffer protocol (memoryview(Array) raises TypeError)"))
def test_buffer_protocol_deletion():
  x = _rand(np.random.default_rng(0), (3, 4), np.float32)
  y = jax.device_put(x)
  x_bytes = memoryview(x).tobytes()
  y_view = memoryview(y)
  # The buffer lives on while the view holds it, delete() or not.
  y.delete()
  assert y_view.tobytes() == x_bytes


def test_array_copy_to_host_async():
  mesh = create_mesh((2, 2), ("x", "y"))
  x = jax.jit(lambda: jnp.arange(8.), out_shardings=jax.NamedSharding(mesh, P(None)))()
  assert len(x.sharding.device_set) == 4
  x.copy_to_host_async()  # doesn't crash
  assert_equal(np.arange(8.), x)


def test_array_fully_replicated_shard():
  # JAX reads the private _fully_replicated_shard(); its public face is addressable_data(0):
  # the whole value on one device.
  arr, data = create_array((8, 2), NamedSharding(_mesh42(), P()))
  fs = arr.addressable_data(0)
  assert fs.shape == (8, 2)
  assert fs.sharding.num_devices == 1
  assert_equal(fs, data)
  assert_equal(arr.addressable_data(0), data)


def test_shard_array_to_fully_replicated():
  sharding = NamedSharding(_mesh42(), P())
  arr = jnp.arange(16)
  assert not arr.committed
  assert arr.sharding == SingleDeviceSharding(jax.devices()[0])
  out = jax.jit(lambda x: x * 2, in_shardings=sharding)(arr)
  assert out.sharding.is_fully_replicated
  assert_equal(out, np.asarray(arr) * 2)


def test_fully_replicated_donated_array_is_deleted():
  sharding = NamedSharding(_mesh42(), P())
  arr = jnp.arange(16)
  arr_copy = arr.copy()
  assert not arr.committed
  assert arr.sharding == SingleDeviceSharding(jax.devices()[0])
  out = jax.jit(lambda x: x * 2, in_shardings=sharding, donate_argnums=0)(arr)
  assert out.sharding.is_fully_replicated
  assert_equal(out, np.asarray(arr_copy) * 2)
  assert arr.is_deleted()


@pytest.mark.parametrize("dtype", [pytest.param(d, id=np.dtype(d).name) for d in HELD] + [
    pytest.param(d, id=np.dtype(d).name, marks=pytest.mark.xfail(
        strict=True, reason="partix holds no complex dtypes"))
    for d in NOT_HELD] + [pytest.param(jnp.bfloat16, id="custom_bfloat16")])
def test_shards_have_correct_dtype(dtype):
  x = jnp.ones((), dtype=dtype)
  shards = x.addressable_shards
  assert shards
  for s in shards:
    assert s.data.dtype == dtype


def test_make_array_from_callback_global_array():
  mesh = _mesh42()
  sharding = NamedSharding(mesh, P())
  np_inp = np.arange(16).reshape(8, 2)
  arr = jax.device_put(np_inp, sharding)
  out = jax.make_array_from_callback(np_inp.shape, sharding, lambda idx: arr[idx])
  assert_equal(out, arr)
  assert out.sharding == sharding

  sharding2 = NamedSharding(mesh, P("x", "y"))
  arr2 = jax.device_put(np_inp, sharding2)
  out2 = jax.make_array_from_callback(np_inp.shape, sharding2, lambda idx: arr2[idx])
  assert_equal(out2, arr2)
  assert out2.sharding == sharding2


def test_make_array_from_process_data_single_host_data_sharding():
  mesh = create_mesh((2, 1), ("x", "y"))
  data = np.ones((256, 512))
  s = jax.NamedSharding(mesh, P("x"))
  result = jax.make_array_from_process_local_data(s, data)
  assert_equal(result, data)
  assert result.sharding == s
  with jax.set_mesh(mesh):
    result = jax.make_array_from_process_local_data(P("x"), data)
    assert_equal(result, data)
    assert result.sharding == s


def test_make_array_from_single_device_arrays_no_dtype_error():
  s = NamedSharding(_mesh42(), P("x", "y"))
  with pytest.raises(Exception, match=(
      "If the Array has no addressable shards, `dtype` must be provided via the `dtype` "
      "argument to `jax.make_array_from_single_device_arrays`.")):
    jax.make_array_from_single_device_arrays((8, 2), s, [])


def test_make_array_from_single_device_arrays_bad_dtype_error():
  s = SingleDeviceSharding(jax.devices()[0])
  shape = (8, 2)
  arr = jax.device_put(np.arange(16).reshape(shape), s)
  with pytest.raises(Exception, match=(
      "If `dtype` is provided to `jax.make_array_from_single_device_arrays`, it must match "
      "the dtype of the addressable shards.")):
    jax.make_array_from_single_device_arrays(shape, s, [arr], dtype=jnp.float32)


def test_unreduced_printing():
  # jtu.with_explicit_mesh((2,), ('x',)): an Explicit mesh, set as the current one.
  mesh = create_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
  with jax.set_mesh(mesh):
    x = jax.device_put(jnp.arange(8., dtype="float32"), P("x"))
    x = lax.reduce_sum(x, [0], out_sharding=P(unreduced={"x"}))
    assert "nreduced" in str(x.sharding)
    assert "Array(shape=(), dtype=float32, sharding=" in str(x)


@pytest.mark.skipif(tuple(int(v) for v in np.__version__.split(".")[:2]) < (2, 4),
                    reason="__numpy_dtype__ protocol requires NumPy v2.4 or later")
def test_deprecated_dtype_conversion():
  x = jnp.arange(4)
  # JAX: a DeprecationWarning (a TypeError once the deprecation completes).
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    try:
      np.dtype(x)
      raised = False
    except TypeError:
      raised = True
  msg = "Implicit conversion of an array to a dtype is deprecated"
  assert raised or any(issubclass(i.category, DeprecationWarning) and msg in str(i.message)
                       for i in w), [str(i.message) for i in w]


@pytest.mark.xfail(strict=True, reason=(
    "partix's arrays carry no weak type: ShapeDtypeStruct.like(jnp.array(1.)).weak_type is "
    'False (JAX: True); the rest of the case (shardings of committed, uncommitted and traced '
    'arrays) matches'))
def test_sds_like():
  out = jax.ShapeDtypeStruct.like(jnp.array(1.))
  assert out.weak_type
  assert out.shape == ()
  assert out.sharding is None  # uncommitted input

  out = jax.ShapeDtypeStruct.like(np.array(1.))
  assert not out.weak_type
  assert out.shape == ()

  out = jax.ShapeDtypeStruct.like(jnp.arange(8))
  assert out.sharding is None  # uncommitted input

  x = jax.device_put(jnp.arange(8), SingleDeviceSharding(jax.devices()[0]))
  assert jax.ShapeDtypeStruct.like(x).sharding == SingleDeviceSharding(jax.devices()[0])

  mesh = create_mesh((2,), "x")
  x = jax.device_put(jnp.arange(8), NamedSharding(mesh, P("x")))
  assert jax.ShapeDtypeStruct.like(x).sharding == NamedSharding(mesh, P("x"))

  seen = []

  @jax.jit
  def f(a):
    sds = jax.ShapeDtypeStruct.like(a)
    seen.append(sds.sharding.spec)
    return jnp.ones(sds.shape, sds.dtype, out_sharding=sds.sharding)

  mesh = create_mesh((2,), "x", axis_types=(AxisType.Explicit,))
  x = jax.device_put(jnp.arange(8), NamedSharding(mesh, P("x")))
  with jax.set_mesh(mesh):
    f(x)
  assert seen == [P("x")]
