#!/usr/bin/env python3
"""Reference outputs of SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32) from Hugging
Face transformers (PyTorch), for partix's Llama tests.

Writes tests/golden/smollm2/:
  golden.json         prompts, their token ids, greedy continuations (32 tokens), top-20
                      (id, logit) per position of the plain prompt
  golden.safetensors  the full last-position logits of the chat prompt (float32)

Regenerate:
  scripts/fetch_smollm2.sh          # the GGUF, into ~/.cache/partix/smollm2/
  python3 -m venv ~/.cache/partix/golden-venv
  ~/.cache/partix/golden-venv/bin/pip install torch transformers accelerate gguf safetensors numpy
  ~/.cache/partix/golden-venv/bin/python tools/golden/llama_smollm2.py [path/to/model.gguf]
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "smollm2")
DEFAULT = os.path.expanduser("~/.cache/partix/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    folder, name = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    plain = "The quick brown fox jumps over the lazy dog. Paris is the capital of"
    chat = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   tokenize=False, add_generation_prompt=True)
    out = {"model": name, "prompts": {}}
    tensors = {}
    with torch.no_grad():
        for key, text in (("plain", plain), ("chat", chat)):
            ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
            logits = model(ids).logits[0]
            top = torch.topk(logits, 20, dim=-1)
            gen = model.generate(ids, max_new_tokens=32, do_sample=False, top_p=None, top_k=None,
                                 temperature=None, pad_token_id=tok.eos_token_id,
                                 eos_token_id=-1)  # always 32 tokens
            out["prompts"][key] = {
                "text": text,
                "ids": ids[0].tolist(),
                "top20_ids": top.indices.tolist(),
                "top20_logits": [[round(v, 5) for v in row] for row in top.values.tolist()],
                "greedy32": gen[0, ids.shape[1]:].tolist(),
                "greedy32_text": tok.decode(gen[0, ids.shape[1]:]),
            }
            tensors[key + ".last_logits"] = logits[-1].contiguous()
    cfg = model.config
    out["config"] = {k: getattr(cfg, k) for k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta",
        "tie_word_embeddings", "max_position_embeddings", "bos_token_id", "eos_token_id")
        if hasattr(cfg, k)}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(out, f, indent=1)
    save_file(tensors, os.path.join(OUT, "golden.safetensors"))
    for key in out["prompts"]:
        print(key, repr(out["prompts"][key]["greedy32_text"]))


if __name__ == "__main__":
    main()
