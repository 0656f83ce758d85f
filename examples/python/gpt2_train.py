"""GPT-2 (tiny) trained with FSDP over 'data' and tensor parallelism over 'model' on a 4x2 mesh:
the training step written with jit and value_and_grad over the model's loss."""
from functools import partial

import numpy as np

import partix as jax
from partix import optim
from partix.models import gpt2
from partix.sharding import NamedSharding, PartitionSpec as P

config = gpt2.tiny()
mesh = gpt2.make_mesh(data=4, model=2)
params = gpt2.init(config, jax.random.key(0), mesh, fsdp=True)
opt_state = optim.adamw_init(params)
print("c_fc sharding:", params["transformer.h.0.mlp.c_fc.weight"].sharding.spec)

# A small corpus as bytes; the model learns to continue it.
text = ("partix runs JAX programs on a mesh of devices. " * 40).encode()
data = np.frombuffer(text, dtype=np.uint8).astype(np.int32)
batch, seq = 8, 32
batch_sharding = NamedSharding(mesh, P("data"))


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, ids, targets, lr, key):
  def loss_fn(p):
    return gpt2.loss(p, ids, targets, config, dropout_key=key)
  loss, grads = jax.value_and_grad(loss_fn)(params)
  grads, _ = optim.clip_by_global_norm(grads, 1.0)
  params, opt_state = optim.adamw_update(params, grads, opt_state, lr, b1=0.9, b2=0.95,
                                         weight_decay=0.1)
  return params, opt_state, loss


rng = np.random.default_rng(0)
losses = []
steps = 12
for step in range(steps):
  starts = rng.integers(0, len(data) - seq - 1, size=batch)
  rows = np.stack([data[s:s + seq + 1] for s in starts])
  ids = jax.device_put(rows[:, :-1], batch_sharding)
  targets = jax.device_put(rows[:, 1:], batch_sharding)
  lr = optim.warmup_cosine(step, 3e-3, 2, steps)
  params, opt_state, loss = train_step(params, opt_state, ids, targets, lr,
                                       jax.random.key(step + 1))
  losses.append(float(loss))
  print(f"step {step} loss {losses[-1]:.4f}")
assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.5, losses
print(f"OK gpt2_train loss {losses[0]:.3f} -> {losses[-1]:.3f}")
