"""partix.ckpt (checkpoints): a pytree saved in one sharding restores in others (finer, coarser, one
device, another mesh), with values equal to the saved numpy data; bad input is a PartixError."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import ckpt as checkpoint
from partix.sharding import NamedSharding, PartitionSpec as P


def _tree(mesh8, rng):
  w = rng.standard_normal((8, 6)).astype(np.float32)
  b = rng.standard_normal((6,)).astype(np.float32)
  e = rng.standard_normal((5, 4)).astype(np.float32)  # uneven over 4
  host = {"params": {"w": w, "b": b}, "layers": [e], "step": np.array(7, np.int32)}
  dev = {"params": {"w": jax.device_put(w, NamedSharding(mesh8, P("x", "y"))),
                    "b": jax.device_put(b, NamedSharding(mesh8, P("y")))},
         "layers": [jax.device_put(e, NamedSharding(mesh8, P("x")))],
         "step": jnp.asarray(host["step"])}
  return host, dev


def _target(host, sharding_of):
  return jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding_of(x)), host)


def test_restore_onto_other_shardings(tmp_path, mesh8, mesh1, rng):
  host, dev = _tree(mesh8, rng)
  checkpoint.save(tmp_path, 3, dev, metadata={"note": "x"})
  checkpoint.wait()
  assert checkpoint.latest_step(tmp_path) == 3 and checkpoint.all_steps(tmp_path) == [3]
  assert checkpoint.metadata(tmp_path, 3)["note"] == "x"
  flat = jax.make_mesh((8,), ("d",))
  finer = lambda x: NamedSharding(flat, P("d") if x.ndim and x.shape[0] % 8 == 0 else P())
  for sharding_of in (finer, lambda x: NamedSharding(mesh1, P()),
                      lambda x: NamedSharding(mesh8, P(None, "x") if x.ndim == 2 else P())):
    out = checkpoint.restore(tmp_path, None, _target(host, sharding_of))
    for got, want, tgt in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(host),
                              jax.tree_util.tree_leaves(_target(host, sharding_of))):
      np.testing.assert_array_equal(np.asarray(got), want)
      assert got.sharding == tgt.sharding


def test_names_match_the_cpp_params_and_dtype_converts(tmp_path, mesh8, rng):
  w = rng.standard_normal((4, 4)).astype(np.float32)
  checkpoint.save(tmp_path, 1, {"model": {"w": jnp.asarray(w)}})
  checkpoint.wait()
  # The leaf is named "model.w": a flat dict with that key restores it too, here as bf16.
  out = checkpoint.restore(tmp_path, 1, {"model.w": jax.ShapeDtypeStruct(
      (4, 4), jnp.bfloat16, NamedSharding(mesh8, P("x")))})
  np.testing.assert_array_equal(np.asarray(out["model.w"]), w.astype(jnp.bfloat16))


def test_training_resumes_from_a_restore(tmp_path, mesh8, rng):
  x = jax.device_put(rng.standard_normal((8, 4)).astype(np.float32),
                     NamedSharding(mesh8, P("x")))
  w0 = jax.device_put(np.zeros((4,), np.float32), NamedSharding(mesh8, P("y")))

  @jax.jit
  def step(w):
    g = jax.grad(lambda w: jnp.mean((x @ w - 1.0) ** 2))(w)
    return w - 0.1 * g
  w = w0
  for i in range(4):
    w = step(w)
    if i == 1:
      checkpoint.save(tmp_path, 2, {"w": w})
  checkpoint.wait()
  r = checkpoint.restore(tmp_path, 2, {"w": jax.ShapeDtypeStruct((4,), jnp.float32,
                                                                 NamedSharding(mesh8, P()))})["w"]
  for _ in range(2):
    r = step(r)
  np.testing.assert_allclose(np.asarray(r), np.asarray(w), rtol=1e-6, atol=1e-7)


def test_bad_input(tmp_path, mesh8):
  with pytest.raises(jax.PartixError, match=r"\[ckpt.save\].*not a partix Array"):
    checkpoint.save(tmp_path, 1, {"w": np.ones(3)})
  with pytest.raises(jax.PartixError, match=r"\[ckpt.restore\] no committed step"):
    checkpoint.restore(tmp_path / "none", None, {"w": jnp.ones(3)})
  checkpoint.save(tmp_path, 1, {"w": jnp.ones(3)})
  checkpoint.wait()
  with pytest.raises(jax.PartixError, match=r"\[ckpt.restore\].*no sharding"):
    checkpoint.restore(tmp_path, 1, {"w": jax.ShapeDtypeStruct((3,), jnp.float32)})
  with pytest.raises(jax.PartixError):  # a leaf the checkpoint lacks
    checkpoint.restore(tmp_path, 1, {"v": jnp.ones(3)})
  with pytest.raises(jax.PartixError):  # the wrong shape
    checkpoint.restore(tmp_path, 1, {"w": jax.ShapeDtypeStruct(
        (4,), jnp.float32, NamedSharding(mesh8, P()))})
