#!/usr/bin/env python3
"""JAX's values and gradients of small shard_map programs, one per collective and form.

Regenerate (from the repository root; Python is never needed to build or test partix):

    python3 -m venv .venv-jax && .venv-jax/bin/pip install jax numpy
    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        .venv-jax/bin/python tools/golden/shard_map_grads.py
    # writes tests/golden/jax_port/shard_map_grads.json

tests/jax_port/shard_map_grads_test.cpp runs the same programs (matched by name) in partix and
compares forward values and gradients.

Each program is a shard_map over a mesh of 8 devices, either (4, 2) with axes ('i', 'j') or
(8,) with axis 'k'. Every collective appears in its varying form (the operand varies over the
collective's axes) and its invariant form (the operand is replicated over them, so JAX inserts
a pvary first), and results that are invariant over an axis are also returned with out_specs
that name that axis (the cotangent then arrives varying and the implicit pvary transposes to
a psum). The loss is sum_k sum(out_k * w_k): the weights differ per element so that a
transpose that sums or slices the wrong blocks shows up.

Inputs and weights are not stored; both sides compute them in double and round to float32:
  input a (argument number a, flat index n):  x = sin(0.7 * n + 1.3 * a + 0.25)
  weight of result r (flat index n):          w = 1 + ((7 * n + 3 * r) mod 11) / 8

partix's all_gather is always invariant over its axes (JAX's all_gather(..., to='invarying'),
also called all_gather_invariant); JAX's default all_gather result varies over them. Programs
named *_varying_all_gather* therefore use JAX's default and, on the partix side,
pvary(all_gather(...)), which has the same meaning. pmax and pmin have no differentiation rule
in JAX; for them only values are compared and "grad_error" is true.

Layout: {"programs": [{"name", "mesh": {"shape", "names"}, "in_specs", "out_specs",
"input_shapes", "outputs": [{"shape", "data"}], "grads": [{"shape", "data"}] or null,
"grad_error": bool}]}; specs as lists of entries (null, "axis" or ["a", "b"]); data flat,
row-major.
"""

import json
import math
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import AxisType  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

OUT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "jax_port",
                   "shard_map_grads.json"))

SHIFT4 = [(0, 1), (1, 2), (2, 3), (3, 0)]


def make_mesh(shape, names):
  return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


def inputs_for(shapes):
  out = []
  for a, s in enumerate(shapes):
    n = np.arange(math.prod(s), dtype=np.float64)
    out.append(np.sin(0.7 * n + 1.3 * a + 0.25).astype(np.float32).reshape(s))
  return out


def weights_for(r, shape):
  n = np.arange(math.prod(shape), dtype=np.int64)
  return (1.0 + ((7 * n + 3 * r) % 11) / 8.0).astype(np.float32).reshape(shape)


def inv_gather(x, axes, axis=0, tiled=False):
  return lax.all_gather(x, axes, axis=axis, tiled=tiled, to="invarying")


# name -> (mesh shape, mesh names, in_specs, out_specs, input shapes, body, differentiable)
PROGRAMS = {}


def program(name, mesh, in_specs, out_specs, shapes, differentiable=True, grad_body=None):
  def register(body):
    PROGRAMS[name] = (mesh, in_specs, out_specs, shapes, body, differentiable, grad_body)
    return body
  return register


M42 = ((4, 2), ("i", "j"))
M8 = ((8,), ("k",))

# ---- psum / pmean ----
program("psum_varying", M42, [P("i")], [P()], [(8, 4)])(
    lambda b: [lax.psum(jnp.sin(b), "i")])
program("psum_varying_out_names_axis", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [lax.psum(jnp.sin(b), "i")])
program("psum_invariant", M42, [P()], [P()], [(4, 4)])(
    lambda b: [lax.psum(b * b, "i")])
program("psum_invariant_out_names_axis", M42, [P()], [P("i")], [(4, 4)])(
    lambda b: [lax.psum(b * b, "i")])
program("psum_two_axes", M42, [P("i", "j")], [P()], [(8, 4)])(
    lambda b: [lax.psum(b * b, ("i", "j"))])
program("psum_one_of_two_axes", M42, [P("i", "j")], [P(None, "j")], [(8, 4)])(
    lambda b: [lax.psum(jnp.exp(b), "i")])
program("psum_one_of_two_axes_out_names_both", M42, [P("i", "j")], [P("i", "j")], [(8, 4)])(
    lambda b: [lax.psum(jnp.exp(b), "i")])
program("psum_times_varying", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [b * lax.psum(b, "i")])
program("psum_of_scalar_sum", M8, [P("k")], [P()], [(16,)])(
    lambda b: [lax.psum(jnp.sum(b * b), "k")])
program("pmean_varying", M42, [P("i")], [P()], [(8, 4)])(
    lambda b: [lax.pmean(jnp.exp(b), "i")])
program("pmean_varying_out_names_axis", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [lax.pmean(jnp.exp(b), "i")])
program("pmean_invariant_out_names_axis", M42, [P()], [P("j")], [(4, 4)])(
    lambda b: [lax.pmean(jnp.sin(b), "j")])
program("pmean_two_axes", M42, [P("i", "j")], [P()], [(8, 4)])(
    lambda b: [lax.pmean(jnp.sin(b), ("i", "j"))])

# ---- pmax / pmin: values only (no differentiation rule in JAX) ----
program("pmax_varying", M42, [P("i")], [P()], [(8, 4)], differentiable=False)(
    lambda b: [lax.pmax(b, "i")])
program("pmin_two_axes", M42, [P("i", "j")], [P()], [(8, 4)], differentiable=False)(
    lambda b: [lax.pmin(b, ("i", "j"))])
program("pmax_invariant_out_names_axis", M42, [P()], [P("i")], [(4, 4)],
        differentiable=False)(lambda b: [lax.pmax(b, "i")])

# ---- all_gather ----
program("varying_all_gather_tiled", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [lax.all_gather(b * b, "i", axis=0, tiled=True)])
program("varying_all_gather_untiled", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [lax.all_gather(jnp.sin(b), "i", axis=0, tiled=False)])
program("varying_all_gather_axis1_two_axes", M42, [P(None, ("i", "j"))],
        [P(None, ("i", "j"))], [(2, 16)])(
    lambda b: [lax.all_gather(b * b, ("i", "j"), axis=1, tiled=True)])
program("invariant_all_gather_tiled", M42, [P("i")], [P()], [(8, 4)])(
    lambda b: [inv_gather(b * b, "i", axis=0, tiled=True)])
program("invariant_all_gather_tiled_out_names_axis", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [inv_gather(b * b, "i", axis=0, tiled=True)])
program("invariant_all_gather_untiled_axis1", M42, [P(None, "j")], [P()], [(4, 4)])(
    lambda b: [inv_gather(jnp.exp(b), "j", axis=1, tiled=False)])
program("invariant_all_gather_untiled_out_names_axis", M42, [P("j")], [P("j")], [(4, 4)])(
    lambda b: [inv_gather(jnp.sin(b), "j", axis=0, tiled=False)])
program("invariant_all_gather_two_axes", M42, [P(("i", "j"))], [P()], [(16, 2)])(
    lambda b: [inv_gather(b * b, ("i", "j"), axis=0, tiled=True)])
program("invariant_all_gather_of_invariant", M42, [P()], [P()], [(4, 2)])(
    lambda b: [inv_gather(jnp.sin(b), "i", axis=0, tiled=True)])
program("invariant_all_gather_then_varying_use", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [b * jnp.sum(inv_gather(b, "i", axis=0, tiled=True), axis=0)])

# ---- psum_scatter ----
program("psum_scatter_tiled", M42, [P("i")], [P(None, "i")], [(8, 4)])(
    lambda b: [lax.psum_scatter(b * b, "i", scatter_dimension=1, tiled=True)])
program("psum_scatter_untiled", M42, [P("i")], [P(("i", "j"))], [(8, 2)])(
    lambda b: [lax.psum_scatter(jnp.sin(b), "j", scatter_dimension=1, tiled=False)])
program("psum_scatter_invariant", M42, [P()], [P("i")], [(8, 2)])(
    lambda b: [lax.psum_scatter(b * b, "i", scatter_dimension=0, tiled=True)])
program("psum_scatter_two_axes", M42, [P(None, ("i", "j"))], [P(("i", "j"))], [(16, 16)])(
    lambda b: [lax.psum_scatter(jnp.sin(b), ("i", "j"), scatter_dimension=0, tiled=True)])

# ---- ppermute ----
program("ppermute_cycle", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [lax.ppermute(b * b, "i", SHIFT4)])
program("ppermute_partial", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [lax.ppermute(jnp.sin(b), "i", [(0, 1), (1, 2)])])
program("ppermute_invariant", M42, [P()], [P("i")], [(4, 2)])(
    lambda b: [lax.ppermute(jnp.exp(b), "i", SHIFT4)])
program("ppermute_two_axes", M42, [P(("i", "j"))], [P(("i", "j"))], [(16, 2)])(
    lambda b: [lax.ppermute(jnp.tanh(b), ("i", "j"), [(0, 7), (7, 3), (3, 0), (5, 6)])])

# ---- all_to_all ----
program("all_to_all_tiled", M42, [P(None, "j")], [P("j")], [(8, 4)])(
    lambda b: [lax.all_to_all(b * b, "j", 1, 0, tiled=True)])
program("all_to_all_tiled_8", M8, [P("k")], [P(None, "k")], [(8, 16)])(
    lambda b: [lax.all_to_all(jnp.sin(b), "k", 1, 0, tiled=True)])
program("all_to_all_untiled_same_axis", M42, [P(None, "i")], [P(None, "i")], [(4, 16)])(
    lambda b: [lax.all_to_all(b * b, "i", 0, 0, tiled=False)])
# JAX cannot transpose an untiled all_to_all whose split and concat axes differ ("Expected
# cotangent type float32[4,4,1,1] but got float32[4,1,4,1]"); its gradient is taken from the
# equal program moveaxis(all_to_all(x, split=s, concat=s), s, c), and the values of the two are
# checked to agree.
program("all_to_all_untiled", M42, [P(None, "i")], [P(None, None, "i")], [(4, 16)],
        grad_body=lambda b: [jnp.moveaxis(lax.all_to_all(b.reshape(4, 4, 1) * 2.0, "i", 0, 0,
                                                         tiled=False), 0, 2)])(
    lambda b: [lax.all_to_all(b.reshape(4, 4, 1) * 2.0, "i", 0, 2, tiled=False)])
program("all_to_all_invariant", M42, [P()], [P("i")], [(8, 4)])(
    lambda b: [lax.all_to_all(jnp.exp(b), "i", 0, 1, tiled=True)])

# ---- axis_index in arithmetic ----
program("axis_index_scales_varying", M42, [P("i")], [P("i")], [(8, 4)])(
    lambda b: [b * b * (lax.axis_index("i") + 1).astype(jnp.float32)])
program("axis_index_scales_invariant", M42, [P()], [P("i")], [(4, 4)])(
    lambda b: [jnp.sin(b) * (lax.axis_index("i") + 1).astype(jnp.float32)])
program("axis_index_two_axes_then_psum", M42, [P()], [P()], [(4, 4)])(
    lambda b: [lax.psum(b * lax.axis_index(("i", "j")).astype(jnp.float32), ("i", "j"))])

# ---- two arguments, several results ----
program("two_args_matmul_psum", M42, [P(None, "i"), P("i")], [P()], [(4, 8), (8, 2)])(
    lambda a, w: [lax.psum(a @ w, "i")])
program("two_args_invariant_weight", M42, [P("i"), P()], [P("i"), P()], [(8, 4), (4, 4)])(
    lambda x, w: [jnp.tanh(x @ w), lax.pmean(jnp.sum(x @ w, axis=0), "i")])
program("two_results_mixed", M42, [P("i", "j")], [P("i", "j"), P(None, "j")], [(8, 4)])(
    lambda b: [jnp.sin(b), lax.psum(b * b, "i")])


def spec_json(spec):
  out = []
  for e in spec:
    if e is None:
      out.append(None)
    elif isinstance(e, tuple):
      out.append(list(e))
    else:
      out.append(e)
  return out


def flat(a):
  # Nine significant digits round-trip float32 exactly.
  return [float("%.9g" % v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


def run(name):
  (mshape, mnames), in_specs, out_specs, shapes, body, differentiable, grad_body = PROGRAMS[name]
  mesh = make_mesh(mshape, mnames)

  def smap(b):
    return jax.jit(jax.shard_map(lambda *a: b(*a), mesh=mesh, in_specs=tuple(in_specs),
                                 out_specs=list(out_specs)))
  f = smap(body)
  xs = inputs_for(shapes)
  outs = f(*xs)
  if grad_body is not None:
    for o, g in zip(outs, smap(grad_body)(*xs)):
      np.testing.assert_array_equal(o, g)
    f = smap(grad_body)
  ws = [weights_for(r, o.shape) for r, o in enumerate(outs)]

  def loss(*a):
    return sum(jnp.sum(o * w) for o, w in zip(f(*a), ws))

  entry = {
      "name": name,
      "mesh": {"shape": list(mshape), "names": list(mnames)},
      "in_specs": [spec_json(s) for s in in_specs],
      "out_specs": [spec_json(s) for s in out_specs],
      "input_shapes": [list(s) for s in shapes],
      "outputs": [{"shape": list(o.shape), "data": flat(o)} for o in outs],
      "grads": None,
      "grad_error": not differentiable,
  }
  if differentiable:
    gs = jax.jit(jax.grad(loss, argnums=tuple(range(len(xs)))))(*xs)
    entry["grads"] = [{"shape": list(g.shape), "data": flat(g)} for g in gs]
  else:
    try:
      jax.grad(loss)(*xs)
      raise AssertionError(f"{name}: expected JAX to refuse differentiation")
    except NotImplementedError:
      pass
  return entry


def main():
  assert jax.device_count() >= 8, "needs XLA_FLAGS=--xla_force_host_platform_device_count=8"
  doc = {"jax_version": jax.__version__, "programs": [run(n) for n in PROGRAMS]}
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  with open(OUT, "w") as f:
    text = json.dumps(doc, separators=(",", ":"))
    f.write(text)
    f.write("\n")
  print(f"wrote {len(doc['programs'])} programs, {os.path.getsize(OUT)} bytes to {OUT}",
        file=sys.stderr)


if __name__ == "__main__":
  main()
