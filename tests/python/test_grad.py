"""grad / value_and_grad against closed forms and finite differences, on 1 and 8 devices."""
import functools

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import NamedSharding, PartitionSpec as P


def fd(f, x, eps=1e-3):
  """Central finite differences of a numpy scalar function."""
  x = x.astype(np.float64)
  g = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    d = np.zeros_like(x)
    d[i] = eps
    g[i] = (f(x + d) - f(x - d)) / (2 * eps)
  return g


def test_closed_forms(rng):
  x = rng.standard_normal((3, 4)).astype(np.float32)
  g = jax.grad(lambda x: (x * x).sum())(x)
  np.testing.assert_allclose(np.asarray(g), 2 * x, rtol=1e-5)
  g = jax.grad(lambda x: jnp.sin(x).sum())(x)
  np.testing.assert_allclose(np.asarray(g), np.cos(x), rtol=1e-5)
  v, g = jax.value_and_grad(lambda x: jnp.exp(x).sum())(x)
  np.testing.assert_allclose(float(v), np.exp(x).sum(), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(g), np.exp(x), rtol=1e-5)
  assert jax.grad(lambda x: x * x)(3.0) == pytest.approx(6.0)


def test_argnums_and_aux(rng):
  a = rng.standard_normal((4,)).astype(np.float32)
  b = rng.standard_normal((4,)).astype(np.float32)
  f = lambda a, b: (a * b).sum()
  ga, gb = jax.grad(f, argnums=(0, 1))(a, b)
  np.testing.assert_allclose(np.asarray(ga), b, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(gb), a, rtol=1e-6)
  gb = jax.grad(f, argnums=1)(a, b)
  np.testing.assert_allclose(np.asarray(gb), a, rtol=1e-6)
  (v, aux), g = jax.value_and_grad(lambda a: ((a ** 2).sum(), {"m": a.mean()}), has_aux=True)(a)
  np.testing.assert_allclose(float(v), (a ** 2).sum(), rtol=1e-5)
  np.testing.assert_allclose(float(aux["m"]), a.mean(), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(g), 2 * a, rtol=1e-5)
  g, aux = jax.grad(lambda a: (a.sum(), a * 2), has_aux=True)(a)
  np.testing.assert_allclose(np.asarray(aux), 2 * a)


def test_pytree_params_mlp_finite_differences(rng):
  w = rng.standard_normal((3, 2)).astype(np.float32)
  b = rng.standard_normal((2,)).astype(np.float32)
  x = rng.standard_normal((5, 3)).astype(np.float32)

  def loss(p, x):
    return jnp.tanh(x @ p["w"] + p["b"]).sum()
  g = jax.grad(loss)({"w": w, "b": b}, x)
  assert set(g) == {"w", "b"}
  np.testing.assert_allclose(np.asarray(g["w"]), fd(lambda w_: np.tanh(x @ w_ + b).sum(), w),
                             rtol=1e-2, atol=1e-3)
  np.testing.assert_allclose(np.asarray(g["b"]), fd(lambda b_: np.tanh(x @ w + b_).sum(), b),
                             rtol=1e-2, atol=1e-3)


def test_grad_sharded_8(mesh8, rng):
  w = rng.standard_normal((8, 4)).astype(np.float32)
  x = rng.standard_normal((6, 8)).astype(np.float32)
  sw = NamedSharding(mesh8, P("x", "y"))
  wd = jax.device_put(w, sw)

  def loss(w, x):
    return ((x @ w) ** 2).mean()
  g = jax.grad(loss)(wd, x)
  assert g.sharding.spec == P("x", "y")
  np.testing.assert_allclose(np.asarray(g), 2 * x.T @ (x @ w) / (6 * 4), rtol=1e-4, atol=1e-5)
  # grad inside jit, jit inside grad
  gj = jax.jit(jax.grad(loss))(wd, x)
  np.testing.assert_allclose(np.asarray(gj), np.asarray(g), rtol=1e-5, atol=1e-6)
  gi = jax.grad(jax.jit(loss))(wd, x)
  np.testing.assert_allclose(np.asarray(gi), np.asarray(g), rtol=1e-5, atol=1e-6)


def test_grad_one_device(mesh1, rng):
  w = rng.standard_normal((4, 4)).astype(np.float32)
  wd = jax.device_put(w, NamedSharding(mesh1, P()))
  g = jax.grad(lambda w: (w @ w).sum())(wd)
  one = np.ones((4, 4))
  np.testing.assert_allclose(np.asarray(g), one @ w.T + w.T @ one, rtol=1e-4)


def test_grad_through_scan_fori_checkpoint(rng):
  x = rng.standard_normal((4,)).astype(np.float32)
  # prod over 3 steps of c * x  ->  x^3 elementwise; d/dx sum = 3 x^2
  def f(x):
    c, _ = lax.scan(lambda c, _: (c * x, None), jnp.ones_like(x), None, length=3)
    return c.sum()
  np.testing.assert_allclose(np.asarray(jax.grad(f)(x)), 3 * x ** 2, rtol=1e-5)

  def g(x):
    return lax.fori_loop(0, 4, lambda i, c: c * x, jnp.ones_like(x)).sum()
  np.testing.assert_allclose(np.asarray(jax.grad(g)(x)), 4 * x ** 3, rtol=1e-4)

  h = jax.checkpoint(lambda x: jnp.sin(x) * x)
  np.testing.assert_allclose(np.asarray(jax.grad(lambda x: h(x).sum())(x)),
                             np.cos(x) * x + np.sin(x), rtol=1e-5)
  r = jax.remat(lambda x: jnp.tanh(x))
  np.testing.assert_allclose(np.asarray(jax.grad(lambda x: r(x).sum())(x)),
                             1 - np.tanh(x) ** 2, rtol=1e-5)


def test_grad_shard_map_psum(mesh8, rng):
  x = rng.standard_normal((8, 4)).astype(np.float32)

  def local(x):
    return lax.psum((x * x).sum(), ("x", "y"))
  sm = jax.shard_map(local, mesh=mesh8, in_specs=P("x", "y"), out_specs=P())
  v = sm(x)
  np.testing.assert_allclose(float(v), (x * x).sum(), rtol=1e-5)
  g = jax.grad(lambda x: sm(x))(jax.device_put(x, NamedSharding(mesh8, P("x", "y"))))
  np.testing.assert_allclose(np.asarray(g), 2 * x, rtol=1e-5)


def test_bad_input(rng):
  x = np.ones((3,), np.float32)
  with pytest.raises(jax.PartixError, match=r"^\[grad\]"):
    jax.grad(lambda x: x * 2)(x)  # non-scalar
  with pytest.raises(jax.PartixError, match=r"^\[grad\].*argnums"):
    jax.grad(lambda x: x.sum(), argnums=2)(x)
  with pytest.raises(jax.PartixError, match=r"^\[grad\].*integer"):
    jax.grad(lambda x: x.sum())(np.ones(3, np.int32))
  with pytest.raises(jax.PartixError, match=r"^\[value_and_grad\].*pair"):
    jax.value_and_grad(lambda x: x.sum(), has_aux=True)(x)
  with pytest.raises(jax.PartixError, match=r"^\[grad\]"):
    jax.grad(lambda x: "s")(x)
  with pytest.raises(jax.PartixError, match=r"^\[grad\]"):
    jax.grad(3)
  # An argument outside argnums may be anything (JAX closes over it).
  np.testing.assert_array_equal(np.asarray(jax.grad(lambda x, s: x.sum())(x, "str")), np.ones(3))
  with pytest.raises(jax.PartixError, match=r"^\[grad\]"):
    jax.grad(lambda s, x: x.sum())("str", x)


def test_checkpoint_static_and_kwargs(rng):
  x = rng.standard_normal((4,)).astype(np.float32)

  @functools.partial(jax.checkpoint, static_argnums=(1,))
  def f(x, n, *, scale):
    for _ in range(n):
      x = jnp.sin(x)
    return x * scale
  g = jax.grad(lambda x: f(x, 2, scale=np.float32(3)).sum())(x)
  np.testing.assert_allclose(np.asarray(g), 3 * np.cos(np.sin(x)) * np.cos(x), rtol=1e-5)
  with pytest.raises(jax.PartixError, match=r"^\[checkpoint\].*not an array"):
    jax.checkpoint(lambda x, s: x)(x, "s")


def test_fori_loop_traced_bounds(rng):
  f = jax.jit(lambda n, x: lax.fori_loop(0, n, lambda i, c: c + i, x))
  assert int(f(5, 0)) == 10
  assert int(f(7, 1)) == 22
  with pytest.raises(jax.PartixError, match=r"^\[fori_loop\]"):
    lax.fori_loop(0, 2.5, lambda i, c: c, 0)


def test_grads_keep_each_params_sharding(mesh8, rng):
  w1 = rng.standard_normal((8, 4)).astype(np.float32)
  w2 = rng.standard_normal((4, 2)).astype(np.float32)
  x = rng.standard_normal((3, 8)).astype(np.float32)
  params = {"w1": jax.device_put(w1, NamedSharding(mesh8, P("x", "y"))),
            "w2": jax.device_put(w2, NamedSharding(mesh8, P("y")))}

  def loss(p, x):
    return ((x @ p["w1"]) @ p["w2"]).sum()
  g = jax.jit(jax.grad(loss))(params, x)
  assert g["w1"].sharding.spec == P("x", "y")
  assert g["w2"].sharding.spec == P("y")
  ones = np.ones((3, 2))
  np.testing.assert_allclose(np.asarray(g["w1"]), x.T @ ones @ w2.T, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(g["w2"]), (x @ w1).T @ ones, rtol=1e-4, atol=1e-5)


def test_arguments_not_differentiated_pass_as_they_are():
  # As JAX: grad closes over the arguments outside argnums, so a function, a string or a
  # Python int used in range() may be one (JAX's custom-derivatives tutorial does this).
  def app(f, x):
    return f(x)
  assert float(jax.grad(app, 1)(lambda v: v ** 3, 3.0)) == 27.0

  def g(x, n, mode):
    for _ in range(n):
      x = jnp.sin(x) if mode == "sin" else jnp.cos(x)
    return x
  x0 = 0.7
  want = np.cos(np.sin(x0)) * np.cos(x0)
  np.testing.assert_allclose(float(jax.grad(g)(x0, 2, "sin")), want, rtol=1e-5)
  v, gv = jax.value_and_grad(g)(x0, 2, "sin")
  np.testing.assert_allclose(float(v), np.sin(np.sin(x0)), rtol=1e-6)
  np.testing.assert_allclose(float(gv), want, rtol=1e-5)
  np.testing.assert_allclose(float(jax.jit(lambda v: jax.grad(g)(v, 2, "sin"))(x0)), want,
                             rtol=1e-5)
  # A differentiated argument must still be a float array.
  with pytest.raises(jax.PartixError, match="grad"):
    jax.grad(app, 0)(lambda v: v, 3.0)


def test_eager_grad_sees_primal_values_in_python_control_flow():
  # As JAX's control-flow tutorial: grad called eagerly differentiates Python branches and
  # loops on the primal values; under jit the same function is refused.
  def f(x):
    if x < 3:
      return 3.0 * x ** 2
    return -4 * x
  assert float(jax.grad(f)(2.0)) == 12.0 and float(jax.grad(f)(4.0)) == -4.0
  with pytest.raises(jax.errors.TracerBoolConversionError):
    jax.jit(jax.grad(f))(2.0)

  def doubling(x, n):
    while x.sum() < n:
      x = x * 2
    return (x ** 2).sum()
  v, g = jax.value_and_grad(doubling)(jnp.ones(3), 10.0)
  assert float(v) == 48.0
  np.testing.assert_array_equal(np.asarray(g), np.full(3, 32.0))
  # int() of a differentiated value is a constant there (JAX: the primal's value); float()
  # has none, as in JAX 0.10.
  assert float(jax.grad(lambda x: int(x) * x)(3.0)) == 3.0
  with pytest.raises(jax.errors.ConcretizationTypeError):
    jax.grad(lambda x: float(x) * x)(3.0)
  # A conversion inside a lax loop body has no one value: the usual error.
  with pytest.raises(jax.errors.TracerBoolConversionError):
    jax.grad(lambda x: jax.lax.fori_loop(0, 2, lambda i, v: v * 2 if v.sum() > 0 else v,
                                         x).sum())(jnp.ones(2))


def test_eager_grad_branches_on_a_sharded_value():
  mesh = jax.make_mesh((8,), ("i",))
  a = np.arange(8.0, dtype=np.float32)
  x = jax.device_put(a, NamedSharding(mesh, P("i")))

  def f(v):
    return (v ** 2).sum() if v.sum() > 10 else v.sum()
  g = jax.grad(f)(x)
  np.testing.assert_array_equal(np.asarray(g), 2 * a)
  assert g.sharding.spec == P("i")
  np.testing.assert_array_equal(np.asarray(jax.grad(f)(x * 0.1)), np.ones(8))
