"""Each program in examples/python runs as a user runs it (python <file>, 8 devices) and checks
its own result; here its exit status and the line saying so."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")
NAMES = ["sharded_matmul", "sharding_constraint", "shard_map_collectives", "collective_matmul",
         "moe_all_to_all", "gpt2_train", "llama_generate", "nnx_transformer"]


def _run(name):
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="8")
  return subprocess.run([sys.executable, os.path.join(EXAMPLES, name + ".py")], env=env,
                        capture_output=True, text=True, timeout=300)


def test_every_example_is_tested():
  found = sorted(f[:-3] for f in os.listdir(EXAMPLES) if f.endswith(".py"))
  assert found == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_example_runs(name):
  r = _run(name)
  assert r.returncode == 0, f"{name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
  if name == "llama_generate" and r.stdout.startswith("SKIP"):
    pytest.skip(r.stdout.strip())
  assert f"OK {name}" in r.stdout
  if name == "sharded_matmul":
    assert "all_reduce(" in r.stdout and "axes=['y']" in r.stdout
  if name == "llama_generate":
    assert "Paris" in r.stdout
  if name == "gpt2_train":
    assert "step 11 loss" in r.stdout
  if name == "nnx_transformer":
    losses = [float(l.split()[-1]) for l in r.stdout.splitlines() if l.startswith("step ")]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.5, losses
    assert "restored 19 leaves onto 2x4, equal" in r.stdout
    assert "plan: per-device arguments" in r.stdout and " peak " in r.stdout
    assert "plan: all_reduce" in r.stdout and "sent per device per step" in r.stdout
