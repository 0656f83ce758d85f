#!/usr/bin/env python3
"""JAX's results of jax.ops' segment reductions and jax.image's resize / scale_and_translate,
with their gradients, for tests/python/test_ops_segment.py and tests/python/test_image.py.

Regenerate (from the repository root; the tests never import JAX):

    python3 -m venv /tmp/jax-venv && /tmp/jax-venv/bin/pip install jax==0.10.2
    /tmp/jax-venv/bin/python tools/golden/ops_image.py   # writes tests/golden/ops_image.npz

The inputs are stored beside the results ("in_*"), so a test reads both from the file. Names:
seg_<op>_<variant> (op sum, prod, max, min; variant default, clip, bucket, auto, int),
seggrad_<op>, resize_<method>_<case>_<aa|noaa>, resize_u8, resize_nearest_int, st_<case>,
resize_grad_<method>, st_grad_<method> (the gradient with respect to scale and translation).
"""
import os

import jax
import jax.numpy as jnp
import numpy as np

METHODS = ["nearest", "linear", "cubic", "lanczos3", "lanczos5", "cubic-pytorch", "area"]
RESIZE_SHAPES = {"up": (12, 17), "down": (3, 5), "mixed": (6, 5)}
ST_CASES = {  # name: (method, shape, scale, translation, antialias)
    "linear": ("linear", (10, 12), (1.7, 1.3), (0.5, -1.0), True),
    "cubic": ("cubic", (10, 12), (1.7, 1.3), (0.5, -1.0), True),
    "lanczos3_down": ("lanczos3", (4, 5), (0.6, 0.45), (0.25, 0.75), True),
    "lanczos3_down_noaa": ("lanczos3", (4, 5), (0.6, 0.45), (0.25, 0.75), False),
    "pytorch_noaa": ("cubic-pytorch", (10, 12), (1.7, 1.3), (0.5, -1.0), False),
    "pytorch_down_noaa": ("cubic-pytorch", (4, 5), (0.6, 0.45), (0.0, 0.0), False),
    "area": ("area", (4, 5), (0.6, 0.45), (0.25, 0.75), True),
}


def main():
  rng = np.random.RandomState(7)
  out = {}
  # ---- segment reductions ----
  data = rng.randn(10, 3).astype(np.float32)
  data[3] = data[1]  # ties inside segment 1 (ids below): max/min share the derivative
  ids = np.array([0, 1, 1, 1, 4, 2, 6, -1, 4, 0], np.int32)
  auto_ids = np.array([0, 1, 1, 1, 4, 2, 3, 3, 4, 0], np.int32)
  int_data = rng.randint(-20, 20, size=(10, 3)).astype(np.int32)
  weights = rng.randn(5, 3).astype(np.float32)
  out.update(in_seg_data=data, in_seg_ids=ids, in_seg_auto_ids=auto_ids,
             in_seg_int=int_data, in_seg_w=weights)
  ops = {"sum": jax.ops.segment_sum, "prod": jax.ops.segment_prod,
         "max": jax.ops.segment_max, "min": jax.ops.segment_min}
  for name, f in ops.items():
    out[f"seg_{name}_default"] = np.asarray(f(data, ids, 5))
    out[f"seg_{name}_clip"] = np.asarray(f(data, ids, 5, mode="clip"))
    out[f"seg_{name}_bucket"] = np.asarray(f(data, ids, 5, bucket_size=3))
    out[f"seg_{name}_auto"] = np.asarray(f(data, auto_ids))
    out[f"seg_{name}_int"] = np.asarray(f(int_data, ids, 5))
    if name == "prod":  # JAX differentiates scatter_mul only with unique indices
      uids = np.array([4, 0, 2, 1, 3, 9, 8, 7, 6, 5], np.int32)
      out["in_seg_unique_ids"] = uids
      g = jax.grad(lambda d: jnp.sum(f(d, uids, 10, unique_indices=True)[:5] * weights))(data)
    else:
      g = jax.grad(lambda d, f=f: jnp.sum(f(d, ids, 5) * weights))(data)
    out[f"seggrad_{name}"] = np.asarray(g)
  # ---- resize ----
  img = rng.rand(6, 8).astype(np.float32)
  out["in_img"] = img
  for method in METHODS:
    for case, shape in RESIZE_SHAPES.items():
      for aa in (True, False):
        r = jax.image.resize(img, shape, method, antialias=aa)
        out[f"resize_{method}_{case}_{'aa' if aa else 'noaa'}"] = np.asarray(r)
  u8 = rng.randint(0, 255, size=(5, 7, 2)).astype(np.uint8)
  out["in_u8"] = u8
  out["resize_u8"] = np.asarray(jax.image.resize(u8, (9, 4, 2), "linear"))
  ints = rng.randint(-50, 50, size=(5, 7)).astype(np.int32)
  out["in_ints"] = ints
  out["resize_nearest_int"] = np.asarray(jax.image.resize(ints, (8, 3), "nearest"))
  rw = rng.randn(3, 5).astype(np.float32)
  out["in_resize_w"] = rw
  for method in ("linear", "lanczos3", "cubic"):
    g = jax.grad(lambda x, m=method: jnp.sum(jax.image.resize(x, (3, 5), m) * rw))(img)
    out[f"resize_grad_{method}"] = np.asarray(g)
  # ---- scale_and_translate ----
  for name, (method, shape, scale, trans, aa) in ST_CASES.items():
    r = jax.image.scale_and_translate(img, shape, (0, 1), jnp.array(scale), jnp.array(trans),
                                      method, antialias=aa)
    out[f"st_{name}"] = np.asarray(r)
  sw = rng.randn(10, 12).astype(np.float32)
  out["in_st_w"] = sw
  for method in ("linear", "cubic", "lanczos3"):
    def loss(s, t, m=method):
      return jnp.sum(jax.image.scale_and_translate(img, (10, 12), (0, 1), s, t, m) * sw)
    gs, gt = jax.grad(loss, argnums=(0, 1))(jnp.array([1.7, 1.3]), jnp.array([0.5, -1.0]))
    out[f"st_grad_{method}"] = np.concatenate([np.asarray(gs), np.asarray(gt)])
  path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "ops_image.npz")
  np.savez_compressed(path, jax_version=np.array(jax.__version__), **out)


if __name__ == "__main__":
  main()
