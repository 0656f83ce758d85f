"""nnx.jit / grad / value_and_grad / vmap / scan / remat / eval_shape over modules: results
equal the plain computation, and state changed inside is written back as Flax does."""
import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix import nnx


class Counter(nnx.Module):
  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 2, rngs=rngs)
    self.calls = nnx.BatchStat(jnp.zeros((), jnp.int32))
    self.dropout = nnx.Dropout(0.5, rngs=rngs)

  def __call__(self, x, train=False):
    self.calls[...] += 1
    return self.dropout(self.linear(x), deterministic=not train)


def test_jit_writes_back_state_changed_inside():
  m = Counter(nnx.Rngs(0))
  x = jnp.ones((4, 3))

  @nnx.jit
  def step(model, x):
    return model(x, train=True)
  y1 = step(m, x)
  y2 = step(m, x)
  assert int(m.calls[...]) == 2
  assert int(m.dropout.rngs.count[...]) == 2  # the dropout stream advanced twice
  assert not np.array_equal(np.asarray(y1), np.asarray(y2))  # new masks each call
  eager = Counter(nnx.Rngs(0))
  np.testing.assert_allclose(np.asarray(y1), np.asarray(eager(x, train=True)), rtol=1e-6)


def test_jit_attribute_updates_static_args_and_returned_modules():
  m = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

  @nnx.jit
  def add_attr(model):
    model.extra = nnx.Param(jnp.ones(2))
    model.kernel[...] = model.kernel[...] * 0
    return model
  out = add_attr(m)
  assert out is m and isinstance(m.extra, nnx.Param)
  assert float(jnp.sum(jnp.abs(m.kernel[...]))) == 0.0

  @nnx.jit(static_argnums=1)
  def make(x, n):
    return nnx.Linear(n, 2, rngs=nnx.Rngs(1)), x * n
  lin, y = make(jnp.ones(2), 3)
  assert isinstance(lin, nnx.Linear) and lin.kernel.shape == (3, 2)
  np.testing.assert_array_equal(np.asarray(y), [3, 3])
  ref = nnx.Linear(3, 2, rngs=nnx.Rngs(1))
  np.testing.assert_allclose(np.asarray(lin.kernel[...]), np.asarray(ref.kernel[...]))
  assert make._jitted.trace_count == 1
  make(jnp.ones(2), 3)
  assert make._jitted.trace_count == 1  # same graph, same statics: no new trace


def test_jit_shared_module_between_arguments():
  shared = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

  @nnx.jit
  def f(a, b):
    a.kernel[...] = a.kernel[...] + 1
    return b.kernel[...]
  before = np.asarray(shared.kernel[...])
  out = f(shared, shared)
  np.testing.assert_allclose(np.asarray(out), before + 1)
  np.testing.assert_allclose(np.asarray(shared.kernel[...]), before + 1)


def test_grad_and_value_and_grad_of_a_module():
  m = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
  x = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))

  def loss(model):
    return jnp.sum(model(x) ** 2)
  value, grads = nnx.value_and_grad(loss)(m)
  assert isinstance(grads, nnx.State) and set(grads.keys()) == {"bias", "kernel"}
  k, b = np.asarray(m.kernel[...]), np.asarray(m.bias[...])
  xn = np.asarray(x)
  y = xn @ k + b
  np.testing.assert_allclose(float(value), (y ** 2).sum(), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(grads["kernel"][...]), xn.T @ (2 * y), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(grads["bias"][...]), (2 * y).sum(0), rtol=1e-5)
  g2 = nnx.grad(loss)(m)
  np.testing.assert_allclose(np.asarray(g2["kernel"][...]), np.asarray(grads["kernel"][...]))

  def with_aux(model, scale):
    out = model(x)
    return jnp.sum(out) * scale, out
  (v, aux), (gm, gs) = nnx.value_and_grad(with_aux, argnums=(0, 1), has_aux=True)(m, 2.0)
  assert aux.shape == (2, 2) and float(gs) == pytest.approx(float(jnp.sum(m(x))), rel=1e-5)


def test_grad_writes_back_non_param_state():
  m = Counter(nnx.Rngs(0))
  grads = nnx.grad(lambda model: jnp.sum(model(jnp.ones((2, 3)), train=True)))(m)
  assert set(nnx.to_flat_state(grads).paths) == {("linear", "bias"), ("linear", "kernel")}
  assert int(m.calls[...]) == 1 and int(m.dropout.rngs.count[...]) == 1


def test_vmap_creates_stacked_modules_and_scan_runs_them():
  keys = partix.random.split(partix.random.key(0), 3)

  @nnx.vmap(in_axes=0, out_axes=0)
  def create(key):
    return nnx.Linear(4, 4, rngs=nnx.Rngs(key))
  stack = create(keys)
  assert stack.kernel.shape == (3, 4, 4) and stack.bias.shape == (3, 4)

  @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
  def forward(x, layer):
    y = layer(x)
    return y, jnp.sum(y)
  x = jnp.ones((2, 4))
  out, sums = forward(x, stack)
  ref = np.asarray(x)
  k, b = np.asarray(stack.kernel[...]), np.asarray(stack.bias[...])
  for i in range(3):
    ref = ref @ k[i] + b[i]
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)
  assert sums.shape == (3,)

  @nnx.vmap(in_axes=(0, None))
  def apply(layer, x):
    return layer(x)
  ys = apply(stack, x)
  np.testing.assert_allclose(np.asarray(ys[1]), np.asarray(x) @ k[1] + b[1], rtol=1e-5)


def test_remat_and_eval_shape():
  m = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
  x = jnp.ones((2, 3))

  @nnx.remat
  def f(model, x):
    return model(x)
  np.testing.assert_allclose(np.asarray(f(m, x)), np.asarray(m(x)))
  g = nnx.grad(lambda model: jnp.sum(f(model, x)))(m)
  np.testing.assert_allclose(np.asarray(g["bias"][...]), [2.0, 2.0])
  abstract = nnx.eval_shape(lambda: nnx.Linear(5, 7, rngs=nnx.Rngs(0)))
  assert isinstance(abstract, nnx.Linear)
  assert isinstance(abstract.kernel[...], partix.ShapeDtypeStruct)
  assert abstract.kernel.shape == (5, 7) and abstract.bias.shape == (7,)


def test_transform_errors():
  with pytest.raises(partix.PartixError, match="not callable"):
    nnx.jit(3)
  with pytest.raises(partix.PartixError, match="in_shardings"):
    nnx.jit(lambda x: x, in_shardings=(None,))
  m = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
  with pytest.raises(partix.PartixError, match="argnums"):
    nnx.grad(lambda model: jnp.sum(model(jnp.ones((1, 3)))), argnums=2)(m)
  with pytest.raises(partix.PartixError, match="hashable"):
    nnx.jit(lambda x, s: x, static_argnums=1)(jnp.ones(2), [1])


def test_jit_on_a_method_and_grad_keywords():
  class Model(nnx.Module):
    def __init__(self):
      self.linear = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
      self.seen = nnx.BatchStat(jnp.zeros(()))

    @nnx.jit
    def __call__(self, x):
      self.seen[...] += 1
      return self.linear(x)
  m = Model()
  x = jnp.ones((2, 3))
  np.testing.assert_allclose(np.asarray(m(x)), np.asarray(m.linear(x)))
  m(x)
  assert float(m.seen[...]) == 2.0

  def loss(model, *, scale):
    return jnp.sum(model.linear(x)) * scale
  g = nnx.grad(loss)(m, scale=3.0)
  np.testing.assert_allclose(np.asarray(g["linear"]["bias"][...]), [6.0, 6.0])
  graphdef, state = nnx.split(m, graph=True)
  assert nnx.merge(graphdef, state, graph=True).linear.kernel is m.linear.kernel


def test_split_rngs_with_vmap_builds_distinct_layers():
  rngs = nnx.Rngs(0)

  @nnx.split_rngs(splits=3)
  @nnx.vmap(in_axes=(0,), out_axes=0)
  def create(rngs):
    return nnx.Linear(4, 4, rngs=rngs)
  stack = create(rngs)
  k = np.asarray(stack.kernel[...])
  assert k.shape == (3, 4, 4) and not np.allclose(k[0], k[1])
  assert rngs.default.key[...].shape == () and int(rngs.default.count[...]) == 1  # restored
  with nnx.split_rngs(rngs, splits=2):
    assert rngs.default.key[...].shape == (2,)
  assert rngs.default.key[...].shape == ()
  with pytest.raises(partix.PartixError, match="splits"):
    nnx.split_rngs(splits=0)


def test_jit_static_argnames_and_donation_accepted():
  m = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

  @nnx.jit(static_argnames="scale", donate_argnums=0)
  def f(model, x, *, scale):
    return model(x) * scale
  x = jnp.ones((1, 3))
  np.testing.assert_allclose(np.asarray(f(m, x, scale=2)), 2 * np.asarray(m(x)), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(f(m, x, scale=3)), 3 * np.asarray(m(x)), rtol=1e-6)
  assert f._jitted.trace_count == 2  # one per static value
  np.asarray(m.kernel[...])  # the module's arrays are still readable (donation is ignored)
