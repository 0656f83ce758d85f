#!/usr/bin/env python3
"""SmolLM2-135M-Instruct generation, partix vs JAX: prefill and decode tokens/s.

Commands (from the repository root; JAX lives in a venv outside the repo):

  ~/.cache/partix-jax-venv/bin/pip install jax gguf numpy
  scripts/fetch_smollm2.sh                  # the Q4_1 GGUF in ~/.cache/partix/smollm2/
  BUILD_DIR=build scripts/build.sh          # builds build/bin/partix_bench_llama_generate
  ~/.cache/partix-jax-venv/bin/python bench/llama_vs_jax.py --devices 8,1 --reps 7

Results on the 2-core development VM (README "Speed against JAX"): partix/JAX tokens/s,
8 devices: prefill 1.72, decode 3.74; 1 device: prefill 1.78, decode 3.51.

What runs on both sides:
- The same weights: the GGUF dequantized to f32 (here with gguf-py; llama.cpp's rotary row
  order of q/k undone as in src/models/llama/loader.cpp), in partix's head-major layouts:
  q/k/v [H, D, C] with each key/value head repeated for its query heads, o [C, H, D].
- The same tensor-parallel sharding on a 1-D mesh 'model' (llama::sharding_rules): q/k/v,
  gate, up column-parallel, o and down row-parallel, embedding (tied lm_head) vocab-parallel,
  KV cache [B, H, S, D] split over heads. H = 9 does not divide over 8 devices: partix stores
  uneven blocks padded (2 heads per device, 16 in all, the last devices computing on padding);
  JAX requires even shardings, so its model gets 7 zero heads (16 in all) -- the same
  per-device shapes and the same results.
- The same program: one jitted step for prefill (T = prompt length) and decode (T = 1):
  embeddings, 30 layers (RMSNorm, RoPE, attention over the whole cache with a mask, SwiGLU),
  greedy argmax in the program; the cache is donated and updated in place. Both sides copy
  the token to the host after every step (streaming), and time only execution: each side is
  warmed up (compiled) first. Cache length = prompt + new tokens rounded up to 16, as partix.
- The same prompt (ChatML of --prompt, token ids from partix's tokenizer) and exactly
  --max-tokens new tokens (EOS does not stop either side); the script checks that the
  greedy tokens agree.
Repetitions alternate the two systems (the partix process stays alive between them) and the
table reports medians, with min..max, of tokens/s and of the per-repetition ratio.
XLA runs on the CPU with 8 forced host devices (XLA_FLAGS); the 1-device case uses one of them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(
    os.environ.get("PARTIX_CACHE", os.path.expanduser("~/.cache/partix")),
    "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


# ---- weights -------------------------------------------------------------------------------

class Config:
    pass


def load_gguf(path):
    """Config and Hugging Face named f32 weights (q/k rows in Hugging Face order)."""
    import gguf
    r = gguf.GGUFReader(path)

    def field(name, default=None):
        f = r.fields.get(name)
        return default if f is None else f.contents()

    c = Config()
    c.hidden = int(field("llama.embedding_length"))
    c.inter = int(field("llama.feed_forward_length"))
    c.layers = int(field("llama.block_count"))
    c.heads = int(field("llama.attention.head_count"))
    c.kv_heads = int(field("llama.attention.head_count_kv", c.heads))
    c.head_dim = int(field("llama.rope.dimension_count", c.hidden // c.heads))
    c.eps = float(field("llama.attention.layer_norm_rms_epsilon", 1e-5))
    c.theta = float(field("llama.rope.freq_base", 10000.0))
    c.vocab = int(field("llama.vocab_size"))
    assert field("llama.rope.scaling.type", "") != "llama3", "llama3 rope scaling not mirrored"
    tensors = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        tensors[t.name] = w.reshape([int(d) for d in reversed(list(t.shape))])
    assert "output.weight" not in tensors, "untied lm_head not mirrored"
    return c, tensors


def head_major(c, g, pad_heads):
    """partix's layouts (src/models/llama/loader.cpp), heads zero-padded to pad_heads."""
    H, KV, D, C = c.heads, c.kv_heads, c.head_dim, c.hidden
    G = H // KV

    def heads_of(w, n, interleaved):  # [n*D, C] -> [n, D, C]
        if not interleaved:
            return w.reshape(n, D, C)
        return w.reshape(n, D // 2, 2, C).transpose(0, 2, 1, 3).reshape(n, D, C)

    def pad0(w, axis):
        extra = pad_heads - w.shape[axis]
        if extra == 0:
            return w
        widths = [(0, 0)] * w.ndim
        widths[axis] = (0, extra)
        return np.pad(w, widths)

    p = {"embed": g["token_embd.weight"], "norm": g["output_norm.weight"], "layers": []}
    for i in range(c.layers):
        b = f"blk.{i}."
        q = heads_of(g[b + "attn_q.weight"], H, True)
        k = np.repeat(heads_of(g[b + "attn_k.weight"], KV, True), G, axis=0)
        v = np.repeat(heads_of(g[b + "attn_v.weight"], KV, False), G, axis=0)
        o = g[b + "attn_output.weight"].reshape(C, H, D)
        p["layers"].append({
            "ln1": g[b + "attn_norm.weight"], "ln2": g[b + "ffn_norm.weight"],
            "q": pad0(q, 0), "k": pad0(k, 0), "v": pad0(v, 0), "o": pad0(o, 1),
            "gate": g[b + "ffn_gate.weight"], "up": g[b + "ffn_up.weight"],
            "down": g[b + "ffn_down.weight"],
        })
    return p


def param_specs(p):
    """llama::sharding_rules('model') on the tree above."""
    layer = {"ln1": P(), "ln2": P(), "q": P("model"), "k": P("model"), "v": P("model"),
             "o": P(None, "model"), "gate": P("model"), "up": P("model"),
             "down": P(None, "model")}
    return {"embed": P("model"), "norm": P(), "layers": [dict(layer) for _ in p["layers"]]}


# ---- model (mirrors src/models/llama/llama.cpp) -------------------------------------------

def rms_norm(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, cos, sin):  # x [B, T, H, D], angles [B, T, D/2]
    D = x.shape[3]
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=3)


def make_step(c, mesh):
    head = NamedSharding(mesh, P(None, "model"))

    def step(p, tokens, pos, start, ck, cv):
        B, T = tokens.shape
        S = ck[0].shape[2]
        D = c.head_dim
        steps = jnp.arange(T, dtype=jnp.int32)[None, :] + pos            # [B, T]
        rel = steps - start[:, None]
        inv = 1.0 / (c.theta ** (np.arange(0, D, 2, dtype=np.float64) / D))
        angles = rel.astype(jnp.float32)[:, :, None] * jnp.asarray(inv, jnp.float32)
        cos_a, sin_a = jnp.cos(angles), jnp.sin(angles)
        slot = jnp.arange(S, dtype=jnp.int32)[None, None, :]
        visible = (slot <= steps[:, :, None]) & (slot >= start[:, None, None])
        mask = visible[:, None]                                            # [B, 1, T, S]
        x = jnp.take(p["embed"], tokens, axis=0)                           # [B, T, C]
        nk, nv = [], []
        for i, l in enumerate(p["layers"]):
            h = rms_norm(x, l["ln1"], c.eps)
            q = rope(jnp.einsum("btc,hdc->bthd", h, l["q"]), cos_a, sin_a)
            k = rope(jnp.einsum("btc,hdc->bthd", h, l["k"]), cos_a, sin_a)
            v = jnp.einsum("btc,hdc->bthd", h, l["v"])
            zero = jnp.int32(0)
            k_i = jax.lax.dynamic_update_slice(ck[i], k.transpose(0, 2, 1, 3), (zero, zero, pos, zero))
            v_i = jax.lax.dynamic_update_slice(cv[i], v.transpose(0, 2, 1, 3), (zero, zero, pos, zero))
            k_i = jax.lax.with_sharding_constraint(k_i, head)
            v_i = jax.lax.with_sharding_constraint(v_i, head)
            scores = jnp.einsum("bthd,bhsd->bhts", q, k_i) * (1.0 / np.sqrt(D))
            probs = jax.nn.softmax(jnp.where(mask, scores, -1e30), axis=-1)
            o = jnp.einsum("bhts,bhsd->bthd", probs, v_i)
            x = x + jnp.einsum("bthd,chd->btc", o, l["o"])
            h2 = rms_norm(x, l["ln2"], c.eps)
            g = jnp.einsum("btc,fc->btf", h2, l["gate"])
            u = jnp.einsum("btc,fc->btf", h2, l["up"])
            x = x + jnp.einsum("btf,cf->btc", jax.nn.silu(g) * u, l["down"])
            nk.append(k_i)
            nv.append(v_i)
        x = rms_norm(x, p["norm"], c.eps)
        logits = jnp.einsum("btc,vc->btv", x, p["embed"])[:, T - 1]        # [B, V]
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), nk, nv

    return step


class JaxLlama:
    def __init__(self, c, g, n):
        self.c = c
        devs = np.array(jax.devices()[:n])
        self.mesh = Mesh(devs, ("model",))
        self.hp = -(-c.heads // n) * n  # heads padded to a multiple of n (partix's blocks)
        p = head_major(c, g, self.hp)
        specs = param_specs(p)
        shard = jax.tree.map(lambda s: NamedSharding(self.mesh, s), specs,
                             is_leaf=lambda s: isinstance(s, P))
        self.params = jax.device_put(p, shard)
        self.rep = NamedSharding(self.mesh, P())
        self.head = NamedSharding(self.mesh, P(None, "model"))
        cache_sh = [self.head] * c.layers
        self.step = jax.jit(make_step(c, self.mesh),
                            in_shardings=(shard, self.rep, self.rep, self.rep, cache_sh, cache_sh),
                            out_shardings=(self.rep, cache_sh, cache_sh),
                            donate_argnums=(4, 5))

    def cache(self, B, S):
        z = lambda: jax.device_put(np.zeros((B, self.hp, S, self.c.head_dim), np.float32), self.head)
        return [z() for _ in range(self.c.layers)], [z() for _ in range(self.c.layers)]

    def generate(self, ids, max_tokens):
        B, Tp = 1, len(ids)
        S = (Tp + max_tokens + 15) // 16 * 16
        ck, cv = self.cache(B, S)
        start = jax.device_put(np.zeros((B,), np.int32), self.rep)
        tokens = jax.device_put(np.asarray([ids], np.int32), self.rep)
        pos = lambda q: jax.device_put(np.int32(q), self.rep)
        t0 = time.perf_counter()
        nxt, ck, cv = self.step(self.params, tokens, pos(0), start, ck, cv)
        cur = np.asarray(nxt)
        prefill_s = time.perf_counter() - t0
        out = [int(cur[0])]
        t1 = time.perf_counter()
        for s in range(max_tokens - 1):
            tok = jax.device_put(cur.reshape(B, 1).astype(np.int32), self.rep)
            nxt, ck, cv = self.step(self.params, tok, pos(Tp + s), start, ck, cv)
            cur = np.asarray(nxt)
            out.append(int(cur[0]))
        decode_s = time.perf_counter() - t1
        return {"prefill_tok_s": B * Tp / prefill_s,
                "decode_tok_s": B * (max_tokens - 1) / decode_s if max_tokens > 1 else 0.0,
                "tokens": out}


# ---- partix (a long-lived process driven over stdin) ---------------------------------------

class Partix:
    def __init__(self, binary, devices, max_tokens, prompt, model):
        cmd = [binary, "--devices", str(devices), "--max-tokens", str(max_tokens),
               "--prompt", prompt, "--model", model]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        self.prompt_ids = self._read()["prompt_ids"]

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("partix bench exited: " + str(self.p.wait()))
        return json.loads(line)

    def generate(self):
        self.p.stdin.write("run\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait()


def spread(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}..{max(xs):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partix", default=os.path.join(ROOT, "build/bin/partix_bench_llama_generate"))
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--devices", default="8,1")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt", default="What is the capital of France?")
    ap.add_argument("--json", action="store_true", help="print every repetition")
    a = ap.parse_args()
    c, g = load_gguf(a.model)
    rows = []
    for n in [int(x) for x in a.devices.split(",")]:
        px = Partix(a.partix, n, a.max_tokens, a.prompt, a.model)
        jx = JaxLlama(c, g, n)
        # Warm up (compiles both shapes on both sides) and check the greedy tokens agree.
        rp, rj = px.generate(), jx.generate(px.prompt_ids, a.max_tokens)
        if rp["tokens"] != rj["tokens"]:
            print(f"[{n} devices] greedy tokens differ:\n partix {rp['tokens']}\n jax    {rj['tokens']}",
                  file=sys.stderr)
            sys.exit(1)
        res = {"partix": [], "jax": []}
        for r in range(a.reps):
            order = [("partix", px.generate), ("jax", lambda: jx.generate(px.prompt_ids, a.max_tokens))]
            if r % 2:
                order.reverse()
            for name, fn in order:
                out = fn()
                res[name].append(out)
                if a.json:
                    print(json.dumps({"devices": n, "system": name, **out}))
        px.close()
        for phase in ("prefill", "decode"):
            pv = [x[phase + "_tok_s"] for x in res["partix"]]
            jv = [x[phase + "_tok_s"] for x in res["jax"]]
            ratio = [p / j for p, j in zip(pv, jv)]
            rows.append((n, phase, spread(pv), spread(jv),
                         f"{statistics.median(ratio):.2f} ({min(ratio):.2f}..{max(ratio):.2f})"))
        del jx
    print(f"\nSmolLM2-135M f32, prompt {len(px.prompt_ids)} tokens, {a.max_tokens} new tokens, "
          f"greedy, {a.reps} alternating repetitions: median (min..max)")
    print(f"| devices | phase | partix tok/s | JAX tok/s | partix/JAX |")
    print(f"|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


if __name__ == "__main__":
    main()
