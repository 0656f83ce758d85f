"""jax.checkpoint with jax.checkpoint_policies and jax.ad_checkpoint.checkpoint_name: the same
gradient under every policy, and the gradient program recomputes only what the policy does not
save (make_jaxpr's text counted)."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.ad_checkpoint import checkpoint_name

policies = jax.checkpoint_policies


def block(w, x):
  return jnp.sin(checkpoint_name(x @ w, "proj")).sum()


@pytest.mark.parametrize("policy,dots,sins", [
    (None, 4, 2), (policies.nothing_saveable, 4, 2), (policies.dots_saveable, 3, 2),
    (policies.checkpoint_dots, 3, 2), (policies.dots_with_no_batch_dims_saveable, 3, 2),
    (policies.save_only_these_names("proj"), 3, 2), (policies.save_only_these_names("x"), 4, 2),
    (policies.everything_saveable, 3, 1),
    # Policy functions of primitives, as JAX's programs write them: read as the policy whose
    # answers they give.
    (lambda prim, *a, **k: True, 3, 1), (lambda prim, *a, **k: False, 4, 2),
    (lambda prim, *a, **k: prim.name == "dot_general", 3, 2),
    # Any policy of primitive names (JAX's shard_map tutorial: all but the all_gathers).
    (lambda prim, *_, **__: str(prim) != "all_gather", 3, 1),
    (lambda prim, *_, **__: prim.name in ("dot_general", "exp"), 3, 2),
    (lambda prim, *_, **__: prim.name == "exp", 4, 2),
    (policies.save_any_names_but_these("other"), 3, 2),
    (policies.save_any_names_but_these("proj"), 4, 2),
    (policies.save_from_both_policies(policies.nothing_saveable,
                                      policies.save_only_these_names("proj")), 3, 2),
    (policies.save_from_both_policies(policies.dots_saveable, policies.everything_saveable), 3,
     1)])
def test_policies_save_what_they_name(policy, dots, sins):
  w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
  x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
  g = jax.grad(jax.checkpoint(block, policy=policy))
  want = jax.grad(block)(w, x)
  np.testing.assert_allclose(g(w, x), want, rtol=1e-6)
  np.testing.assert_allclose(jax.jit(g)(w, x), want, rtol=1e-6)
  text = str(jax.make_jaxpr(g)(w, x))
  assert text.count("dot_general") == dots, text
  assert text.count(" sin(") == sins, text


def test_bad_policies_are_errors():
  with pytest.raises(jax.PartixError, match=r"^\[checkpoint\] policy function .* no avals"):
    jax.checkpoint(block, policy=lambda prim, *avals, **k: avals[0].ndim > 1)
  with pytest.raises(jax.PartixError, match=r"^\[checkpoint\] policy 3 is not one of"):
    jax.checkpoint(block, policy=3)
  with pytest.raises(jax.PartixError, match=r"save_any_names_but_these\] names must be"):
    policies.save_any_names_but_these("")
  with pytest.raises(jax.PartixError, match=r"save_from_both_policies\] cannot combine"):
    policies.save_from_both_policies(policies.dots_with_no_batch_dims_saveable,
                                     policies.save_only_these_names("proj"))
  with pytest.raises(jax.PartixError, match=r"names must be non-empty strs"):
    policies.save_only_these_names(3)
  with pytest.raises(jax.PartixError, match=r"applied by partix.checkpoint"):
    policies.dots_saveable(None)
  with pytest.raises(jax.PartixError, match=r"^\[checkpoint_name\] name must be"):
    checkpoint_name(np.ones(2, np.float32), "")


def test_policy_function_in_an_fsdp_shard_map_on_8_devices():
  # JAX's shard_map tutorial: weights gathered just before use and gathered again on the
  # backward pass (all but the all_gathers saved). Gradients equal the unremat'd ones, and
  # the backward program gathers again.
  import functools
  from partix.sharding import NamedSharding, PartitionSpec as P
  mesh = jax.make_mesh((8,), ("b",), axis_types=(jax.sharding.AxisType.Auto,))
  rng = np.random.default_rng(3)
  w = rng.standard_normal((16, 16)).astype(np.float32)
  x = rng.standard_normal((8, 16)).astype(np.float32)

  def predict(w_frag, inputs):
    return jnp.tanh(inputs @ jax.lax.all_gather(w_frag, "b", tiled=True))

  def loss_with(policy):
    body = predict if policy is None else jax.checkpoint(predict, policy=policy)

    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P("b"), P("b")), out_specs=P())
    def loss(w_frag, xb):
      return jax.lax.pmean(jnp.sum(body(w_frag, xb) ** 2), "b")
    return loss

  ws = jax.device_put(w, NamedSharding(mesh, P("b")))
  xs = jax.device_put(x, NamedSharding(mesh, P("b")))
  policy = lambda op, *_, **__: str(op) != "all_gather"  # noqa: E731
  want = jax.jit(jax.grad(loss_with(None)))(ws, xs)
  got = jax.jit(jax.grad(loss_with(policy)))(ws, xs)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
  text = str(jax.make_jaxpr(jax.grad(loss_with(policy)))(ws, xs))
  plain = str(jax.make_jaxpr(jax.grad(loss_with(None)))(ws, xs))
  assert text.count("all_gather") > plain.count("all_gather"), text
