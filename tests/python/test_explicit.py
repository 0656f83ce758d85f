"""Mesh axis types, partix.typeof and reshard (JAX's explicit-sharding foundations).

Expected strings follow JAX: the type notation of jax/_src/core.py (`float32[8@X,4]`,
`8@(X,Y)`, `{U:X}`), `jax.typeof(x)` printing as `ShapedArray(float32[4,8@dp,16])` in JAX's
explicit-sharding examples, and Mesh's str in jax/_src/mesh.py
(`Mesh('x': 4, 'y': 2, axis_types=(Explicit, Auto))`).
"""
import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

E, A, M = AxisType.Explicit, AxisType.Auto, AxisType.Manual


@pytest.fixture(scope="module")
def emesh(mesh8):
  return partix.make_mesh((4, 2), ("X", "Y"), axis_types=(E, E))


def x84():
  return np.arange(32, dtype=np.float32).reshape(8, 4)


def test_make_mesh_defaults_to_explicit_axes_as_jax_0_10():
  m = partix.make_mesh((4, 2), ("x", "y"))
  assert m.axis_types == (E, E)
  assert Mesh(np.array(partix.devices()[:8]).reshape(4, 2), ("x", "y")).axis_types == (A, A)
  x = partix.device_put(x84(), NamedSharding(m, P("x")))
  assert str(partix.typeof(x)) == "float32[8@x,4]"
  assert str(partix.typeof(x @ jnp.ones((4, 4)))) == "float32[8@x,4]"
  assert partix.make_mesh((8,), ("i",), axis_types=(A,)).axis_types == (A,)


def test_mesh_axis_types(mesh8):
  assert mesh8.axis_types == (A, A)
  assert repr(mesh8) == "Mesh(axis_sizes=(4, 2), axis_names=('x', 'y'), axis_types=(Auto, Auto))"
  assert str(mesh8) == "Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto))"
  m = partix.make_mesh((4, 2), ("x", "y"), axis_types=(E, A))
  assert m.axis_types == (E, A)
  assert str(m) == "Mesh('x': 4, 'y': 2, axis_types=(Explicit, Auto))"
  assert str(partix.make_mesh((8,), ("x",), (M,))) == "Mesh('x': 8, axis_types=(Manual,))"
  assert repr(partix.make_mesh((8,), ("x",), (M,))) == ("Mesh(axis_sizes=(8,), axis_names=('x',), "
                                                        "axis_types=(Manual,))")
  assert repr(AxisType.Explicit) == "Explicit"
  # Mesh(devices, names, axis_types=) reaches the same C++ mesh.
  devs = np.array(partix.devices()[:8], dtype=object).reshape(4, 2)
  assert Mesh(devs, ("x", "y"), axis_types=(E, A)) == m
  # Types take part in equality and hashing.
  assert m != mesh8
  assert hash(m) != hash(mesh8)
  assert NamedSharding(m, P("x")) != NamedSharding(mesh8, P("x"))
  # A mesh read back from C++ (an array's sharding) keeps its types.
  y = partix.device_put(x84(), NamedSharding(m, P("x")))
  assert y.sharding.mesh.axis_types == (E, A)


def test_mesh_axis_types_errors(mesh8):
  with pytest.raises(partix.PartixError, match=r"\[make_mesh\].*axis_types"):
    partix.make_mesh((4, 2), ("x", "y"), axis_types=(E,))
  with pytest.raises(partix.PartixError, match=r"\[make_mesh\]"):
    partix.make_mesh((4, 2), ("x", "y"), axis_types=("Explicit", "Auto"))
  devs = np.array(partix.devices()[:8], dtype=object).reshape(4, 2)
  with pytest.raises(partix.PartixError, match=r"\[Mesh\] Number of axis names should match "
                     r"the number of axis_types"):
    Mesh(devs, ("x", "y"), axis_types=(E, E, E))


def test_typeof_strings(emesh):
  x = x84()
  t = partix.typeof(partix.numpy.asarray(x))
  assert str(t) == "float32[8,4]"
  assert repr(t) == "ShapedArray(float32[8,4])"
  assert t.shape == (8, 4) and t.dtype == np.float32 and t.ndim == 2
  cases = {
      P("X"): "float32[8@X,4]",
      P(None, "X"): "float32[8,4@X]",
      P("X", "Y"): "float32[8@X,4@Y]",
      P(("X", "Y")): "float32[8@(X,Y),4]",
      P(("Y", "X")): "float32[8@(Y,X),4]",
      P(): "float32[8,4]",
  }
  for spec, want in cases.items():
    y = partix.device_put(x, NamedSharding(emesh, spec))
    assert str(partix.typeof(y)) == want, spec
    assert repr(partix.typeof(y)) == f"ShapedArray({want})"
  # Auto axes are not part of the type.
  mixed = partix.make_mesh((4, 2), ("X", "Y"), axis_types=(A, E))
  y = partix.device_put(x, NamedSharding(mixed, P("X", "Y")))
  assert str(partix.typeof(y)) == "float32[8,4@Y]"
  assert partix.typeof(y).sharding.spec == P("X", "Y")
  i = partix.device_put(np.arange(8, dtype=np.int32), NamedSharding(emesh, P("X")))
  assert str(partix.typeof(i)) == "int32[8@X]"
  b = partix.numpy.asarray(x).astype(jnp.bfloat16)
  assert str(partix.typeof(b)) == "bfloat16[8,4]"


def test_typeof_in_jit(emesh):
  seen = []

  def f(a, b):
    seen.append((str(partix.typeof(a)), str(partix.typeof(b))))
    c = partix.sharding.reshard(a + b, P(None, "X"))
    seen.append(str(partix.typeof(c)))
    return c

  with partix.set_mesh(emesh):
    g = partix.jit(f, in_shardings=(NamedSharding(emesh, P("X", "Y")), None))
    out = g(x84(), x84())
  assert seen[0] == ("float32[8@X,4@Y]", "float32[8,4]")
  assert seen[1] == "float32[8,4@X]"
  np.testing.assert_array_equal(np.asarray(out), 2 * x84())
  assert str(partix.typeof(out)) == "float32[8,4@X]"


def test_reshard_eager(emesh):
  x = x84()
  s = NamedSharding(emesh, P("X", "Y"))
  y = partix.sharding.reshard(x, s)
  assert y.sharding == s
  np.testing.assert_array_equal(np.asarray(y), x)
  z = partix.reshard(y, NamedSharding(emesh, P("Y", "X")))
  assert z.sharding.spec == P("Y", "X")
  np.testing.assert_array_equal(np.asarray(z), x)
  with partix.set_mesh(emesh):
    w = partix.reshard(x, P(None, "X"))
  assert w.sharding == NamedSharding(emesh, P(None, "X"))
  np.testing.assert_array_equal(np.asarray(w), x)
  # A pytree with one spec for all leaves.
  with partix.set_mesh(emesh):
    a, b = partix.reshard((x, x + 1), P("X"))
  assert a.sharding.spec == P("X") and b.sharding.spec == P("X")
  np.testing.assert_array_equal(np.asarray(b), x + 1)


def test_reshard_in_jit_shows_its_collective(emesh):
  s_in = NamedSharding(emesh, P("X"))
  f = partix.jit(lambda a: partix.reshard(a * 2, NamedSharding(emesh, P())), in_shardings=s_in)
  x = np.arange(64, dtype=np.float32).reshape(16, 4)
  out = f(x)
  np.testing.assert_array_equal(np.asarray(out), 2 * x)
  assert out.sharding.spec == P()
  assert "all_gather" in f.lower(x).compile().as_text()


def test_reshard_errors(emesh):
  x = x84()
  with partix.set_mesh(emesh):
    with pytest.raises(partix.PartixError, match=r"\[reshard\].*'Z'"):
      partix.reshard(x, P("Z"))
    with pytest.raises(partix.PartixError, match=r"\[reshard\].*3 entries.*rank 2"):
      partix.reshard(x, P("X", "Y", None))
  with pytest.raises(partix.PartixError, match=r"\[reshard\].*3 entries"):
    partix.reshard(x, NamedSharding(emesh, P("X", "Y", None)))
  with pytest.raises(partix.PartixError, match=r"\[reshard\].*needs a mesh"):
    partix.reshard(x, P("X"))
  with pytest.raises(partix.PartixError, match=r"\[reshard\]"):
    partix.reshard(x, "X")
