"""SmolLM2 generates text with tensor parallelism over 8 devices."""
import os
import sys

import partix as jax
from partix.models import llama

path = llama.default_model_path()
if not os.path.exists(path):
  print(f"SKIP: no model at {path} (scripts/fetch_smollm2.sh downloads it)")
  sys.exit(0)

mesh = jax.make_mesh((8,), ("model",))
model = llama.load(path, mesh, axis="model")
out = model.generate("What is the capital of France?", max_tokens=24, chat=True)
print(out.text)
assert "Paris" in out.text, out.text
print("OK llama_generate")
