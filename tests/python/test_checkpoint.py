"""partix.ckpt (checkpoints): a pytree saved in one sharding restores in others (finer, coarser, one
device, another mesh), with values equal to the saved numpy data; bad input is a PartixError.
One writer per folder: two processes saving into one folder at once get one success and one
clear refusal, a committed step is replaced only when asked, and a killed writer frees it."""
import os
import re
import subprocess
import sys
import textwrap
import time

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


def test_a_committed_step_is_replaced_only_when_asked(tmp_path, mesh8):
  s = NamedSharding(mesh8, P("x"))
  a, b = np.arange(8, dtype=np.float32), -np.arange(8, dtype=np.float32)
  target = {"w": jax.ShapeDtypeStruct((8,), jnp.float32, s)}
  checkpoint.save(tmp_path, 1, {"w": jax.device_put(a, s)})
  checkpoint.wait()
  with pytest.raises(jax.PartixError, match=r"\[ckpt.save\] step 1 of '.*' is already committed"
                     r".*overwrite=True"):
    checkpoint.save(tmp_path, 1, {"w": jax.device_put(b, s)})
  np.testing.assert_array_equal(np.asarray(checkpoint.restore(tmp_path, 1, target)["w"]), a)
  checkpoint.save(tmp_path, 1, {"w": jax.device_put(b, s)}, overwrite=True)
  checkpoint.wait()
  assert checkpoint.all_steps(tmp_path) == [1]
  np.testing.assert_array_equal(np.asarray(checkpoint.restore(tmp_path, 1, target)["w"]), b)


def test_steps_are_whole_numbers(tmp_path, mesh8):
  tree = {"w": jnp.ones(4)}
  for bad in (2.7, 2.0, True, np.bool_(True), np.float32(3), np.float64(2.5), "3", None, 1j):
    with pytest.raises(jax.PartixError, match=r"\[ckpt.save\] step " + re.escape(repr(bad))
                       + " is .*not an integer"):
      checkpoint.save(tmp_path, bad, tree)
  with pytest.raises(jax.PartixError, match=r"\[ckpt.save\] step -1 is negative"):
    checkpoint.save(tmp_path, -1, tree)
  with pytest.raises(jax.PartixError, match=r"\[ckpt.save\] step 9223372036854775808 is past "
                     "int64"):
    checkpoint.save(tmp_path, 2**63, tree)
  with pytest.raises(jax.PartixError, match=r"\[ckpt.save\] step np.uint64\(.*past int64"):
    checkpoint.save(tmp_path, np.uint64(2**63), tree)
  assert checkpoint.all_steps(tmp_path) == []
  checkpoint.save(tmp_path, np.int64(4), tree)
  checkpoint.save(tmp_path, np.int32(5), tree)
  checkpoint.save(tmp_path, 2**63 - 1, tree)
  checkpoint.wait()
  assert checkpoint.all_steps(tmp_path) == [4, 5, 2**63 - 1]
  target = {"w": jax.ShapeDtypeStruct((4,), jnp.float32, NamedSharding(mesh8, P()))}
  np.testing.assert_array_equal(np.asarray(checkpoint.restore(tmp_path, np.int64(4), target)["w"]),
                                np.ones(4, np.float32))
  for bad, what in ((2.7, "not an integer"), (False, "a bool"), (-3, "negative"),
                    (2**64, "past int64")):
    with pytest.raises(jax.PartixError, match=r"\[ckpt.restore\] step " + re.escape(repr(bad))
                       + " is .*" + what):
      checkpoint.restore(tmp_path, bad, target)
  with pytest.raises(jax.PartixError, match=r"\[ckpt.metadata\] step 4.0 is"):
    checkpoint.metadata(tmp_path, 4.0)


# A writer in its own process: saves step 1 of FOLDER holding its own id everywhere, once
# every writer is ready (so that the saves overlap), or kills itself (kill -9) right after
# save() returned, while the background write holds the folder.
_WRITER = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    import partix as jax
    from partix import ckpt
    from partix.sharding import NamedSharding, PartitionSpec as P
    folder, me, sync, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    s = NamedSharding(jax.make_mesh((8,), ("d",)), P("d"))
    x = jax.device_put(np.full((1 << 21,), me, np.float32), s)
    x.block_until_ready()
    open(os.path.join(sync, f"ready{me}"), "w").close()
    while not os.path.exists(os.path.join(sync, "go")):
      time.sleep(0.001)
    try:
      ckpt.save(folder, 1, {"x": x})
      if mode == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
      ckpt.wait()
    except jax.PartixError as e:
      print(e, flush=True)
      sys.exit(3)
    print("saved", flush=True)
    """)


def _start_writers(tmp_path, folder, modes):
  script = tmp_path / "writer.py"
  script.write_text(_WRITER)
  sync = tmp_path / "sync"
  sync.mkdir()
  procs = [subprocess.Popen([sys.executable, str(script), str(folder), str(i + 1), str(sync), m],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i, m in enumerate(modes)]
  deadline = time.monotonic() + 120
  while not all((sync / f"ready{i + 1}").exists() for i in range(len(modes))):
    if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
      for p in procs:
        p.kill()
      pytest.fail("a writer did not start: " + " | ".join(p.communicate()[0] for p in procs))
    time.sleep(0.01)
  (sync / "go").touch()
  outs = [p.communicate(timeout=120)[0] for p in procs]
  return [p.returncode for p in procs], outs


def test_two_processes_saving_into_one_folder_one_is_refused(tmp_path, mesh8):
  folder = tmp_path / "ck"
  codes, outs = _start_writers(tmp_path, folder, ["save", "save"])
  assert sorted(codes) == [0, 3], outs
  winner = codes.index(0) + 1
  loser_out = outs[codes.index(3)]
  # Refused while the other's save held the folder, or after it committed step 1.
  assert re.search(r"\[ckpt.save\] ('.*ck' is in use by another run|step 1 of '.*ck' is already "
                   r"committed)", loser_out), loser_out
  assert checkpoint.all_steps(folder) == [1]
  target = {"x": jax.ShapeDtypeStruct((1 << 21,), jnp.float32, NamedSharding(mesh8, P("x")))}
  got = np.asarray(checkpoint.restore(folder, 1, target)["x"])
  np.testing.assert_array_equal(got, np.full((1 << 21,), winner, np.float32))


def test_a_writer_killed_mid_save_leaves_the_folder_free(tmp_path, mesh8):
  folder = tmp_path / "ck"
  codes, outs = _start_writers(tmp_path, folder, ["crash"])
  assert codes == [-9], outs
  s = NamedSharding(mesh8, P("x"))
  checkpoint.save(folder, 2, {"x": jax.device_put(np.full((8,), 7.0, np.float32), s)})
  checkpoint.wait()
  steps = checkpoint.all_steps(folder)
  assert steps in ([2], [1, 2]), steps
  if steps == [1, 2]:  # committed before the kill: whole
    target = {"x": jax.ShapeDtypeStruct((1 << 21,), jnp.float32, s)}
    np.testing.assert_array_equal(np.asarray(checkpoint.restore(folder, 1, target)["x"]),
                                  np.ones(1 << 21, np.float32))

