"""partix.orbax.checkpoint (Orbax's checkpoint API over partix.ckpt): a state saved on a 4x2
mesh restores onto other meshes and shardings with equal values; max_to_keep,
save_interval_steps, latest_step/all_steps as Orbax's CheckpointManager; restore with no
target rebuilds the saved tree; bad input raises an error naming the API and the value."""
import json
import os
import textwrap

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
import partix.orbax.checkpoint as ocp
from partix.sharding import NamedSharding, PartitionSpec as P
from mpi_job import needs_mpirun, run_two_processes


@jax.tree_util.register_pytree_with_keys_class
class Pair:
  def __init__(self, a, b):
    self.a, self.b = a, b

  def tree_flatten_with_keys(self):
    return ((jax.tree_util.GetAttrKey("a"), self.a), (jax.tree_util.GetAttrKey("b"), self.b)), None

  @classmethod
  def tree_unflatten(cls, aux, children):
    return cls(*children)


def _host(rng):
  return {"params": {"w": rng.standard_normal((8, 6)).astype(np.float32),
                     "b": rng.standard_normal((6,)).astype(np.float32)},
          "layers": [rng.standard_normal((5, 4)).astype(np.float32),
                     np.arange(12, dtype=np.int32).reshape(4, 3)]}


def _state(host, mesh):
  return {"params": {"w": jax.device_put(host["params"]["w"], NamedSharding(mesh, P("x", "y"))),
                     "b": jax.device_put(host["params"]["b"], NamedSharding(mesh, P("y")))},
          "layers": [jax.device_put(host["layers"][0], NamedSharding(mesh, P("x"))),
                     jax.device_put(host["layers"][1], NamedSharding(mesh, P(None, None)))],
          "step": 7}


def _mesh42():
  return jax.make_mesh((4, 2), ("x", "y"))


def _equal(got, want):
  for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert np.asarray(g).dtype == np.asarray(w).dtype


def test_restore_onto_other_meshes(tmp_path, rng):
  host = _host(rng)
  state = _state(host, _mesh42())
  with ocp.CheckpointManager(tmp_path / "c") as mngr:
    assert mngr.save(3, args=ocp.args.StandardSave(state))
    mngr.wait_until_finished()
    assert mngr.latest_step() == 3 and mngr.all_steps() == [3]
    targets = {
        "2x4": lambda x: NamedSharding(jax.make_mesh((2, 4), ("a", "b")),
                                        P("b") if x.shape[0] % 4 == 0 else
                                        P(None, "a") if x.ndim == 2 else P()),
        "8x1": lambda x: NamedSharding(jax.make_mesh((8, 1), ("d", "e")),
                                        P("d") if x.shape[0] % 8 == 0 else P()),
        "one": lambda x: NamedSharding(jax.make_mesh((1,), ("o",)), P()),
    }
    for name, sharding_of in targets.items():
      abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                             sharding=sharding_of(x)), host)
      abstract["step"] = 0
      out = mngr.restore(3, args=ocp.args.StandardRestore(abstract))
      assert out["step"] == 7 and type(out["step"]) is int, name
      out_arrays = {k: v for k, v in out.items() if k != "step"}
      _equal(out_arrays, host)
      for got, want in zip(jax.tree_util.tree_leaves(out_arrays),
                           jax.tree_util.tree_leaves({k: v for k, v in abstract.items()
                                                      if k != "step"})):
        assert got.sharding == want.sharding, name


def test_restore_with_arrays_as_target_and_pytree_classes(tmp_path, rng):
  mesh = _mesh42()
  x = rng.standard_normal((4, 4)).astype(np.float32)
  state = {"pair": Pair(jax.device_put(x, NamedSharding(mesh, P("x"))),
                        (jnp.asarray(np.int32(5)), jnp.asarray(x[0].astype(jnp.bfloat16))))}
  mngr = ocp.CheckpointManager(tmp_path)
  mngr.save(0, args=ocp.args.StandardSave(state))
  other = jax.make_mesh((2, 4), ("a", "b"))
  target = {"pair": Pair(jax.device_put(np.zeros((4, 4), np.float32),
                                        NamedSharding(other, P(None, "b"))),
                         (jnp.zeros((), jnp.int32), jnp.zeros((4,), jnp.bfloat16)))}
  out = mngr.restore(0, args=ocp.args.StandardRestore(target))
  assert isinstance(out["pair"], Pair) and isinstance(out["pair"].b, tuple)
  np.testing.assert_array_equal(np.asarray(out["pair"].a), x)
  assert out["pair"].a.sharding == NamedSharding(other, P(None, "b"))
  assert int(out["pair"].b[0]) == 5
  assert out["pair"].b[1].dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(out["pair"].b[1]).astype(np.float32),
                                x[0].astype(jnp.bfloat16).astype(np.float32))
  mngr.close()


def test_restore_without_target_as_saved(tmp_path, rng):
  host = _host(rng)
  mesh = _mesh42()
  state = _state(host, mesh)
  state["opt"] = (np.arange(3, dtype=np.int64), 0.25, True)
  state["empty"] = {"d": {}, "l": [], "n": None}
  with ocp.CheckpointManager(tmp_path) as mngr:
    mngr.save(5, args=ocp.args.StandardSave(state))
    out = mngr.restore(5)
    same = mngr.restore(None, args=ocp.args.StandardRestore())
  for got in (out, same):
    _equal(got["params"], host["params"])
    assert isinstance(got["layers"], list) and len(got["layers"]) == 2
    _equal(got["layers"], host["layers"])
    assert got["params"]["w"].sharding == NamedSharding(mesh, P("x", "y"))
    assert got["layers"][0].sharding == NamedSharding(mesh, P("x"))
    assert got["step"] == 7 and type(got["step"]) is int
    # Orbax restores sequences without a target as lists; numpy arrays stay numpy.
    opt = got["opt"]
    assert isinstance(opt, list) and isinstance(opt[0], np.ndarray)
    np.testing.assert_array_equal(opt[0], np.arange(3))
    assert opt[0].dtype == np.int64 and opt[1] == 0.25 and opt[2] is True
    assert got["empty"] == {"d": {}, "l": [], "n": None}
  meta = ocp.CheckpointManager(tmp_path).item_metadata(5)
  assert meta["params"]["w"].shape == (8, 6) and meta["params"]["w"].dtype == np.float32


def test_save_interval_and_max_to_keep(tmp_path):
  opts = ocp.CheckpointManagerOptions(max_to_keep=2, save_interval_steps=3)
  state = {"x": jnp.arange(4.0)}
  saved = []
  with ocp.CheckpointManager(tmp_path, options=opts) as mngr:
    for step in range(10):
      assert mngr.should_save(step) == (step % 3 == 0)
      saved.append(mngr.save(step, args=ocp.args.StandardSave({"x": state["x"] + step})))
    assert saved == [s % 3 == 0 for s in range(10)]
    assert mngr.all_steps() == [6, 9] and mngr.latest_step() == 9
    # Not yet a step <= the latest, even with force: Orbax refuses an existing step.
    assert not mngr.save(9, args=ocp.args.StandardSave(state))
    with pytest.raises(ocp.StepAlreadyExistsError, match="step 9"):
      mngr.save(9, args=ocp.args.StandardSave(state), force=True)
    assert mngr.save(10, args=ocp.args.StandardSave({"x": state["x"] + 10}), force=True)
  assert sorted(os.listdir(tmp_path)) == [".partix-lock", "step_10", "step_9"]
  again = ocp.CheckpointManager(tmp_path, options=opts)
  assert again.all_steps() == [9, 10] and again.latest_step() == 10
  np.testing.assert_array_equal(np.asarray(again.restore(9)["x"]), np.arange(4.0) + 9)
  # A restarted run: the first save after restart is not forced (interval, above the latest).
  assert not again.should_save(11) and again.should_save(12)


def test_old_steps_are_deleted_only_after_the_new_one_commits(tmp_path):
  opts = ocp.CheckpointManagerOptions(max_to_keep=1)
  mngr = ocp.CheckpointManager(tmp_path, options=opts)
  mngr.save(1, args=ocp.args.StandardSave({"x": jnp.ones(3)}))
  mngr.wait_until_finished()
  mngr.save(2, args=ocp.args.StandardSave({"x": jnp.ones(3) * 2}))
  # Until the save of step 2 is joined, step 1 is on disk (a crash now would keep it).
  assert os.path.isdir(tmp_path / "step_1")
  assert mngr.all_steps() == [2]
  mngr.wait_until_finished()
  assert not os.path.exists(tmp_path / "step_1") and os.path.isdir(tmp_path / "step_2")
  assert [e for e in os.listdir(tmp_path) if "tmp" in e] == []
  np.testing.assert_array_equal(np.asarray(mngr.restore(2)["x"]), np.full(3, 2.0))
  mngr.close()


def test_the_seed_program_usage(tmp_path, rng):
  """As the seed: save, then restore the latest step with StandardRestore of the state's
  shardings. Orbax's StandardRestore takes arrays or ShapeDtypeStructs, not bare shardings:
  a tree of NamedShardings is refused with Orbax's words and a hint; paired with the abstract
  state (as the hint says) it restores."""
  host = _host(rng)
  mesh = _mesh42()
  state = _state(host, mesh)
  del state["step"]
  mngr = ocp.CheckpointManager(tmp_path / "ckpt")
  assert mngr.save(0, args=ocp.args.StandardSave(state))
  target_shardings = jax.tree.map(lambda x: x.sharding, state)
  with pytest.raises(ValueError, match=r"Unsupported type: .*NamedSharding.* for key: "
                                       r"\('layers', 0\)"):
    mngr.restore(mngr.latest_step(), args=ocp.args.StandardRestore(target_shardings))
  abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
  abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          abstract, target_shardings)
  loaded = mngr.restore(mngr.latest_step(), args=ocp.args.StandardRestore(abstract))
  _equal(loaded, {k: v for k, v in host.items()})
  assert loaded["params"]["w"].sharding == NamedSharding(mesh, P("x", "y"))
  # The seed passes a folder where the step goes: refused, naming the value.
  with pytest.raises(ValueError, match="step"):
    mngr.save(str(tmp_path / "ckpt"), args=ocp.args.StandardSave(state))
  mngr.close()


def test_standard_and_pytree_checkpointers(tmp_path, rng):
  host = _host(rng)
  state = _state(host, _mesh42())
  ckptr = ocp.StandardCheckpointer()
  ckptr.save(tmp_path / "a", state)
  ckptr.wait_until_finished()
  with pytest.raises(ValueError, match="already exists"):
    ckptr.save(tmp_path / "a", state)
  one = NamedSharding(jax.make_mesh((1,), ("o",)), P())
  target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one),
                        dict(host))
  target["step"] = 0
  out = ckptr.restore(tmp_path / "a", target)
  assert out["step"] == 7
  _equal(out["params"], host["params"])
  assert out["params"]["w"].sharding == one
  # A ShapeDtypeStruct without a sharding restores as a numpy array, as in Orbax.
  np_out = ckptr.restore(tmp_path / "a", {**target, "params": {
      "w": jax.ShapeDtypeStruct((8, 6), np.float32), "b": jax.ShapeDtypeStruct((6,), np.float32)}})
  assert isinstance(np_out["params"]["w"], np.ndarray)
  np.testing.assert_array_equal(np_out["params"]["w"], host["params"]["w"])
  ckptr.save(tmp_path / "a", {"x": jnp.ones(2)}, force=True)
  ckptr.wait_until_finished()
  np.testing.assert_array_equal(np.asarray(ckptr.restore(tmp_path / "a")["x"]), np.ones(2))
  p = ocp.PyTreeCheckpointer()
  p.save(tmp_path / "b", args=ocp.args.PyTreeSave({"y": jnp.arange(3)}))
  np.testing.assert_array_equal(np.asarray(p.restore(tmp_path / "b")["y"]), np.arange(3))


def test_composite_items_and_metadata(tmp_path, rng):
  mesh = _mesh42()
  w = rng.standard_normal((8, 4)).astype(np.float32)
  state = {"w": jax.device_put(w, NamedSharding(mesh, P("x"))), "n": 3}
  with ocp.CheckpointManager(tmp_path, item_names=("state", "meta")) as mngr:
    with pytest.raises(ValueError, match="item_names"):
      mngr.save(0, args=ocp.args.StandardSave(state))
    assert mngr.save(0, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                meta=ocp.args.JsonSave({"epoch": 2})),
                     custom_metadata={"run": "a"}, metrics={"loss": np.float32(0.5)})
    other = NamedSharding(jax.make_mesh((2, 4), ("a", "b")), P(None, "b"))
    out = mngr.restore(0, args=ocp.args.Composite(
        state=ocp.args.StandardRestore({"w": jax.ShapeDtypeStruct((8, 4), np.float32,
                                                                  sharding=other), "n": 0}),
        meta=ocp.args.JsonRestore()))
    assert isinstance(out, ocp.args.Composite) and out.meta == {"epoch": 2}
    np.testing.assert_array_equal(np.asarray(out.state["w"]), w)
    assert out.state["w"].sharding == other and out.state["n"] == 3
    # Only one item, the other as saved; and every item as saved.
    only = mngr.restore(0, args=ocp.args.Composite(meta=None))
    assert list(only.keys()) == ["meta"] and only["meta"] == {"epoch": 2}
    every = mngr.restore(0)
    assert sorted(every.keys()) == ["meta", "state"]
    np.testing.assert_array_equal(np.asarray(every.state["w"]), w)
    assert every.state["w"].sharding == NamedSharding(mesh, P("x"))
    # A target missing a saved leaf of its item is refused, unless partial_restore.
    lacks = r"item 'state' holds leaves the target lacks: \['state.n'\]"
    with pytest.raises(ValueError, match=lacks):
      mngr.restore(0, args=ocp.args.Composite(state=ocp.args.StandardRestore(
          {"w": jax.ShapeDtypeStruct((8, 4), np.float32, sharding=other)})))
    part = mngr.restore(0, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
        {"w": jax.ShapeDtypeStruct((8, 4), np.float32, sharding=other)}, partial_restore=True)))
    assert list(part.state) == ["w"]
    with pytest.raises(ValueError, match="no item 'opt'"):
      mngr.restore(0, args=ocp.args.Composite(opt=None))
    with pytest.raises(ValueError, match="holds items"):
      mngr.restore(0, args=ocp.args.StandardRestore(state))
    md = mngr.metadata(0)
    assert md.custom_metadata == {"run": "a"} and md.metrics == {"loss": 0.5}
    assert mngr.metrics(0) == {"loss": 0.5}
  flat = ocp.tree.to_flat_dict({"a": {"b": 1, "c": [2, 3]}})
  assert flat == {("a", "b"): 1, ("a", "c", 0): 2, ("a", "c", 1): 3}
  assert ocp.tree.from_flat_dict(flat, target={"a": {"b": 0, "c": [0, 0]}}) == {
      "a": {"b": 1, "c": [2, 3]}}


_FEWER = textwrap.dedent("""
  import sys
  import numpy as np
  import partix as jax
  import partix.orbax.checkpoint as ocp
  from partix.sharding import NamedSharding, PartitionSpec as P
  mngr = ocp.CheckpointManager(sys.argv[1])
  try:
    mngr.restore(0)
    print("no error")
  except ValueError as e:
    print(str(e).splitlines()[0])
  s = NamedSharding(jax.make_mesh((2,), ("d",)), P("d"))
  out = mngr.restore(0, args=ocp.args.StandardRestore(
      {"w": jax.ShapeDtypeStruct((8, 6), np.float32, sharding=s), "step": 0}))
  np.save(sys.argv[1] + "/w.npy", np.asarray(out["w"]))
  print(out["step"], sorted(d.id for d in out["w"].devices()))
""")


def test_restore_in_a_process_with_fewer_devices(tmp_path, rng):
  """Saved from 8 devices, restored by a process that has 2: as saved is refused (its devices
  are not there), onto a target on the 2 devices it restores."""
  import subprocess
  import sys
  w = rng.standard_normal((8, 6)).astype(np.float32)
  with ocp.CheckpointManager(tmp_path) as mngr:
    mngr.save(0, args=ocp.args.StandardSave({"w": jax.device_put(
        w, NamedSharding(_mesh42(), P("x", "y"))), "step": 4}))
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="2")
  p = subprocess.run([sys.executable, "-c", _FEWER, str(tmp_path)], env=env, text=True,
                     capture_output=True, timeout=120)
  assert p.returncode == 0, p.stdout + p.stderr
  lines = p.stdout.splitlines()
  assert lines[0].startswith("[CheckpointManager.restore] Topology mismatch: leaf 'w' was "
                             "saved on devices [0, 1, 2, 3, 4, 5, 6, 7]"), lines
  assert lines[1] == "4 [0, 1]"
  np.testing.assert_array_equal(np.load(tmp_path / "w.npy"), w)


def test_a_program_that_exits_without_closing(tmp_path):
  """The save in flight is committed and the step it made old deleted at exit."""
  import subprocess
  import sys
  prog = textwrap.dedent("""
    import sys
    import partix.numpy as jnp
    import partix.orbax.checkpoint as ocp
    m = ocp.CheckpointManager(sys.argv[1], options=ocp.CheckpointManagerOptions(max_to_keep=1))
    m.save(0, args=ocp.args.StandardSave({"x": jnp.ones(4)}))
    m.save(1, args=ocp.args.StandardSave({"x": jnp.full(4, 2.0)}))
  """)
  p = subprocess.run([sys.executable, "-c", prog, str(tmp_path)], text=True,
                     capture_output=True, timeout=120)
  assert p.returncode == 0, p.stdout + p.stderr
  assert sorted(os.listdir(tmp_path)) == [".partix-lock", "step_1"]
  np.testing.assert_array_equal(np.asarray(ocp.CheckpointManager(tmp_path).restore(1)["x"]),
                                np.full(4, 2.0))


def test_bad_input(tmp_path, rng):
  mesh = _mesh42()
  x = jax.device_put(np.ones((8, 2), np.float32), NamedSharding(mesh, P("x")))
  mngr = ocp.CheckpointManager(tmp_path)
  with pytest.raises(ValueError, match="Must provide `args`"):
    mngr.save(0)
  negative = r"\[orbax.checkpoint.CheckpointManager.save\] step -1 is negative"
  with pytest.raises(ValueError, match=negative):
    mngr.save(-1, args=ocp.args.StandardSave({"x": x}))
  with pytest.raises(ValueError, match=r"Unsupported type: <class 'str'> for key: \('s',\)"):
    mngr.save(0, args=ocp.args.StandardSave({"x": x, "s": "text"}))
  with pytest.raises(ValueError, match="single arrays or scalars"):
    mngr.save(0, args=ocp.args.StandardSave(x))
  assert mngr.all_steps() == [] and not os.path.exists(tmp_path / "step_0")
  with pytest.raises(FileNotFoundError, match="No steps found"):
    mngr.restore(None)
  mngr.save(0, args=ocp.args.StandardSave({"x": x}))
  with pytest.raises(FileNotFoundError, match=r"no step 4 .*\[0\]"):
    mngr.restore(4)
  sd = lambda shape, dt=np.float32: jax.ShapeDtypeStruct(shape, dt, sharding=NamedSharding(
      mesh, P()))
  with pytest.raises(ValueError, match=r"leaf 'x' has shape \[8,2\] but the target needs \[4,2\]"):
    mngr.restore(0, args=ocp.args.StandardRestore({"x": sd((4, 2))}))
  with pytest.raises(ValueError, match="no leaf 'y'"):
    mngr.restore(0, args=ocp.args.StandardRestore({"x": sd((8, 2)), "y": sd((8, 2))}))
  with pytest.raises(ValueError, match="no leaf 'z'"):
    mngr.restore(0, args=ocp.args.StandardRestore({"z": sd((8, 2))}))
  mngr.save(1, args=ocp.args.StandardSave({"x": x, "extra": x}))
  with pytest.raises(ValueError, match="extra"):  # a saved leaf the target lacks
    mngr.restore(1, args=ocp.args.StandardRestore({"x": sd((8, 2))}))
  with pytest.raises(ValueError, match="f32 and cannot be restored as i32"):
    mngr.restore(0, args=ocp.args.StandardRestore({"x": sd((8, 2), np.int32)}))
  with pytest.raises(ValueError, match="max_to_keep=-1"):
    ocp.CheckpointManagerOptions(max_to_keep=-1)
  with pytest.raises(ValueError, match="best_fn"):
    ocp.CheckpointManagerOptions(best_fn=lambda m: m)
  with pytest.raises(AttributeError, match="does not provide EmergencyCheckpointManager"):
    ocp.EmergencyCheckpointManager
  # Nothing was lost by the refusals.
  mngr.wait_until_finished()
  assert mngr.all_steps() == [0, 1]
  np.testing.assert_array_equal(np.asarray(mngr.restore(0)["x"]), np.ones((8, 2)))


_TWO = textwrap.dedent("""
  import json, sys
  import numpy as np
  import partix as jax
  jax.distributed.initialize()
  import partix.orbax.checkpoint as ocp
  from partix.sharding import NamedSharding, PartitionSpec as P
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  mesh = jax.make_mesh((2, 2), ("x", "y"))
  state = {"w": jax.device_put(a, NamedSharding(mesh, P("x", "y"))), "step": 3}
  opts = ocp.CheckpointManagerOptions(max_to_keep=1)
  with ocp.CheckpointManager(sys.argv[1] + "/c", options=opts) as m:
    m.save(1, args=ocp.args.StandardSave(state))
    m.save(2, args=ocp.args.StandardSave(state))
    m.wait_until_finished()
    other = jax.make_mesh((4,), ("d",))
    t = {"w": jax.ShapeDtypeStruct((8, 4), np.float32, sharding=NamedSharding(other, P("d"))),
         "step": 0}
    out = m.restore(m.latest_step(), args=ocp.args.StandardRestore(t))
    mine = sorted((s.device.id, np.asarray(s.data).tolist()) for s in out["w"].addressable_shards)
    with open(f"{sys.argv[1]}/out{jax.process_index()}.json", "w") as f:
      json.dump([m.all_steps(), out["step"], mine], f)
""")


@needs_mpirun
def test_two_processes(tmp_path):
  p = run_two_processes(tmp_path, _TWO)
  assert p.returncode == 0, p.stdout + p.stderr
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  for pi in (0, 1):
    steps, step, mine = json.loads((tmp_path / f"out{pi}.json").read_text())
    assert steps == [2] and step == 3
    assert mine == [[d, a[2 * d:2 * d + 2].tolist()] for d in (2 * pi, 2 * pi + 1)]
  assert sorted(os.listdir(tmp_path / "c")) == [".partix-lock", "step_2"]
