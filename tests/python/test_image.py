"""jax.image.resize and scale_and_translate against JAX 0.10.2's results
(tests/golden/ops_image.npz, written by tools/golden/ops_image.py): every method, up- and
downsampling with and without antialiasing, integer images, gradients (with respect to the
image, and to a traced scale and translation), under jit and vmap, on a sharded batch, and the
refusals of bad arguments."""
import os

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.sharding import NamedSharding, PartitionSpec as P

GOLDEN = np.load(os.path.join(os.path.dirname(__file__), "..", "golden", "ops_image.npz"))
IMG = GOLDEN["in_img"]
METHODS = ["nearest", "linear", "cubic", "lanczos3", "lanczos5", "cubic-pytorch", "area"]
SHAPES = {"up": (12, 17), "down": (3, 5), "mixed": (6, 5)}
ST_CASES = {
    "linear": ("linear", (10, 12), (1.7, 1.3), (0.5, -1.0), True),
    "cubic": ("cubic", (10, 12), (1.7, 1.3), (0.5, -1.0), True),
    "lanczos3_down": ("lanczos3", (4, 5), (0.6, 0.45), (0.25, 0.75), True),
    "lanczos3_down_noaa": ("lanczos3", (4, 5), (0.6, 0.45), (0.25, 0.75), False),
    "pytorch_noaa": ("cubic-pytorch", (10, 12), (1.7, 1.3), (0.5, -1.0), False),
    "pytorch_down_noaa": ("cubic-pytorch", (4, 5), (0.6, 0.45), (0.0, 0.0), False),
    "area": ("area", (4, 5), (0.6, 0.45), (0.25, 0.75), True),
}


def close(got, want, tol=2e-6):
  got = np.asarray(got)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  assert got.shape == want.shape, (got.shape, want.shape)
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("method", METHODS)
def test_resize_matches_jax(method):
  for case, shape in SHAPES.items():
    for aa in (True, False):
      want = GOLDEN[f"resize_{method}_{case}_{'aa' if aa else 'noaa'}"]
      close(jax.image.resize(IMG, shape, method, antialias=aa), want)
      close(jax.image.resize(jnp.asarray(IMG), shape, method, aa), want)


def test_method_names_and_enum():
  want = GOLDEN["resize_linear_up_aa"]
  for name in ("linear", "bilinear", "trilinear", "triangle"):
    close(jax.image.resize(IMG, (12, 17), name), want)
  close(jax.image.resize(IMG, (12, 17), jax.image.ResizeMethod.LINEAR), want)
  cubic = GOLDEN["resize_cubic_down_noaa"]
  for name in ("cubic", "bicubic", "tricubic"):
    close(jax.image.resize(IMG, (3, 5), name, antialias=False), cubic)
  assert jax.image.ResizeMethod.from_string("lanczos5") is jax.image.ResizeMethod.LANCZOS5
  assert [m.name for m in jax.image.ResizeMethod] == [
      "NEAREST", "LINEAR", "LANCZOS3", "LANCZOS5", "CUBIC", "CUBIC_PYTORCH", "AREA"]


def test_integer_images():
  got = jax.image.resize(GOLDEN["in_u8"], (9, 4, 2), "linear")  # promoted to float32
  close(got, GOLDEN["resize_u8"], 2e-5)
  got = jax.image.resize(GOLDEN["in_ints"], (8, 3), "nearest")  # keeps its dtype
  np.testing.assert_array_equal(np.asarray(got), GOLDEN["resize_nearest_int"])
  assert got.dtype == np.int32


def test_batch_and_channel_dimensions_stay():
  x = np.random.RandomState(0).rand(2, 6, 8, 3).astype(np.float32)
  got = np.asarray(jax.image.resize(x, (2, 12, 17, 3), "lanczos3"))
  ref = jax.image.resize(IMG, (12, 17), "lanczos3")  # the same per image and channel
  np.testing.assert_allclose(got[0, :, :, 0],
                             np.asarray(jax.image.resize(x[0, :, :, 0], (12, 17), "lanczos3")),
                             rtol=1e-6, atol=1e-6)
  assert got.shape == (2, 12, 17, 3) and ref.shape == (12, 17)
  assert np.asarray(jax.image.resize(x, x.shape, "cubic")).tolist() == x.tolist()


@pytest.mark.parametrize("name", list(ST_CASES))
def test_scale_and_translate_matches_jax(name):
  method, shape, scale, trans, aa = ST_CASES[name]
  want = GOLDEN[f"st_{name}"]
  close(jax.image.scale_and_translate(IMG, shape, (0, 1), np.array(scale, np.float32),
                                      np.array(trans, np.float32), method, antialias=aa),
        want, 1e-5)
  # A scale and translation given as partix arrays are computed in the program: the same.
  close(jax.image.scale_and_translate(IMG, shape, (0, 1), jnp.asarray(scale),
                                      jnp.asarray(trans), method, antialias=aa), want, 1e-5)
  got = jax.jit(lambda s, t: jax.image.scale_and_translate(IMG, shape, (0, 1), s, t, method,
                                                           antialias=aa))(
      jnp.asarray(scale), jnp.asarray(trans))
  close(got, want, 1e-5)


def test_resize_gradients_match_jax():
  w = GOLDEN["in_resize_w"]
  for method in ("linear", "lanczos3", "cubic"):
    g = jax.grad(lambda x, m=method: jnp.sum(jax.image.resize(x, (3, 5), m) * w))(IMG)
    close(g, GOLDEN[f"resize_grad_{method}"], 1e-5)
    g = jax.jit(jax.grad(lambda x, m=method: jnp.sum(jax.image.resize(x, (3, 5), m) * w)))(IMG)
    close(g, GOLDEN[f"resize_grad_{method}"], 1e-5)


def test_scale_and_translate_gradients_match_jax():
  w = GOLDEN["in_st_w"]
  for method in ("linear", "cubic", "lanczos3"):
    def loss(s, t, m=method):
      return jnp.sum(jax.image.scale_and_translate(IMG, (10, 12), (0, 1), s, t, m) * w)
    gs, gt = jax.grad(loss, argnums=(0, 1))(jnp.asarray([1.7, 1.3]), jnp.asarray([0.5, -1.0]))
    got = np.concatenate([np.asarray(gs), np.asarray(gt)])
    np.testing.assert_allclose(got, GOLDEN[f"st_grad_{method}"], rtol=1e-4, atol=1e-4)


def test_gradient_by_finite_differences():
  with jax.enable_x64():  # float64 finite differences (as JAX's with x64)
    _gradient_by_finite_differences()


def _gradient_by_finite_differences():
  rng = np.random.RandomState(5)
  x = rng.rand(5, 6)
  w = rng.randn(8, 4)
  for method in ("linear", "cubic", "lanczos5", "area"):
    def loss(a, m=method):
      return jnp.sum(jax.image.resize(a, (8, 4), m) * jnp.asarray(w, jnp.float64))
    g = np.asarray(jax.grad(loss)(jnp.asarray(x, jnp.float64)))
    eps = 1e-6
    for i, j in [(0, 0), (2, 3), (4, 5), (1, 4)]:
      dp, dm = x.copy(), x.copy()
      dp[i, j] += eps
      dm[i, j] -= eps
      fd = (float(loss(jnp.asarray(dp, jnp.float64))) -
            float(loss(jnp.asarray(dm, jnp.float64)))) / (2 * eps)
      assert abs(g[i, j] - fd) < 1e-4, (method, i, j, g[i, j], fd)


def test_under_vmap():
  batch = np.random.RandomState(6).rand(3, 6, 8).astype(np.float32)
  for method in ("nearest", "linear", "lanczos3"):
    got = jax.vmap(lambda im, m=method: jax.image.resize(im, (3, 5), m))(batch)
    for k in range(3):
      np.testing.assert_allclose(np.asarray(got[k]),
                                 np.asarray(jax.image.resize(batch[k], (3, 5), method)),
                                 rtol=1e-6, atol=1e-6)
  scales = jnp.asarray([[1.7, 1.3], [1.2, 1.5], [2.0, 1.1]])
  got = jax.vmap(lambda s: jax.image.scale_and_translate(
      IMG, (10, 12), (0, 1), s, jnp.zeros(2), "linear"))(scales)
  for k in range(3):
    np.testing.assert_allclose(np.asarray(got[k]), np.asarray(jax.image.scale_and_translate(
        IMG, (10, 12), (0, 1), np.asarray(scales[k]), np.zeros(2), "linear")), rtol=1e-5,
        atol=1e-5)


def test_sharded_batch():
  mesh = jax.make_mesh((8,), ("x",))
  batch = np.random.RandomState(7).rand(8, 6, 8, 2).astype(np.float32)
  xs = jax.device_put(batch, NamedSharding(mesh, P("x")))
  for method in ("nearest", "linear", "cubic"):
    want = np.stack([np.asarray(jax.image.resize(b, (12, 5, 2), method)) for b in batch])
    got = jax.image.resize(xs, (8, 12, 5, 2), method)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
    assert got.sharding.spec[0] == "x"  # the batch stays split, as in JAX
    got = jax.jit(lambda b, m=method: jax.image.resize(b, (8, 12, 5, 2), m))(xs)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
  g = jax.jit(jax.grad(lambda b: jnp.sum(jax.image.resize(b, (8, 3, 4, 2), "linear"))))(xs)
  assert g.shape == xs.shape and g.sharding.spec[0] == "x"


def test_bad_arguments():
  with pytest.raises(jax.PartixError, match=r"image.resize.*unknown resize method 'bogus'"):
    jax.image.resize(IMG, (3, 4), "bogus")
  with pytest.raises(jax.PartixError, match=r"image.resize.*shape \(3, 4, 1\) must have one "
                     r"entry per dimension"):
    jax.image.resize(IMG, (3, 4, 1), "linear")
  with pytest.raises(jax.PartixError, match=r"negative dimension"):
    jax.image.resize(IMG, (3, -4), "linear")
  with pytest.raises(jax.PartixError, match=r"method must be a ResizeMethod or its name, got 3"):
    jax.image.resize(IMG, (3, 4), 3)
  with pytest.raises(jax.PartixError, match=r"nearest-neighbour resampling is not supported"):
    jax.image.scale_and_translate(IMG, (3, 4), (0, 1), [1.0, 1.0], [0.0, 0.0], "nearest")
  with pytest.raises(jax.PartixError, match=r"scale has 1 entries for 2 spatial_dims"):
    jax.image.scale_and_translate(IMG, (3, 4), (0, 1), [1.0], [0.0, 0.0], "linear")
  with pytest.raises(jax.PartixError, match=r"dimension 1 is not in spatial_dims"):
    jax.image.scale_and_translate(IMG, (3, 4), (0,), [1.0], [0.0], "linear")
  with pytest.raises(jax.PartixError, match=r"unknown resize method 'cubic-torch'"):
    jax.image.ResizeMethod.from_string("cubic-torch")
