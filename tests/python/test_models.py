"""partix.models (llama, gpt2) and partix.optim against the C++ library: the same tokens as the
C++ CLI and the committed Hugging Face golden output, the same losses as the C++ step and the
C++ trainer, on 1 and 8 devices, and bad input."""
import functools
import json
import os
import subprocess

import numpy as np
import pytest

import partix as jax
from partix import optim
from partix.models import gpt2, llama
from partix.sharding import NamedSharding, PartitionSpec as P

from conftest import build_dir

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
GOLDEN = os.path.join(ROOT, "tests", "golden", "smollm2", "golden.json")


def _cli():
  exe = os.path.join(build_dir(), "bin", "partix")
  return exe if os.path.exists(exe) else None


# ---------------------------------------------------------------- llama

@pytest.fixture(scope="module")
def smollm2():
  path = llama.default_model_path()
  if not os.path.exists(path):
    pytest.skip(f"SmolLM2 not cached at {path} (scripts/fetch_smollm2.sh)")
  return path


@pytest.fixture(scope="module")
def golden():
  with open(GOLDEN) as f:
    return json.load(f)


@pytest.mark.parametrize("n", [1, 8])
def test_llama_greedy_matches_golden_and_cli(smollm2, golden, n, tmp_path):
  if jax.device_count() < n:
    pytest.skip(f"needs {n} devices")
  mesh = jax.make_mesh((n,), ("model",))
  model = llama.load(smollm2, mesh)
  chat = golden["prompts"]["chat"]
  # Tokenizer and chat template as Hugging Face's (the golden file came from transformers).
  text = model.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
  assert text == chat["text"]
  assert model.encode(text) == chat["ids"]
  out = model.generate("What is the capital of France?", max_tokens=32, chat=True,
                       stop_at_eos=False)
  assert out.tokens == chat["greedy32"]
  assert out.text == model.decode(chat["greedy32"])
  assert "Paris" in out.text
  # The prompt given as token ids generates the same.
  assert model.generate(chat["ids"], max_tokens=8, stop_at_eos=False).tokens == chat["greedy32"][:8]
  # Parameters live on the mesh, split over 'model'.
  # Stacked over layers (scanned), unless asked per layer.
  q = model.params["model.layers.self_attn.q_proj.weight"]
  # On the mesh's devices and axes; the model library lays them out itself, so its axes are
  # Auto whatever the given mesh's types (make_mesh's default is Explicit).
  m = q.sharding.mesh
  assert m.axis_names == mesh.axis_names and list(m.devices.flat) == list(mesh.devices.flat)
  assert m.axis_types == (jax.sharding.AxisType.Auto,)
  assert q.shape[0] == golden["config"]["num_hidden_layers"]
  if n == 1:
    per = llama.load(smollm2, mesh, stacked=False)
    assert "model.layers.29.self_attn.q_proj.weight" in per.params
    assert not any(k.startswith("model.layers.self_attn") for k in per.params)
    assert per.generate(chat["ids"], max_tokens=8, stop_at_eos=False).tokens == chat["greedy32"][:8]
  assert model.config["num_layers"] == golden["config"]["num_hidden_layers"]
  exe = _cli()
  if exe is None:
    return
  prompt = "The capital of France is"
  res = subprocess.run([exe, "generate", "--model", smollm2, "--devices", str(n), "--greedy",
                        "--max-tokens", "12", "--quiet", "--prompt", prompt, "--output",
                        str(tmp_path / "out.txt")], capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, res.stderr
  cli_text = (tmp_path / "out.txt").read_text().rstrip("\n")
  assert model.generate(prompt, max_tokens=12).text == cli_text


def test_llama_batch_sampling_and_errors(smollm2, golden, mesh8):
  mesh = jax.make_mesh((2,), ("model",))
  model = llama.load(smollm2, mesh)
  plain = golden["prompts"]["plain"]
  batch = model.generate([plain["text"], "What is the capital of France?"], max_tokens=6,
                         stop_at_eos=False)
  assert len(batch) == 2
  assert batch[0].tokens == plain["greedy32"][:6]
  # A tiny temperature samples the greedy tokens; the same seed samples the same tokens.
  assert model.generate(plain["text"], max_tokens=6, temperature=1e-30,
                        stop_at_eos=False).tokens == plain["greedy32"][:6]
  a = model.generate(plain["text"], max_tokens=6, temperature=1.0, seed=3, stop_at_eos=False)
  b = model.generate(plain["text"], max_tokens=6, temperature=1.0, seed=3, stop_at_eos=False)
  assert a.tokens == b.tokens
  with pytest.raises(jax.PartixError, match=r"^\[llama.generate\] max_tokens"):
    model.generate("hi", max_tokens=0)
  with pytest.raises(jax.PartixError, match=r"^\[llama.generate\] temperature"):
    model.generate("hi", temperature=-1.0)
  with pytest.raises(jax.PartixError, match=r"^\[llama.generate\] a prompt"):
    model.generate([3.5])
  # Token ids outside the vocabulary are refused, not clamped to its first or last row.
  for bad in (-5, 10**9, 10**10, model.config["vocab_size"]):
    with pytest.raises(jax.PartixError, match="outside the vocabulary"):
      model.generate([1, 2, bad], max_tokens=2)
    with pytest.raises(jax.PartixError, match="outside the vocabulary"):
      model.generate([[1, 2], [bad, 3]], max_tokens=2)
  with pytest.raises(jax.PartixError, match=r"^\[llama.apply_chat_template\]"):
    model.apply_chat_template(["no role"])
  with pytest.raises(jax.PartixError, match="'model'"):
    llama.load(smollm2, mesh8)  # axes 'x', 'y'
  with pytest.raises(jax.PartixError, match=r"^\[llama.load\] dtype"):
    llama.load(smollm2, mesh, dtype="int8")


def test_llama_quantized_and_bf16_weights(smollm2, tmp_path):
  if jax.device_count() < 2:
    pytest.skip("needs 2 devices")
  q = "What is the capital of France?"
  texts = []
  for n in (1, 2):
    model = llama.load(smollm2, jax.make_mesh((n,), ("model",)), quantized=True)
    assert model.params["model.layers.mlp.up_proj.weight"].dtype.name == "q4_1"
    # A prompt whose first greedy tokens are clear winners: the same tokens whatever the device
    # count.
    # (The quantized model's chat answer to q starts with near ties, 0.08 apart for its first
    # token: 2 devices sum a split product's halves in another order than 1, and on some
    # instruction sets that rounding picks the other token a few tokens in.)
    texts.append(model.generate("The capital of France is", max_tokens=4).text)
  assert texts[0] == texts[1]
  assert "Paris" in texts[0]
  half = llama.load(smollm2, jax.make_mesh((2,), ("model",)), dtype=jax.numpy.bfloat16)
  assert half.params["model.layers.mlp.up_proj.weight"].dtype == jax.numpy.bfloat16
  assert "Paris" in half.generate(q, max_tokens=8, chat=True).text
  exe = _cli()
  if exe is None:
    return
  res = subprocess.run([exe, "generate", "--model", smollm2, "--devices", "2", "--greedy",
                        "--weights", "quantized", "--max-tokens", "4", "--quiet",
                        "--prompt", "The capital of France is", "--output", str(tmp_path / "q.txt")],
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, res.stderr
  assert texts[1].rstrip("\n") == (tmp_path / "q.txt").read_text().rstrip("\n")


def test_generate_and_train_release_the_gil(smollm2):
  import sys
  import threading
  import time
  model = llama.load(smollm2, jax.make_mesh((1,), ("model",)))
  model.generate("Hi", max_tokens=2)  # compiled before timing
  trainer = gpt2.Trainer("tiny", steps=3, batch=4, seq=16)
  trainer.step()
  works = (lambda: model.generate("Tell me a story.", max_tokens=12, stop_at_eos=False),
           lambda: [trainer.step() for _ in range(2)])
  interval = sys.getswitchinterval()
  # A thread that held the GIL in C++ would let the other run only at the interpreter's
  # switch points: make those a second apart, so only released waits give ticks.
  sys.setswitchinterval(1.0)
  try:
    for work in works:
      done = threading.Event()

      def repeat():
        start = time.monotonic()
        while time.monotonic() - start < 0.5:  # long enough on any machine
          work()
        done.set()

      t = threading.Thread(target=repeat)
      ticks = 0
      t.start()
      while not done.is_set() and t.is_alive():
        ticks += 1  # this thread runs while the other waits in C++
        time.sleep(0.001)
      t.join()
      assert done.is_set() and ticks > 20, ticks
  finally:
    sys.setswitchinterval(interval)


def test_llama_load_missing_file(tmp_path):
  mesh = jax.make_mesh((1,), ("model",))
  with pytest.raises(jax.PartixError, match="nothing.gguf"):
    llama.load(str(tmp_path / "nothing.gguf"), mesh)
  with pytest.raises(jax.PartixError, match=r"^\[llama.load\] mesh"):
    llama.load(str(tmp_path / "nothing.gguf"), "model")


# ---------------------------------------------------------------- gpt2

def _batches(steps, batch=8, seq=16):
  rng = np.random.default_rng(1)
  rows = rng.integers(0, 256, size=(steps, batch, seq + 1)).astype(np.int32)
  return rows[..., :-1], rows[..., 1:]


@pytest.mark.parametrize("shape,fsdp", [((1, 1), False), ((4, 2), True), ((4, 2), False)])
def test_gpt2_python_step_equals_cpp_step(shape, fsdp):
  if jax.device_count() < shape[0] * shape[1]:
    pytest.skip("needs 8 devices")
  cfg = gpt2.tiny()
  mesh = gpt2.make_mesh(*shape)
  params = gpt2.init(cfg, jax.random.key(0), mesh, fsdp=fsdp)
  want = gpt2.param_shardings(cfg, mesh, fsdp=fsdp)
  for name, p in params.items():
    assert p.sharding == want[name], name
  ref_p, ref_s = params, optim.adamw_init(params)
  py_p, py_s = params, optim.adamw_init(params)
  step = jax.jit(functools.partial(gpt2.train_step, config=cfg))
  ids, targets = _batches(3)
  bs = NamedSharding(mesh, P("data"))
  py, ref = [], []
  for i in range(3):
    x, t = jax.device_put(ids[i], bs), jax.device_put(targets[i], bs)
    key = jax.random.key(10 + i)
    py_p, py_s, lp = step(py_p, py_s, x, t, 2e-3, key)
    ref_p, ref_s, lr_ = gpt2._reference_step(ref_p, ref_s, x, t, 2e-3, key, config=cfg)
    py.append(float(lp))
    ref.append(float(lr_))
  np.testing.assert_allclose(py, ref, rtol=2e-6)
  # The loss of uniform predictions over 256 bytes is log(256); init sits near it.
  assert abs(py[0] - np.log(256)) < 0.2
  assert int(py_s.count) == 3
  np.testing.assert_allclose(np.asarray(py_p["transformer.wte.weight"]),
                             np.asarray(ref_p["transformer.wte.weight"]), rtol=1e-5, atol=1e-6)


def test_gpt2_losses_same_on_1_and_8_devices_and_decrease(mesh8):
  cfg = gpt2.tiny()
  ids, targets = _batches(1)
  runs = []
  for shape in ((1, 1), (4, 2)):
    mesh = gpt2.make_mesh(*shape)
    params = gpt2.init(cfg, jax.random.key(0), mesh, fsdp=True)
    opt = optim.adamw_init(params)
    step = jax.jit(functools.partial(gpt2.train_step, config=cfg))
    bs = NamedSharding(mesh, P("data"))
    x, t = jax.device_put(ids[0], bs), jax.device_put(targets[0], bs)
    losses = []
    for _ in range(6):  # the same batch: the model memorises it
      params, opt, loss = step(params, opt, x, t, 1e-2)
      losses.append(float(loss))
    runs.append(losses)
    # The eager loss of the trained parameters is below the first step's.
    assert float(gpt2.loss(params, x, t, cfg)) < losses[0] - 0.3
  np.testing.assert_allclose(runs[0], runs[1], rtol=1e-4)
  assert runs[0][-1] < runs[0][0] - 0.3, runs[0]


def test_gpt2_forward_matches_loss(mesh1):
  cfg = gpt2.tiny()
  mesh = gpt2.make_mesh(1, 1)
  params = gpt2.init(cfg, jax.random.key(2), mesh)
  ids, targets = _batches(1, batch=2, seq=8)
  logits = np.asarray(gpt2.forward(params, ids[0], cfg)).astype(np.float64)
  assert logits.shape == (2, 8, 256)
  logp = logits - logits.max(-1, keepdims=True)
  logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
  want = -np.take_along_axis(logp, targets[0][..., None], -1).mean()
  np.testing.assert_allclose(float(gpt2.loss(params, ids[0], targets[0], cfg)), want, rtol=1e-5)


@pytest.mark.parametrize("mesh_shape", [(1, 1), (4, 2)])
def test_gpt2_trainer_matches_cli(mesh_shape, tmp_path):
  if jax.device_count() < mesh_shape[0] * mesh_shape[1]:
    pytest.skip("needs 8 devices")
  try:
    tr = gpt2.Trainer("tiny", data=mesh_shape[0], model=mesh_shape[1], fsdp=True, steps=4,
                      batch=8, seq=32, lr=3e-3, warmup=1)
  except jax.PartixError as e:
    pytest.skip(f"no training corpus: {e}")
  losses = [tr.step() for _ in range(4)]
  assert tr.step_count == 4
  assert all(np.isfinite(losses))
  assert tr.mesh.axis_sizes == mesh_shape
  exe = _cli()
  if exe is None:
    return
  csv = tmp_path / "m.csv"
  res = subprocess.run([exe, "train", "--model", "tiny", "--mesh", f"{mesh_shape[0]}x{mesh_shape[1]}",
                        "--fsdp", "--steps", "4", "--batch", "8", "--seq", "32", "--lr", "3e-3",
                        "--warmup", "1", "--quiet", "--metrics", str(csv)],
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, res.stderr
  rows = csv.read_text().strip().splitlines()[1:]
  cli = [float(r.split(",")[1]) for r in rows]
  np.testing.assert_allclose(losses, cli, atol=2e-6)


def test_gpt2_trainer_pipelined_matches_unpipelined(tmp_path):
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  text = tmp_path / "corpus.txt"
  text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
  kw = dict(steps=3, batch=8, seq=16, lr=3e-3, warmup=1, corpus=[text])
  want = [t.step() for t in [gpt2.Trainer("tiny", **kw)] for _ in range(3)]
  for schedule in ("gpipe", "1f1b"):
    tr = gpt2.Trainer("tiny", stages=2, data=2, model=2, microbatches=2, schedule=schedule, **kw)
    assert tr.mesh.axis_names == ("stage", "data", "model")
    got = [tr.step() for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
  with pytest.raises(jax.PartixError, match=r"unknown schedule 'zb'"):
    gpt2.Trainer("tiny", stages=2, microbatches=2, schedule="zb", **kw)
  with pytest.raises(jax.PartixError, match=r"^\[gpt2.Trainer\] microbatches"):
    gpt2.Trainer("tiny", stages=2, microbatches=0, **kw)


def test_gpt2_trainer_custom_corpus(tmp_path):
  text = tmp_path / "corpus.txt"
  text.write_text("abcdefgh" * 400)
  tr = gpt2.Trainer("tiny", steps=8, batch=4, seq=16, lr=1e-2, warmup=1, corpus=[text])
  losses = [tr.step() for _ in range(8)]
  # A period-8 text is learnt fast: far below the uniform log(256).
  assert losses[0] > 4.5 and losses[-1] < losses[0] - 1.0, losses
  assert set(tr.params) == set(gpt2.init(gpt2.tiny(), jax.random.key(0),
                                         gpt2.make_mesh(1, 1)))


def test_gpt2_and_optim_bad_input(mesh8):
  cfg = gpt2.tiny()
  with pytest.raises(jax.PartixError, match=r"^\[gpt2.init\] the mesh needs axes"):
    gpt2.init(cfg, jax.random.key(0), mesh8)
  with pytest.raises(jax.PartixError, match=r"^\[gpt2.init\] config"):
    gpt2.init("huge", jax.random.key(0), gpt2.make_mesh(1, 1))
  bad = gpt2.tiny()
  bad.n_head = 3  # 64 channels do not split over 3 heads
  with pytest.raises(jax.PartixError, match="n_head"):
    gpt2.init(bad, jax.random.key(0), gpt2.make_mesh(1, 1))
  params = gpt2.init(cfg, jax.random.key(0), gpt2.make_mesh(1, 1))
  with pytest.raises(jax.PartixError, match=r"^\[gpt2.loss\] params\['x'\] is not an Array"):
    gpt2.loss({**params, "x": 1.0}, np.zeros((1, 4), np.int32), np.zeros((1, 4), np.int32), cfg)
  with pytest.raises(jax.PartixError, match=r"^\[adamw_init\] params must be a dict"):
    optim.adamw_init([1, 2])
  st = optim.adamw_init(params)
  grads = dict(params)
  grads.pop("transformer.wte.weight")
  with pytest.raises(jax.PartixError, match=r"^\[adamw_update\] grads' names"):
    optim.adamw_update(params, grads, st, 1e-3)
  with pytest.raises(jax.PartixError, match=r"^\[adamw_update\] lr"):
    optim.adamw_update(params, params, st, "fast")
  with pytest.raises(jax.PartixError, match=r"^\[gpt2.Trainer\] batch"):
    gpt2.Trainer("tiny", batch=0)
  with pytest.raises(jax.PartixError, match="no_such_corpus"):
    gpt2.Trainer("tiny", corpus=["no_such_corpus.txt"])


def test_optim_against_numpy():
  mesh = jax.make_mesh((8,), ("x",)) if jax.device_count() >= 8 else jax.make_mesh((1,), ("x",))
  rng = np.random.default_rng(0)
  w = rng.standard_normal((8, 4)).astype(np.float32)
  g = rng.standard_normal((8, 4)).astype(np.float32)
  sh = NamedSharding(mesh, P("x"))
  params = {"w": jax.device_put(w, sh)}
  grads = {"w": jax.device_put(g, sh)}
  n = float(optim.global_norm(grads))
  np.testing.assert_allclose(n, np.sqrt((g.astype(np.float64) ** 2).sum()), rtol=1e-5)
  clipped, norm = optim.clip_by_global_norm(grads, 1.0)
  np.testing.assert_allclose(np.asarray(clipped["w"]), g / n, rtol=1e-5)
  st = optim.adamw_init(params)
  new, st = optim.adamw_update(params, grads, st, 0.1, b1=0.9, b2=0.999, eps=1e-8,
                               weight_decay=0.01)
  # First step: m/(1-b1) = g, v/(1-b2) = g^2, so the update is lr * (g/(|g|+eps) + wd * w).
  want = w - 0.1 * (g / (np.abs(g) + 1e-8) + 0.01 * w)
  np.testing.assert_allclose(np.asarray(new["w"]), want, rtol=1e-5, atol=1e-6)
  assert new["w"].sharding.spec == P("x")
  assert int(st.count) == 1
  assert optim.warmup_cosine(0, 1.0, 10, 100) < optim.warmup_cosine(9, 1.0, 10, 100)
