"""Regressions of the fourth hostile round where Python meets the core: reductions over uneven
shards at the dtype limits, max/min of empty axes, 16-bit means, unreduced axes, remat under
Explicit axes, GPT-2 parameters and options, meshless reshard, uneven pipeline stages. Each
test failed before its fix (a silent wrong result, an accepted bad input or an unclear error);
the expected values are numpy's and JAX's."""
import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix.models import gpt2
from partix.sharding import AxisType, NamedSharding, PartitionSpec as P

E = AxisType.Explicit
DTYPES = [np.int32, np.float32, np.float16, jnp.bfloat16]


def limits(dt):
  if np.dtype(dt).kind == "i":
    return np.iinfo(dt).min, np.iinfo(dt).max
  info = jnp.finfo(dt)
  return float(info.min), float(info.max)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_uneven_reductions_at_the_dtype_limits(mesh8, dt, jitted):
  # 30 rows over 4 blocks of 8: the last block holds 6 rows and 2 of padding, which must not
  # take part in a max of all-lowest or a min of all-highest values.
  lo, hi = limits(dt)
  s = NamedSharding(mesh8, P("x"))
  lows = jax.device_put(np.full((30, 3), lo, dt), s)
  highs = jax.device_put(np.full((30, 3), hi, dt), s)
  mx = jax.jit(jnp.max) if jitted else jnp.max
  mn = jax.jit(jnp.min) if jitted else jnp.min
  assert np.asarray(mx(lows)).astype(np.float64) == np.float64(np.asarray(lo, dt))
  assert np.asarray(mn(highs)).astype(np.float64) == np.float64(np.asarray(hi, dt))
  ax0 = jax.jit(lambda a: jnp.max(a, axis=0)) if jitted else (lambda a: jnp.max(a, axis=0))
  np.testing.assert_array_equal(np.asarray(ax0(lows)), np.full(3, lo, dt))


def test_max_and_min_of_an_empty_axis_raise():
  e = jnp.zeros((3, 0))
  for f in (jnp.max, jnp.min):
    with pytest.raises(jax.PartixError, match="zero-size|empty"):
      f(e)
    with pytest.raises(jax.PartixError, match="zero-size|empty"):
      jax.jit(lambda a, f=f: f(a, axis=1))(e)
  assert jnp.max(e, axis=0).shape == (0,)
  assert float(jnp.sum(e)) == 0.0


@pytest.mark.parametrize("dt", [np.float16, jnp.bfloat16], ids=["f16", "bf16"])
def test_half_precision_mean_accumulates_in_f32(dt):
  x = jnp.full((8192,), 16.0, dt)  # the sum 131072 is past f16's 65504
  m = jnp.mean(x)
  assert m.dtype == np.dtype(dt)
  assert float(m) == 16.0
  assert float(jnp.var(x)) == 0.0


def test_unreduced_axes_must_be_explicit_axes_of_the_mesh(mesh8):
  emesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(E, E))
  with pytest.raises(jax.PartixError, match=r"unreduced axis 'z' is not in"):
    NamedSharding(emesh, P("x", unreduced={"z"}))
  with pytest.raises(jax.PartixError, match=r"unreduced axis 'y' .* is Auto; unreduced axes "
                                            r"must be Explicit"):
    NamedSharding(mesh8, P("x", unreduced={"y"}))
  # An Explicit one is kept, not dropped.
  assert NamedSharding(emesh, P("x", unreduced={"y"}))._s.unreduced == {"y"}


def test_reshard_without_a_mesh_names_python_apis():
  with pytest.raises(jax.PartixError) as e:
    jax.sharding.reshard(jnp.ones(8), P("x"))
  msg = str(e.value)
  assert "set_mesh" in msg and "use_mesh" in msg
  assert "MeshContext ctx" not in msg


def test_remat_composes_with_explicit_axes(mesh8):
  emesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(E, E))
  w = jax.device_put(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8),
                     NamedSharding(emesh, P("x", None)))
  x = jax.device_put(np.linspace(0, 1, 32, dtype=np.float32).reshape(4, 8),
                     NamedSharding(emesh, P("x", None)))

  def layer(w, x):
    return jnp.tanh(x * 2.0) * jnp.sum(w)

  def loss(w, x, remat):
    f = jax.checkpoint(layer) if remat else layer
    return jnp.sum(f(w, x) ** 2)

  want = jax.jit(jax.value_and_grad(lambda w, x: loss(w, x, False)))(w, x)
  got = jax.jit(jax.value_and_grad(lambda w, x: loss(w, x, True)))(w, x)
  np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-6)
  assert got[1].sharding.spec == want[1].sharding.spec


def test_gpt2_train_step_names_a_wrong_shaped_parameter():
  cfg = gpt2.tiny()
  params = gpt2.init(cfg, jax.random.key(0), gpt2.make_mesh(1, 1))
  name = next(n for n in params if n.endswith("mlp.c_fc.weight"))
  bad = dict(params)
  bad[name] = jnp.zeros((3, 5))
  ids = np.zeros((2, 8), np.int32)
  with pytest.raises(jax.PartixError, match=rf"parameter '{name}' is f32\[3,5\], but the config "
                                            r"needs shape"):
    gpt2.loss(bad, ids, ids, cfg)
  missing = dict(params)
  missing.pop(name)
  with pytest.raises(jax.PartixError, match=rf"params has no '{name}'"):
    gpt2.loss(missing, ids, ids, cfg)


@pytest.mark.parametrize("kw, what", [
    (dict(lr=float("nan")), "lr is nan"), (dict(lr=-1e-3), "lr is -0.001"),
    (dict(lr=0.0), "lr is 0"), (dict(weight_decay=float("nan")), "weight_decay is nan"),
    (dict(weight_decay=-0.1), "weight_decay is -0.1"), (dict(clip=float("inf")), "clip is inf"),
    (dict(warmup=-1), "warmup is -1")])
def test_gpt2_trainer_refuses_bad_optimiser_numbers(kw, what):
  with pytest.raises(jax.PartixError, match=what):
    gpt2.Trainer("tiny", steps=1, batch=2, seq=8, **kw)


def test_uneven_pipeline_stages_are_refused_naming_the_counts_that_divide():
  # 2 layers over 4 stages would pad the stacked weights over 'stage' and gather them all.
  if jax.device_count() < 4:
    pytest.skip("needs 4 devices")
  with pytest.raises(jax.PartixError, match=r"2 layers do not split into 4 chunks.*stage counts "
                                            r"that divide: 2"):
    gpt2.Trainer("tiny", stages=4, microbatches=4, batch=8, seq=16, steps=1)
