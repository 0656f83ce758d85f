#!/usr/bin/env python3
"""JAX's results of jit over sharded arguments: output values, output shardings chosen by
sharding propagation, and gradients with their shardings.

Regenerate (from the repository root; Python is never needed to build or test partix):

    python3 -m venv .venv-jax && .venv-jax/bin/pip install jax numpy
    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        .venv-jax/bin/python tools/golden/jit_propagation.py
    # writes tests/golden/jax_port/jit_propagation.json

tests/jax_port/jit_propagation_test.cpp runs the same programs (matched by name) in partix.

The programs come from JAX's tests/pjit_test.py: PJitTest and ArrayPjitTest (basic 1-D and 2-D
programs, matmuls with given or propagated out_shardings, constraints) and ShardingInTypesTest
(reductions, dot_general, broadcast_in_dim, transpose, reshape, slice, squeeze, pad, concatenate,
argmax/argmin, select, integer_pow), each named after its JAX test and parameters. JAX's
ShardingInTypesTest runs them with explicit-mode meshes; here every mesh axis is of the Auto
kind, which is what partix implements (GSPMD-style propagation), so the recorded shardings are
the ones JAX's propagation chooses.

Every argument a is np.arange(n, dtype=float32).reshape(shape) + a (shifted per argument) and is
committed with device_put to its in_spec. For "grad" programs the gradient of
sum_k sum(out_k * w_k), w = 1 + ((7 n + 3 k) mod 11) / 8 in float32, is recorded with each
gradient's sharding.

Layout: {"programs": [{"name", "mesh": {"shape", "names"}, "in_specs", "out_shardings" (null or
a list of specs, as given to jit), "input_shapes", "outputs": [{"shape", "spec", "data"}],
"grads": null or [{"shape", "spec", "data"}]}]}; a spec is a list of entries (null, "axis" or
["a", "b"]) without trailing nulls; data is flat, row-major, and arrays of more than 256 values
may be written {"affine": [a, b]} (value i is a + b i) or {"periodic": [...]} (value i is
entry i mod p).
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
from jax.sharding import AxisType, Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

OUT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden",
                                    "jax_port", "jit_propagation.json"))

PROGRAMS = []


def program(name, mesh, in_specs, shapes, body, out_shardings=None, grad=False):
  PROGRAMS.append(dict(name=name, mesh=mesh, in_specs=in_specs, shapes=shapes, body=body,
                       out_shardings=out_shardings, grad=grad))


M2 = ((2,), ("x",))
M21 = ((2, 1), ("x", "y"))
M22 = ((2, 2), ("x", "y"))
M42 = ((4, 2), ("x", "y"))
M222 = ((2, 2, 2), ("x", "y", "z"))
M181 = ((1, 8, 1), ("x", "y", "z"))

# ---- PJitTest / ArrayPjitTest ----
program("basic_1d", M2, [P("x"), P("x")], [(8, 8), (8, 8)], lambda x, y: [x + y])
program("basic_2d", M22, [P(None, "x", "y"), P("y")], [(8, 6, 4), (4, 2)],
        lambda x, y: [x @ y], out_shardings=[P("x")])
program("two_mesh_axis_sharding", M22, [P(("x", "y")), P(("x", "y"))], [(8, 8), (8, 8)],
        lambda x, y: [x @ y], out_shardings=[P(("x", "y"))])
program("array_single_output_fully_sharded", M42, [P("x", "y")], [(8, 2)],
        lambda x: [x @ x.T], out_shardings=[P("x", "y")])
program("array_single_output_fully_replicated", M42, [P("x", "y")], [(8, 2)],
        lambda x: [x @ x.T], out_shardings=[P(None)])
program("unspecified_out_axis_resources", M42, [P("x", "y")], [(8, 2)], lambda x: [x * 2])
program("multi_input_multi_output_mesh1", M42, [P("x", "y"), P("x"), P(("x", "y")), P(None)],
        [(8, 2)] * 4, lambda a, b, c, d: [a, b, c * 2, d])
program("multi_input_multi_output_mesh2", M22, [P("x", "y"), P("x"), P(("x", "y")), P(None)],
        [(8, 2)] * 4, lambda a, b, c, d: [a, b, c * 2, d])
program("multi_input_multi_output_mesh3", M21, [P("x", "y"), P("x"), P(("x", "y")), P(None)],
        [(8, 2)] * 4, lambda a, b, c, d: [a, b, c * 2, d])
program("multi_device_pjit_mul", M42, [P("x", "y"), P(None, "y")], [(8, 2), (8, 2)],
        lambda x, y: [x @ x.T, y * 2])
program("sharding_constraint_stablehlo", M21, [P()], [(8, 8)],
        lambda x: [lax.with_sharding_constraint(x + 1, P("x", "y")) * 2])
program("uneven_sharding_constraint", M2, [P("x"), P("x")], [(4,), (4,)],
        lambda x, y: [jnp.pad(lax.with_sharding_constraint(x[:3], P("x")) +
                              lax.with_sharding_constraint(y[:3], P("x")), [[0, 1]])])
program("grad_of_constraint", M2, [P()], [(8,)],
        lambda x: [jax.grad(lambda v: jnp.sin(lax.with_sharding_constraint(v, P("x"))).sum())(x)])
program("autodiff", M22, [P("x", None)], [(4, 4)],
        lambda x: [jnp.sin(x * 4 + 2).sum(1) * jnp.arange(4.).sum()], grad=True)
program("noop_partition_specs", M2, [P(None, None)], [(2, 2, 2)], lambda x: [x * 2])
program("jit_partially_specified_shardings", M22,
        [P("x", "y"), P(), P("x"), P(), P("x", "y")], [(8, 2)] * 5,
        lambda x, y, z, a, b: [x * 2, y @ y.T, z ** 2, a * 3, b.T],
        out_shardings=[P("x"), None, None, P("x", "y"), None])
program("same_named_sharding_pspec_on_eager_ops", M181, [P("x", "y", "z")], [(1, 32, 1)],
        lambda x: [x + 1])
program("different_named_sharding_object_replicated", ((1, 2), ("x", "y")), [P("x")], [(8, 2)],
        lambda x: [jnp.sum(x)])
program("none_out_sharding", M21, [P()], [(8,)], lambda x: [x * 2])
program("jit_mul_sum_sharding_preserved", M21, [P("x")], [(8, 1)],
        lambda x: [x * 2, jnp.sum(x)])

# ---- ShardingInTypesTest ----
for n, axis, spec in [("all", None, P("x", "y")), ("first", 0, P("x", "y")),
                      ("second", 1, P("x", "y")), ("first2", 0, P(("x", "y"), None)),
                      ("second2", 1, P(("x", "y"), None))]:
  program(f"reduce_sum_{n}", M22, [spec], [(8, 2)],
          (lambda a: lambda x: [jnp.sum(x, axis=a)])(axis))
  program(f"reduce_max_{n}", M22, [spec], [(8, 2)],
          (lambda a: lambda x: [jnp.max(x, axis=a)])(axis), grad=True)
for n, s1, s2 in [("x_y", P("x", None), P(None, "y")), ("x_None", P("x", None), P(None, None)),
                  ("contracting2", P("x", "y"), P(None, None)),
                  ("fsdp", P("x", None), P("x", None)), ("half_tp", P(None, "y"), P(None, "y"))]:
  program(f"dot_general_{n}", M22, [s1, s2], [(8, 2), (2, 8)], lambda x, y: [x @ y], grad=True)
for n, axis in [("0", 0), ("1", 1), ("2", 2), ("minus1", -1)]:
  program(f"broadcast_in_dim_{n}", M22, [P("x", "y")], [(8, 2)],
          (lambda a: lambda x: [jnp.expand_dims(x, a)])(axis))
for p in [2, 3, 4]:
  program(f"integer_pow_{p}", M22, [P("x", "y")], [(8, 2)],
          (lambda q: lambda x: [x ** q])(p))
program("sin_unop", M22, [P("x", "y")], [(8, 2)], lambda x: [lax.sin(x)])
program("lax_transpose_rule", M222, [P("x", "y", "z")], [(4, 2, 2)],
        lambda x: [jnp.transpose(x, (1, 2, 0))])
program("einsum_batch", M22, [P("x", None, "y"), P("x", "y", None)], [(2, 4, 8), (2, 8, 4)],
        lambda a, b: [jnp.einsum("bij,bjk->bik", a, b)], grad=True)
program("slice", M22, [P("x", None)], [(4, 4)], lambda x: [lax.slice(x, (0, 0), (4, 3))],
        grad=True)
program("squeeze", M22, [P("x", None, None)], [(4, 4, 1)], lambda x: [lax.squeeze(x, (2,))],
        grad=True)
program("pad_2_2", M22, [P("x")], [(8,)], lambda x: [lax.pad(x, 0., ((2, 2, 0),))], grad=True)
program("pad_0_0", M22, [P("x")], [(8,)], lambda x: [lax.pad(x, 0., ((0, 0, 0),))])
program("concatenate", M21, [P("x", "y"), P("x", "y")], [(4, 4), (4, 1)],
        lambda x, y: [jnp.concatenate([x, y], axis=1)], grad=True)
program("argminmax", M22, [P("x", "y")], [(8, 2)],
        lambda x: [jnp.argmax(x, axis=0).astype(jnp.float32),
                   jnp.argmin(x, axis=1).astype(jnp.float32)])
program("select", M22, [P("x", "y"), P("x", "y")], [(8, 2), (8, 2)],
        lambda a, b: [jnp.where(a > 7, a, -b)])

RESHAPES = [
    ((16, 1), (1, 16, 1), P("x", None)),
    ((8, 2, 1), (1, 16, 1), P("x", None, None)),
    ((8, 1), (1, 4, 2), P("x", None)),
    ((1, 4, 1, 6, 1), (1, 4, 6), P(None, "x", None, None, None)),
    ((4, 6), (4, 6), P(None, "x")),
    ((8, 32), (8, 16, 2, 1, 1, 1, 1), P("x", None)),
    ((8, 32, 32), (8, 16, 2, 1, 1, 32), P("x", None, None)),
    ((8, 32), (8, 1, 1, 32), P("x", None)),
    ((8, 32), (8, 1, 1, 32), P(None, "x")),
    ((8, 16, 2, 1, 1, 1), (8, 32), P("x", None, None, None, None, None)),
    ((8, 16, 2, 1, 1, 1), (8, 32), P(None, "x", None, None, None, None)),
    ((4, 1, 8, 1, 32), (4, 1, 2, 4, 1, 32), P("x", None, None, None, None)),
    ((4, 1, 2, 4, 1, 32), (4, 1, 8, 1, 32), P("x", None, None, None, None, None)),
]
for i, (src, dst, spec) in enumerate(RESHAPES):
  program(f"reshape_{i}", M2, [spec], [src], (lambda d: lambda x: [jnp.reshape(x, d) * 2])(dst),
          grad=True)

SPLIT_MERGE = [
    ((4, 6, 8), (4, 2, 3, 8), P("x", None, "y")),
    ((4, 6, 8), (4, 6, 2, 2, 2), P("x", None, None)),
    ((4, 6, 8), (4, 2, 3, 4, 2), P("x", None, None)),
    ((4, 6, 8), (4, 2, 3, 8), P("x", "y", None)),
    ((4, 12, 8), (4, 4, 3, 8), P(None, ("x", "y"), None)),
    ((4, 6, 8), (4, 3, 2, 8), P("x", "y", None)),
    ((4, 6, 8), (4, 4, 2, 6), P("x", None, None)),
    ((4, 8, 9), (4, 2, 2, 3, 3, 2), P("x", None, None)),
    ((10, 1), (2, 5, 1), P("x", None)),
    ((10, 1), (2, 5, 1, 1), P("x", None)),
    ((10, 1, 1), (2, 5, 1, 1), P("x", None, None)),
    ((1, 10), (1, 2, 5), P(None, "x")),
    ((4, 2, 3, 8), (4, 6, 8), P("x", None, None, "y")),
    ((2, 2, 6, 8), (4, 6, 8), P(None, None, "y", "x")),
    ((4, 6, 2, 2, 2), (4, 6, 8), P("x", None, None, None, None)),
    ((4, 2, 3, 8), (4, 6, 8), P(None, "y", None, "x")),
    ((4, 4, 3, 8), (4, 12, 8), P(None, ("x", "y"), None, None)),
    ((4, 2, 3, 2, 4), (4, 6, 8), P("x", None, None, None, None)),
    ((4, 2, 6, 8), (4, 12, 8), P(None, None, "y", "x")),
    ((4, 2, 3, 8), (4, 8, 6), P(None, "y", None, "x")),
    ((2, 5, 1), (10, 1), P("x", None, None)),
    ((16, 8, 4), (16, 32, 1), P("x", "y", None)),
    ((16, 32, 1), (16, 8, 4), P("x", "y", None)),
]
for i, (src, dst, spec) in enumerate(SPLIT_MERGE):
  program(f"reshape_split_merge_{i}", M22, [spec], [src],
          (lambda d: lambda x: [lax.reshape(x, d) * 2])(dst), grad=True)


def spec_json(spec):
  entries = [None if e is None else (list(e) if isinstance(e, tuple) else e) for e in spec]
  while entries and entries[-1] is None:
    entries.pop()
  return entries


def flat(a):
  """The flat values, or for long arrays a compact exact form the test expands: {"affine":
  [a, b]} for a + b i, or {"periodic": [v_0, ..., v_p-1]} for v_(i mod p)."""
  v = np.asarray(a, dtype=np.float32).reshape(-1)
  # Nine significant digits round-trip float32 exactly.
  dump = lambda xs: [float("%.9g" % x) for x in xs]
  if v.size > 256:
    i = np.arange(v.size, dtype=np.float64)
    if np.array_equal(v, (v[0] + (float(v[1]) - float(v[0])) * i).astype(np.float32)):
      return {"affine": dump(v[:2])}
    for p in range(1, 65):
      if np.array_equal(v, np.resize(v[:p], v.size)):
        return {"periodic": dump(v[:p])}
  return dump(v)


def weights(k, shape):
  n = np.arange(math.prod(shape), dtype=np.int64)
  return jnp.asarray((1.0 + ((7 * n + 3 * k) % 11) / 8.0).astype(np.float32).reshape(shape))


def run(p):
  mshape, names = p["mesh"]
  mesh = Mesh(np.array(jax.devices()[:math.prod(mshape)]).reshape(mshape), names,
              axis_types=(AxisType.Auto,) * len(mshape))
  xs = []
  for a, (shape, spec) in enumerate(zip(p["shapes"], p["in_specs"])):
    v = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) + a
    xs.append(jax.device_put(v, NamedSharding(mesh, spec)))
  kw = {}
  if p["out_shardings"] is not None:
    kw["out_shardings"] = [None if s is None else NamedSharding(mesh, s)
                           for s in p["out_shardings"]]
  body = p["body"]
  with jax.set_mesh(mesh):
    f = jax.jit(lambda *a: body(*a), **kw)
    outs = f(*xs)
    entry = {
        "name": p["name"],
        "mesh": {"shape": list(mshape), "names": list(names)},
        "in_specs": [spec_json(s) for s in p["in_specs"]],
        "out_shardings": (None if p["out_shardings"] is None else
                          [None if s is None else spec_json(s) for s in p["out_shardings"]]),
        "input_shapes": [list(s) for s in p["shapes"]],
        "outputs": [{"shape": list(o.shape), "spec": spec_json(o.sharding.spec),
                     "data": flat(o)} for o in outs],
        "grads": None,
    }
    if p["grad"]:
      ws = [weights(k, o.shape) for k, o in enumerate(outs)]

      def loss(*a):
        return sum(jnp.sum(o * w) for o, w in zip(f(*a), ws))
      gs = jax.jit(jax.grad(loss, argnums=tuple(range(len(xs)))))(*xs)
      entry["grads"] = [{"shape": list(g.shape), "spec": spec_json(g.sharding.spec),
                         "data": flat(g)} for g in gs]
  return entry


def main():
  assert jax.device_count() >= 8, "needs XLA_FLAGS=--xla_force_host_platform_device_count=8"
  doc = {"jax_version": jax.__version__, "programs": [run(p) for p in PROGRAMS]}
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  with open(OUT, "w") as f:
    json.dump(doc, f, separators=(",", ":"))
    f.write("\n")
  print(f"wrote {len(doc['programs'])} programs, {os.path.getsize(OUT)} bytes to {OUT}",
        file=sys.stderr)


if __name__ == "__main__":
  main()
