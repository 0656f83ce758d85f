"""Programs whose HLO text (Lowered.compiler_ir(dialect='hlo')) is checked against XLA:
tools/golden/hlo_export.py parses each text with XLA's HLO parser, runs the unsharded ones
with XLA and writes the texts and XLA's results to tests/golden/hlo_export.json;
test_hlo_export.py checks that partix still writes those texts and computes those results."""
import numpy as np

import partix
import partix.lax as lax
import partix.numpy as jnp


def _mixed(x, y):
  z = jnp.sum(jnp.exp(x) * 2.0 + 1, axis=0)
  w = (x @ y.T).astype(jnp.int32)
  return (z, jnp.where(w > 0, w, 0).reshape(-1)[1:3], jnp.arange(4), jnp.concatenate([x, x]).T,
          jnp.max(x, axis=1), jnp.min(x, axis=0))


def _shapes(x):
  p = lax.pad(x, -1.0, [(1, 2, 0), (0, 1, 1)])
  s = lax.dynamic_slice(p, (1, 2), (2, 3))
  u = lax.dynamic_update_slice(p, jnp.zeros((2, 2)), (3, 1))
  return jnp.flip(p, axis=(0,)), s, u, x[::2, 1:], jnp.broadcast_to(x[:1], (3, 4))


def _ints(a, b):
  return (lax.shift_left(a, 2), a ^ b, lax.rem(a, b), jnp.max(a, axis=0), jnp.min(b),
          (a < b) | (a == 3), jnp.sign(a), -a, jnp.abs(b), a // b)


def _floats(x):
  return (jnp.tanh(x), jnp.sqrt(jnp.abs(x)), lax.rsqrt(x * x + 1), jnp.floor(x), jnp.ceil(x),
          jnp.round(x), partix.nn.sigmoid(x), lax.erf(x), jnp.log1p(jnp.abs(x)), jnp.expm1(x),
          jnp.sin(x), jnp.cos(x), jnp.maximum(x, 0.5) ** 2.0, x.astype(jnp.bfloat16),
          x.astype(jnp.int32), jnp.log(jnp.abs(x) + 1) / 3.0)


def _batched_dot(a, b):
  return jnp.einsum("bij,bjk->bik", a, b), partix.lax.stop_gradient(a).sum()


def _sharded(mesh):
  def f(x, w):
    h = jnp.dot(x, w)
    h = partix.lax.with_sharding_constraint(h, partix.NamedSharding(mesh, partix.P("a", None)))
    return jnp.sum(h * h, axis=1)
  return f


def _abs_sq(x):
  return (x.conj() * x).real


def _square(x):
  return x * x


def _inputs():
  rng = np.random.default_rng(7)
  f = lambda *s: rng.standard_normal(s).astype(np.float32)
  return {
      "abs_sq": (_abs_sq, (f(3),)),
      "square": (_square, (f(3),)),
      "mixed": (_mixed, (f(8, 4), f(3, 4))),
      "shapes": (_shapes, (f(3, 4),)),
      "ints": (_ints, (rng.integers(-9, 9, (4, 3)).astype(np.int32),
                       rng.integers(1, 5, (4, 3)).astype(np.int32))),
      "floats": (_floats, (f(5) * 3,)),
      "batched_dot": (_batched_dot, (f(2, 3, 4), f(2, 4, 5))),
  }


def programs():
  """name -> (function, arguments, mesh or None); a mesh's programs run sharded."""
  out = {k: (fn, args, None) for k, (fn, args) in _inputs().items()}
  mesh = partix.make_mesh((4, 2), ("a", "b"),
                          axis_types=(partix.sharding.AxisType.Auto,) * 2)
  rng = np.random.default_rng(3)
  x = partix.device_put(rng.standard_normal((8, 4)).astype(np.float32),
                        partix.NamedSharding(mesh, partix.P("a", "b")))
  w = partix.device_put(rng.standard_normal((4, 6)).astype(np.float32),
                        partix.NamedSharding(mesh, partix.P(None, "b")))
  out["sharded"] = (_sharded(mesh), (x, w), mesh)
  return out


def hlo_text(fn, args, mesh):
  del mesh
  return partix.jit(fn).lower(*args).compiler_ir(dialect="hlo").as_hlo_text()
