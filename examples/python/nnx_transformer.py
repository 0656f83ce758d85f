"""A Flax NNX transformer block, sharded, trained, checkpointed, restored elsewhere and planned.

The block is the one of the "Scaling Up: Sharding and Parallelism with JAX and Flax NNX"
slides (LayerNorm, MultiHeadAttention, a two-Linear GELU MLP, Dropout), between an embedding
and a vocabulary head. Its parameters carry logical axes ('embed', 'hidden', 'heads', 'vocab')
through nnx.with_partitioning / nnx.with_metadata(out_sharding=..., sharding_rules=...) (the
slides' `sharding=` is Flax 0.12's deprecated spelling of out_sharding), and the rules map
them onto a ('data', 'model') mesh. The program

  1. builds the model sharded under @nnx.jit on a 4x2 mesh (8 devices) and trains it data-
     and tensor-parallel with nnx.value_and_grad and nnx.Optimizer(optax.adamw) for a few
     steps of next-token prediction on a repeated synthetic sequence (the loss goes down);
  2. saves the model's state with orbax.checkpoint's CheckpointManager, restores it onto a
     2x4 mesh from an abstract state (nnx.eval_shape, ShapeDtypeStruct leaves with their
     target NamedShardings) and checks every leaf equals what was saved, on its sharding;
  3. plans the same training step for a wider model on a 16x8 AbstractMesh (128 devices this
     machine does not have): lowered from ShapeDtypeStructs, it prints the per-device peak
     memory and the bytes each kind of collective sends per step, as `partix plan` does.

Run it with 8 devices (virtual CPU devices here):

  PARTIX_NUM_CPU_DEVICES=8 PYTHONPATH=build/python python examples/python/nnx_transformer.py
"""
import tempfile

import numpy as np

import partix as jax
import partix.numpy as jnp
import partix.orbax.checkpoint as ocp
from partix import nnx
from partix.sharding import AbstractMesh, NamedSharding, PartitionSpec as P

import partix.as_jax  # noqa: F401,E402  (optax imports `jax`: let it find partix)
import optax  # noqa: E402

# Logical axis -> mesh axis. 'embed' is replicated; the MLP's hidden units, the attention
# heads and the vocabulary are split over 'model' (Megatron-style tensor parallelism).
RULES = (("batch", "data"), ("embed", None), ("hidden", "model"), ("heads", "model"),
         ("vocab", "model"))


def meta(init, *axes):
  return nnx.with_metadata(init, out_sharding=axes, sharding_rules=RULES)


class TransformerBlock(nnx.Module):
  def __init__(self, embed_dim, num_heads, ff_dim, dropout_rate, rngs):
    xavier, zeros, ones = (nnx.initializers.xavier_uniform(), nnx.initializers.zeros_init(),
                           nnx.initializers.ones_init())
    self.layer_norm1 = nnx.LayerNorm(embed_dim, epsilon=1e-6, rngs=rngs,
                                     scale_init=meta(ones, "embed"), bias_init=meta(zeros, "embed"))
    self.mha = nnx.MultiHeadAttention(
        num_heads=num_heads, in_features=embed_dim, decode=False, rngs=rngs,
        kernel_init=meta(xavier, "embed", "heads", None), bias_init=meta(zeros, "heads", None),
        out_kernel_init=meta(xavier, "heads", None, "embed"), out_bias_init=meta(zeros, "embed"))
    self.dropout1 = nnx.Dropout(dropout_rate, rngs=rngs)
    self.layer_norm2 = nnx.LayerNorm(embed_dim, epsilon=1e-6, rngs=rngs,
                                     scale_init=meta(ones, "embed"), bias_init=meta(zeros, "embed"))
    self.linear1 = nnx.Linear(embed_dim, ff_dim, rngs=rngs,
                              kernel_init=meta(xavier, "embed", "hidden"),
                              bias_init=nnx.with_partitioning(zeros, ("hidden",),
                                                              sharding_rules=RULES))
    self.linear2 = nnx.Linear(ff_dim, embed_dim, rngs=rngs,
                              kernel_init=meta(xavier, "hidden", "embed"),
                              bias_init=meta(zeros, "embed"))
    self.dropout2 = nnx.Dropout(dropout_rate, rngs=rngs)

  def __call__(self, inputs, training=False):
    seq_len = inputs.shape[1]
    mask = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    attention = self.mha(self.layer_norm1(inputs), mask=mask)
    x = inputs + self.dropout1(attention, deterministic=not training)
    mlp = self.linear2(nnx.gelu(self.linear1(self.layer_norm2(x))))
    return x + self.dropout2(mlp, deterministic=not training)


class TinyLM(nnx.Module):
  def __init__(self, vocab, embed_dim, num_heads, ff_dim, rngs, dropout_rate=0.1):
    self.embed = nnx.Embed(vocab, embed_dim, rngs=rngs,
                           embedding_init=meta(nnx.initializers.normal(0.02), "vocab", "embed"))
    self.block = TransformerBlock(embed_dim, num_heads, ff_dim, dropout_rate, rngs)
    self.head = nnx.Linear(embed_dim, vocab, rngs=rngs,
                           kernel_init=meta(nnx.initializers.lecun_normal(), "embed", "vocab"),
                           bias_init=meta(nnx.initializers.zeros_init(), "vocab"))

  def __call__(self, ids, training=False):
    return self.head(self.block(self.embed(ids), training=training))


def loss_fn(model, ids, targets):
  logits = model(ids, training=True)
  return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


@nnx.jit
def train_step(model, optimizer, ids, targets):
  loss, grads = nnx.value_and_grad(loss_fn)(model, ids, targets)
  optimizer.update(model, grads)
  return loss


CONFIG = dict(vocab=32, embed_dim=32, num_heads=4, ff_dim=64)
mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
with jax.set_mesh(mesh):
  model = nnx.jit(lambda: TinyLM(**CONFIG, rngs=nnx.Rngs(0)))()  # born sharded
  optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
print("linear1 kernel:", model.block.linear1.kernel[...].sharding.spec,
      " query kernel:", model.block.mha.query.kernel[...].sharding.spec)

# 1. Training: predict the next token of a repeating sequence, batch split over 'data'.
pattern = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3], np.int32)
rng = np.random.default_rng(0)
batch_sharding = NamedSharding(mesh, P("data", None))
losses = []
with jax.set_mesh(mesh):
  for step in range(8):
    starts = rng.integers(0, len(pattern), size=8)
    rows = np.stack([np.roll(np.tile(pattern, 2), -s)[:17] for s in starts])
    ids, targets = jax.device_put((rows[:, :-1], rows[:, 1:]), batch_sharding)
    losses.append(float(train_step(model, optimizer, ids, targets)))
    print(f"step {step} loss {losses[-1]:.4f}")
assert losses[-1] < losses[0] - 0.5, losses

# 2. Checkpoint the parameters, restore them onto a 2x4 mesh, each leaf on its target sharding.
state = nnx.state(model, nnx.Param)
other = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
with jax.set_mesh(other):
  abstract_model = nnx.eval_shape(lambda: TinyLM(**CONFIG, rngs=nnx.Rngs(0)))
abstract_state = nnx.state(abstract_model, nnx.Param)
targets_2x4 = nnx.spmd.get_named_sharding(abstract_state, other)
abstract_state = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                              abstract_state, targets_2x4)
with tempfile.TemporaryDirectory() as d, ocp.CheckpointManager(d + "/ckpt") as mngr:
  mngr.save(8, args=ocp.args.StandardSave(state))
  mngr.wait_until_finished()
  restored = mngr.restore(mngr.latest_step(), args=ocp.args.StandardRestore(abstract_state))
leaves = jax.tree_util.tree_leaves(restored)
for saved, got, want in zip(jax.tree_util.tree_leaves(state), leaves,
                            jax.tree_util.tree_leaves(abstract_state)):
  assert got.sharding == want.sharding, (got.sharding, want.sharding)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(saved))
print(f"restored {len(leaves)} leaves onto 2x4, equal; linear1 kernel now "
      f"{restored['block']['linear1']['kernel'].value.sharding.spec}")

# 3. Planning: the same step for a wider model on 128 devices, lowered from shapes only.
big = AbstractMesh((16, 8), ("data", "model"))
BIG = dict(vocab=32768, embed_dim=2048, num_heads=16, ff_dim=8192)
with jax.set_mesh(big):
  abstract = nnx.eval_shape(lambda: TinyLM(**BIG, rngs=nnx.Rngs(0)))
  abstract_opt = nnx.eval_shape(
      lambda: nnx.Optimizer(abstract, optax.adamw(1e-2), wrt=nnx.Param))
# Under the abstract mesh, eval_shape's leaves are ShapeDtypeStructs sharded by the rules.
graphdef, abstract_state = nnx.split((abstract, abstract_opt))
tokens = jax.ShapeDtypeStruct((256, 512), jnp.int32, sharding=NamedSharding(big, P("data", None)))


def pure_step(state, ids, targets):
  model, optimizer = nnx.merge(graphdef, state)
  loss, grads = nnx.value_and_grad(loss_fn)(model, ids, targets)
  optimizer.update(model, grads)
  return nnx.state((model, optimizer)), loss


# Only AbstractMeshes here (no devices), so, as in JAX, the platform to lower for is named.
lowered = jax.jit(pure_step, donate_argnums=0).trace(abstract_state, tokens, tokens).lower(
    lowering_platforms=("cpu",))
memory, cost = lowered.memory_analysis(), lowered.cost_analysis()
n_params = sum(int(np.prod(a.shape))
               for a in jax.tree_util.tree_leaves(nnx.state(abstract, nnx.Param)))
gib = 2.0 ** 30
print(f"plan: {n_params / 1e6:.1f} M parameters on a 16x8 mesh (128 devices), batch 256 x 512")
print(f"plan: per-device arguments {memory.argument_size_in_bytes / gib:.3f} GiB, "
      f"peak {memory.peak_memory_in_bytes / gib:.3f} GiB")
kinds = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute")
for kind in kinds:
  print(f"plan: {kind:<18} {int(cost['collectives ' + kind]):3d} ops "
        f"{cost['bytes ' + kind] / gib:7.3f} GiB sent per device per step")
print(f"plan: {cost['flops'] / 1e12:.2f} TFLOP per device per step")
assert memory.peak_memory_in_bytes > memory.argument_size_in_bytes > 0
assert cost["bytes all_reduce"] > 0, cost
print(f"OK nnx_transformer loss {losses[0]:.3f} -> {losses[-1]:.3f}")
