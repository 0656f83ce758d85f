#!/usr/bin/env python3
"""safetensors interoperability with Hugging Face's reference implementation (PyPI
`safetensors`, the Rust reader/writer).

  python tools/golden/safetensors_hf.py
      writes tests/io/golden/hf_written.safetensors with Hugging Face's writer (one tensor of
      each dtype partix loads, one U64 tensor it refuses, a scalar and an empty tensor) and
      tests/io/golden/hf_written.json with the values as Python numbers.
  python tools/golden/safetensors_hf.py --check FILE
      reads a file partix wrote (save_safetensors) with Hugging Face's reader and prints
      every tensor's dtype, shape and first values; fails if the reader rejects the file.
"""
import json
import os
import sys

import numpy as np
from safetensors import TensorSpec, safe_open, serialize_file

OUT_DIR = os.path.join("tests", "io", "golden")


def bf16_bytes(values):
    """float32 -> bfloat16 bits with round to nearest even (numpy has no bfloat16)."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16), (rounded.astype(np.uint32) << 16).view(np.float32)


def write_golden():
    rng = np.random.default_rng(5)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f16 = rng.standard_normal((2, 3, 2)).astype(np.float16)
    f64 = rng.standard_normal((4,)) * 1e5
    i32 = rng.integers(-2**31, 2**31, size=(2, 4), dtype=np.int32)
    i64 = np.array([2**40 + 1, -(2**40), 7], dtype=np.int64)
    boolean = np.array([[True, False, False], [True, True, False]])
    u8 = np.array([[0, 1, 255], [128, 7, 200]], dtype=np.uint8)
    i8 = np.array([-128, 127, -1, 5], dtype=np.int8)
    i16 = np.array([-32768, 32767, 12345], dtype=np.int16)
    u16 = np.array([65535, 0, 40000], dtype=np.uint16)
    u32 = np.array([4294967295, 2**31, 3], dtype=np.uint32)
    u64 = np.arange(6, dtype=np.uint64).reshape(2, 3)
    bf_raw, bf_vals = bf16_bytes(rng.standard_normal((3, 2)))
    scalar = np.array(3.25, dtype=np.float32)
    empty = np.zeros((0, 4), dtype=np.float32)

    tensors = {
        "f32": ("F32", f32), "f16": ("F16", f16), "f64": ("F64", f64), "i32": ("I32", i32),
        "i64": ("I64", i64), "bool": ("BOOL", boolean), "u8": ("U8", u8), "i8": ("I8", i8),
        "i16": ("I16", i16), "u16": ("U16", u16), "u32": ("U32", u32), "u64": ("U64", u64),
        "scalar": ("F32", scalar), "empty": ("F32", empty),
    }
    arrays = {k: np.require(a, requirements="C") for k, (_, a) in tensors.items()}  # keeps 0-d
    flat = {k: TensorSpec(dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data,
                          data_len=a.nbytes) for k, a in arrays.items()}
    bf_raw = np.ascontiguousarray(bf_raw.reshape(3, 2))
    flat["bf16"] = TensorSpec(dtype="bfloat16", shape=[3, 2], data_ptr=bf_raw.ctypes.data,
                              data_len=bf_raw.nbytes)
    path = os.path.join(OUT_DIR, "hf_written.safetensors")
    serialize_file(flat, path, metadata={"producer": "huggingface safetensors"})

    golden = {"metadata": {"producer": "huggingface safetensors"}, "tensors": {}}
    for k, (dt, a) in tensors.items():
        e = {"dtype": dt, "shape": list(a.shape)}
        if dt != "U64":
            e["values"] = [float(v) if dt != "BOOL" else int(v) for v in a.reshape(-1)]
        golden["tensors"][k] = e
    golden["tensors"]["bf16"] = {"dtype": "BF16", "shape": [3, 2],
                                 "values": [float(v) for v in bf_vals.reshape(-1)]}
    # Hugging Face's own reader agrees with what was written.
    with safe_open(path, framework="numpy") as f:
        assert sorted(f.keys()) == sorted(golden["tensors"]), f.keys()
    with open(os.path.join(OUT_DIR, "hf_written.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {path} and hf_written.json", file=sys.stderr)


def check(path):
    with safe_open(path, framework="numpy") as f:
        print("metadata:", f.metadata())
        for k in sorted(f.keys()):
            try:
                a = f.get_tensor(k)
                print(f"{k}: {a.dtype} {list(a.shape)} {a.reshape(-1)[:6].tolist()}")
            except TypeError:  # numpy has no bfloat16: the slice API still reads the header
                s = f.get_slice(k)
                print(f"{k}: {s.get_dtype()} {s.get_shape()} (no numpy dtype)")
    print("ok: Hugging Face safetensors reads", path)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        write_golden()
