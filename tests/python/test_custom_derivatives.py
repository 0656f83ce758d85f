"""jax.custom_jvp and jax.custom_vjp: the examples of JAX's custom-derivatives tutorial and
tests (tests/api_test.py's CustomJVPTest / CustomVJPTest), re-expressed, checked against
closed forms; rules that differ from the true derivative show that the rule was used; under
jit, on sharded arguments, inside shard_map; pytrees, nondiff_argnums and bad rules."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import NamedSharding, PartitionSpec as P


@jax.custom_jvp
def log1pexp(x):
  return jnp.log(1. + jnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
  x, = primals
  x_dot, = tangents
  ans = log1pexp(x)  # the function itself inside its rule
  return ans, (1 - 1 / (1 + jnp.exp(x))) * x_dot


def test_custom_jvp_stable_gradient_where_the_naive_one_is_nan():
  x = jnp.array([-3., 0., 3., 100.])
  naive = jax.grad(lambda v: jnp.sum(jnp.log(1. + jnp.exp(v))))(x)
  assert np.isnan(np.asarray(naive)[3])
  want = 1 / (1 + np.exp(-np.array([-3., 0., 3., 100.])))
  for f in (jax.grad(lambda v: jnp.sum(log1pexp(v))),
            jax.jit(jax.grad(lambda v: jnp.sum(log1pexp(v))))):
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-6)
  # The value is the function's, eagerly and under jit.
  np.testing.assert_allclose(np.asarray(log1pexp(x))[:3], np.log1p(np.exp([-3., 0., 3.])),
                             rtol=1e-6)
  np.testing.assert_allclose(np.asarray(jax.jit(log1pexp)(x))[:3],
                             np.log1p(np.exp([-3., 0., 3.])), rtol=1e-6)


def test_custom_jvp_defjvps_and_second_order():
  @jax.custom_jvp
  def f(x, y):
    return jnp.sin(x) * y

  # Rules deliberately 3x the true partials.
  f.defjvps(lambda x_dot, primal_out, x, y: 3 * jnp.cos(x) * x_dot * y,
            lambda y_dot, primal_out, x, y: 3 * jnp.sin(x) * y_dot)
  x, y = jnp.array([0.3, 1.1]), jnp.array([2.0, -1.0])
  gx, gy = jax.grad(lambda a, b: jnp.sum(f(a, b)), argnums=(0, 1))(x, y)
  xn, yn = np.array([0.3, 1.1]), np.array([2.0, -1.0])
  np.testing.assert_allclose(np.asarray(gx), 3 * np.cos(xn) * yn, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(gy), 3 * np.sin(xn), rtol=1e-6)
  # grad of grad differentiates the rule: d/dx (3 cos x y) = -3 sin x y.
  h = jax.grad(lambda a: jnp.sum(jax.grad(lambda u: jnp.sum(f(u, y)))(a)))(x)
  np.testing.assert_allclose(np.asarray(h), -3 * np.sin(xn) * yn, rtol=1e-5)


def test_custom_jvp_nondiff_argnums_takes_a_function():
  from functools import partial

  @partial(jax.custom_jvp, nondiff_argnums=(0,))
  def app(f, x):
    return f(x)

  @app.defjvp
  def app_jvp(f, primals, tangents):
    x, = primals
    x_dot, = tangents
    return f(x), 2. * x_dot  # not f's derivative: the rule's

  g = jax.grad(lambda v: jnp.sum(app(jnp.sin, v)))(jnp.ones(3))
  np.testing.assert_allclose(np.asarray(g), 2.0)


def test_custom_vjp_clip_gradient_with_nondiff_argnums():
  from functools import partial

  @partial(jax.custom_vjp, nondiff_argnums=(0, 1))
  def clip_gradient(lo, hi, x):
    return x

  def fwd(lo, hi, x):
    return x, None

  def bwd(lo, hi, _, g):
    return (jnp.clip(g, lo, hi),)

  clip_gradient.defvjp(fwd, bwd)
  f = lambda v: jnp.sum(clip_gradient(-0.75, 0.75, jnp.sin(v)) * 10.0)
  x = jnp.array([0.0, 1.0, 2.0])
  # cos(x) * clip(10, -.75, .75) = 0.75 cos(x)
  np.testing.assert_allclose(np.asarray(jax.grad(f)(x)), 0.75 * np.cos([0., 1., 2.]), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(f))(x)), 0.75 * np.cos([0., 1., 2.]),
                             rtol=1e-6)


@jax.custom_vjp
def scaled_sin(x, y):
  return jnp.sin(x) * y


def scaled_sin_fwd(x, y):
  return scaled_sin(x, y), {"cos": jnp.cos(x), "parts": (jnp.sin(x), y)}  # pytree residuals


def scaled_sin_bwd(res, g):
  sin_x, y = res["parts"]
  return (res["cos"] * g * y * 2, sin_x * g)  # x's cotangent twice the true one


scaled_sin.defvjp(scaled_sin_fwd, scaled_sin_bwd)


def test_custom_vjp_rule_is_used_eager_jit_and_sharded(mesh8):
  x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2)
  y = np.full((8, 2), 3.0, np.float32)
  loss = lambda a, b: jnp.sum(scaled_sin(a, b))
  want_x, want_y = 2 * np.cos(x) * y, np.sin(x)
  s = NamedSharding(mesh8, P("x", "y"))
  xs, ys = jax.device_put(x, s), jax.device_put(y, s)
  for f in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
    for a, b in ((x, y), (xs, ys)):
      gx, gy = f(a, b)
      np.testing.assert_allclose(np.asarray(gx), want_x, rtol=1e-6)
      np.testing.assert_allclose(np.asarray(gy), want_y, rtol=1e-6)
  gx, _ = jax.jit(jax.grad(loss, argnums=(0, 1)))(xs, ys)
  assert gx.sharding == s
  np.testing.assert_allclose(np.asarray(scaled_sin(xs, ys)), np.sin(x) * y, rtol=1e-6)


def test_custom_vjp_inside_shard_map_with_psum(mesh8):
  mesh = jax.make_mesh((8,), ("i",))
  x = jax.device_put(np.linspace(0, 1, 16, dtype=np.float32), NamedSharding(mesh, P("i")))

  def body(b):
    return lax.psum(jnp.sum(scaled_sin(b, jnp.ones_like(b))), "i")[None]

  f = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
  g = jax.jit(jax.grad(lambda v: jnp.sum(f(v)) / 8))(x)
  np.testing.assert_allclose(np.asarray(g), 2 * np.cos(np.linspace(0, 1, 16)), rtol=1e-5)


def test_custom_vjp_pytree_arguments_and_none_cotangents():
  @jax.custom_vjp
  def f(p, z):
    return p["w"] * p["b"] + z

  f.defvjp(lambda p, z: (f(p, z), p),
           lambda p, g: ({"w": g * p["b"], "b": None}, None))  # None: zero cotangents
  p = {"w": jnp.array([1.0, 2.0]), "b": jnp.array([3.0, 4.0])}
  gp, gz = jax.grad(lambda q, z: jnp.sum(f(q, z)), argnums=(0, 1))(p, jnp.zeros(2))
  np.testing.assert_allclose(np.asarray(gp["w"]), [3.0, 4.0])
  np.testing.assert_allclose(np.asarray(gp["b"]), [0.0, 0.0])
  np.testing.assert_allclose(np.asarray(gz), [0.0, 0.0])


def test_bad_rules_are_errors_naming_the_api():
  x = jnp.ones(3)

  @jax.custom_vjp
  def f(v):
    return v * 2

  with pytest.raises(jax.PartixError, match=r"^\[custom_vjp\] f has no VJP rules"):
    jax.grad(lambda v: jnp.sum(f(v)))(x)
  f.defvjp(lambda v: (f(v), None), lambda r, g: (g, g))
  with pytest.raises(jax.PartixError, match=r"^\[custom_vjp\] bwd must return a tuple of 1 "
                                            r"cotangents"):
    jax.grad(lambda v: jnp.sum(f(v)))(x)
  f.defvjp(lambda v: (f(v), None), lambda r, g: (jnp.sum(g),))
  with pytest.raises(jax.PartixError, match=r"^\[custom_vjp\] bwd must return one cotangent per "
                                            r"differentiable input"):
    jax.grad(lambda v: jnp.sum(f(v)))(x)
  f.defvjp(lambda v: f(v), lambda r, g: (g,))
  with pytest.raises(jax.PartixError, match=r"^\[custom_vjp\] fwd must return a pair"):
    jax.grad(lambda v: jnp.sum(f(v)))(x)

  @jax.custom_jvp
  def h(v):
    return v * 2

  with pytest.raises(jax.PartixError, match=r"^\[custom_jvp\] h has no JVP rule"):
    jax.grad(lambda v: jnp.sum(h(v)))(x)
  h.defjvp(lambda p, t: (h(*p), jnp.sum(t[0])))
  with pytest.raises(jax.PartixError, match=r"^\[custom_jvp\] the jvp rule must return"):
    jax.grad(lambda v: jnp.sum(h(v)))(x)

  # Closing over the value being differentiated gives it no cotangent: refused.
  def closes(v):
    @jax.custom_vjp
    def c(u):
      return u * v
    c.defvjp(lambda u: (u * v, None), lambda r, g: (g,))
    return jnp.sum(c(jnp.ones(3)))
  with pytest.raises(jax.PartixError, match=r"close over a value being differentiated"):
    jax.grad(closes)(x)


def test_custom_gradient():
  # JAX's documented example: the gradient of x**2 written as g * x (half the true one).
  @jax.custom_gradient
  def f(x):
    return x ** 2, lambda g: (g * x,)
  x = np.float32(3.0)
  assert float(f(x)) == 9.0
  assert float(jax.grad(f)(x)) == 3.0
  assert float(jax.jit(jax.grad(f))(x)) == 3.0
  # Two arguments, a clipped gradient, under vmap.
  @jax.custom_gradient
  def clip_mul(a, b):
    return a * b, lambda g: (jnp.clip(g * b, -1, 1), g * a)
  a, b = np.array([0.5, 4.0, -3.0], np.float32), np.array([2.0, 3.0, 5.0], np.float32)
  ga, gb = jax.vmap(jax.grad(clip_mul, argnums=(0, 1)))(a, b)
  np.testing.assert_allclose(ga, np.clip(b, -1, 1))
  np.testing.assert_allclose(gb, a)
  with pytest.raises(jax.PartixError, match=r"^\[custom_gradient\] .* must return a pair"):
    jax.grad(jax.custom_gradient(lambda x: x * 2))(x)
  with pytest.raises(jax.PartixError, match=r"one cotangent per positional argument \(2\)"):
    jax.grad(jax.custom_gradient(lambda x, y: (x * y, lambda g: (g,))))(x, x)


def test_second_derivative_through_a_custom_vjp_calling_itself():
  # JAX's custom-derivatives tutorial: a fixed point by while_loop whose fwd rule calls the
  # custom_vjp function and whose bwd solves the adjoint with it again. The rules of those
  # inner calls are used too, so the second derivative never differentiates the while_loop.
  from functools import partial
  from partix.lax import while_loop

  @partial(jax.custom_vjp, nondiff_argnums=(0,))
  def fixed_point(f, a, x_guess):
    def cond(c):
      return jnp.abs(c[0] - c[1]) > 1e-6
    _, x = while_loop(cond, lambda c: (c[1], f(a, c[1])), (x_guess, f(a, x_guess)))
    return x

  def fwd(f, a, x_init):
    x = fixed_point(f, a, x_init)
    return x, (a, x)

  def rev_iter(f, packed, u):
    a, x, x_bar = packed
    _, vjp_x = jax.vjp(lambda v: f(a, v), x)
    return x_bar + vjp_x(u)[0]

  def bwd(f, res, x_bar):
    a, x = res
    _, vjp_a = jax.vjp(lambda v: f(v, x), a)
    a_bar, = vjp_a(fixed_point(partial(rev_iter, f), (a, x, x_bar), x_bar))
    return a_bar, jnp.zeros_like(x)

  fixed_point.defvjp(fwd, bwd)

  def newton_sqrt(a):
    return fixed_point(lambda a, x: 0.5 * (x + a / x), a, a)

  np.testing.assert_allclose(float(newton_sqrt(2.0)), np.sqrt(2.0), rtol=1e-6)
  np.testing.assert_allclose(float(jax.grad(newton_sqrt)(2.0)), 0.5 / np.sqrt(2.0), rtol=1e-5)
  np.testing.assert_allclose(float(jax.grad(jax.grad(newton_sqrt))(2.0)), -0.25 * 2.0 ** -1.5,
                             rtol=1e-4)
  np.testing.assert_allclose(float(jax.jit(jax.grad(jax.grad(newton_sqrt)))(2.0)),
                             -0.25 * 2.0 ** -1.5, rtol=1e-4)
