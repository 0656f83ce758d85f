"""GPT-2 tiny trained from Python with optax's AdamW (unmodified, through partix.as_jax) gives
the losses of partix's own training step, on 8 devices (bench/py_gpt2_optax.py, run short)."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_optax_adamw_matches_partix_train_step():
  if importlib.util.find_spec("optax") is None:
    pytest.skip("optax is not installed (scripts/setup.sh installs it)")
  p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "py_gpt2_optax.py"),
                      "--steps", "4", "--rounds", "1"],
                     env=dict(os.environ, PARTIX_NUM_CPU_DEVICES="8"), capture_output=True,
                     text=True, timeout=300)
  assert p.returncode == 0, p.stdout + p.stderr
  worst = float(p.stdout.split("largest loss difference ")[1].split()[0])
  assert worst < 1e-4, p.stdout
  assert p.stdout.count("step ") >= 4
