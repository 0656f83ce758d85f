# Two safetensors files of f32 tensors hold the same tensors, equal within a tolerance relative
# to each tensor's largest value: safetensors_close.py A B TOLERANCE (no numpy needed).
import json, struct, sys, array
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); base = 8 + n; out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        assert v['dtype'] == 'F32', v['dtype']
        s, e = v['data_offsets']; a = array.array('f'); a.frombytes(b[base + s:base + e]); out[k] = a
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (a.keys() ^ b.keys())
worst = 0.0
for k in a:
    assert len(a[k]) == len(b[k]), k
    scale = max(1e-6, max(abs(x) for x in a[k]))
    worst = max(worst, max(abs(x - y) for x, y in zip(a[k], b[k])) / scale)
print(f"{len(a)} tensors, largest difference {worst:.2e} of each tensor's largest value")
sys.exit(0 if worst <= float(sys.argv[3]) else 1)
