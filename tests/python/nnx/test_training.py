"""Training with nnx.value_and_grad and nnx.Optimizer over optax (partix as `jax` for optax):
losses equal on every mesh and on one device and to a hand-written adamw step, moments
sharded like their parameters, step counting, and metrics."""
import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix import nnx
from partix.sharding import NamedSharding, PartitionSpec as P

from nnx_meshes import make_mesh


class DotReluDot(nnx.Module):
  def __init__(self, depth, rngs):
    init = nnx.initializers.lecun_normal()
    self.dot1 = nnx.Linear(depth, depth, use_bias=False, rngs=rngs,
                           kernel_init=nnx.with_partitioning(init, (None, "model")))
    self.w2 = nnx.Param(init(rngs.params(), (depth, depth)), out_sharding=("model", None))

  def __call__(self, x):
    y = nnx.relu(self.dot1(x))
    y = partix.lax.with_sharding_constraint(y, P("data", "model"))
    return y @ self.w2


def batch():
  rng = np.random.default_rng(0)
  return (rng.normal(size=(8, 16)).astype(np.float32),
          rng.integers(0, 16, size=(8,)).astype(np.int32))


def train(optax, mesh, steps=3):
  @nnx.jit
  def create():
    model = DotReluDot(16, nnx.Rngs(0))
    state = nnx.state(model)
    nnx.update(model, partix.lax.with_sharding_constraint(
        state, nnx.spmd.get_partition_spec(state)))
    return model

  @nnx.jit
  def train_step(model, optimizer, x, y):
    def loss_fn(model):
      logits = model(x)
      return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss
  x, y = batch()
  with partix.set_mesh(mesh):
    model = create()
    opt = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
    xb = partix.device_put(x, NamedSharding(mesh, P("data", None)))
    yb = partix.device_put(y, NamedSharding(mesh, P("data")))
    losses = [float(train_step(model, opt, xb, yb)) for _ in range(2)]
    traces = train_step._jitted.trace_count
    losses += [float(train_step(model, opt, xb, yb)) for _ in range(steps - 2)]
  # Once the state is the program's own output, steps reuse the trace.
  assert traces <= 2 and train_step._jitted.trace_count == traces
  return losses, model, opt


def test_losses_equal_on_every_mesh_and_one_device(optax):
  results = {shape: train(optax, make_mesh(shape)) for shape in [(4, 2), (2, 4), (8, 1),
                                                                  (1, 1)]}
  ref, _, _ = results[(1, 1)]
  assert ref[2] < ref[0]  # it learns
  for shape, (losses, model, opt) in results.items():
    np.testing.assert_allclose(losses, ref, rtol=2e-5, err_msg=str(shape))
    assert int(opt.step[...]) == 3
    for path in (("dot1", "kernel"), ("w2",)):
      param = model.dot1.kernel if path[0] == "dot1" else model.w2
      mu = opt.opt_state[0].mu
      nu = opt.opt_state[0].nu
      for moment in (mu, nu):
        m = moment["dot1"]["kernel"] if path[0] == "dot1" else moment["w2"]
        assert isinstance(m, nnx.OptVariable)
        assert m[...].sharding.spec == param[...].sharding.spec, (shape, path)
        assert m.out_sharding == param.out_sharding


def test_optimizer_step_equals_hand_written_adamw(optax):
  model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
  k0 = np.asarray(model.kernel[...])
  opt = nnx.Optimizer(model, optax.adamw(0.1, weight_decay=0.0), wrt=nnx.Param)
  x = jnp.ones((4, 3))
  grads = nnx.grad(lambda m: jnp.sum(m(x)))(model)
  opt.update(model, grads)
  # Adam's first step moves every entry by lr * sign(g) (g / sqrt(g^2) with eps tiny).
  np.testing.assert_allclose(np.asarray(model.kernel[...]), k0 - 0.1, rtol=1e-5, atol=1e-5)
  assert int(opt.step[...]) == 1
  paths = ["/".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(opt))]
  assert "step" in paths and "opt_state/0/mu/kernel" in paths and "opt_state/0/count" in paths


def test_optimizer_errors(optax):
  model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
  with pytest.raises(partix.PartixError, match="GradientTransformation"):
    nnx.Optimizer(model, object(), wrt=nnx.Param)
  opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
  with pytest.raises(partix.PartixError, match="missing paths"):
    opt.update(model, nnx.State({"kernel": nnx.Param(jnp.zeros((3, 2)))}))


def test_metrics():
  avg = nnx.metrics.Average()
  avg.update(values=jnp.asarray([1.0, 2.0, 3.0]))
  avg.update(values=5.0)
  assert float(avg.compute()) == pytest.approx(11 / 4)
  metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"),
                            accuracy=nnx.metrics.Accuracy())

  @nnx.jit
  def step(metrics, logits, labels, loss):
    metrics.update(logits=logits, labels=labels, loss=loss)
  logits = jnp.asarray([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
  step(metrics, logits, jnp.asarray([1, 1, 1]), jnp.asarray(2.0))
  step(metrics, logits, jnp.asarray([1, 0, 1]), jnp.asarray(4.0))
  out = metrics.compute()
  assert float(out["loss"]) == pytest.approx(3.0)
  assert float(out["accuracy"]) == pytest.approx(5 / 6)
  metrics.reset()
  assert int(metrics.loss.count[...]) == 0
  with pytest.raises(TypeError, match="values"):
    nnx.metrics.Average().update(other=1.0)


def test_model_and_optimizer_inside_jit(optax):
  model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
  k0 = np.asarray(model.kernel[...])
  state = nnx.ModelAndOptimizer(model, optax.sgd(0.5))

  @nnx.jit
  def step(state, x):
    grads = nnx.grad(lambda m: jnp.sum(m(x)))(state.model)
    state.update(grads)
  step(state, jnp.ones((2, 3)))
  np.testing.assert_allclose(np.asarray(model.kernel[...]), k0 - 0.5 * 2, rtol=1e-6)
  assert state.model is model and int(state.step[...]) == 1
