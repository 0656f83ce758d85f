"""Sharding annotations: with_partitioning / with_metadata / sharding_rules /
logical_axis_rules resolved to PartitionSpecs, eager placement under set_mesh, models born
sharded under nnx.jit on 4x2, 2x4 and 8x1, get_named_sharding, eval_shape's abstract
shardings, and the errors of bad annotations."""
import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix import nnx
from partix.sharding import NamedSharding, PartitionSpec as P

from nnx_meshes import make_mesh

RULES = (("batch", "data"), ("hidden", "model"), ("embed", None))


class Annotated(nnx.Module):
  def __init__(self, rngs, depth=8):
    init = nnx.initializers.lecun_normal()
    self.dot1 = nnx.Linear(depth, 2 * depth, rngs=rngs,
                           kernel_init=nnx.with_partitioning(init, (None, "model")),
                           bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(),
                                                           ("model",)))
    self.w2 = nnx.Param(init(rngs.params(), (2 * depth, depth)), out_sharding=("model", None))
    self.logical = nnx.Linear(depth, depth, use_bias=False, rngs=rngs,
                              kernel_init=nnx.with_metadata(init, out_sharding=("embed", "hidden"),
                                                            sharding_rules=RULES))
    self.norm = nnx.LayerNorm(depth, rngs=rngs)

  def __call__(self, x):
    return self.norm(self.logical(nnx.relu(self.dot1(x)) @ self.w2))


EXPECTED = {"dot1/kernel": P(None, "model"), "dot1/bias": P("model"), "w2": P("model", None),
            "logical/kernel": P(None, "model"), "norm/scale": P(), "norm/bias": P()}


def specs(state):
  return {"/".join(map(str, p)): v.get_value()
          for p, v in nnx.to_flat_state(nnx.spmd.get_partition_spec(state))}


def test_get_partition_spec_reads_metadata_and_rules():
  with nnx.use_eager_sharding(False):
    m = Annotated(nnx.Rngs(0))
  assert specs(nnx.state(m)) == EXPECTED
  spec_state = nnx.spmd.get_partition_spec(nnx.state(m))
  assert spec_state["logical"]["kernel"].out_sharding == ("embed", "hidden")
  with nnx.logical_axis_rules((("embed", None), ("hidden", "model"))):  # consistent
    assert specs(nnx.state(m))["logical/kernel"] == P(None, "model")
  with nnx.logical_axis_rules((("hidden", "data"),)):  # contradicts the variable's rules
    with pytest.raises(ValueError, match="Inconsistent"):
      specs(nnx.state(m))
  free = nnx.State({"w": nnx.Param(jnp.zeros((2, 2)), out_sharding=("embed", "hidden"),
                                   eager_sharding=False)})
  assert specs(free)["w"] == P("embed", "hidden")  # no rules: names stand for themselves
  with nnx.logical_axis_rules(RULES):
    assert specs(free)["w"] == P(None, "model")


def test_logical_rules_from_context_and_golden(golden):
  _, structure = golden
  mesh = make_mesh((4, 2))
  with partix.set_mesh(mesh):
    m = Annotated(nnx.Rngs(0))
  want = {k: P(*v) for k, v in structure["seed"]["logical_specs_4x2"].items()}
  assert want == {"dot1/kernel": P(None, "model"), "w2": P("model", None)}
  assert m.logical.kernel[...].sharding.spec == P(None, "model")


@pytest.mark.parametrize("shape", [(4, 2), (2, 4), (8, 1)])
def test_models_born_sharded_under_jit(shape):
  mesh = make_mesh(shape)

  @nnx.jit
  def create():
    model = Annotated(nnx.Rngs(0))
    state = nnx.state(model)
    nnx.update(model, partix.lax.with_sharding_constraint(
        state, nnx.spmd.get_partition_spec(state)))
    return model
  with partix.set_mesh(mesh):
    m = create()
  for path, v in nnx.to_flat_state(nnx.state(m)):
    key = "/".join(map(str, path))
    sh = v[...].sharding
    assert isinstance(sh, NamedSharding) and sh.mesh == mesh
    assert tuple(sh.spec) == tuple(EXPECTED[key]), (shape, key, sh.spec)
  # the same values as an unsharded, eager build
  with nnx.use_eager_sharding(False):
    ref = Annotated(nnx.Rngs(0))
  for (p, a), (_, b) in zip(nnx.to_flat_state(nnx.state(m)), nnx.to_flat_state(nnx.state(ref))):
    np.testing.assert_allclose(np.asarray(a[...]), np.asarray(b[...]), err_msg=str(p))
  shardings = nnx.spmd.get_named_sharding(nnx.state(m), mesh)
  assert shardings["w2"].get_value() == NamedSharding(mesh, P("model", None))


def test_eager_sharding_under_set_mesh_and_use_eager_sharding():
  mesh = make_mesh((4, 2))
  with partix.set_mesh(mesh):
    m = Annotated(nnx.Rngs(0))
    assert m.w2[...].sharding.spec == P("model", None)
    assert m.dot1.bias[...].sharding.spec == P("model")
    with nnx.use_eager_sharding(False):
      assert not nnx.using_eager_sharding()
      lazy = nnx.Param(jnp.zeros((4, 4)), out_sharding=("model", None))
    assert nnx.using_eager_sharding()
    assert lazy[...].sharding.spec == P()


def test_explicit_mesh_axes_reshard_on_creation():
  if partix.device_count() < 8:
    pytest.skip("needs 8 devices")
  mesh = partix.make_mesh((4, 2), ("data", "model"))  # Explicit axes, make_mesh's default
  with partix.set_mesh(mesh):
    eager = Annotated(nnx.Rngs(0))
    born = nnx.jit(lambda: Annotated(nnx.Rngs(0)))()
  for m in (eager, born):
    assert m.w2[...].sharding.spec == P("model", None)
    assert m.dot1.kernel[...].sharding.spec == P(None, "model")
  np.testing.assert_allclose(np.asarray(eager.w2[...]), np.asarray(born.w2[...]))


def test_eval_shape_keeps_shardings_and_abstract_model():
  mesh = make_mesh((4, 2))
  with partix.set_mesh(mesh):
    abstract = nnx.eval_shape(lambda: Annotated(nnx.Rngs(0)))
  k = abstract.dot1.kernel[...]
  assert isinstance(k, partix.ShapeDtypeStruct) and k.shape == (8, 16)
  assert k.sharding.spec == P(None, "model")
  gdef, abs_state = nnx.spmd.get_abstract_model(lambda: Annotated(nnx.Rngs(0)), mesh)
  assert abs_state["w2"].get_value().sharding == NamedSharding(mesh, P("model", None))


def test_bad_annotations_name_the_axis():
  mesh = make_mesh((4, 2))
  with partix.set_mesh(mesh):
    with pytest.raises(partix.PartixError, match="'nope'"):
      nnx.Param(jnp.zeros((4, 4)), out_sharding=("nope", None))
    with pytest.raises(partix.PartixError, match="'hidden'"):  # a logical name, no rule
      nnx.Param(jnp.zeros((4, 4)), out_sharding=("hidden", None))
    with pytest.raises(partix.PartixError, match="3 entries"):
      nnx.Param(jnp.zeros((4, 4)), out_sharding=("data", None, None))
  with nnx.use_eager_sharding(False):
    v = nnx.Param(jnp.zeros((4, 4)), out_sharding=("bogus", None))
  with pytest.raises(partix.PartixError, match=r"\['w'\].*'bogus'"):
    nnx.spmd.get_named_sharding(nnx.State({"w": v}), mesh)
  with partix.set_mesh(mesh), pytest.raises(partix.PartixError,
                                            match=r"get_partition_spec at \['w'\].*'bogus'"):
    nnx.spmd.get_partition_spec(nnx.State({"w": v}))


def test_vmap_adds_the_stacked_axis_to_annotations():
  mesh = make_mesh((4, 2))
  init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))

  @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "data"})
  def create(key):
    return nnx.Linear(8, 8, kernel_init=init, rngs=nnx.Rngs(key))
  with partix.set_mesh(mesh):
    stack = create(partix.random.split(partix.random.key(0), 4))
    assert stack.kernel.out_sharding == ("data", None, "model")
    specs = nnx.spmd.get_partition_spec(nnx.state(stack))
    assert specs["kernel"].get_value() == P("data", None, "model")
    placed = partix.lax.with_sharding_constraint(nnx.state(stack), specs)
  assert placed["kernel"][...].sharding.spec == P("data", None, "model")


def test_scan_over_a_stack_sees_per_layer_annotations():
  mesh = make_mesh((4, 2))
  init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))

  @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: None})
  def create(key):
    return nnx.Linear(8, 8, kernel_init=init, rngs=nnx.Rngs(key))
  seen = []

  @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
  def forward(x, layer):
    seen.append(nnx.spmd.get_partition_spec(nnx.state(layer))["kernel"].get_value())
    return layer(x), None
  with partix.set_mesh(mesh):
    stack = create(partix.random.split(partix.random.key(0), 3))
    out, _ = nnx.jit(forward)(jnp.ones((4, 8)), stack)
  assert seen == [P(None, "model")]
  assert stack.kernel.out_sharding == (None, None, "model")  # outside: the stacked annotation
  assert out.shape == (4, 8)


def test_with_partitioning_refuses_a_non_mesh_third_argument():
  with pytest.raises(TypeError, match=r"\[nnx.with_partitioning\] mesh .* must be a Mesh"):
    nnx.with_partitioning(nnx.initializers.zeros_init(), ("hidden",), (("hidden", "model"),))
