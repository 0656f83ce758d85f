#!/usr/bin/env python3
"""Golden data for partix's GGUF reader and tokenizer on the real SmolLM2-135M-Instruct GGUF.

Independent references: the PyPI `gguf` package (llama.cpp's Python reader and dequantizer)
for metadata and tensors; Hugging Face `tokenizers` (the Rust implementation) for token ids;
`transformers` (AutoTokenizer with gguf_file=..., which needs torch) and jinja2 for the chat
template. Writes tests/io/golden/smollm2_gguf.json (small: slices and checksums only).

The model is fetched by scripts/fetch_smollm2.sh. Run from the repository root, in a venv
outside the repository (pip install gguf numpy tokenizers transformers torch jinja2):
  python tools/golden/gguf_smollm2.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]

Tokenizer note: SmolLM2's own tokenizer.json pre-tokenizes with
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]
(llama.cpp's "smollm" pre-tokenizer does the same). transformers' GGUF loader does not know
"smollm" and falls back to plain GPT-2 splitting, which differs on digit runs; both id lists
are recorded ("ids" is the model's real tokenization, "ids_transformers_gguf" the other),
and the script checks they agree wherever the text has no digits.
"""
import collections
import json
import os
import subprocess
import sys

import numpy as np
import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

OUT = os.path.join("tests", "io", "golden", "smollm2_gguf.json")

SLICE_TENSORS = [
    "token_embd.weight",        # Q8_0
    "blk.0.attn_q.weight",      # Q4_1
    "blk.0.attn_k.weight",      # Q4_1 (GQA: 3 KV heads)
    "blk.0.ffn_down.weight",    # Q4_1
    "blk.29.ffn_gate.weight",   # Q4_1
    "blk.0.attn_norm.weight",   # F32
    "output_norm.weight",       # F32
]

METADATA_KEYS = [
    "general.architecture", "general.name", "general.alignment",
    "llama.block_count", "llama.context_length", "llama.embedding_length",
    "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
    "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "llama.vocab_size",
    "llama.rope.dimension_count", "general.file_type", "general.quantization_version",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template",
]

TEXTS = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How's it going? I'm fine; you'll see -- they've done it.",
    "1234567890 and 3.14159, 1,000,000 apples in 2024",
    "multiple   spaces    here  ",
    "line one\nline two\n\n\tindented\r\nwindows\n",
    "   leading spaces and trailing\n\n",
    "héllo wörld — naïve café, Ünïcödé",
    "日本語のテキスト 你好，世界！ 한국어",
    "emoji 🙂👍🏽 and symbols ©®™ ½ ² ∑",
    "Arabic-Indic digits ٣٤٥ and Roman Ⅳ Ⅻ",
    "def f(x):\n    return x ** 2  # it's squared!!",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more <|im_end|>end",
]

CHATS = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"}],
     "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Hi!"},
                  {"role": "assistant", "content": "Hello."},
                  {"role": "user", "content": "Count: 1 2 3"}],
     "add_generation_prompt": False},
]


def field_value(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.contents()
    return v.item() if hasattr(v, "item") else v


def tensor_entry(t, values):
    v = values.astype(np.float64).reshape(-1)
    f32 = values.astype(np.float32).reshape(-1)
    return {
        "type": t.tensor_type.name,
        "shape": [int(d) for d in reversed(t.shape)],  # gguf-py lists dims fastest first
        "first": [float(f"{x:.9g}") for x in f32[:16]],
        "last": [float(f"{x:.9g}") for x in f32[-16:]],
        "sum": float(v.sum()),
        "sum_sq": float((v * v).sum()),
    }


def hf_tokenizer(reader):
    """The model's tokenizer as Hugging Face tokenizers builds it from the GGUF vocabulary."""
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    types = list(reader.fields["tokenizer.ggml.token_type"].contents())
    merges = [tuple(m.split(" ")) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def transformers_tokenizer(path):
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(os.path.dirname(path),
                                             gguf_file=os.path.basename(path))
    except Exception as e:  # torch missing, or an API change: fall back to jinja2 alone
        print(f"transformers GGUF tokenizer unavailable ({type(e).__name__}: {e})",
              file=sys.stderr)
        return None


def render_chat(template, chat, tf_tok):
    if tf_tok is not None:
        return tf_tok.apply_chat_template(chat["messages"], tokenize=False,
                                          add_generation_prompt=chat["add_generation_prompt"])
    import jinja2
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=chat["messages"],
                                            add_generation_prompt=chat["add_generation_prompt"])


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else subprocess.check_output(
        ["scripts/fetch_smollm2.sh"], text=True).strip().splitlines()[-1]
    r = gguf.GGUFReader(path)
    out = {"file": os.path.basename(path), "size": os.path.getsize(path)}
    out["version"] = int(field_value(r, "GGUF.version"))
    out["metadata"] = {k: field_value(r, k) for k in METADATA_KEYS if k in r.fields}
    tokens = list(r.fields["tokenizer.ggml.tokens"].contents())
    types = list(r.fields["tokenizer.ggml.token_type"].contents())
    merges = list(r.fields["tokenizer.ggml.merges"].contents())
    out["tokenizer"] = {
        "num_tokens": len(tokens), "num_merges": len(merges),
        "first_tokens": tokens[:24], "last_tokens": tokens[-4:],
        "first_merges": merges[:8], "last_merges": merges[-4:],
        "control_ids": [i for i, t in enumerate(types) if t == 3],
    }
    out["type_counts"] = dict(collections.Counter(t.tensor_type.name for t in r.tensors))
    out["tensor_names"] = [t.name for t in r.tensors]

    tensors, checksums = {}, {}
    for t in r.tensors:
        values = gguf.dequantize(t.data, t.tensor_type)
        e = tensor_entry(t, values)
        checksums[t.name] = {"type": e["type"], "shape": e["shape"], "sum": e["sum"],
                             "sum_sq": e["sum_sq"]}
        if t.name in SLICE_TENSORS:
            tensors[t.name] = e
    out["tensors"] = tensors
    out["checksums"] = checksums

    hf = hf_tokenizer(r)
    tf = transformers_tokenizer(path)
    cases = []
    for text in TEXTS:
        enc = hf.encode(text, add_special_tokens=False)
        case = {"text": text, "ids": enc.ids,
                "decoded": hf.decode(enc.ids, skip_special_tokens=False),
                # Piece boundaries (byte offsets) of the pre-tokenizer on the whole text.
                "pieces": [[len(text[:a].encode()), len(text[:b].encode())]
                           for _, (a, b) in hf.pre_tokenizer.pre_tokenize_str(text)]}
        if tf is not None:
            tf_ids = tf.encode(text, add_special_tokens=False)
            case["ids_transformers_gguf"] = tf_ids
            if not any(ch.isdigit() for ch in text) and "<|" not in text:
                assert tf_ids == enc.ids, (text, tf_ids, enc.ids)
        cases.append(case)
    out["texts"] = cases

    template = out["metadata"]["tokenizer.chat_template"]
    chats = []
    for chat in CHATS:
        rendered = render_chat(template, chat, tf)
        chats.append(dict(chat, rendered=rendered,
                          ids=hf.encode(rendered, add_special_tokens=False).ids))
    out["chats"] = chats
    out["references"] = {"gguf": gguf.__version__ if hasattr(gguf, "__version__") else "?",
                         "tokenizers": __import__("tokenizers").__version__,
                         "transformers_gguf_tokenizer": tf is not None}

    with open(OUT, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
