"""nnx layers against Flax 0.12: parameter names, shapes and initializer statistics, outputs
equal to nnx-free partix functions of the same weights and to Flax's outputs (golden files
from tools/golden/nnx_layers.py), and their errors."""
import numpy as np
import pytest

import partix
import partix.numpy as jnp
from partix import nnx


def flat(module):
  return {"/".join(map(str, p)): v for p, v in nnx.to_flat_state(nnx.state(module))}


def shapes(module):
  return {k: [type(v).__name__, list(np.shape(v[...]))] for k, v in flat(module).items()
          if not k.endswith(("rngs/key", "rngs/count"))}


def load(module, golden_arrays, case):
  for k, v in flat(module).items():
    v[...] = jnp.asarray(golden_arrays[f"{case}/param/{k}"])


LAYERS = {
    "linear": lambda: nnx.Linear(8, 6, rngs=nnx.Rngs(1)),
    "linear_nobias": lambda: nnx.Linear(8, 3, use_bias=False, rngs=nnx.Rngs(2)),
    "layernorm": lambda: nnx.LayerNorm(8, rngs=nnx.Rngs(3)),
    "rmsnorm": lambda: nnx.RMSNorm(8, rngs=nnx.Rngs(4)),
    "embed": lambda: nnx.Embed(11, 8, rngs=nnx.Rngs(5)),
    "batchnorm": lambda: nnx.BatchNorm(8, momentum=0.9, rngs=nnx.Rngs(8)),
    "mha": lambda: nnx.MultiHeadAttention(num_heads=2, in_features=8, qkv_features=12,
                                          out_features=4, rngs=nnx.Rngs(6), decode=False),
}


@pytest.mark.parametrize("case", sorted(LAYERS))
def test_parameter_names_and_shapes_are_flax(case, golden):
  _, structure = golden
  assert shapes(LAYERS[case]()) == structure[case]


@pytest.mark.parametrize("case", sorted(set(LAYERS) - {"batchnorm"}) + ["embed_attend"])
def test_outputs_equal_flax_for_the_same_weights(case, golden):
  arrays, _ = golden
  m = LAYERS["embed" if case == "embed_attend" else case]()
  load(m, arrays, case)
  x3, ids, mask = arrays["x3"], arrays["ids"], arrays["mask"]
  calls = {"linear": lambda: m(jnp.asarray(x3)), "linear_nobias": lambda: m(jnp.asarray(x3)),
           "layernorm": lambda: m(jnp.asarray(x3 * 3 + 1)),
           "rmsnorm": lambda: m(jnp.asarray(x3 * 2 - 1)), "embed": lambda: m(jnp.asarray(ids)),
           "embed_attend": lambda: m.attend(jnp.asarray(x3)),
           "mha": lambda: m(jnp.asarray(x3), mask=jnp.asarray(mask))}
  np.testing.assert_allclose(np.asarray(calls[case]()), arrays[f"{case}/output"], rtol=2e-5,
                             atol=2e-5)


def test_batchnorm_equals_flax_and_updates_running_averages(golden):
  arrays, _ = golden
  m = LAYERS["batchnorm"]()
  load(m, arrays, "batchnorm")
  x3 = arrays["x3"]
  y = m(jnp.asarray(x3 * 2 + 1))
  got = [y, m.mean[...], m.var[...], m(jnp.asarray(x3), use_running_average=True)]
  for i, g in enumerate(got):
    np.testing.assert_allclose(np.asarray(g), arrays[f"batchnorm/output{i}"], rtol=2e-5,
                               atol=2e-5, err_msg=f"output{i}")

  @nnx.jit
  def train_step(bn, x):  # running averages are BatchStats, written back by nnx.jit
    return bn(x)
  m2 = LAYERS["batchnorm"]()
  load(m2, arrays, "batchnorm")
  train_step(m2, jnp.asarray(x3 * 2 + 1))
  np.testing.assert_allclose(np.asarray(m2.mean[...]), arrays["batchnorm/output1"], rtol=2e-5,
                             atol=2e-6)
  m2.eval()
  assert m2.use_running_average is True
  np.testing.assert_allclose(np.asarray(m2(jnp.asarray(x3))), arrays["batchnorm/output3"],
                             rtol=2e-5, atol=2e-5)
  m2.train()
  assert m2.use_running_average is False
  grads = nnx.grad(lambda bn: jnp.sum(bn(jnp.asarray(x3))))(m2)
  assert set(nnx.to_flat_state(grads).paths) == {("bias",), ("scale",)}
  assert not np.allclose(np.asarray(m2.mean[...]), arrays["batchnorm/output1"])  # written back


def test_outputs_equal_nnx_free_functions(rng):
  x = rng.normal(size=(3, 4, 8)).astype(np.float32)
  lin = nnx.Linear(8, 5, rngs=nnx.Rngs(0))
  k, b = np.asarray(lin.kernel[...]), np.asarray(lin.bias[...])
  np.testing.assert_allclose(np.asarray(lin(jnp.asarray(x))), x @ k + b, rtol=1e-5, atol=1e-5)
  ln = nnx.LayerNorm(8, epsilon=1e-6, rngs=nnx.Rngs(0))
  ln.scale[...] = jnp.asarray(np.linspace(0.5, 2, 8, dtype=np.float32))
  ln.bias[...] = jnp.asarray(np.linspace(-1, 1, 8, dtype=np.float32))
  mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  ref = (x - mu) / np.sqrt(var + 1e-6) * np.linspace(0.5, 2, 8) + np.linspace(-1, 1, 8)
  np.testing.assert_allclose(np.asarray(ln(jnp.asarray(x))), ref, rtol=1e-4, atol=1e-4)
  rms = nnx.RMSNorm(8, rngs=nnx.Rngs(0))
  ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
  np.testing.assert_allclose(np.asarray(rms(jnp.asarray(x))), ref, rtol=1e-4, atol=1e-5)


def test_mha_equals_a_hand_written_attention(rng):
  x = rng.normal(size=(2, 5, 8)).astype(np.float32)
  m = nnx.MultiHeadAttention(num_heads=2, in_features=8, rngs=nnx.Rngs(0), decode=False)
  w = {k: np.asarray(v[...]) for k, v in flat(m).items()}
  q = np.einsum("bsi,ihd->bshd", x, w["query/kernel"]) + w["query/bias"]
  k = np.einsum("bsi,ihd->bshd", x, w["key/kernel"]) + w["key/bias"]
  v = np.einsum("bsi,ihd->bshd", x, w["value/kernel"]) + w["value/bias"]
  logits = np.einsum("bqhd,bkhd->bhqk", q / np.sqrt(4), k)
  causal = np.tril(np.ones((5, 5), bool))
  logits = np.where(causal, logits, np.finfo(np.float32).min)
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  o = np.einsum("bhqk,bkhd->bqhd", p, v)
  ref = np.einsum("bqhd,hdo->bqo", o, w["out/kernel"]) + w["out/bias"]
  got = m(jnp.asarray(x), mask=jnp.asarray(causal))
  np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-5)
  causal_mask = nnx.make_causal_mask(jnp.ones((2, 5)))
  assert causal_mask.shape == (2, 1, 5, 5)
  np.testing.assert_allclose(np.asarray(m(jnp.asarray(x), mask=causal_mask)), ref, rtol=1e-4,
                             atol=1e-5)


def test_initializer_statistics_match_flax(golden):
  _, structure = golden
  lin = nnx.Linear(512, 512, rngs=nnx.Rngs(0))
  emb = nnx.Embed(512, 256, rngs=nnx.Rngs(0))
  k, e = np.asarray(lin.kernel[...]), np.asarray(emb.embedding[...])
  for got, (mean, std) in ((k, structure["init_stats"]["linear_kernel"]),
                           (e, structure["init_stats"]["embed"])):
    assert abs(got.mean() - mean) < 3e-3 and abs(got.std() - std) / std < 0.03
  # lecun_normal: std 1/sqrt(fan_in); Embed: std 1/sqrt(features... fan_in of axis 1)
  assert abs(k.std() - 1 / np.sqrt(512)) / (1 / np.sqrt(512)) < 0.03
  assert np.all(np.asarray(lin.bias[...]) == 0)
  ln = nnx.LayerNorm(6, rngs=nnx.Rngs(0))
  assert np.all(np.asarray(ln.scale[...]) == 1) and np.all(np.asarray(ln.bias[...]) == 0)


def test_defaults_and_options():
  ln = nnx.LayerNorm(4, use_bias=False, use_scale=False, rngs=nnx.Rngs(0))
  assert ln.epsilon == 1e-6 and ln.scale is None and ln.bias is None
  assert flat(ln) == {}
  lin = nnx.Linear(3, 2, use_bias=False, rngs=nnx.Rngs(0))
  assert lin.bias is None and set(flat(lin)) == {"kernel"}
  k = nnx.Linear(3, 2, kernel_init=nnx.initializers.zeros_init(), rngs=nnx.Rngs(0)).kernel
  assert np.all(np.asarray(k[...]) == 0)


def test_sequential_and_activations():
  seq = nnx.Sequential(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), nnx.relu,
                       nnx.Linear(3, 2, rngs=nnx.Rngs(1)))
  x = jnp.asarray(np.arange(8, dtype=np.float32).reshape(2, 4))
  ref = seq.layers[2](nnx.relu(seq.layers[0](x)))
  np.testing.assert_allclose(np.asarray(seq(x)), np.asarray(ref))
  assert set(flat(seq)) == {"layers/0/kernel", "layers/0/bias", "layers/2/kernel",
                            "layers/2/bias"}
  np.testing.assert_allclose(np.asarray(nnx.gelu(jnp.asarray([0.0, 1.0]))),
                             [0.0, 0.841192], rtol=1e-5)


def test_dropout():
  d = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=3))
  x = jnp.ones((1000,))
  y = np.asarray(d(x))
  assert set(np.unique(y)) <= {0.0, 2.0} and 0.4 < (y == 0).mean() < 0.6
  assert int(d.rngs.count[...]) == 1
  assert not np.array_equal(np.asarray(d(x)), y)  # the stream advanced
  np.testing.assert_array_equal(np.asarray(d(x, deterministic=True)), np.ones(1000))
  with pytest.raises(ValueError, match="rngs"):
    nnx.Dropout(0.5)(x)
  with pytest.raises(ValueError, match="deterministic"):
    nnx.Dropout(0.5, deterministic=None)(x)
  np.testing.assert_array_equal(np.asarray(nnx.Dropout(0.5)(x, deterministic=True)),
                                np.ones(1000))


def test_layer_errors():
  with pytest.raises(partix.PartixError, match="in_features"):
    nnx.Linear(0, 3, rngs=nnx.Rngs(0))
  lin = nnx.Linear(4, 3, rngs=nnx.Rngs(0))
  with pytest.raises(partix.PartixError, match=r"in_features=4"):
    lin(jnp.ones((2, 5)))
  with pytest.raises(ValueError, match="divisible"):
    nnx.MultiHeadAttention(num_heads=3, in_features=8, rngs=nnx.Rngs(0))
  with pytest.raises(TypeError, match="embed_dim"):
    nnx.MultiHeadAttention(num_heads=2, embed_dim=8, in_features=8, rngs=nnx.Rngs(0))
  mha = nnx.MultiHeadAttention(num_heads=2, in_features=8, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="decode"):
    mha(jnp.ones((1, 3, 8)))
  with pytest.raises(partix.PartixError, match="decode=True"):
    mha(jnp.ones((1, 3, 8)), decode=True)
  with pytest.raises(ValueError, match="integer"):
    nnx.Embed(4, 2, rngs=nnx.Rngs(0))(jnp.ones((2,)))
  with pytest.raises(partix.PartixError, match="rate"):
    nnx.Dropout(1.5)


def test_mha_attention_dropout_and_sown_weights():
  m = nnx.MultiHeadAttention(num_heads=2, in_features=8, dropout_rate=0.5, rngs=nnx.Rngs(0),
                             decode=False)
  assert int(m.rngs.count[...]) == 0
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 4, 8)).astype(np.float32))
  a = m(x, deterministic=True)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(m(x, deterministic=True)))
  b = m(x, deterministic=False)
  assert int(m.rngs.count[...]) == 1 and not np.allclose(np.asarray(a), np.asarray(b))
  with pytest.raises(ValueError, match="deterministic"):
    m(x)
  m(x, deterministic=True, sow_weights=True)
  (w,) = m.attention_weights[...]
  assert w.shape == (1, 2, 4, 4)
  np.testing.assert_allclose(np.asarray(jnp.sum(w, axis=-1)), np.ones((1, 2, 4)), rtol=1e-5)
