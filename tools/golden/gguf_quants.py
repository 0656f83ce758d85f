#!/usr/bin/env python3
"""Golden data for partix's GGUF reader on every tensor type it dequantizes.

Writes, with the PyPI `gguf` package (the llama.cpp project's Python reader/writer) as the
independent reference:
  tests/io/golden/quants.gguf  a small GGUF (v3, general.alignment = 64) holding one tensor
                               of each type F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q6_K (random
                               blocks with sane scales), one Q5_K tensor (a type partix
                               refuses), and metadata of every value type;
  tests/io/golden/quants.json  what gguf-py reads back: the metadata values, and each tensor's
                               row-major shape and dequantized values (float32).

Run from the repository root in a venv with gguf and numpy:
  python tools/golden/gguf_quants.py
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

OUT_DIR = os.path.join("tests", "io", "golden")
rng = np.random.default_rng(1234)

# (name, type, row-major shape): rows of whole blocks; one 3-D tensor checks the dims order.
TENSORS = [
    ("f32_3d", T.F32, (2, 3, 8)),
    ("f16", T.F16, (4, 16)),
    ("bf16", T.BF16, (4, 16)),
    ("q8_0", T.Q8_0, (4, 64)),
    ("q4_0", T.Q4_0, (4, 64)),
    ("q4_1", T.Q4_1, (4, 64)),
    ("q4_k", T.Q4_K, (2, 512)),
    ("q6_k", T.Q6_K, (2, 512)),
    ("q5_k_unsupported", T.Q5_K, (1, 256)),
]

# Byte offsets of the f16 scale fields inside each block: random bytes there could be
# NaN or inf, so they get small normal values instead.
HALF_FIELDS = {
    T.Q8_0: [0],
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}


def random_blocks(qtype, rows, cols):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = rows * cols // block_elems
    raw = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
    for off in HALF_FIELDS[qtype]:
        h = (rng.standard_normal(nblocks) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(rows, cols // block_elems * block_bytes)


def main():
    path = os.path.join(OUT_DIR, "quants.gguf")
    w = gguf.GGUFWriter(path, arch="partix-test")
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_uint64("test.u64", 2**40 + 3)
    w.add_int64("test.i64", -(2**40) - 3)
    w.add_float32("test.f32", 0.1)
    w.add_float64("test.f64", 1e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo, 世界")
    w.add_array("test.strings", ["a", "", "ü"])
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.floats", [0.5, -1.25])
    w.add_array("test.nested", [[1, 2], [3]])

    expected = {"tensors": {}}
    for name, qtype, shape in TENSORS:
        rows = int(np.prod(shape[:-1]))
        if qtype in (T.F32, T.F16):
            data = rng.standard_normal(shape).astype(np.float32 if qtype == T.F32 else np.float16)
            w.add_tensor(name, data)
            raw_bytes = data.view(np.uint8).reshape(-1)
        elif qtype == T.BF16:
            vals = rng.standard_normal(shape).astype(np.float32)
            raw = gguf.quantize(vals, T.BF16)  # uint8 bytes, round to nearest even
            w.add_tensor(name, raw, raw_dtype=T.BF16)  # the writer derives the shape from bytes
            raw_bytes = raw.reshape(-1)
        else:
            raw = random_blocks(qtype, rows, shape[-1])
            w.add_tensor(name, raw, raw_dtype=qtype)
            raw_bytes = raw.reshape(-1)
        entry = {"type": qtype.name, "shape": list(shape)}
        if qtype != T.Q5_K:
            values = gguf.dequantize(raw_bytes, qtype).astype(np.float32).reshape(-1)
            assert values.size == int(np.prod(shape)) and np.all(np.isfinite(values))
            entry["values"] = [float(f"{v:.9g}") for v in values]  # float32 round-trips in 9 digits
        expected["tensors"][name] = entry
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # What gguf-py's reader makes of the file: the metadata and the tensor order.
    r = gguf.GGUFReader(path)
    md = {}
    for key, field in r.fields.items():
        if not key.startswith("test.") and key != "general.alignment":
            continue
        if key == "test.nested":
            md[key] = [[1, 2], [3]]  # gguf-py's reader has no accessor for nested arrays
            continue
        v = field.contents()
        md[key] = v
    expected["metadata"] = md
    expected["tensor_order"] = [t.name for t in r.tensors]
    expected["alignment"] = 64
    expected["version"] = int(r.fields["GGUF.version"].contents())
    with open(os.path.join(OUT_DIR, "quants.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes) and quants.json", file=sys.stderr)


if __name__ == "__main__":
    main()
