#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/: small valid inputs (a few KB each) that
reach every part of each reader, so the fuzzer starts from deep inside the formats.

Usage: fuzz/make_corpus.py [--model SmolLM2-135M-Instruct.Q4_1.gguf]

With the SmolLM2 GGUF (scripts/fetch_smollm2.sh caches it), slices of the real model are added:
its metadata with a few rows of real quantized tensors, and its first few hundred tokens with
the merges among them. Everything else is built here byte by byte. The output is deterministic.
"""

import argparse
import json
import os
import re
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
DEFAULT_MODEL = Path(os.environ.get("PARTIX_CACHE", Path.home() / ".cache" / "partix")) / \
    "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"

# ---------------------------------------------------------------------------------------------
# GGUF

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FORMAT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
                 U64: "Q", I64: "q", F64: "d"}
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0, GGML_Q4_K, GGML_Q6_K, GGML_BF16 = \
    0, 1, 2, 3, 8, 12, 14, 30
# ggml type: (elements per block, bytes per block)
BLOCKS = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_BF16: (1, 2), GGML_Q4_0: (32, 18),
          GGML_Q4_1: (32, 20), GGML_Q8_0: (32, 34), GGML_Q4_K: (256, 144), GGML_Q6_K: (256, 210)}


def gguf_str(s):
    b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(t, v):
    if t in SCALAR_FORMAT:
        return struct.pack("<" + SCALAR_FORMAT[t], v)
    if t == STRING:
        return gguf_str(v)
    elem, items = v
    out = struct.pack("<IQ", elem, len(items))
    for item in items:
        out += gguf_value(elem, item)
    return out


def gguf_file(kv, tensors, version=3, alignment=32):
    """kv: [(key, type, value)]; arrays are (ARRAY, (elem type, [items])).
    tensors: [(name, dims fastest first, ggml type, data bytes)], laid out in order."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    for key, t, v in kv:
        out += gguf_str(key) + struct.pack("<I", t) + gguf_value(t, v)
    offset, data = 0, b""
    for name, dims, t, payload in tensors:
        elements = 1
        for d in dims:
            elements *= d
        per_block, block_bytes = BLOCKS[t]
        assert len(payload) == elements // per_block * block_bytes, name
        out += gguf_str(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", t, offset)
        data += payload + b"\0" * (-len(payload) % alignment)
        offset = len(data)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def read_gguf(path):
    """(kv {key: (type, value)}, tensors {name: (dims, type, absolute offset)}, bytes)."""
    b = Path(path).read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, b, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v

    def string():
        nonlocal pos
        n = take("Q")
        s = b[pos:pos + n].decode("utf-8", "surrogateescape")
        pos += n
        return s

    def value(t):
        if t in SCALAR_FORMAT:
            return take(SCALAR_FORMAT[t])
        if t == STRING:
            return string()
        elem, n = take("I"), take("Q")
        return (elem, [value(elem) for _ in range(n)])

    assert b[:4] == b"GGUF"
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        key = string()
        t = take("I")
        kv[key] = (t, value(t))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        infos.append((name, dims, take("I"), take("Q")))
    alignment = kv.get("general.alignment", (U32, 32))[1]
    data_start = (pos + alignment - 1) // alignment * alignment
    tensors = {name: (dims, t, data_start + off) for name, dims, t, off in infos}
    return kv, tensors, b


def pattern(n, seed):
    """n deterministic bytes that make finite, varied values in every format."""
    out = bytearray()
    x = seed
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append((x >> 16) & 0x3F)  # small exponents: no inf or nan in f16/bf16/scales
    return bytes(out)


def f32s(values):
    return b"".join(struct.pack("<f", v) for v in values)


# ---------------------------------------------------------------------------------------------
# Byte-level BPE vocabularies (GPT-2's byte to character mapping).


def byte_chars():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def spell(text):
    chars = byte_chars()
    return "".join(chars[b] for b in text.encode())


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def tiny_vocab():
    """Specials, the 256 byte tokens, then tokens made by merges of a few words."""
    tokens = list(SPECIALS) + byte_chars()
    merges = []
    for word in ["Hello", " world", " the", "ing", " 12"]:
        spelled = spell(word)
        left = spelled[0]
        for ch in spelled[1:]:
            merged = left + ch
            merges.append(f"{left} {ch}")
            if merged not in tokens:
                tokens.append(merged)
            left = merged
    tokens.append("<tool>")  # a user-defined added token
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS) - 1) + [4]
    return tokens, types, merges


def tokenizer_kv(tokens, types, merges, pre="smollm", template=CHATML, with_types=True,
                 extra=()):
    kv = [("general.architecture", STRING, "llama"),
          ("tokenizer.ggml.model", STRING, "gpt2")]
    if pre is not None:
        kv.append(("tokenizer.ggml.pre", STRING, pre))
    kv.append(("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)))
    if with_types:
        kv.append(("tokenizer.ggml.token_type", ARRAY, (I32, types)))
    kv += [("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
           ("tokenizer.ggml.bos_token_id", U32, 1),
           ("tokenizer.ggml.eos_token_id", U32, 2),
           ("tokenizer.ggml.padding_token_id", U32, 2),
           ("tokenizer.ggml.unknown_token_id", U32, 0)]
    if template is not None:
        kv.append(("tokenizer.chat_template", STRING, template))
    return kv + list(extra)


def tokenizer_json(tokens, types, merges, digits=False, merges_as_pairs=False, unk=None,
                   ignore_merges=False, add_prefix_space=False):
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3}
             for i, t in enumerate(tokens) if types[i] in (3, 4)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
                  "use_regex": True}
    pre = byte_level
    if digits:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]}
    model = {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": ignore_merges,
             "vocab": {t: i for i, t in enumerate(tokens)},
             "merges": [m.split(" ") for m in merges] if merges_as_pairs else merges}
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None, "pre_tokenizer": pre, "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": model}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


CONFIG_SEPARATOR = "\n#tokenizer_config.json\n"  # as fuzz/tokenizer_json.cpp splits its input


def real_vocab_slice(kv, n):
    """The model's first n tokens and the merges that stay inside them."""
    tokens = kv["tokenizer.ggml.tokens"][1][1][:n]
    types = kv["tokenizer.ggml.token_type"][1][1][:n]
    have = set(tokens)
    merges = [m for m in kv["tokenizer.ggml.merges"][1][1]
              if len(m.split(" ")) == 2 and all(p in have for p in m.split(" "))
              and m.replace(" ", "") in have]
    return tokens, types, merges


# ---------------------------------------------------------------------------------------------
# safetensors


def safetensors_file(entries, metadata=None, pad=True):
    """entries: [(name, dtype, shape, data bytes)] laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


# ---------------------------------------------------------------------------------------------
# Program text


def program_literals(path):
    """Every C++ string literal (adjacent ones joined) in a test source that is a program."""
    src = path.read_text()
    out = []
    for m in re.finditer(r'((?:"(?:[^"\\\n]|\\.)*"\s*)+)', src):
        parts = re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(1))
        text = "".join(parts).encode().decode("unicode_escape")
        if text.startswith("program @") and text.endswith("}\n"):
            out.append(text)
    return out


# Programs as jit(...).lower() prints them: a shard_map with a region and collectives (global
# and per-device text) and a gradient.
TRACED = [
    """\
program @jit mesh<'x': 4, 'y': 2> (%0: f32[8,4] P('x', 'y'), %1: f32[8] P('y')) -> (%4) {
  %2, %3 = shard_map(%0, %1) {in_specs=[P('x', 'y'), P('y')], mesh=mesh<'x': 4, 'y': 2>, out_specs=[P(('x', 'y')), P('y')]} : f32[16] P(('x', 'y')), f32[8] P('y') region {
    program @shard_map_body (%0: f32[2,2] vary('x', 'y'), %1: f32[4] vary('y')) -> (%12, %14) {
      %2 = constant() {value=<f32[]: 2>} : f32[]
      %3 = pvary(%2) {axes=['x','y']} : f32[] vary('x', 'y')
      %4 = mul(%0, %3) : f32[2,2] vary('x', 'y')
      %5 = reduce_sum(%4) {axes=[0]} : f32[2] vary('x', 'y')
      %6 = all_reduce(%5) {axes=['x'], group=4, kind="sum"} : f32[2] vary('y')
      %7 = all_gather(%1) {axes=['y'], axis=0, group=2, tiled=true} : f32[8]
      %8 = pvary(%6) {axes=['x']} : f32[2] vary('x', 'y')
      %9 = ppermute(%8) {axes=['x'], group=4, perm=[0,1,1,2,2,3,3,0]} : f32[2] vary('x', 'y')
      %10 = constant() {value=<f32[]: 1>} : f32[]
      %11 = pvary(%10) {axes=['x','y']} : f32[] vary('x', 'y')
      %12 = add(%9, %11) : f32[2] vary('x', 'y')
      %13 = pvary(%7) {axes=['y']} : f32[8] vary('y')
      %14 = reduce_scatter(%13) {axes=['y'], axis=0, group=2, tiled=true} : f32[4] vary('y')
    }
  }
  %4 = tanh(%2) : f32[16] P(('x', 'y'))
}
""",
    """\
program @jit mesh<'x': 4, 'y': 2> (%0: f32[2,2] P('x', 'y'), %1: f32[4] P('y')) -> (%15) {
  %2 = constant() {value=<f32[]: 2>} : f32[]
  %3 = pvary(%2) {axes=['x','y']} : f32[] vary('x', 'y')
  %4 = mul(%0, %3) : f32[2,2] vary('x', 'y')
  %5 = reduce_sum(%4) {axes=[0]} : f32[2] vary('x', 'y')
  %6 = all_reduce(%5) {axes=['x'], group=4, kind="sum"} : f32[2] vary('y')
  %8 = pvary(%6) {axes=['x']} : f32[2] vary('x', 'y')
  %9 = ppermute(%8) {axes=['x'], group=4, perm=[0,1,1,2,2,3,3,0]} : f32[2] vary('x', 'y')
  %10 = constant() {value=<f32[]: 1>} : f32[]
  %11 = pvary(%10) {axes=['x','y']} : f32[] vary('x', 'y')
  %12 = add(%9, %11) : f32[2] vary('x', 'y')
  %15 = tanh(%12) : f32[2] P(('x', 'y'))
}
""",
    """\
program @jit mesh<> (%0: f32[3,2] P()) -> (%9) {
  %1 = exp(%0) : f32[3,2] P()
  %2 = mul(%1, %0) : f32[3,2] P()
  %3 = reduce_sum(%2) {axes=[0,1]} : f32[] P()
  %4 = constant() {value=<f32[]: 1>} : f32[] P()
  %5 = broadcast_in_dim(%4) {dims=[], shape=[3,2]} : f32[3,2] P()
  %6 = mul(%5, %0) : f32[3,2] P()
  %7 = mul(%5, %1) : f32[3,2] P()
  %8 = mul(%6, %1) : f32[3,2] P()
  %9 = add(%7, %8) : f32[3,2] P()
}
""",
]


# ---------------------------------------------------------------------------------------------


def write(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (folder / name).write_bytes(data)


def gguf_seeds(model):
    write("gguf", "quants.gguf", (ROOT / "tests/io/golden/quants.gguf").read_bytes())
    scalars = [("general.architecture", STRING, "llama"), ("test.u8", U8, 7),
               ("test.i16", I16, -3), ("test.u64", U64, 2**63 + 1), ("test.f64", F64, 0.25),
               ("test.bool", BOOL, True),
               ("test.nested", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["x"])])),
               ("test.floats", ARRAY, (F32, [1.5, -2.0]))]
    write("gguf", "v3_f32_f16.gguf", gguf_file(scalars, [
        ("a", [3, 2], GGML_F32, f32s([1, -2, 3.5, 0, 1e-3, 7])),
        ("b", [4], GGML_F16, pattern(8, 1)),
        ("scalar", [], GGML_F32, f32s([42]))]))
    write("gguf", "v2_aligned64.gguf", gguf_file(
        [("general.alignment", U32, 64), ("general.name", STRING, "v2")], [
            ("q8", [64, 2], GGML_Q8_0, pattern(4 * 34, 2)),
            ("bf16", [8], GGML_BF16, pattern(16, 3)),
            ("q4_0", [32], GGML_Q4_0, pattern(18, 4))], version=2, alignment=64))
    write("gguf", "k_quants.gguf", gguf_file([], [
        ("q4_k", [256], GGML_Q4_K, pattern(144, 5)),
        ("q6_k", [256], GGML_Q6_K, pattern(210, 6)),
        ("q4_1", [32, 2], GGML_Q4_1, pattern(40, 7))]))
    write("gguf", "metadata_only.gguf", gguf_file(scalars + [
        ("test.strings", ARRAY, (STRING, ["a", "", "\u00fc"])),
        ("test.ints", ARRAY, (I64, [1, -2, 3]))], []))
    if model:
        kv, tensors, b = model

        def rows(name, n_rows):
            dims, t, at = tensors[name]
            per_block, block_bytes = BLOCKS[t]
            row = dims[0] // per_block * block_bytes
            return (name, [dims[0], n_rows], t, b[at:at + row * n_rows])

        meta = [(k, t, v) for k, (t, v) in kv.items()
                if not k.startswith("tokenizer.") and (t != ARRAY or len(v[1]) < 16)]
        norm_dims, norm_t, norm_at = tensors["blk.0.attn_norm.weight"]
        write("gguf", "smollm2_slice.gguf", gguf_file(meta, [
            rows("token_embd.weight", 2), rows("blk.0.ffn_down.weight", 1),
            ("blk.0.attn_norm.weight", [64], norm_t, b[norm_at:norm_at + 256])]))


def gguf_tokenizer_seeds(model):
    tokens, types, merges = tiny_vocab()
    write("gguf_tokenizer", "tiny_smollm_pre.gguf", gguf_file(tokenizer_kv(tokens, types, merges),
                                                              []))
    write("gguf_tokenizer", "tiny_gpt2_no_types.gguf", gguf_file(
        tokenizer_kv(tokens, types, merges, pre=None, template=None, with_types=False), []))
    write("gguf_tokenizer", "tiny_other_template.gguf", gguf_file(
        tokenizer_kv(tokens, types, merges, pre="gpt2",
                     template="{{ bos_token }}[INST] {{ m }} [/INST]"), []))
    if model:
        kv = model[0]
        tokens, types, merges = real_vocab_slice(kv, 320)
        write("gguf_tokenizer", "smollm2_vocab_slice.gguf", gguf_file(
            tokenizer_kv(tokens, types, merges, template=kv["tokenizer.chat_template"][1]), []))


def tokenizer_json_seeds(model):
    tokens, types, merges = tiny_vocab()
    write("tokenizer_json", "tiny.json", tokenizer_json(tokens, types, merges))
    write("tokenizer_json", "tiny_digits_pairs_unk.json", tokenizer_json(
        tokens, types, merges, digits=True, merges_as_pairs=True, unk="<|endoftext|>",
        ignore_merges=True, add_prefix_space=True))
    config = {"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
              "pad_token": "<|endoftext|>", "chat_template": CHATML}
    write("tokenizer_json", "tiny_with_config.json",
          tokenizer_json(tokens, types, merges) + CONFIG_SEPARATOR + json.dumps(config))
    named = {"eos_token": "<|endoftext|>",
             "chat_template": [{"name": "default", "template": "{{ m }}"},
                               {"name": "tool_use", "template": "<|im_start|>"}]}
    write("tokenizer_json", "tiny_named_templates.json",
          tokenizer_json(tokens, types, merges, digits=True) + CONFIG_SEPARATOR +
          json.dumps(named))
    if model:
        kv = model[0]
        tokens, types, merges = real_vocab_slice(kv, 320)
        config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                  "chat_template": kv["tokenizer.chat_template"][1]}
        write("tokenizer_json", "smollm2_vocab_slice.json",
              tokenizer_json(tokens, types, merges, digits=True) + CONFIG_SEPARATOR +
              json.dumps(config, ensure_ascii=False))


def safetensors_seeds():
    write("safetensors", "hf_written.safetensors",
          (ROOT / "tests/io/golden/hf_written.safetensors").read_bytes())
    write("safetensors", "every_dtype.safetensors", safetensors_file([
        ("bool", "BOOL", [3], b"\x00\x01\x01"),
        ("bf16", "BF16", [2, 2], pattern(8, 8)),
        ("f16", "F16", [4], pattern(8, 9)),
        ("f32", "F32", [2, 3], f32s([1, -2, 3.5, 0, 1e-3, 7])),
        ("f64", "F64", [2], struct.pack("<dd", 0.5, -1e300)),
        ("i32", "I32", [3], struct.pack("<iii", 1, -2, 2**31 - 1)),
        ("i64", "I64", [2], struct.pack("<qq", 5, -2**63)),
        ("u8", "U8", [2], b"\x07\xff")], metadata={"format": "pt", "note": "seed"}))
    write("safetensors", "scalar_and_empty.safetensors", safetensors_file([
        ("empty", "F32", [0, 3], b""), ("scalar", "F32", [], f32s([2.5])),
        ("row", "I64", [1, 2], struct.pack("<qq", 2**40, -7))], pad=False))


def safetensors_index_seeds():
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                  "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors"}
    write("safetensors_index", "two_shards.json", json.dumps(
        {"metadata": {"total_size": 43, "format": "pt"}, "weight_map": weight_map}, indent=2))
    write("safetensors_index", "one_shard.json", json.dumps(
        {"metadata": None, "weight_map": {"c": "model-00002-of-00002.safetensors"}}))
    write("safetensors_index", "broken_shard.json", json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "e": "broken.safetensors"}}))


def program_text_seeds():
    texts = []
    for source in ["tests/ir/program_text_test.cpp", "tests/spmd/partition_golden_test.cpp",
                   "tests/spmd/sub_axes_test.cpp"]:
        for text in program_literals(ROOT / source):
            if text not in texts:
                texts.append(text)
    texts += TRACED
    for i, text in enumerate(texts):
        write("program_text", f"program_{i:02d}.txt", text)


def checkpoint_data_seeds():
    # Byte 0 picks the restore's sharding; then (16-bit position scaled to the data file, XOR
    # byte, 0 = truncate there) edits. Positions past 0x1000 / size land in the data.
    for mode, name in enumerate(["replicated", "rows", "cols", "grid"]):
        write("checkpoint_data", f"intact_{name}", bytes([mode]))
    write("checkpoint_data", "flip_in_data_rows", bytes([1]) + struct.pack("<HB", 0xF000, 0x10))
    write("checkpoint_data", "flip_in_data_cols", bytes([2]) + struct.pack("<HB", 0xE400, 0x01))
    write("checkpoint_data", "flip_in_header", bytes([0]) + struct.pack("<HB", 0x0040, 0x20))
    write("checkpoint_data", "truncated_grid", bytes([3]) + struct.pack("<HB", 0xE000, 0x00))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL),
                        help="the SmolLM2 GGUF to slice real seeds from (skipped if absent)")
    args = parser.parse_args()
    model = read_gguf(args.model) if Path(args.model).is_file() else None
    if model is None:
        print(f"{args.model} not found: writing the synthetic seeds only")
    gguf_seeds(model)
    gguf_tokenizer_seeds(model)
    tokenizer_json_seeds(model)
    safetensors_seeds()
    safetensors_index_seeds()
    program_text_seeds()
    checkpoint_data_seeds()
    for folder in sorted(CORPUS.iterdir()):
        files = sorted(folder.iterdir())
        print(f"{folder.name}: {len(files)} files, largest {max(f.stat().st_size for f in files)} "
              "bytes")


if __name__ == "__main__":
    main()
