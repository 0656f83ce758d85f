"""JAX 0.10's check_vma rule for a user's loops and branches inside shard_map: a carry keeps
the varying axes it enters with, and cond's branches agree on their results'; otherwise a
clear error that names the lax.pcast fixing it. The package's own loops (random.gamma's
rejection loop, special functions) and the loops autodiff and batching build still widen.
Messages and outcomes checked against JAX 0.10.2."""
from functools import partial

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import AxisType, PartitionSpec as P


@pytest.fixture
def mesh():
  return jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def smap(mesh, f, in_specs, out_specs):
  return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


@pytest.mark.parametrize("loop", ["scan", "fori_loop", "while_loop"])
def test_a_carry_that_starts_invariant_and_varies_is_refused(mesh, loop):
  def body(x):
    acc = jnp.zeros((2,), jnp.float32)  # invariant
    if loop == "scan":
      return lax.scan(lambda c, _: (c + x, None), acc, None, length=3)[0]
    if loop == "fori_loop":
      return lax.fori_loop(0, 3, lambda i, c: c + x, acc)
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + x), (0, acc))[1]
  f = smap(mesh, body, P("x"), P("x"))
  with pytest.raises(jax.PartixError, match=rf"{loop} body function carry input and carry "
                     r"output must have equal types(.|\n)*has type f32\[2\] but the "
                     r"corresponding output carry component has type f32\[2\]\{V:x\}(.|\n)*"
                     r"pcast\(..., \('x',\), to='varying'\)` to the initial carry value"):
    f(jnp.arange(4.))
  with pytest.raises(jax.PartixError, match="carry input and carry output"):
    jax.jit(f)(jnp.arange(4.))


@pytest.mark.parametrize("loop", ["scan", "fori_loop", "while_loop"])
def test_the_named_fix_runs(mesh, loop):
  def body(x):
    acc = lax.pcast(jnp.zeros((2,), jnp.float32), "x", to="varying")
    if loop == "scan":
      return lax.scan(lambda c, _: (c + x, None), acc, None, length=3)[0]
    if loop == "fori_loop":
      return lax.fori_loop(0, 3, lambda i, c: c + x, acc)
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + x), (0, acc))[1]
  x = np.arange(4., dtype=np.float32)
  for f in (smap(mesh, body, P("x"), P("x")), jax.jit(smap(mesh, body, P("x"), P("x")))):
    np.testing.assert_array_equal(np.asarray(f(x)), 3 * x)


def test_zeros_like_of_a_varying_value_varies(mesh):
  # As JAX's (jnp.zeros_like is lax.full_like): started from it, the carry is well typed.
  def body(x):
    a = lax.fori_loop(0, 3, lambda i, c: c + x, jnp.zeros_like(x))
    b = lax.fori_loop(0, 2, lambda i, c: c * x, jnp.ones_like(x))
    c = lax.fori_loop(0, 1, lambda i, c: c - x, jnp.full_like(x, 7.0))
    return a + b + c
  x = np.arange(8., dtype=np.float32)
  out = smap(mesh, body, P("x"), P("x"))(x)
  np.testing.assert_array_equal(np.asarray(out), 3 * x + x * x + (7 - x))


def test_cond_branches_must_agree(mesh):
  def swap(x, y):
    return lax.cond(True, lambda a, b: (a, b), lambda a, b: (b, a), x, y)
  f = smap(mesh, swap, (P("x"), P("y")), (P(("x", "y")), P(("x", "y"))))
  x = jnp.arange(8.)
  with pytest.raises(jax.PartixError, match=r"cond branches must have equal output types"
                     r"(.|\n)*This might be fixed by:\n  \* applying `jax.lax.pcast\(..., "
                     r"\('y',\), to='varying'\)` to the output of true_fun at path \[0\]"):
    f(x, jnp.arange(16.))  # blocks of 4 on every device
  # A branch returning zeros_like of the other's value agrees (JAX accepts it too).
  g = smap(mesh, lambda x: lax.cond(True, lambda v: v, jnp.zeros_like, x), P("x"), P("x"))
  np.testing.assert_array_equal(np.asarray(g(x)), np.arange(8.))


def test_a_varying_predicate_widens_what_it_must(mesh):
  # Devices may take different branches: partix makes results vary over the predicate's axes
  # itself (a branch's invariant constant is widened, not refused).
  def body(x):
    return lax.cond(x[0] > 1, lambda v: v * 2, lambda v: jnp.zeros((2,), jnp.float32), x)
  x = np.arange(4., dtype=np.float32)
  out = smap(mesh, body, P("x"), P("x"))(x)
  np.testing.assert_array_equal(np.asarray(out), [0, 0, 4, 6])


def test_library_loops_inside_shard_map_still_run(mesh):
  # random.gamma's rejection loop starts its state invariant; with a varying key it varies.
  def body(k, a):
    k = lax.pcast(k, ("x",), to="varying")
    return jax.random.gamma(k, a)
  f = smap(mesh, body, (P(), P("x")), P("x"))
  out = np.asarray(f(jax.random.key(0), jnp.full((8,), 2.0)))
  assert out.shape == (8,) and np.all(out > 0)
  np.testing.assert_array_equal(out[:4], out[4:])  # the one key on both devices


def test_grad_and_vmap_of_well_typed_loops(mesh):
  def loss(w, x):
    def body(x):
      acc = jnp.zeros_like(x)
      acc = lax.fori_loop(0, 3, lambda i, c: c + jnp.sin(w * x), acc)
      return lax.psum(jnp.sum(acc), ("x", "y"))
    return smap(mesh, body, P(("x", "y")), P())(x)
  x = np.linspace(0, 1, 8, dtype=np.float32)
  g = jax.grad(loss)(jnp.float32(0.5), x)
  np.testing.assert_allclose(float(g), float(np.sum(3 * np.cos(0.5 * x) * x)), rtol=1e-5)
  # vmap over a batch of inputs
  xs = np.stack([x, 2 * x])
  out = jax.vmap(lambda v: loss(jnp.float32(0.5), v))(xs)
  np.testing.assert_allclose(np.asarray(out), [3 * np.sum(np.sin(0.5 * v)) for v in xs],
                             rtol=1e-5)


# ---- jax_remove_size_one_mesh_axis_from_type (off by default, as in JAX 0.10) ----


def test_size_one_axes_stay_in_the_varying_set_by_default():
  mesh = jax.make_mesh((2, 1), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
  seen = []

  def body(x):
    seen.append(jax.typeof(x).mat.varying)
    return lax.psum(x, "x")
  f = smap(mesh, body, P("x", "y"), P())
  with pytest.raises(jax.PartixError, match="out_specs which require replication"):
    f(np.arange(16.).reshape(8, 2))
  assert seen[-1] == {"x", "y"}


def test_size_one_axes_leave_the_varying_set_with_the_option():
  mesh = jax.make_mesh((2, 1), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
  seen = []

  def body(x):
    seen.append(jax.typeof(x).mat.varying)
    out = lax.psum(x, "x")
    seen.append(jax.typeof(out).mat.varying)
    return out
  data = np.arange(16.).reshape(8, 2)
  g = jax.jit(smap(mesh, body, P("x", "y"), P()))
  jax.config.update("jax_remove_size_one_mesh_axis_from_type", True)
  try:
    out = g(data)
    assert seen[-2:] == [{"x"}, frozenset()]
    np.testing.assert_array_equal(np.asarray(out), data[:4] + data[4:])
    # grad through it: the size-1 axis needs no psum either
    grad = jax.grad(lambda v: jnp.sum(g(v)))(jnp.asarray(data))
    np.testing.assert_array_equal(np.asarray(grad), np.ones_like(data))
  finally:
    jax.config.update("jax_remove_size_one_mesh_axis_from_type", False)
  # The option is part of the jit's signature: off again, the same jit traces again and
  # refuses the out_specs, as without the option.
  with pytest.raises(jax.PartixError, match="out_specs which require replication"):
    g(data)


# ---- jax_auto_pcast (on by default) ----

def test_without_auto_pcast_mismatched_operands_are_refused():
  mesh = jax.make_mesh((2,), ("i",), axis_types=(AxisType.Auto,))
  x, y = np.arange(4., dtype=np.float32), np.ones(2, np.float32)  # y whole on each device

  def mul(a, b):
    return a * b
  f = smap(mesh, mul, (P("i"), P()), P("i"))
  fixed = smap(mesh, lambda a, b: a * lax.pcast(b, "i", to="varying"), (P("i"), P()), P("i"))
  loose = jax.shard_map(mul, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"),
                        check_vma=False)
  want = x * np.tile(y, 2)
  np.testing.assert_array_equal(np.asarray(f(x, y)), want)  # on: an implicit pvary
  jax.config.update("jax_auto_pcast", False)
  try:
    for g in (f, jax.jit(f)):
      with pytest.raises(jax.PartixError, match=r"Primitive mul requires varying manual axes "
                         r"to match, but got \[\{i\}, \{\}\]"):
        g(x, y)
    np.testing.assert_array_equal(np.asarray(fixed(x, y)), want)
    np.testing.assert_array_equal(np.asarray(loose(x, y)), want)
    # grad of the well-typed program
    grad = jax.grad(lambda a: jnp.sum(fixed(a, y)))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(grad), np.tile(y, 2))
  finally:
    jax.config.update("jax_auto_pcast", True)
  np.testing.assert_array_equal(np.asarray(jax.jit(f)(x, y)), want)  # on again: traced anew


def test_vmap_spmd_axis_name_in_a_shard_map_spec_and_the_flag():
  mesh = jax.make_mesh((2,), ("i",), axis_types=(AxisType.Auto,))

  def f(x, y):
    return jax.shard_map(lambda a, b: a + lax.all_gather(b, "i", tiled=True), mesh=mesh,
                         in_specs=(P(None), P("i")), out_specs=P(None), check_vma=False)(x, y)
  g = jax.vmap(f, in_axes=(0, None), spmd_axis_name="i")
  xs, y = jnp.arange(32).reshape(4, 8), jnp.arange(8)
  with pytest.raises(jax.PartixError, match="vmap spmd_axis_name cannot appear in shard_map"):
    g(xs, y)
  jax.config.update("jax_disable_vmap_shmap_error", True)
  try:
    out = g(xs, y)
  finally:
    jax.config.update("jax_disable_vmap_shmap_error", False)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(xs) + np.arange(8))


def test_custom_vjp_bwd_must_give_each_argument_its_own_varying_type(mesh):
  # JAX 0.10's check: a psum'd (invariant) cotangent for a varying argument is refused; the
  # same rule without the psum, or with check_vma=False, runs.
  def make(bwd):
    @jax.custom_vjp
    def f(x):
      return x * 2.0
    f.defvjp(lambda x: (f(x), None), bwd)
    return f

  bad = make(lambda _, g: (lax.psum(g, "x") * 2.0,))
  good = make(lambda _, g: (g * 2.0,))
  x = jnp.arange(8.)
  loss = lambda f, check: lambda v: jax.shard_map(
      f, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=check)(v).sum()
  with pytest.raises(jax.PartixError, match=r"Custom VJP bwd rule must produce an output with "
                     r"the same type as the args tuple of the primal function, but at output\[0\]"
                     r" the bwd rule produced an output of type f32\[4\] corresponding to an "
                     r"input of type f32\[4\]\{V:x\}"):
    jax.grad(loss(bad, True))(x)
  np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(loss(good, True)))(x)),
                                np.full(8, 2.))
  jax.grad(loss(bad, False))(x)  # unchecked, as JAX


def test_linearize_tangent_must_vary_as_its_primal(mesh):
  def m(p, t, cast):
    if cast:
      p = lax.pcast(p, ("x", "y"), to="varying")
    _, f_jvp = jax.linearize(lambda v: (v ** 2).sum(), p)
    return f_jvp(t)[None]
  p = jnp.array([1., 2.])
  run = lambda cast: jax.shard_map(lambda t: m(p, t, cast), mesh=mesh, in_specs=P(("x", "y")),
                                   out_specs=P(("x", "y")))(jnp.ones(16))
  with pytest.raises(jax.PartixError, match=r"applying `jax.lax.pcast\(..., \('x', 'y'\), "
                     r"to='varying'\)` to the primal value passed to `jax.linearize`"):
    run(False)
  np.testing.assert_array_equal(np.asarray(run(True)), np.full(8, 6.))
