"""partix.nnx across two processes (mpirun -np 2, 4 devices each): a model born sharded over
the global 4x2 mesh, trained with nnx.Optimizer(optax.adamw), its parameters saved with
orbax.checkpoint's CheckpointManager and restored onto a 2x4 mesh. The same program on one
process with 8 devices is the reference: the losses and the parameters must be the same."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mpi_job import needs_mpirun, run_two_processes  # noqa: E402

_PROG = textwrap.dedent("""
  import json, os, sys
  import numpy as np
  import partix as jax
  if os.environ.get("OMPI_COMM_WORLD_SIZE"):
    jax.distributed.initialize()
  import partix.numpy as jnp
  import partix.orbax.checkpoint as ocp
  from partix import nnx
  from partix.experimental import multihost_utils
  from partix.sharding import AxisType, NamedSharding, PartitionSpec as P
  import partix.as_jax  # optax imports jax
  import optax

  RULES = (("embed", None), ("hidden", "model"), ("heads", "model"), ("vocab", "model"))
  def meta(init, *axes):
    return nnx.with_metadata(init, out_sharding=axes, sharding_rules=RULES)

  class Block(nnx.Module):
    def __init__(self, d, heads, ff, rngs):
      xavier, zeros = nnx.initializers.xavier_uniform(), nnx.initializers.zeros_init()
      self.embed = nnx.Embed(32, d, rngs=rngs,
                             embedding_init=meta(nnx.initializers.normal(0.02), "vocab", "embed"))
      self.norm = nnx.LayerNorm(d, rngs=rngs, bias_init=meta(zeros, "embed"),
                                scale_init=meta(nnx.initializers.ones_init(), "embed"))
      self.mha = nnx.MultiHeadAttention(heads, d, decode=False, rngs=rngs,
                                        kernel_init=meta(xavier, "embed", "heads", None),
                                        out_kernel_init=meta(xavier, "heads", None, "embed"))
      self.fc1 = nnx.Linear(d, ff, rngs=rngs, kernel_init=meta(xavier, "embed", "hidden"),
                            bias_init=nnx.with_partitioning(zeros, ("hidden",),
                                                            sharding_rules=RULES))
      self.fc2 = nnx.Linear(ff, d, rngs=rngs, kernel_init=meta(xavier, "hidden", "embed"))
      self.drop = nnx.Dropout(0.1, rngs=rngs)
      self.head = nnx.Linear(d, 32, rngs=rngs, kernel_init=meta(xavier, "embed", "vocab"))

    def __call__(self, ids):
      x = self.embed(ids)
      mask = jnp.tril(jnp.ones((ids.shape[1],) * 2, dtype=bool))
      x = x + self.drop(self.mha(self.norm(x), mask=mask))
      x = x + self.fc2(nnx.gelu(self.fc1(x)))
      return self.head(x)

  @nnx.jit
  def train_step(model, optimizer, ids, targets):
    def loss_fn(model):
      return optax.softmax_cross_entropy_with_integer_labels(model(ids), targets).mean()
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss

  auto = (AxisType.Auto,) * 2
  mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=auto)
  with jax.set_mesh(mesh):
    model = nnx.jit(lambda: Block(16, 2, 32, nnx.Rngs(0)))()
    optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
  rng = np.random.default_rng(0)
  batch = NamedSharding(mesh, P("data", None))
  losses = []
  with jax.set_mesh(mesh):
    for _ in range(4):
      rows = rng.integers(0, 32, size=(8, 9)).astype(np.int32)
      rows[:, 1::2] = rows[:, 0:-1:2]  # every other token repeats the one before: learnable
      ids, targets = jax.device_put((rows[:, :-1], rows[:, 1:]), batch)
      losses.append(float(train_step(model, optimizer, ids, targets)))

  state = nnx.state(model, nnx.Param)
  paths = ["/".join(map(str, p)) for p, _ in nnx.to_flat_state(state)]
  saved = [np.asarray(multihost_utils.process_allgather(v.value, tiled=True))
           for _, v in nnx.to_flat_state(state)]
  specs = [str(v.value.sharding.spec) for _, v in nnx.to_flat_state(state)]
  other = jax.make_mesh((2, 4), ("data", "model"), axis_types=auto)
  with jax.set_mesh(other):
    abstract = nnx.state(nnx.eval_shape(lambda: Block(16, 2, 32, nnx.Rngs(0))), nnx.Param)
  targets_2x4 = nnx.spmd.get_named_sharding(abstract, other)
  abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          abstract, targets_2x4)
  with ocp.CheckpointManager(sys.argv[1] + "/ckpt") as mngr:
    mngr.save(4, args=ocp.args.StandardSave(state))
    mngr.wait_until_finished()
    restored = mngr.restore(mngr.latest_step(), args=ocp.args.StandardRestore(abstract))
  checked = 0
  for (_, got), (_, want), full in zip(nnx.to_flat_state(restored), nnx.to_flat_state(abstract),
                                      saved):
    assert got.value.sharding == want.sharding, (got.value.sharding, want.sharding)
    for shard in got.value.addressable_shards:  # each process checks the shards it holds
      np.testing.assert_array_equal(np.asarray(shard.data), full[shard.index])
      checked += 1
  out = dict(losses=losses, paths=paths, specs=specs, checked=checked,
             devices=[d.id for d in jax.local_devices()],
             params={p: v.tolist() for p, v in zip(paths, saved)})
  with open(f"{sys.argv[1]}/out{jax.process_index()}-of-{jax.process_count()}.json", "w") as f:
    json.dump(out, f)
""")


def _single_process(tmp_path):
  tmp_path.mkdir()
  prog = tmp_path / "prog.py"
  prog.write_text(_PROG)
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="8")
  env.pop("OMPI_COMM_WORLD_SIZE", None)
  p = subprocess.run([sys.executable, str(prog), str(tmp_path)], env=env, capture_output=True,
                     text=True, timeout=120)
  assert p.returncode == 0, p.stdout + p.stderr
  return json.loads((tmp_path / "out0-of-1.json").read_text())


@needs_mpirun
def test_two_processes_train_and_restore_as_one_process(tmp_path, optax):  # optax: or skip
  one = _single_process(tmp_path / "one")
  (tmp_path / "two").mkdir()
  p = run_two_processes(tmp_path / "two", _PROG, devices_each=4, timeout=120)
  assert p.returncode == 0, p.stdout + p.stderr
  assert one["losses"][-1] < one["losses"][0], one["losses"]
  assert one["checked"] == 8 * len(one["paths"])
  for pi in (0, 1):
    two = json.loads((tmp_path / "two" / f"out{pi}-of-2.json").read_text())
    assert two["devices"] == list(range(4 * pi, 4 * pi + 4))
    assert two["paths"] == one["paths"] and two["specs"] == one["specs"]
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-6)
    assert two["checked"] == 4 * len(two["paths"])  # half of each leaf's 8 shards
    for path in one["paths"]:
      # The key projection's bias shifts every score of a query equally, which the softmax
      # cancels: its gradient is zero but for round-off, which AdamW scales up to steps of
      # up to lr. Its values only need to stay within those 4 steps of 1e-2.
      atol = 4e-2 if path == "mha/key/bias" else 1e-6
      np.testing.assert_allclose(two["params"][path], one["params"][path], rtol=1e-5,
                                 atol=atol, err_msg=path)
