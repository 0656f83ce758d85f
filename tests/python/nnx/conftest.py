"""Fixtures of the partix.nnx tests: the golden files and optax (imported with
partix installed under JAX's module names, as partix.as_jax does)."""
import importlib.util
import os

import numpy as np
import pytest

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "golden", "nnx")


@pytest.fixture(scope="session")
def optax():
  if importlib.util.find_spec("optax") is None:
    pytest.skip("optax is not installed (scripts/setup.sh installs it)")
  import partix.as_jax  # noqa: F401  (optax imports jax: partix under JAX's names)
  import optax as _optax
  return _optax


@pytest.fixture(scope="session")
def golden():
  arrays = np.load(os.path.join(GOLDEN, "layers.npz"))
  import json
  with open(os.path.join(GOLDEN, "structure.json")) as f:
    return arrays, json.load(f)
