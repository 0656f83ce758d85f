"""Variables, split / merge / update / state round trips, filters, shared references and the
State pytree."""
import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix import nnx


class Block(nnx.Module):
  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 4, rngs=rngs)
    self.norm = nnx.LayerNorm(4, rngs=rngs)
    self.count = nnx.BatchStat(jnp.zeros(()))
    self.layers = [nnx.Linear(4, 4, rngs=rngs), nnx.Linear(4, 2, rngs=rngs)]
    self.name = "block"

  def __call__(self, x):
    self.count[...] += 1
    x = self.norm(self.linear(x))
    for layer in self.layers:
      x = layer(x)
    return x


def paths(state):
  return ["/".join(map(str, p)) for p, _ in nnx.to_flat_state(state)]


def test_variable_value_metadata_and_arithmetic():
  with pytest.raises(ValueError, match="mesh"):  # annotated, eager, and no mesh: Flax's error
    nnx.Param(jnp.asarray([1.0, 2.0]), out_sharding=("a",))
  p = nnx.Param(jnp.asarray([1.0, 2.0]), out_sharding=("a",), note="x", eager_sharding=False)
  assert p.shape == (2,) and p.dtype == np.float32
  assert p.out_sharding == ("a",) and p.note == "x" and p.get_metadata("note") == "x"
  np.testing.assert_array_equal(np.asarray(p[...]), [1, 2])
  np.testing.assert_array_equal(np.asarray(p.value), [1, 2])
  np.testing.assert_array_equal(np.asarray(p * 2 + 1), [3, 5])
  np.testing.assert_array_equal(np.asarray(jnp.asarray([1.0, 1.0]) @ p), 3.0)
  np.testing.assert_array_equal(np.asarray(jnp.sum(p)), 3.0)
  p[...] = jnp.asarray([5.0, 6.0])
  p[0] = 7.0
  np.testing.assert_array_equal(np.asarray(p.get_value()), [7, 6])
  p.set_value(jnp.zeros(2))
  p += 1
  np.testing.assert_array_equal(np.asarray(p[...]), [1, 1])
  p.set_metadata(note="y")
  assert p.note == "y"
  with pytest.raises(AttributeError, match="set_metadata"):
    p.note = "z"
  with pytest.warns(DeprecationWarning, match="out_sharding"):
    q = nnx.Param(jnp.zeros(2), sharding=("a",), eager_sharding=False)
  assert q.out_sharding == ("a",) and not q.has_metadata("sharding")
  assert isinstance(q.sharding, partix.sharding.NamedSharding) or q.sharding is not None


def test_split_merge_round_trip_and_graphdef_equality():
  m = Block(nnx.Rngs(0))
  graphdef, state = nnx.split(m)
  assert paths(state) == ["count", "layers/0/bias", "layers/0/kernel", "layers/1/bias",
                          "layers/1/kernel", "linear/bias", "linear/kernel", "norm/bias",
                          "norm/scale"]
  m2 = nnx.merge(graphdef, state)
  assert m2 is not m and m2.name == "block" and isinstance(m2.layers[1], nnx.Linear)
  x = jnp.ones((2, 3))
  np.testing.assert_allclose(np.asarray(m2(x)), np.asarray(m(x)))
  assert nnx.graphdef(m) == graphdef and hash(nnx.graphdef(m)) == hash(graphdef)
  assert nnx.graphdef(nnx.Linear(3, 4, rngs=nnx.Rngs(0))) != graphdef
  # merge shares the state's Variables (Flax's copy=False); clone does not.
  assert m2.linear.kernel is state["linear"]["kernel"] is m.linear.kernel
  c = nnx.clone(m)
  assert c.linear.kernel is not m.linear.kernel


def test_filters_state_and_update():
  m = Block(nnx.Rngs(0))
  graphdef, params, stats = nnx.split(m, nnx.Param, nnx.BatchStat)
  assert "count" in paths(stats) and "count" not in paths(params)
  with pytest.raises(ValueError, match="Non-exhaustive"):
    nnx.split(m, nnx.BatchStat)
  g2, s_rest, s_all = nnx.split(m, nnx.BatchStat, ...)
  assert paths(s_rest) == ["count"] and len(paths(s_all)) == 8
  only = nnx.state(m, nnx.Param)
  assert len(paths(only)) == 8
  zero = partix.tree_util.tree_map(lambda v: jnp.zeros_like(v), only)
  nnx.update(m, zero)
  assert float(jnp.sum(jnp.abs(m.linear.kernel[...]))) == 0.0
  assert nnx.state(m, "nothing-tagged") == nnx.State({}) or len(nnx.state(m, "x")) == 0
  with pytest.raises(partix.PartixError, match="path"):
    nnx.update(m, nnx.State({"missing": nnx.Param(jnp.zeros(2))}))


def test_shared_variables_and_modules_appear_once():
  class Tied(nnx.Module):
    def __init__(self):
      self.a = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
      self.b = self.a
      self.w = nnx.Param(jnp.ones(2))
      self.also_w = self.w
  t = Tied()
  graphdef, state = nnx.split(t)
  assert paths(state) == ["a/bias", "a/kernel", "also_w"]  # first path in sorted order
  t2 = nnx.merge(graphdef, state)
  assert t2.b is t2.a and t2.also_w is t2.w


def test_state_is_a_pytree_and_mapping():
  m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
  s = nnx.state(m)
  assert isinstance(s, nnx.State) and set(s.keys()) == {"bias", "kernel"}
  assert s.kernel is s["kernel"]
  leaves = partix.tree_util.tree_leaves(s)
  assert [x.shape for x in leaves] == [(3,), (2, 3)]
  doubled = partix.tree_util.tree_map(lambda x: x * 2, s)
  assert isinstance(doubled["kernel"], nnx.Param)
  np.testing.assert_allclose(np.asarray(doubled["kernel"][...]), 2 * np.asarray(m.kernel[...]))
  flat = nnx.to_flat_state(s)
  assert flat.paths == (("bias",), ("kernel",))
  assert nnx.from_flat_state(list(flat))["kernel"] is s["kernel"]
  pure = nnx.to_pure_dict(s)
  assert set(pure) == {"bias", "kernel"} and not isinstance(pure["kernel"], nnx.Variable)
  # a module is a pytree too (Flax 0.12's tree mode)
  assert len(partix.tree_util.tree_leaves(m)) == 2


def test_pop_iter_modules_and_sow():
  m = Block(nnx.Rngs(0))
  mods = dict(m.iter_modules())
  assert set(mods) >= {(), ("linear",), ("layers", 0), ("layers", 1), ("norm",)}
  m.sow(nnx.Intermediate, "seen", jnp.ones(2))
  m.sow(nnx.Intermediate, "seen", jnp.zeros(2))
  assert len(m.seen[...]) == 2
  popped = nnx.pop(m, nnx.Intermediate)
  assert "seen" in paths(popped) and not hasattr(m, "seen")


def test_merge_errors():
  graphdef, state = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
  with pytest.raises(partix.PartixError, match="kernel"):
    nnx.merge(graphdef, nnx.State({"bias": state["bias"]}))
  with pytest.raises(partix.PartixError, match="GraphDef"):
    nnx.merge(state, state)
  with pytest.raises(partix.PartixError, match="filter"):
    nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), 3.5)


def test_deepcopy_of_a_module():
  import copy
  m = Block(nnx.Rngs(0))
  c = copy.deepcopy(m)
  assert c.linear.kernel is not m.linear.kernel and c.linear.kernel.get_metadata() == \
      m.linear.kernel.get_metadata()
  np.testing.assert_array_equal(np.asarray(c.linear.kernel[...]),
                                np.asarray(m.linear.kernel[...]))
  c.linear.kernel[...] = jnp.zeros((3, 4))
  assert float(jnp.sum(jnp.abs(m.linear.kernel[...]))) > 0
