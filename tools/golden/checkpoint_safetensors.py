#!/usr/bin/env python3
"""Opens a partix checkpoint step with Hugging Face's safetensors reader (PyPI `safetensors`,
the Rust implementation) and checks it against the step's index.json.

  python tools/golden/checkpoint_safetensors.py STEP_DIR

For every data file the index lists: the reader opens it; the tensors it holds are exactly the
chunks the index places in it; each chunk's dtype and shape (its box's extent) are what the
reader reports; the chunk's byte range is where the reader finds its data (for dtypes numpy
has, the reader's array equals the bytes at that range, and the index's XXH64 of each block
is checked over them). Prints one line per file and exits non-zero on the first disagreement.

Exit status 77 when the safetensors package is missing (the test suite reports a skip).
"""
import json
import os
import sys

try:
    import numpy as np
    from safetensors import safe_open
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e}")
    sys.exit(77)

# index dtype -> (safetensors dtype, numpy dtype or None when numpy has none)
DTYPES = {
    "F32": ("F32", np.float32), "F64": ("F64", np.float64), "F16": ("F16", np.float16),
    "BF16": ("BF16", None), "I8": ("I8", np.int8), "I16": ("I16", np.int16),
    "I32": ("I32", np.int32), "I64": ("I64", np.int64), "U8": ("U8", np.uint8),
    "BOOL": ("BOOL", np.bool_),
}

# Quantized leaves are stored as their raw GGUF blocks, U8 rows: (elements, bytes) per block.
QUANT_BLOCKS = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q4_K": (256, 144),
                "Q6_K": (256, 210)}

M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def xxh64(data, seed=0):
    """XXH64 from its specification (pure Python; checkpoint chunks here are small)."""
    n = len(data)
    i = 0

    def rnd(acc, lane):
        acc = (acc + lane * P2) & M64
        return (rotl(acc, 31) * P1) & M64

    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed & M64, (seed - P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], int.from_bytes(data[i:i + 8], "little"))
                i += 8
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for k in range(4):
            h = ((h ^ rnd(0, v[k])) * P1 + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= rnd(0, int.from_bytes(data[i:i + 8], "little"))
        h = (rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * P1) & M64
        h = (rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


def fail(msg):
    print(f"FAILED: {msg}")
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    step = sys.argv[1]
    with open(os.path.join(step, "index.json")) as f:
        index = json.load(f)
    by_file = {name: {} for name in index["files"]}
    for leaf in index["leaves"]:
        for c in leaf["chunks"]:
            by_file[c["file"]][c["tensor"]] = (leaf, c)
    for name, chunks in by_file.items():
        path = os.path.join(step, name)
        raw = open(path, "rb").read()
        with safe_open(path, framework="numpy") as f:
            keys = set(f.keys())
            if keys != set(chunks):
                fail(f"{name}: the reader sees {sorted(keys)}, the index {sorted(chunks)}")
            checked = 0
            for tensor, (leaf, c) in chunks.items():
                shape = list(c["extent"])
                if leaf["dtype"] in QUANT_BLOCKS:
                    elems, nbytes = QUANT_BLOCKS[leaf["dtype"]]
                    shape[-1] = shape[-1] // elems * nbytes
                    st_dtype, np_dtype = DTYPES["U8"]
                else:
                    st_dtype, np_dtype = DTYPES[leaf["dtype"]]
                s = f.get_slice(tensor)
                if s.get_dtype() != st_dtype or list(s.get_shape()) != shape:
                    fail(f"{name}: {tensor}: reader has {s.get_dtype()} {s.get_shape()}, "
                         f"index {leaf['dtype']} {c['extent']}")
                begin, end = c["byte_range"]
                data = raw[begin:end]
                # Version 2: one XXH64 per block of xxh64_block bytes; version 1: one in all.
                block = c.get("xxh64_block", len(data)) if index["version"] >= 2 else len(data)
                block = min(block, len(data))
                hashes = c["xxh64"]
                starts = range(0, len(data), block)
                if len(hashes) != 16 * len(starts):
                    fail(f"{name}: {tensor}: {len(hashes) // 16} checksums for "
                         f"{len(starts)} blocks")
                for i, at in enumerate(starts):
                    if xxh64(data[at:at + block]) != int(hashes[16 * i:16 * i + 16], 16):
                        fail(f"{name}: {tensor}: XXH64 of bytes [{begin + at}, "
                             f"{min(end, begin + at + block)}) differs")
                if np_dtype is not None:
                    a = f.get_tensor(tensor)
                    if a.dtype != np_dtype or a.tobytes() != data:
                        fail(f"{name}: {tensor}: the reader's data is not bytes [{begin}, {end})")
                    checked += 1
            print(f"{name}: {len(chunks)} chunks opened by safetensors "
                  f"{'' if checked == len(chunks) else f'({checked} compared as arrays) '}"
                  f"agree with index.json")


if __name__ == "__main__":
    main()
