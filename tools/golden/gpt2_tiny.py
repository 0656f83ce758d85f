#!/usr/bin/env python3
"""Reference outputs of a tiny GPT-2 from Hugging Face transformers (PyTorch, float32).

Writes tests/golden/gpt2_tiny/:
  config.json, model.safetensors  the model, as save_pretrained writes it (HF layout)
  golden.safetensors              ids, targets, logits, loss and the gradient of every parameter
                                  (HF names and layouts) of the mean next-token cross entropy

Regenerate (outside the repository's tree for the environment):
  python3 -m venv ~/.cache/partix/golden-venv
  ~/.cache/partix/golden-venv/bin/pip install torch transformers safetensors numpy
  ~/.cache/partix/golden-venv/bin/python tools/golden/gpt2_tiny.py
"""
import os

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "gpt2_tiny")


def main():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5,
                        bos_token_id=255, eos_token_id=255)
    model = GPT2LMHeadModel(config).float()
    # Non-trivial biases and LayerNorm parameters, so a test that ignores them fails.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn_like(p) * 0.1)
            elif ".ln_" in name and name.endswith(".weight"):
                p.copy_(1.0 + torch.randn_like(p) * 0.1)
    model.eval()
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)

    rng = np.random.default_rng(0)
    seq = rng.integers(0, 256, size=(2, 17))
    ids = torch.tensor(seq[:, :-1], dtype=torch.int64)
    targets = torch.tensor(seq[:, 1:], dtype=torch.int64)
    logits = model(ids).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
    loss.backward()
    golden = {
        "ids": ids.to(torch.int32),
        "targets": targets.to(torch.int32),
        "logits": logits.detach().contiguous(),
        "loss": loss.detach().reshape(()),
    }
    for name, p in model.named_parameters():
        golden["grad." + name] = p.grad.detach().contiguous()
    save_file(golden, os.path.join(OUT, "golden.safetensors"))
    print("loss", float(loss), "->", os.path.abspath(OUT))


if __name__ == "__main__":
    main()
