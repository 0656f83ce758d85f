"""Seed 001 ("Scaling Up: Sharding and Parallelism with JAX and Flax NNX"): its programs as
written, with `from flax import nnx` read as `from partix import nnx` and `jax` as partix.
Where the document departs from Flax 0.12 (nnx.make_rng, MultiHeadAttention(embed_dim=,
scale_init=)), Flax 0.12's behaviour is what is checked. Orbax checkpointing is left out."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.experimental import mesh_utils
from partix.sharding import Mesh, NamedSharding, PartitionSpec as P
from partix import nnx

sharding_rules = (("batch", "data"), ("hidden", "model"), ("embed", None))


class LogicalDotReluDot(nnx.Module):
  def __init__(self, depth: int, rngs: nnx.Rngs):
    init_fn = nnx.initializers.lecun_normal()
    self.dot1 = nnx.Linear(
        depth, depth,
        kernel_init=nnx.with_metadata(
            init_fn, sharding=("embed", "hidden"), sharding_rules=sharding_rules),
        use_bias=False, rngs=rngs)
    self.w2 = nnx.Param(init_fn(rngs.params(), (depth, depth)), sharding=("hidden", "embed"),
                        sharding_rules=sharding_rules)

  def __call__(self, x):
    y = self.dot1(x)
    y = jax.nn.relu(y)
    y = jax.lax.with_sharding_constraint(y, P("data", "model"))
    return jnp.dot(y, self.w2.value)


def causal_attention_mask(seq_len):
  return jnp.tril(jnp.ones((seq_len, seq_len)))


class TransformerBlock(nnx.Module):
  def __init__(self, embed_dim: int, num_heads: int, ff_dim: int, dropout_rate: float,
               rngs: nnx.Rngs):
    self.layer_norm1 = nnx.LayerNorm(epsilon=1e-6, num_features=embed_dim,
                                     scale_init=nnx.with_metadata(
                                         nnx.initializers.ones_init(), sharding=("model",)),
                                     bias_init=nnx.with_metadata(
                                         nnx.initializers.zeros_init(), sharding=("model",)),
                                     rngs=rngs)
    self.mha = nnx.MultiHeadAttention(
        num_heads=num_heads, in_features=embed_dim,
        kernel_init=nnx.with_metadata(nnx.initializers.xavier_uniform(), sharding=("model",)),
        bias_init=nnx.with_metadata(nnx.initializers.zeros_init(), sharding=("model",)),
        rngs=rngs)
    self.dropout1 = nnx.Dropout(rate=dropout_rate)
    self.layer_norm2 = nnx.LayerNorm(epsilon=1e-6, num_features=embed_dim,
                                     scale_init=nnx.with_metadata(
                                         nnx.initializers.ones_init(), sharding=("model",)),
                                     bias_init=nnx.with_metadata(
                                         nnx.initializers.zeros_init(), sharding=("model",)),
                                     rngs=rngs)
    self.linear1 = nnx.Linear(in_features=embed_dim, out_features=ff_dim,
                              kernel_init=nnx.with_metadata(
                                  nnx.initializers.xavier_uniform(), sharding=("model",)),
                              bias_init=nnx.with_partitioning(
                                  nnx.initializers.zeros_init(), sharding=("model",)),
                              rngs=rngs)
    self.linear2 = nnx.Linear(in_features=ff_dim, out_features=embed_dim,
                              kernel_init=nnx.with_metadata(
                                  nnx.initializers.xavier_uniform(), sharding=("model",)),
                              bias_init=nnx.with_metadata(
                                  nnx.initializers.zeros_init(), sharding=("model",)),
                              rngs=rngs)
    self.dropout2 = nnx.Dropout(rate=dropout_rate)

  def __call__(self, inputs, training: bool = False):
    input_shape = inputs.shape
    bs, seq_len, emb_sz = input_shape
    attention_output = self.mha(
        inputs_q=self.layer_norm1(inputs),
        mask=causal_attention_mask(seq_len), decode=False,
    )
    x = inputs + self.dropout1(attention_output, deterministic=not training)
    # MLP
    mlp_output = self.linear1(self.layer_norm2(x))
    mlp_output = nnx.gelu(mlp_output)
    mlp_output = self.linear2(mlp_output)
    mlp_output = self.dropout2(mlp_output, deterministic=not training)
    return x + mlp_output


class TinyLM(nnx.Module):
  """The block between an embedding and a vocabulary head (the document's GPT-2 outline)."""

  def __init__(self, rngs, vocab=32, embed_dim=16):
    self.embed = nnx.Embed(vocab, embed_dim, rngs=rngs)
    self.block = TransformerBlock(embed_dim, 2, 32, 0.0, rngs)
    self.head = nnx.Linear(embed_dim, vocab, rngs=rngs)

  def __call__(self, ids, training=False):
    return self.head(self.block(self.embed(ids), training=training))


def mesh_of(shape, names):
  n = int(np.prod(shape))
  if jax.device_count() < n:
    pytest.skip(f"needs {n} devices")
  return Mesh(mesh_utils.create_device_mesh(shape, devices=jax.devices()[:n]), names)


def test_annotation_snippets_as_flax_012_reads_them():
  init_fn = nnx.initializers.lecun_normal()
  with pytest.raises(AttributeError, match="make_rng"):  # not in Flax 0.12: nnx.Rngs instead
    nnx.make_rng(0)
  rng_key = nnx.Rngs(0).params()
  mesh = mesh_of((4, 2), ("data", "model"))
  with jax.set_mesh(mesh):
    kernel = nnx.Param(nnx.with_metadata(init_fn, sharding=(None, "model"))(rng_key, (8, 4)))
    bias = nnx.Param(nnx.initializers.zeros(rng_key, (4,)), sharding=("model",))
  assert kernel.out_sharding == (None, "model") and bias.out_sharding == ("model",)
  assert kernel[...].sharding.spec == P(None, "model")
  assert bias[...].sharding.spec == P("model")


def test_sharded_initialization_function_with_mesh_context(golden):
  _, structure = golden
  mesh = mesh_of((4, 2), ("data", "model"))

  @nnx.jit  # Decorate the whole initialization function
  def create_sharded_model():
    model = LogicalDotReluDot(16, rngs=nnx.Rngs(0))  # Step 1
    state = nnx.state(model)  # Step 2
    pspecs = nnx.spmd.get_partition_spec(state)  # Step 3
    sharded_state = jax.lax.with_sharding_constraint(state, pspecs)  # Step 4
    nnx.update(model, sharded_state)  # Step 5
    return model  # Step 6
  with mesh:  # Step 7
    sharded_model = create_sharded_model()
  want = structure["seed"]["logical_specs_4x2"]  # Flax's specs for this model
  assert sharded_model.dot1.kernel.value.sharding.spec == P(*want["dot1/kernel"])
  assert sharded_model.w2.value.sharding.spec == P(*want["w2"])
  state_struct = nnx.state(sharded_model)
  target_shardings = nnx.spmd.get_named_sharding(state_struct, mesh)
  assert target_shardings["w2"].value == NamedSharding(mesh, P("model", None))
  assert target_shardings["dot1"]["kernel"].value == NamedSharding(mesh, P(None, "model"))
  with pytest.raises(ValueError, match="mesh"):  # annotated variables need a mesh (Flax)
    nnx.eval_shape(lambda: LogicalDotReluDot(16, rngs=nnx.Rngs(0)))
  with mesh:
    abstract = nnx.eval_shape(lambda: LogicalDotReluDot(16, rngs=nnx.Rngs(0)))
  assert nnx.spmd.get_named_sharding(nnx.state(abstract), mesh)["w2"].value == \
      target_shardings["w2"].value


def test_distributed_training_loop(optax):
  mesh = mesh_of((4, 2), ("data", "model"))
  with mesh:
    sharded_model = nnx.jit(lambda: LogicalDotReluDot(16, rngs=nnx.Rngs(0)))()
    optimizer = nnx.Optimizer(sharded_model, optax.adamw(1e-2), wrt=nnx.Param)

  @nnx.jit  # Compile the entire step
  def train_step(model, optimizer, batch, labels):
    def loss_fn(model_stateful):  # loss_fn operates on the stateful model
      logits = model_stateful(batch)  # Forward pass
      loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))
      return loss
    loss_val, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss_val
  rng = np.random.default_rng(1)
  input_sharding = NamedSharding(mesh, P("data", None))
  label_sharding = NamedSharding(mesh, P("data"))
  losses = []
  with mesh:
    for _ in range(4):
      numpy_batch = rng.normal(size=(8, 16)).astype(np.float32)
      numpy_labels = rng.integers(0, 16, size=(8,)).astype(np.int32)
      sharded_batch = jax.device_put(numpy_batch, input_sharding)
      sharded_labels = jax.device_put(numpy_labels, label_sharding)
      losses.append(float(train_step(sharded_model, optimizer, sharded_batch, sharded_labels)))
  assert all(np.isfinite(losses)) and int(optimizer.step.value) == 4
  mu = optimizer.opt_state[0].mu
  assert mu["w2"].value.sharding == sharded_model.w2.value.sharding
  assert mu["dot1"]["kernel"].value.sharding == sharded_model.dot1.kernel.value.sharding


def test_transformer_block_structure_is_flax(golden):
  _, structure = golden
  with nnx.use_eager_sharding(False):  # no mesh here: annotations are kept, not applied
    block = TransformerBlock(8, 2, 16, 0.1, nnx.Rngs(0))
  paths = {"/".join(map(str, p)): [type(v).__name__, list(v.value.shape)]
           for p, v in nnx.to_flat_state(nnx.state(block))}
  want = {k: v for k, v in structure["seed"]["block_paths"].items()
          if not k.startswith(("dropout", "linear1", "layer_norm2", "linear2"))}
  assert {k: v for k, v in paths.items() if k in want} == want
  assert paths["linear1/kernel"] == ["Param", [8, 16]]
  # the slide's variant (embed_dim=, scale_init=) is not Flax's API
  with pytest.raises(TypeError, match="in_features|embed_dim"):
    nnx.MultiHeadAttention(num_heads=2, embed_dim=8, rngs=nnx.Rngs(0))


def train_lm(optax, mesh, steps=3):
  @nnx.jit
  def create():
    return TinyLM(nnx.Rngs(0))

  @nnx.jit
  def train_step(model, optimizer, metrics, batch):
    inputs, targets = batch

    def loss_fn(model):
      logits = model(inputs, training=True)
      return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    metrics.update(loss=loss)
    optimizer.update(model, grads)
    return loss
  rng = np.random.default_rng(3)
  ids = rng.integers(0, 32, size=(8, 9)).astype(np.int32)
  input_batch, target_batch = ids[:, :-1], ids[:, 1:]
  with jax.set_mesh(mesh):
    model = create()
    optimizer = nnx.Optimizer(model, optax.adamw(3e-3), wrt=nnx.Param)
    train_metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))
    losses = [float(train_step(model, optimizer, train_metrics,
                               jax.device_put((input_batch, target_batch),
                                              NamedSharding(mesh, P("batch", None)))))
              for _ in range(steps)]
  return losses, model, train_metrics


def test_transformer_block_trains_equally_under_every_parallelism(optax):
  shapes = [(4, 2), (2, 4), (1, 8), (8, 1)]
  runs = {s: train_lm(optax, mesh_of(s, ("batch", "model"))) for s in shapes}
  ref, _, _ = train_lm(optax, mesh_of((1, 1), ("batch", "model")))
  assert ref[-1] < ref[0]
  for s, (losses, model, metrics) in runs.items():
    np.testing.assert_allclose(losses, ref, rtol=1e-4, err_msg=str(s))
    assert float(metrics.compute()["loss"]) == pytest.approx(np.mean(losses), rel=1e-5)
    mha = model.block.mha
    assert mha.query.kernel.value.sharding.spec == P("model")
    assert model.block.linear1.bias.value.sharding.spec == P("model")
    assert model.block.layer_norm1.scale.value.sharding.spec == P("model")


def test_transformer_block_dropout_only_when_training():
  with nnx.use_eager_sharding(False):
    block = TransformerBlock(8, 2, 16, 0.5, nnx.Rngs(0))
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 4, 8)).astype(np.float32))
  a, b = block(x), block(x)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with pytest.raises(ValueError, match="rngs"):  # the document's Dropouts hold no rngs
    block(x, training=True)


SEED_TEXT = '''
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from flax import nnx

devices = mesh_utils.create_device_mesh((4, 2))
mesh = Mesh(devices, axis_names=('data', 'model'))

sharding_rules = (('batch', 'data'), ('hidden', 'model'), ('embed', None))

class LogicalDotReluDot(nnx.Module):
    def __init__(self, depth: int, rngs: nnx.Rngs):
        init_fn = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(
            depth, depth,
            kernel_init=nnx.with_metadata(
                init_fn, sharding=('embed', 'hidden'), sharding_rules=sharding_rules),
            use_bias=False, rngs=rngs)
        self.w2 = nnx.Param(init_fn(rngs.params(), (depth, depth)),
                            sharding=('hidden', 'embed'), sharding_rules=sharding_rules)

    def __call__(self, x):
        return nnx.relu(self.dot1(x)) @ self.w2

@nnx.jit
def create_sharded_model():
    model = LogicalDotReluDot(16, rngs=nnx.Rngs(0))
    state = nnx.state(model)
    pspecs = nnx.spmd.get_partition_spec(state)
    sharded_state = jax.lax.with_sharding_constraint(state, pspecs)
    nnx.update(model, sharded_state)
    return model

with mesh:
    sharded_model = create_sharded_model()
    optimizer = nnx.Optimizer(sharded_model, optax.adamw(1e-2), wrt=nnx.Param)

@nnx.jit
def train_step(model, optimizer, batch, labels):
    def loss_fn(model_stateful):
        logits = model_stateful(batch)
        loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))
        return loss
    loss_val, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss_val

input_sharding = NamedSharding(mesh, P('data', None))
label_sharding = NamedSharding(mesh, P('data'))
rng = np.random.default_rng(0)
numpy_batch = rng.normal(size=(8, 16)).astype(np.float32)
numpy_labels = rng.integers(0, 16, size=(8,)).astype(np.int32)
with mesh:
    sharded_batch = jax.device_put(numpy_batch, input_sharding)
    sharded_labels = jax.device_put(numpy_labels, label_sharding)
    losses = [float(train_step(sharded_model, optimizer, sharded_batch, sharded_labels))
              for _ in range(3)]
target_shardings = nnx.spmd.get_named_sharding(nnx.state(sharded_model), mesh)
print("specs", sharded_model.dot1.kernel.value.sharding.spec, sharded_model.w2.value.sharding.spec)
print("targets", target_shardings['w2'].value.spec)
print("losses", losses)
'''

PRELUDE = '''
import partix.as_jax  # jax -> partix, flax.nnx -> partix.nnx
'''


def test_seed_text_runs_under_jax_and_flax_names(optax):
  import os
  import subprocess
  import sys
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="8",
             PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
  p = subprocess.run([sys.executable, "-W", "ignore", "-c", PRELUDE + SEED_TEXT], env=env,
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr[-3000:]
  out = dict(line.split(" ", 1) for line in p.stdout.strip().splitlines())
  # what JAX and Flax print for this program (arrays' specs drop trailing Nones)
  assert out["specs"] == "P(None, 'model') P('model',)", out
  assert out["targets"] == "P('model', None)", out
  losses = eval(out["losses"])
  assert len(losses) == 3 and losses[2] < losses[0]
