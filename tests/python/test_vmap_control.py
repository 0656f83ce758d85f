"""jax.vmap of loops, branches, random draws, collectives over axis_name, shard_map and
spmd_axis_name: each against the function applied to every example in turn (a Python loop),
or the collective written out over the examples with numpy. Cases re-expressed from JAX's
batching tests (lax_control_flow_test's vmap cases, api_test's axis_name cases) and the
shard_map tutorial."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import Mesh, NamedSharding, PartitionSpec as P


def loop(f, *args):
  """f on each example (axis 0 of every argument), results stacked as a tree."""
  n = np.shape(args[0])[0]
  outs = [f(*[a[i] for a in args]) for i in range(n)]
  return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *outs)


def assert_tree_close(got, want, tol=1e-6):
  g, w = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
  assert len(g) == len(w)
  for a, b in zip(g, w):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def rng(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def rnn(h, xs):
  def step(c, x):
    c = jnp.tanh(0.5 * c + x)
    return c, c.sum()
  return lax.scan(step, h, xs)


@pytest.mark.parametrize("jitted", [False, True])
def test_scan_fori_while_and_cond_per_example(jitted):
  wrap = jax.jit if jitted else (lambda f: f)
  h, xs = rng(4, 3), rng(4, 5, 3, seed=1)
  assert_tree_close(wrap(jax.vmap(rnn))(h, xs), loop(rnn, h, xs))
  # A carry unbatched at the start becomes batched through the body.
  f = lambda x: lax.fori_loop(0, 4, lambda i, c: (c[0] + 1, c[1] * 0.5 + x.sum() * i),
                              (0, jnp.float32(0.0)))
  assert_tree_close(wrap(jax.vmap(f))(xs[:, 0]), loop(f, xs[:, 0]))
  # Per-example trip counts.
  x, limit = np.array([1, 3, 0.5, 7], np.float32), np.array([10, 10, 100, 5], np.float32)
  g = lambda v, lim: lax.while_loop(lambda c: c[0] < lim, lambda c: (c[0] * 2, c[1] + 1),
                                    (v, 0))
  got = wrap(jax.vmap(g))(x, limit)
  assert_tree_close(got, loop(g, x, limit))
  np.testing.assert_array_equal(np.asarray(got[1]), [4, 2, 8, 0])
  # A predicate per example selects between both branches.
  c = lambda v: lax.cond(v.sum() > 0, jnp.sin, lambda u: u * u - 1, v)
  assert_tree_close(wrap(jax.vmap(c))(h), loop(c, h))
  sw = lambda i, v: lax.switch(i, [jnp.sin, jnp.cos, lambda u: -u], v)
  idx = np.array([0, 2, 1, 2], np.int32)
  assert_tree_close(wrap(jax.vmap(sw))(idx, h), loop(sw, idx, h))


def test_per_example_gradients_through_a_scan():
  h, xs = rng(4, 3), rng(4, 5, 3, seed=1)
  loss = lambda h0, x: rnn(h0, x)[1].sum()
  per = jax.vmap(jax.grad(loss))(h, xs)
  assert_tree_close(per, loop(jax.grad(loss), h, xs), 1e-5)


def test_random_draws_from_per_example_keys():
  keys = jax.random.split(jax.random.key(0), 4)
  draw = lambda k: (jax.random.normal(k, (3,)), jax.random.uniform(jax.random.fold_in(k, 7), (2,)))
  got = jax.vmap(draw)(keys)
  want = [draw(keys[i]) for i in range(4)]
  for j in range(2):
    np.testing.assert_array_equal(np.asarray(got[j]), np.stack([np.asarray(w[j]) for w in want]))
  # Dropout with a key per example.
  x = rng(4, 6)
  drop = lambda k, v: jnp.where(jax.random.bernoulli(k, 0.5, v.shape), v * 2, 0)
  assert_tree_close(jax.jit(jax.vmap(drop))(keys, x), loop(drop, keys, x))


def test_collectives_over_the_axis_name():
  x = rng(4, 3)
  np.testing.assert_allclose(jax.vmap(lambda v: v - lax.pmean(v, "i"), axis_name="i")(x),
                             x - x.mean(0), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(jax.vmap(lambda v: v / lax.psum(v, "i"), axis_name="i")(x),
                             x / x.sum(0), rtol=1e-5)
  np.testing.assert_array_equal(jax.vmap(lambda v: lax.axis_index("i"), axis_name="i")(x),
                                np.arange(4))
  assert jax.vmap(lambda v: lax.psum(1, "i"), axis_name="i", out_axes=None)(x) == 4
  gathered = jax.vmap(lambda v: lax.all_gather(v, "i"), axis_name="i")(x)
  assert gathered.shape == (4, 4, 3)
  np.testing.assert_array_equal(gathered[2], x)
  shifted = jax.vmap(lambda v: lax.ppermute(v, "i", [(j, (j + 1) % 4) for j in range(4)]),
                     axis_name="i")(x)
  np.testing.assert_array_equal(shifted, np.roll(x, 1, axis=0))
  # Under jit, and nested: the inner vmap's collective names the outer axis.
  y = rng(3, 4, 2)
  f = jax.jit(jax.vmap(jax.vmap(lambda v: v - lax.pmean(v, "outer"), axis_name="inner"),
                       axis_name="outer"))
  np.testing.assert_allclose(f(y), y - y.mean(0), rtol=1e-6, atol=1e-6)


def test_vmap_of_shard_map_and_spmd_axis_name():
  mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  x = rng(3, 8, 2)

  def body(b):
    return lax.psum(b.sum(0), "x") + 0 * b
  sm = jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  assert_tree_close(jax.vmap(sm)(x), loop(sm, x), 1e-5)
  # spmd_axis_name: the constrained value's batch splits over 'x'.
  z = rng(8, 6, 4)
  g = lambda v: jax.lax.with_sharding_constraint(jnp.tanh(v), NamedSharding(mesh, P(None, "y")))
  out = jax.jit(jax.vmap(g, spmd_axis_name="x"))(z)
  assert out.sharding == NamedSharding(mesh, P("x", None, "y"))
  np.testing.assert_allclose(out, np.tanh(z), rtol=1e-6, atol=1e-6)
  with pytest.raises(jax.PartixError, match=r"spmd_axis_name 'z' is not an axis"):
    jax.jit(jax.vmap(g, spmd_axis_name="z"))(z)


def test_unbound_axis_names_are_errors():
  with pytest.raises(jax.PartixError, match=r"'j' is not bound"):
    jax.vmap(lambda v: lax.psum(v, "j"), axis_name="i")(rng(3))
  with pytest.raises(jax.PartixError, match=r"^\[vmap\] axis_name must be a non-empty str"):
    jax.vmap(lambda v: v, axis_name="")(rng(3))


def test_all_to_all_over_the_examples():
  x = np.arange(32, dtype=np.float32).reshape(4, 8)
  got = jax.vmap(lambda v: lax.all_to_all(v, "i", 0, 0, tiled=True), axis_name="i")(x)
  want = x.reshape(4, 4, 2).transpose(1, 0, 2).reshape(4, 8)  # example e: piece e of each
  np.testing.assert_array_equal(got, want)
