"""What reverse mode keeps: jax.ad_checkpoint.saved_residuals / print_saved_residuals, vjp's
vjp_fn as a pytree of its residuals (a custom_vjp fwd rule may return it), and grad's
allow_int (float0 gradients of integer arguments). Values against numpy closed forms; eager,
jit, shard_map on 8 devices, bad input."""
import functools

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import tree_util as tu
from partix.ad_checkpoint import checkpoint_name, print_saved_residuals, saved_residuals
from partix.sharding import NamedSharding, PartitionSpec as P


def _texts(f, *args):
  return [text for _, text in saved_residuals(f, *args)]


def test_remat_default_policy_saves_only_the_argument():
  # Under checkpoint's default policy the backward pass recomputes sin(x) from x.
  f = jax.checkpoint(lambda x: jnp.sin(jnp.sin(x)).sum())
  res = saved_residuals(f, jnp.ones(4))
  assert [t for _, t in res] == ["from the argument x"]
  aval, _ = res[0]
  assert tuple(aval.shape) == (4,) and np.dtype(aval.dtype) == np.float32


def test_argument_names_follow_the_signature():
  def f(weights, inputs):
    return (jnp.tanh(inputs @ weights["w"]) * weights["b"]).sum()
  w = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
  res = saved_residuals(jax.checkpoint(f), w, jnp.ones((5, 3)))
  texts = [t for _, t in res]
  # The backward pass of a fully rematerialized function reads its arguments only.
  assert set(texts) <= {"from the argument weights['w']", "from the argument weights['b']",
                        "from the argument inputs"}
  assert "from the argument inputs" in texts


def test_named_residual_is_saved_by_its_policy():
  def f(x):
    y = checkpoint_name(jnp.sin(x), "s")
    return jnp.cos(y).sum()
  saved = jax.checkpoint(f, policy=jax.checkpoint_policies.save_only_these_names("s"))
  texts = _texts(saved, jnp.ones(8))
  assert "named 's'" in texts
  recomputed = jax.checkpoint(f, policy=jax.checkpoint_policies.nothing_saveable)
  assert "named 's'" not in _texts(recomputed, jnp.ones(8))


def test_without_remat_intermediates_are_saved():
  # sin(sin(x)): the backward pass needs cos(x) and cos(sin(x)), intermediates of the forward
  # pass, so at least one residual is not the argument.
  texts = _texts(lambda x: jnp.sin(jnp.sin(x)).sum(), jnp.ones(4))
  assert any(t.startswith("output of ") for t in texts), texts


def test_print_saved_residuals_prints_one_line_each(capsys):
  f = jax.checkpoint(lambda x, y: (x * y).sum())
  print_saved_residuals(f, jnp.ones(3), jnp.ones(3))
  lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
  assert lines == ["f32[3] from the argument x", "f32[3] from the argument y"]


def test_residuals_inside_shard_map_skip_collectives():
  # A remat'd shard_map body with all_gathers: only the argument is kept.
  mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))

  @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
  def body(x):
    g = jax.lax.all_gather(jnp.sin(x), "i", tiled=True)
    return (g * g)[:2] * x

  x = jnp.linspace(0.0, 1.0, 16)
  assert len(saved_residuals(jax.checkpoint(lambda v: body(v).sum()), x)) == 1


def test_saved_residuals_bad_input():
  with pytest.raises(jax.PartixError, match="saved_residuals"):
    saved_residuals(3, jnp.ones(2))
  with pytest.raises(jax.PartixError, match="saved_residuals"):
    saved_residuals(lambda x: x.sum(), "not an array")


# ---- vjp_fn is a pytree ----

def _f(x, w):
  return jnp.tanh(x * w).sum(), x * 2.0


def test_vjp_fn_is_a_pytree_of_arrays():
  x, w = jnp.arange(4.0) / 4, jnp.full(4, 0.5)
  out, vjp_fn = jax.vjp(_f, x, w)
  leaves, tree = tu.tree_flatten(vjp_fn)
  assert leaves and all(isinstance(a, jax.Array) for a in leaves)
  ct = (jnp.float32(1.0), jnp.ones(4))
  rebuilt = tu.tree_unflatten(tree, leaves)
  for a, b in zip(vjp_fn(ct), rebuilt(ct)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
  # Against the closed form: d/dx sum tanh(xw) + 2 * 1.
  xn, wn = np.asarray(x), np.asarray(w)
  sech2 = 1 - np.tanh(xn * wn) ** 2
  gx, gw = rebuilt(ct)
  np.testing.assert_allclose(np.asarray(gx), sech2 * wn + 2, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(gw), sech2 * xn, rtol=1e-5)


def test_vjp_fn_passes_through_jit_as_an_argument():
  x = jnp.linspace(0.1, 1.0, 8)
  _, vjp_fn = jax.vjp(jnp.sin, x)
  g = jax.jit(lambda fn, c: fn(c)[0])(vjp_fn, jnp.ones(8))
  np.testing.assert_allclose(np.asarray(g), np.cos(np.asarray(x)), rtol=1e-6)


def test_vjp_fn_as_custom_vjp_residual():
  # A custom_vjp whose fwd keeps jax.vjp's vjp_fn and whose bwd calls it (a common idiom).
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x) * x

  def fwd(x):
    y, vjp_fn = jax.vjp(lambda v: jnp.sin(v) * v, x)
    return y, vjp_fn

  def bwd(vjp_fn, g):
    return vjp_fn(g)

  f.defvjp(fwd, bwd)
  x = jnp.linspace(-1.0, 1.0, 8)
  xn = np.asarray(x)
  want = np.cos(xn) * xn + np.sin(xn)
  for grad in (jax.grad(lambda v: f(v).sum()), jax.jit(jax.grad(lambda v: f(v).sum()))):
    np.testing.assert_allclose(np.asarray(grad(x)), want, rtol=1e-5)
  # Sharded over 8 devices.
  mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
  xs = jax.device_put(x, NamedSharding(mesh, P("i")))
  np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(lambda v: f(v).sum()))(xs)), want,
                             rtol=1e-5)


def test_vjp_fn_bad_cotangent():
  _, vjp_fn = jax.vjp(jnp.sin, jnp.ones(3))
  with pytest.raises(jax.PartixError, match="vjp"):
    vjp_fn(jnp.ones(4))
  with pytest.raises(jax.PartixError, match="vjp"):
    vjp_fn((jnp.ones(3), jnp.ones(3)))
  leaves, tree = tu.tree_flatten(vjp_fn)
  with pytest.raises(jax.PartixError, match="vjp"):
    tu.tree_unflatten(tree, leaves)(jnp.ones(3, jnp.int32))


# ---- grad(allow_int=True) ----

def test_grad_allow_int_gives_float0():
  def f(x, n):
    return (x * n).sum()
  gx, gn = jax.grad(f, argnums=(0, 1), allow_int=True)(jnp.ones(3), 4)
  np.testing.assert_allclose(np.asarray(gx), np.full(3, 4.0))
  assert isinstance(gn, np.ndarray) and gn.dtype == jax.dtypes.float0 and gn.shape == ()
  _, (gx2, gi) = jax.value_and_grad(f, argnums=(0, 1), allow_int=True)(
      jnp.ones(3), jnp.arange(3))
  assert gi.dtype == jax.dtypes.float0 and gi.shape == (3,)
  np.testing.assert_allclose(np.asarray(gx2), np.arange(3.0))
  with pytest.raises(jax.PartixError, match="grad"):
    jax.grad(f, argnums=(0, 1))(jnp.ones(3), 4)
