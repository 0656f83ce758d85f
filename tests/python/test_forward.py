"""vjp, jvp, linearize, jacrev/jacfwd/hessian, linear_transpose and make_jaxpr against numpy
finite differences and closed forms: pytrees, has_aux, jit composition, 8 devices, bad input."""
import functools

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix.sharding import NamedSharding, PartitionSpec as P


def f_np(x, w):
  return np.tanh(x @ w) * x[:, :2]


def f_px(x, w):
  return jnp.tanh(x @ w) * x[:, :2]


def fd_jvp(f, primals, tangents, eps=1e-4):
  """Central differences of a numpy function along tangents, in float64."""
  p = [np.asarray(a, np.float64) for a in primals]
  t = [np.asarray(a, np.float64) for a in tangents]
  plus = f(*[a + eps * b for a, b in zip(p, t)])
  minus = f(*[a - eps * b for a, b in zip(p, t)])
  return (plus - minus) / (2 * eps)


@pytest.fixture
def xw(rng):
  return (rng.standard_normal((3, 4)).astype(np.float32),
          (0.5 * rng.standard_normal((4, 2))).astype(np.float32))


def test_vjp_matches_finite_differences_and_is_called_twice(xw, rng):
  x, w = xw
  y, vjp_fn = jax.vjp(f_px, x, w)
  np.testing.assert_allclose(np.asarray(y), f_np(x, w), rtol=1e-5, atol=1e-6)
  for _ in range(2):
    ct = rng.standard_normal((3, 2)).astype(np.float32)
    gx, gw = vjp_fn(ct)
    tx, tw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    # <ct, J t> = <J^T ct, t>
    lhs = float(np.sum(ct * fd_jvp(f_np, (x, w), (tx, tw))))
    rhs = float(np.sum(np.asarray(gx) * tx) + np.sum(np.asarray(gw) * tw))
    assert rhs == pytest.approx(lhs, rel=1e-3, abs=1e-4)
    want = jax.grad(lambda a, b: jnp.sum(f_px(a, b) * ct), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(np.asarray(gx), np.asarray(want[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(want[1]), rtol=1e-5, atol=1e-6)


def test_vjp_pytrees_and_has_aux(rng):
  params = {"w": rng.standard_normal((4, 3)).astype(np.float32),
            "b": rng.standard_normal((3,)).astype(np.float32)}
  xs = (rng.standard_normal((2, 4)).astype(np.float32),)

  def f(p, inputs):
    h = inputs[0] @ p["w"] + p["b"]
    return {"h": jnp.sin(h), "s": jnp.sum(h)}, jnp.max(h)

  out, vjp_fn, aux = jax.vjp(f, params, xs, has_aux=True)
  h = xs[0] @ params["w"] + params["b"]
  np.testing.assert_allclose(float(aux), h.max(), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(out["h"]), np.sin(h), rtol=1e-5)
  ct = {"h": rng.standard_normal((2, 3)).astype(np.float32), "s": np.float32(2.0)}
  gp, gxs = vjp_fn(ct)
  assert set(gp) == {"w", "b"} and isinstance(gxs, tuple) and len(gxs) == 1
  dh = ct["h"] * np.cos(h) + 2.0
  np.testing.assert_allclose(np.asarray(gp["w"]), xs[0].T @ dh, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(gp["b"]), dh.sum(0), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(gxs[0]), dh @ params["w"].T, rtol=1e-4, atol=1e-5)


def test_jvp_matches_finite_differences_and_the_vjp_jacobian(xw, rng):
  x, w = xw
  tx = rng.standard_normal(x.shape).astype(np.float32)
  tw = rng.standard_normal(w.shape).astype(np.float32)
  y, t = jax.jvp(f_px, (x, w), (tx, tw))
  np.testing.assert_allclose(np.asarray(y), f_np(x, w), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(t), fd_jvp(f_np, (x, w), (tx, tw)), rtol=1e-3, atol=1e-4)
  _, vjp_fn = jax.vjp(f_px, x, w)
  jt = np.zeros((3, 2))
  for k in np.ndindex(3, 2):
    e = np.zeros((3, 2), np.float32)
    e[k] = 1
    rx, rw = vjp_fn(e)
    jt[k] = np.sum(np.asarray(rx) * tx) + np.sum(np.asarray(rw) * tw)
  np.testing.assert_allclose(np.asarray(t), jt, rtol=1e-5, atol=1e-5)


def test_jvp_pytrees_has_aux_and_integer_outputs(rng):
  p = {"a": rng.standard_normal(3).astype(np.float32), "n": np.arange(3, dtype=np.int32)}
  t = {"a": np.ones(3, np.float32), "n": np.zeros(3, np.int32)}

  def f(d):
    return (d["a"] * d["n"], (d["a"] * 10).astype(jnp.int32)), jnp.sum(d["a"])

  (y, yi), (ty, tyi), aux = jax.jvp(f, (p,), (t,), has_aux=True)
  np.testing.assert_allclose(np.asarray(ty), np.arange(3), rtol=1e-6)
  assert tyi.dtype == np.int32 and not np.asarray(tyi).any()
  np.testing.assert_allclose(float(aux), p["a"].sum(), rtol=1e-5)


def test_jit_composition(xw, rng):
  x, w = xw
  tx = rng.standard_normal(x.shape).astype(np.float32)
  tw = rng.standard_normal(w.shape).astype(np.float32)
  want = fd_jvp(f_np, (x, w), (tx, tw))
  _, t1 = jax.jit(lambda a, b, c, d: jax.jvp(f_px, (a, b), (c, d)))(x, w, tx, tw)
  _, t2 = jax.jvp(jax.jit(f_px), (x, w), (tx, tw))
  for t in (t1, t2):
    np.testing.assert_allclose(np.asarray(t), want, rtol=1e-3, atol=1e-4)
  ct = rng.standard_normal((3, 2)).astype(np.float32)

  @jax.jit
  def pulled(a, b, c):
    _, vjp_fn = jax.vjp(f_px, a, b)
    return vjp_fn(c), vjp_fn(2 * c)
  (gx, gw), (gx2, _) = pulled(x, w, ct)
  want = jax.grad(lambda a, b: jnp.sum(f_px(a, b) * ct), argnums=(0, 1))(x, w)
  np.testing.assert_allclose(np.asarray(gx), np.asarray(want[0]), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(gw), np.asarray(want[1]), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(gx2), 2 * np.asarray(want[0]), rtol=1e-5, atol=1e-6)


def test_through_control_flow(rng):
  x = (0.5 * rng.standard_normal(4)).astype(np.float32)
  t = rng.standard_normal(4).astype(np.float32)

  def f(v):
    v = lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) * 1.5, v)
    return lax.cond(True, lambda c: c * c, lambda c: -c, v)

  def f_np_(v):
    for _ in range(3):
      v = np.sin(v) * 1.5
    return v * v
  _, jt = jax.jvp(f, (x,), (t,))
  np.testing.assert_allclose(np.asarray(jt), fd_jvp(f_np_, (x,), (t,)), rtol=1e-3, atol=1e-4)


def test_sharded_inputs(mesh8, rng):
  x = rng.standard_normal((8, 4)).astype(np.float32)
  w = rng.standard_normal((4, 6)).astype(np.float32)
  sx, sw = NamedSharding(mesh8, P("x", "y")), NamedSharding(mesh8, P("y", None))
  xs, ws = jax.device_put(x, sx), jax.device_put(w, sw)
  f = lambda a, b: jnp.tanh(a @ b)
  ct = rng.standard_normal((8, 6)).astype(np.float32)
  want = jax.grad(lambda a, b: jnp.sum(f(a, b) * ct), argnums=(0, 1))(x, w)
  y, vjp_fn = jax.vjp(f, xs, ws)
  for _ in range(2):
    gx, gw = vjp_fn(ct)
    assert gx.sharding == sx and gw.sharding == sw
    np.testing.assert_allclose(np.asarray(gx), np.asarray(want[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(want[1]), rtol=1e-5, atol=1e-6)
  tx = rng.standard_normal(x.shape).astype(np.float32)
  tw = rng.standard_normal(w.shape).astype(np.float32)
  _, t_ref = jax.jvp(f, (x, w), (tx, tw))
  _, t = jax.jvp(f, (xs, ws), (jax.device_put(tx, sx), jax.device_put(tw, sw)))
  np.testing.assert_allclose(np.asarray(t), np.asarray(t_ref), rtol=1e-5, atol=1e-6)
  assert t.sharding == y.sharding
  _, tj = jax.jit(lambda a, b, c, d: jax.jvp(f, (a, b), (c, d)))(xs, ws, tx, tw)
  np.testing.assert_allclose(np.asarray(tj), np.asarray(t_ref), rtol=1e-5, atol=1e-6)


def test_linearize_traces_once(xw, rng):
  x, w = xw
  calls = []

  def f(a, b):
    calls.append(1)
    return f_px(a, b)
  y, f_jvp = jax.linearize(f, x, w)
  np.testing.assert_allclose(np.asarray(y), f_np(x, w), rtol=1e-5, atol=1e-6)
  for _ in range(3):
    tx = rng.standard_normal(x.shape).astype(np.float32)
    tw = rng.standard_normal(w.shape).astype(np.float32)
    np.testing.assert_allclose(np.asarray(f_jvp(tx, tw)), fd_jvp(f_np, (x, w), (tx, tw)),
                               rtol=1e-3, atol=1e-4)
  assert len(calls) == 1
  assert f_jvp.trace_count == 1


def test_jacobians_closed_forms(rng):
  x = rng.standard_normal(4).astype(np.float32)
  a = rng.standard_normal((3, 4)).astype(np.float32)
  for jac in (jax.jacrev, jax.jacfwd, jax.jacobian):
    np.testing.assert_allclose(np.asarray(jac(lambda v: a @ v)(x)), a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(jac(jnp.sin)(x)), np.diag(np.cos(x)), rtol=1e-5,
                               atol=1e-6)
  h = jax.hessian(lambda v: jnp.sum(v ** 3))(x)
  np.testing.assert_allclose(np.asarray(h), np.diag(6 * x), rtol=1e-4, atol=1e-5)
  # f(x, y) = x y^T: d/dx[i,j,k] = delta_ik y_j, out.shape + in.shape.
  y = rng.standard_normal(2).astype(np.float32)
  for jac in (jax.jacrev, jax.jacfwd):
    jx, jy = jac(lambda u, v: jnp.outer(u, v), argnums=(0, 1))(x, y)
    assert jx.shape == (4, 2, 4) and jy.shape == (4, 2, 2)
    np.testing.assert_allclose(np.asarray(jx), np.einsum("ik,j->ijk", np.eye(4), y), atol=1e-6)
    np.testing.assert_allclose(np.asarray(jy), np.einsum("jk,i->ijk", np.eye(2), x), atol=1e-6)


def test_jacobian_pytrees_and_aux(rng):
  p = {"a": rng.standard_normal(3).astype(np.float32), "b": np.float32(2.0)}

  def f(d):
    return (d["a"] * d["b"], jnp.sum(d["a"] ** 2)), d["b"] * 3

  for jac in (jax.jacrev, jax.jacfwd):
    (j0, j1), aux = jac(f, has_aux=True)(p)
    assert float(aux) == pytest.approx(6.0)
    np.testing.assert_allclose(np.asarray(j0["a"]), 2 * np.eye(3), atol=1e-6)
    np.testing.assert_allclose(np.asarray(j0["b"]), p["a"], rtol=1e-6)
    assert j1["a"].shape == (3,) and j1["b"].shape == ()
    np.testing.assert_allclose(np.asarray(j1["a"]), 2 * p["a"], rtol=1e-5)
    assert float(j1["b"]) == 0.0


def test_make_jaxpr():
  x = jnp.arange(4.0)
  text = str(jax.make_jaxpr(lambda v: jnp.sin(v) * 2 + v)(x))
  for op in ("sin", "mul", "add", "f32[4]"):
    assert op in text
  j, shape = jax.make_jaxpr(lambda v: v @ v.T, return_shape=True)(
      jax.ShapeDtypeStruct((8, 3), jnp.float32))
  assert "f32[8,8]" in str(j) and shape.shape == (8, 8)


def test_linear_transpose_of_a_matmul(rng):
  a = rng.standard_normal((3, 5)).astype(np.float32)
  ct = rng.standard_normal(3).astype(np.float32)
  f_t = jax.linear_transpose(lambda v: jnp.asarray(a) @ v, jax.ShapeDtypeStruct((5,), jnp.float32))
  (got,) = f_t(ct)
  np.testing.assert_allclose(np.asarray(got), a.T @ ct, rtol=1e-5, atol=1e-6)
  (got2,) = f_t(2 * ct)
  np.testing.assert_allclose(np.asarray(got2), 2 * a.T @ ct, rtol=1e-5, atol=1e-6)
  m = rng.standard_normal((5, 2)).astype(np.float32)
  c2 = rng.standard_normal((3, 2)).astype(np.float32)
  (gm,) = jax.linear_transpose(lambda v: jnp.asarray(a) @ v, m)(c2)
  np.testing.assert_allclose(np.asarray(gm), a.T @ c2, rtol=1e-5, atol=1e-6)


def test_bad_input_names_the_api(xw):
  x, w = xw
  with pytest.raises(jax.PartixError, match=r"\[jvp\].*tangent.*shape"):
    jax.jvp(f_px, (x, w), (x, x))
  with pytest.raises(jax.PartixError, match=r"\[jvp\].*tangent.*dtype"):
    jax.jvp(f_px, (x, w), (x.astype(np.float16), w))
  with pytest.raises(jax.PartixError, match=r"\[jvp\].*same number"):
    jax.jvp(f_px, (x, w), (x,))
  with pytest.raises(jax.PartixError, match=r"\[jvp\].*tuples or lists"):
    jax.jvp(jnp.sin, x, x)
  _, vjp_fn = jax.vjp(f_px, x, w)
  with pytest.raises(jax.PartixError, match=r"\[vjp\].*cotangent.*shape"):
    vjp_fn(np.ones((2, 3), np.float32))
  with pytest.raises(jax.PartixError, match=r"\[vjp\].*structure"):
    vjp_fn((np.ones((3, 2), np.float32),))
  _, f_jvp = jax.linearize(f_px, x, w)
  with pytest.raises(jax.PartixError, match=r"\[linearize\].*2 tangents"):
    f_jvp(x)
  with pytest.raises(jax.PartixError, match=r"\[jacfwd\].*float"):
    jax.jacfwd(lambda n: n * 2)(np.arange(3, dtype=np.int32))
  with pytest.raises(jax.PartixError, match=r"\[jacrev\].*argnums"):
    jax.jacrev(f_px, argnums=2)(x, w)


def test_pullbacks_and_jacobians_trace_fun_once(xw):
  x, w = xw
  calls = []

  def f(a, b):
    calls.append(1)
    return f_px(a, b)
  _, vjp_fn = jax.vjp(f, x, w)
  first = vjp_fn(np.ones((3, 2), np.float32))
  second = vjp_fn(np.ones((3, 2), np.float32))
  np.testing.assert_array_equal(np.asarray(first[0]), np.asarray(second[0]))
  assert len(calls) == 1
  del calls[:]
  jr = jax.jacrev(f, argnums=(0, 1))(x, w)
  assert len(calls) == 1
  del calls[:]
  jf = jax.jacfwd(f, argnums=(0, 1))(x, w)
  assert len(calls) == 1
  for a, b in zip(jr, jf):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_make_jaxpr_equations_and_traced_avals():
  # eqns: the top-level instructions (constants are literals, a loop's body is its own)
  j = jax.make_jaxpr(lambda x, c: jax.lax.scan(lambda a, b: (a + b * 2.0, a), c, x))(
      jnp.arange(8.), 0.0)
  assert [str(e.primitive) for e in j.eqns] == ["scan"]
  (eqn,) = j.eqns
  assert eqn.params["length"] == "8" and len(eqn.outvars) == 2 and len(eqn.invars) == 2
  j = jax.make_jaxpr(lambda x: jnp.sin(x).sum(axis=0) * 3)(jnp.ones((3, 4)))
  assert [e.primitive.name for e in j.eqns] == ["sin", "reduce_sum", "mul"]
  assert j.eqns[1].params["axes"] == "[0]"
  assert j.eqns[1].invars == j.eqns[0].outvars  # the sum reads the sine
  t = jax.jit(lambda x, y=1.0: x * y).trace(jnp.arange(4.), y=jnp.float32(2.0))
  pos, kw = t.in_avals
  assert [a.shape for a in pos] == [(4,)] and set(kw) == {"y"} and kw["y"].shape == ()


def test_eval_jaxpr_and_jaxpr_as_fun_with_consts():
  from partix.extend.core import jaxpr_as_fun
  w = jnp.arange(4.) + 1.0  # captured: a const of the program
  f = lambda x: jnp.sin(x) * w + 2.0
  x = jnp.linspace(0.0, 1.0, 4)
  closed = jax.make_jaxpr(f)(x)
  assert len(closed.consts) == 1
  np.testing.assert_allclose(np.asarray(closed.consts[0]), np.asarray(w))
  (r,) = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, x)
  np.testing.assert_allclose(np.asarray(r), np.asarray(f(x)), rtol=1e-6)
  (r2,) = jaxpr_as_fun(closed)(x * 2)
  np.testing.assert_allclose(np.asarray(r2), np.asarray(f(x * 2)), rtol=1e-6)
  # under jit and grad it is traced like the function
  g = jax.grad(lambda v: jnp.sum(jaxpr_as_fun(closed)(v)[0]))(x)
  np.testing.assert_allclose(np.asarray(g), np.cos(np.asarray(x)) * np.asarray(w), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(jax.jit(jaxpr_as_fun(closed))(x)[0]),
                             np.asarray(f(x)), rtol=1e-6)
  with pytest.raises(jax.PartixError, match=r"\[eval_jaxpr\] the program takes 2 values"):
    jax.core.eval_jaxpr(closed.jaxpr, [], x)
  with pytest.raises(jax.PartixError, match=r"\[eval_jaxpr\] value 0 is f32\[5\]"):
    jax.core.eval_jaxpr(closed.jaxpr, closed.consts, jnp.ones(5))


def test_custom_jvp_with_symbolic_zeros_rule():
  from partix.custom_derivatives import SymbolicZero

  @jax.custom_jvp
  def f(a, b):
    return a * b

  @functools.partial(f.defjvp, symbolic_zeros=True)
  def f_jvp(primals, tangents):
    (a, b), (da, db) = primals, tangents
    y = f(a, b)
    dy = jnp.zeros_like(y)
    if not isinstance(da, SymbolicZero):
      dy = dy + da * b * 10.0  # the rule's own derivative, to see that it is used
    if not isinstance(db, SymbolicZero):
      dy = dy + a * db
    return y, dy

  a, b = jnp.arange(3.0), jnp.full(3, 2.0)
  y, dy = jax.jvp(lambda x: f(x, b), (a,), (jnp.ones(3),))
  np.testing.assert_allclose(np.asarray(dy), np.full(3, 20.0))
  z = SymbolicZero.from_primal_value(a)
  assert z.shape == (3,) and np.asarray(z.zero()).sum() == 0


def test_eager_vjp_jvp_linearize_jacrev_follow_python_control_flow():
  # As JAX's: called eagerly, the function's Python branches see the primal values.
  def f(x):
    if x.sum() > 3:
      return jnp.sin(x) * 2
    return jnp.cos(x)
  for a in (np.arange(3.0, dtype=np.float32), np.arange(1.0, 4.0, dtype=np.float32)):
    big = a.sum() > 3
    want_y = np.sin(a) * 2 if big else np.cos(a)
    want_d = np.cos(a) * 2 if big else -np.sin(a)
    y, vjp_fn = jax.vjp(f, jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(vjp_fn(jnp.ones(3))[0]), want_d, rtol=1e-5, atol=1e-7)
    _, t = jax.jvp(f, (jnp.asarray(a),), (jnp.ones(3),))
    np.testing.assert_allclose(np.asarray(t), want_d, rtol=1e-5, atol=1e-7)
    _, f_jvp = jax.linearize(f, jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(f_jvp(jnp.ones(3))), want_d, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(jax.jacrev(f)(jnp.asarray(a))), np.diag(want_d),
                               rtol=1e-5, atol=1e-7)
  with pytest.raises(jax.errors.TracerBoolConversionError):
    jax.jit(lambda v: jax.vjp(f, v)[0])(jnp.ones(3))
