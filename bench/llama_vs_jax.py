#!/usr/bin/env python3
"""SmolLM2-135M-Instruct generation, partix vs JAX: prefill and decode tokens/s.

Commands (from the repository root; JAX lives in a venv outside the repo):

  ~/.cache/partix-jax-venv/bin/pip install jax gguf numpy
  scripts/fetch_smollm2.sh                  # the Q4_1 GGUF in ~/.cache/partix/smollm2/
  BUILD_DIR=build scripts/build.sh          # builds build/bin/partix_bench_llama_generate
  ~/.cache/partix-jax-venv/bin/python bench/llama_vs_jax.py --devices 1,8 --reps 3
  ~/.cache/partix-jax-venv/bin/python bench/llama_vs_jax.py --jax-only --devices 1   # no partix

By default each repetition of each side runs in a fresh process while no other is alive (the
JAX side through this script's --worker mode), repetitions alternating the order, and the
script prints the fraction of the read bandwidth partix's decode reaches; --shared-processes
keeps the older arrangement below (one partix process and JAX in this one, all alive through
every repetition). docs/performance.md has the isolated results.

Results of the older arrangement (--shared-processes), --reps 3, tokens/s medians; "stream" = one jitted step per token, "fori_loop" = all
decode steps in one program. Two 2-core VMs (AMD EPYC): "512" has AVX-512 (this version of
partix), "AVX2" has AVX2 only (before partix ran oneDNN on its own thread team):
  | VM | devices | phase | partix | JAX stream | JAX fori_loop | partix/JAX stream | partix/JAX fori_loop |
  |---|---|---|---|---|---|---|---|
  | 512 | 1 | prefill | 861.2 | 832.0 | 845.9 | 1.00 | 1.02 |
  | 512 | 1 | decode | 58.2 | 55.3 | 56.5 | 1.05 | 1.02 |
  | 512 | 8 | prefill | 417.8 | 483.1 | 473.8 | 0.86 | 0.88 |
  | 512 | 8 | decode | 21.7 | 30.6 | 35.1 | 0.71 | 0.62 |
  | AVX2 | 1 | prefill | 284.1 | 180.6 | 169.7 | 1.57 | 1.67 |
  | AVX2 | 1 | decode | 19.8 | 19.8 | 21.0 | 0.96 | 0.86 |
  | AVX2 | 8 | prefill | 130.3 | 161.7 | 114.3 | 0.96 | 1.14 |
  | AVX2 | 8 | decode | 9.0 | 13.0 | 14.7 | 0.62 | 0.57 |

(prompt 37 tokens, 32 new tokens; per-repetition ranges, e.g. on the AVX2 VM 1-device partix prefill
186..299; JAX's two prefill columns run the same program, their difference is noise.)

What runs on both sides:
- The same weights: the GGUF dequantized to f32. partix loads the file with its own loader
  into its own layouts; this script reads it with gguf-py and lays it out as JAX wants it
  (below). Nothing here depends on partix's internal layouts, only on the GGUF file and on
  the JSON lines of bench/llama_generate_bench.cpp.
- The same computation: embeddings, 30 layers (RMSNorm, RoPE, attention over the whole
  cache with a mask, SwiGLU), final norm, tied lm_head, greedy argmax inside the program;
  the KV cache is donated and updated in place; cache length = prompt + new tokens rounded
  up to 16, as partix. Each side times execution only, after a warm-up run that compiles.
- The same tensor-parallel plan on a 1-D mesh 'model' (llama::sharding_rules): q/k/v, gate,
  up column-parallel, o and down row-parallel, embedding (tied lm_head) vocab-parallel, KV
  cache split over key/value heads.
- The same prompt (ChatML of --prompt, token ids from partix's tokenizer) and exactly
  --max-tokens new tokens (EOS does not stop either side). The warm-up runs compare the
  greedy tokens: they agree exactly on 1, 2 and 8 devices; were f32 rounding to make them
  diverge, the script reports how many agree instead of failing.
Repetitions alternate the systems (the partix process stays alive between them; odd
repetitions run in reverse order) and the table reports medians, with min..max, of tokens/s
and of the per-repetition ratio. partix streams (one step per token, the token copied to the
host each step), so "partix/JAX stream" is the like-for-like ratio; "partix/JAX fori_loop"
compares it with JAX's fastest way to decode. XLA runs on the CPU with 8 forced host devices
(XLA_FLAGS); the 1-device case uses one of them.

The JAX side, as one would write it for JAX:
- Weights are [in, out] f32 matrices (x @ W), transposed once at load in numpy; q/k rows
  are put back in Hugging Face's half-split rotary order (llama.cpp interleaves them).
  Grouped-query attention with the 3 key/value heads as they are (no repeated K/V in the
  weights or the cache): q's columns are ordered [KV, G, D], the G = 3 query heads of a
  key/value head side by side, so a column shard holds whole groups with their K/V head.
- The KV cache of a layer is [KV*B, S, D] (key/value head major) and the G*T query rows of
  a key/value head attend as one [G*T, D] x [D, S] product. (With a [B, KV, S, D] cache
  XLA:CPU transposed V and copied each layer's K and V cache 3-4 times per step to update
  it in place while the attention read it; the 3-D layout needs no copy.)
- The step takes tokens [B, T] at position pos and returns the greedy next token [B, 1]:
  prefill is the step at T = prompt length, decode at T = 1; only the last position goes
  through the final norm and lm_head. (a) stream: the device token feeds the next step and
  is copied to the host after each step; (b) fori_loop: prefill, then all decode steps in
  one jitted lax.fori_loop with the caches in the carry and the tokens gathered on device.
- Uneven heads: JAX requires even shardings, and 3 key/value heads do not divide over 2 or 8
  devices. The model then gets zero key/value heads (with their zero query groups and zero
  rows of o) up to a multiple of the mesh size: 3 -> 4 on 2 devices, 3 -> 8 on 8 devices
  (24 query heads), one key/value head and its 3 query heads per device; zero heads add
  exactly zero. Replicating attention instead would compute all 9 heads on every device,
  8 times the attention work on 8 host devices sharing 2 cores; padding costs 8/3 of it and
  keeps the plan tensor-parallel. 1 and 3 devices need no padding.
- Before timing, the script compiles both decode programs with the run's shapes and counts,
  in the optimized HLO (jax.jit(...).lower(...).compile().as_text()), the copies, transposes
  and all-gathers of arrays of a weight's shape (per device or global), and those of other
  arrays of at least 1024 elements; it prints one line per program (--no-hlo-check skips
  it). Weight-sized: 0 on 1, 2 and 8 devices. Others: 0 on 1 and 2 devices; on 8 XLA copies
  each device's [1, S, D] K and V cache block 8 times per layer per step (the leading 1 is
  bitcast away for the attention product and the in-place update then needs private
  copies): 20 KB blocks, about 5 MB a step against 90 MB of weights per device. The
  collectives on 8 devices are the Megatron ones: 2 all-reduces of [1, 1, 576] per layer,
  one for the embedding, and two tiny all-gathers for the vocab-parallel argmax.

What changed from the previous baseline, and why: it gave JAX partix's head-major layouts
(q/k/v [H, D, C] with each key/value head repeated for its query heads, o [C, H, D]), which
XLA transposed on every step (about 120 copy fusions of attention weights per decode step),
a cache with 9 (repeated) heads, 9 heads zero-padded to 16 on 8 devices, the lm_head over
every prompt position in prefill, and only the streaming mode. Its results (partix/JAX
tokens/s, 8 devices: prefill 1.72, decode 3.74; 1 device: prefill 1.78, decode 3.51) measured
that handicap more than XLA; transposing the weights once at load alone took its 1-device
decode from about 5.7 to 9.6 tokens/s.
"""

import argparse
import json
import os
import re
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


def kv_padding(c, n):
    """Key/value heads after padding: a multiple of the mesh size n (3 stays 3 for n = 1, 3)."""
    return -(-c.kv_heads // n) * n


def jax_layout(c, g, kvp):
    """f32 weights as [in, out] matrices (x @ W), transposed once here in numpy.

    q columns are ordered [KV, G, D]: the G = heads/kv_heads query heads of each key/value
    head side by side, so that a column shard of q holds whole groups with their K/V head.
    Key/value heads beyond c.kv_heads (and their query groups) are zeros.
    """
    H, KV, D, C = c.heads, c.kv_heads, c.head_dim, c.hidden
    G = H // KV

    def rows_hf(w, n):  # llama.cpp's rotary row order -> Hugging Face's (half-split) order
        return w.reshape(n, D // 2, 2, C).transpose(0, 2, 1, 3).reshape(n * D, C)

    def pad_out(w_in_out, per_kv):  # [C, KV*per_kv] -> [C, kvp*per_kv] with zero columns
        return np.pad(w_in_out, [(0, 0), (0, (kvp - KV) * per_kv)])

    T = lambda w: np.ascontiguousarray(w.T)
    p = {"embed": g["token_embd.weight"], "norm": g["output_norm.weight"], "layers": []}
    for i in range(c.layers):
        b = f"blk.{i}."
        q = T(rows_hf(g[b + "attn_q.weight"], H))                     # [C, H*D], head h -> kv h//G
        k = T(rows_hf(g[b + "attn_k.weight"], KV))                    # [C, KV*D]
        v = T(g[b + "attn_v.weight"])                                 # [C, KV*D]
        o = T(g[b + "attn_output.weight"])                            # [H*D, C]
        p["layers"].append({
            "ln1": g[b + "attn_norm.weight"], "ln2": g[b + "ffn_norm.weight"],
            "wq": pad_out(q, G * D), "wk": pad_out(k, D), "wv": pad_out(v, D),
            "wo": np.pad(o, [(0, (kvp - KV) * G * D), (0, 0)]),
            "gate": T(g[b + "ffn_gate.weight"]), "up": T(g[b + "ffn_up.weight"]),
            "down": T(g[b + "ffn_down.weight"]),                      # [F, C]
        })
    return p


def param_specs(p):
    """Megatron tensor parallelism on the 1-D mesh 'model'."""
    col, row = P(None, "model"), P("model", None)
    layer = {"ln1": P(), "ln2": P(), "wq": col, "wk": col, "wv": col, "wo": row,
             "gate": col, "up": col, "down": row}
    return {"embed": row, "norm": P(), "layers": [dict(layer) for _ in p["layers"]]}


# ---- model ---------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, cos, sin):  # x [B, T, ..., D] (half-split pairs), cos/sin [B, T, D/2]
    D = x.shape[-1]
    shape = cos.shape[:2] + (1,) * (x.ndim - 3) + cos.shape[2:]
    c, s = cos.reshape(shape), sin.reshape(shape)
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def make_forward(c, kvp, mesh):
    """One step: tokens [B, T] at cache positions pos.. -> greedy next token [B, 1], caches."""
    D, G = c.head_dim, c.heads // c.kv_heads
    cache_sh = NamedSharding(mesh, P("model"))                 # [KV*B, S, D] over KV heads
    inv = jnp.asarray(1.0 / (c.theta ** (np.arange(0, D, 2, dtype=np.float64) / D)), jnp.float32)

    def forward(p, tokens, pos, ck, cv):
        B, T = tokens.shape
        S = ck[0].shape[1]
        steps = pos + jnp.arange(T, dtype=jnp.int32)                       # [T]
        angles = steps.astype(jnp.float32)[None, :, None] * inv            # [1, T, D/2]
        cos_a, sin_a = jnp.cos(angles), jnp.sin(angles)
        mask = jnp.arange(S, dtype=jnp.int32)[None, :] <= steps[:, None]   # [T, S]
        x = jnp.take(p["embed"], tokens, axis=0)                           # [B, T, C]
        zero = jnp.int32(0)
        nk, nv = [], []
        for i, l in enumerate(p["layers"]):
            h = rms_norm(x, l["ln1"], c.eps)
            q = rope((h @ l["wq"]).reshape(B, T, kvp, G, D), cos_a, sin_a)
            k = rope((h @ l["wk"]).reshape(B, T, kvp, D), cos_a, sin_a)
            v = (h @ l["wv"]).reshape(B, T, kvp, D)
            kvrows = lambda t: t.transpose(2, 0, 1, 3).reshape(kvp * B, T, D)
            k_i = jax.lax.dynamic_update_slice(ck[i], kvrows(k), (zero, pos, zero))
            v_i = jax.lax.dynamic_update_slice(cv[i], kvrows(v), (zero, pos, zero))
            k_i = jax.lax.with_sharding_constraint(k_i, cache_sh)
            v_i = jax.lax.with_sharding_constraint(v_i, cache_sh)
            qh = q.transpose(2, 0, 3, 1, 4).reshape(kvp * B, G * T, D)         # rows (g, t)
            scores = jnp.einsum("nrd,nsd->nrs", qh, k_i) * (1.0 / np.sqrt(D))
            probs = jax.nn.softmax(jnp.where(jnp.tile(mask, (G, 1)), scores, -jnp.inf), axis=-1)
            o = jnp.einsum("nrs,nsd->nrd", probs, v_i).reshape(kvp, B, G, T, D)
            o = o.transpose(1, 3, 0, 2, 4).reshape(B, T, kvp * G * D)
            x = x + o @ l["wo"]
            h2 = rms_norm(x, l["ln2"], c.eps)
            x = x + (jax.nn.silu(h2 @ l["gate"]) * (h2 @ l["up"])) @ l["down"]
            nk.append(k_i)
            nv.append(v_i)
        last = rms_norm(x[:, T - 1], p["norm"], c.eps)                     # [B, C]
        logits = jnp.einsum("bc,vc->bv", last, p["embed"])                 # tied lm_head
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)[:, None], nk, nv

    return forward


class JaxLlama:
    def __init__(self, c, g, n):
        self.c = c
        self.mesh = Mesh(np.array(jax.devices()[:n]), ("model",))
        self.kvp = kv_padding(c, n)
        p = jax_layout(c, g, self.kvp)
        ns = lambda s: NamedSharding(self.mesh, s)
        shard = jax.tree.map(ns, param_specs(p), is_leaf=lambda s: isinstance(s, P))
        self.params = jax.device_put(p, shard)
        self.rep = ns(P())
        self.cache_sh = ns(P("model"))
        cs = [self.cache_sh] * c.layers
        forward = make_forward(c, self.kvp, self.mesh)
        # (a) streaming: one jitted step per token (prefill is the same function at T = prompt).
        self.step = jax.jit(forward, in_shardings=(shard, self.rep, self.rep, cs, cs),
                            out_shardings=(self.rep, cs, cs), donate_argnums=(3, 4))

        # (b) all decode tokens in one program: a fori_loop with the caches in the carry.
        def decode_loop(p, tok, pos, ck, cv, n_new):
            out = jnp.zeros((n_new, tok.shape[0]), jnp.int32)

            def body(i, carry):
                tok, ck, cv, out = carry
                nxt, ck, cv = forward(p, tok, pos + i, ck, cv)
                return nxt, ck, cv, jax.lax.dynamic_update_slice(out, nxt.T, (i, jnp.int32(0)))

            _, ck, cv, out = jax.lax.fori_loop(0, n_new, body, (tok, ck, cv, out))
            return out.T, ck, cv

        self.loop = jax.jit(decode_loop, static_argnums=(5,),
                            in_shardings=(shard, self.rep, self.rep, cs, cs),
                            out_shardings=(self.rep, cs, cs), donate_argnums=(3, 4))

    def cache(self, B, S):
        z = lambda: jax.device_put(np.zeros((self.kvp * B, S, self.c.head_dim), np.float32),
                                   self.cache_sh)
        return [z() for _ in range(self.c.layers)], [z() for _ in range(self.c.layers)]

    def decode_args(self, n_prompt, max_tokens, B=1):
        """Arguments of a decode step (for lowering it)."""
        S = (n_prompt + max_tokens + 15) // 16 * 16
        ck, cv = self.cache(B, S)
        tok = jax.device_put(np.zeros((B, 1), np.int32), self.rep)
        return self.params, tok, np.int32(n_prompt), ck, cv

    def generate(self, ids, max_tokens, mode="stream"):
        B, Tp = 1, len(ids)
        S = (Tp + max_tokens + 15) // 16 * 16
        ck, cv = self.cache(B, S)
        tokens = jax.device_put(np.asarray([ids], np.int32), self.rep)
        t0 = time.perf_counter()
        nxt, ck, cv = self.step(self.params, tokens, np.int32(0), ck, cv)
        out = [int(np.asarray(nxt)[0, 0])]
        prefill_s = time.perf_counter() - t0
        n_new = max_tokens - 1
        t1 = time.perf_counter()
        if mode == "stream":
            for s in range(n_new):
                # The device token feeds the next step; the host copy is the streamed token.
                nxt, ck, cv = self.step(self.params, nxt, np.int32(Tp + s), ck, cv)
                out.append(int(np.asarray(nxt)[0, 0]))
        elif n_new > 0:
            toks, ck, cv = self.loop(self.params, nxt, np.int32(Tp), ck, cv, n_new)
            out += [int(t) for t in np.asarray(toks)[0]]
        decode_s = time.perf_counter() - t1
        return {"prefill_tok_s": B * Tp / prefill_s,
                "decode_tok_s": B * n_new / decode_s if n_new > 0 else 0.0,
                "tokens": out}


# ---- HLO check: no weight copied, transposed or gathered per step --------------------------

def weight_shapes(params):
    """The per-device and global shapes of the weight matrices, as sorted dimensions."""
    shapes = set()
    for leaf in jax.tree.leaves(params):
        if leaf.ndim == 2:
            shapes.add(tuple(sorted(leaf.addressable_shards[0].data.shape)))
            shapes.add(tuple(sorted(leaf.shape)))
    return shapes


def copies(hlo_text, match):
    """Instructions of a compiled program (outside fusion bodies) that copy, transpose or
    all-gather an array whose sorted dimensions satisfy match, or fusions that copy or
    transpose one. Returns [(name, op, shape)]."""
    comps, cur = {}, None
    for line in hlo_text.splitlines():
        m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if m and not line.startswith(" "):
            cur = comps.setdefault(m.group(1), [])
        elif cur is not None and line.strip() and line.strip() != "}":
            cur.append(line.strip())
    inst = re.compile(r"^(?:ROOT )?%?([\w.\-]+) = (\w+)\[([\d,]*)\][^ ]* ([\w\-]+)\(")

    def hit(line, ops):
        m = inst.match(line)
        if not m or m.group(4) not in ops or not m.group(3):
            return None
        dims = tuple(sorted(int(d) for d in m.group(3).split(",")))
        return (m.group(1), m.group(4), m.group(3)) if match(dims) else None

    fused = set(re.findall(r"kind=k\w+, calls=%?([\w.\-]+)", hlo_text))
    found = []
    for name, lines in comps.items():
        if name in fused:
            continue
        for line in lines:
            h = hit(line, ("copy", "transpose", "all-gather", "all-gather-start"))
            if h:
                found.append(h)
                continue
            m = re.search(r"fusion\(.*calls=%?([\w.\-]+)", line)
            if m and any(hit(l, ("copy", "transpose")) for l in comps.get(m.group(1), [])):
                found.append((inst.match(line).group(1), "fusion", inst.match(line).group(3)))
    return found


def hlo_check(jx, n_prompt, max_tokens):
    """{program: (weight-size copies, number of other copies/transposes of >= 1024 elements,
    their distinct shapes)} for the compiled decode step and the fori_loop decode."""
    shapes = weight_shapes(jx.params)
    res = {}
    for prog in ("stream step", "fori_loop"):
        args = jx.decode_args(n_prompt, max_tokens)
        f = jx.step.lower(*args) if prog == "stream step" else \
            jx.loop.lower(*args, max(max_tokens - 1, 1))
        text = f.compile().as_text()
        other = copies(text, lambda d: d not in shapes and np.prod(d) >= 1024)
        res[prog] = (copies(text, lambda d: d in shapes), len(other),
                     sorted({o[2] for o in other}))
    return res


# ---- partix (a long-lived process driven over stdin) ---------------------------------------

class Partix:
    def __init__(self, binary, devices, max_tokens, prompt, model):
        cmd = [binary, "--devices", str(devices), "--max-tokens", str(max_tokens),
               "--prompt", prompt, "--model", model]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        self.prompt_ids = self._read()["prompt_ids"]
        self.weights = self._read()  # weight_bytes, read_gbs

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


def print_table(a, n_prompt, systems, rows, notes, how):
    print(f"\nSmolLM2-135M f32, prompt {n_prompt} tokens, {a.max_tokens} new tokens, greedy, "
          f"{a.reps} alternating repetitions{how}: tokens/s, median (min..max)")
    names = {"partix": "partix", "jax_stream": "JAX stream", "jax_loop": "JAX fori_loop"}
    head = ["devices", "phase"] + [names[s] for s in systems]
    if not a.jax_only:
        head += ["partix/JAX stream", "partix/JAX fori_loop"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    for line in notes:
        print(line)


def jax_worker(a):
    """--worker: one JAX system in this process alone: load, compile and warm up, then one
    timed generation; prints the warm-up and the timed run as JSON lines."""
    c, g = load_gguf(a.model)
    ids = [int(x) for x in a.prompt_ids.split(",")]
    jx = JaxLlama(c, g, a.worker_devices)
    if a.worker_hlo_check:
        for prog, (found, other, shapes) in hlo_check(jx, len(ids), a.max_tokens).items():
            print(json.dumps({"hlo": prog, "weight_copies": len(found), "other": other,
                              "shapes": [list(x) for x in shapes]}), flush=True)
    mode = "stream" if a.worker == "jax_stream" else "loop"
    print(json.dumps(jx.generate(ids, a.max_tokens, mode)), flush=True)  # warm-up
    print(json.dumps(jx.generate(ids, a.max_tokens, mode)), flush=True)


def run_isolated(a, system, n, ids, hlo_check_first=False):
    """One repetition of `system` in a process of its own (none of the others alive): returns
    its warm-up and its timed run (and, for JAX with hlo_check_first, the HLO counts)."""
    if system == "partix":
        px = Partix(a.partix, n, a.max_tokens, a.prompt, a.model)
        try:
            warm = px.generate()
            timed = px.generate()
        finally:
            px.close()
        return warm, timed, [], px.weights
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", system, "--worker-devices",
           str(n), "--prompt-ids", ",".join(str(t) for t in ids), "--max-tokens",
           str(a.max_tokens), "--model", a.model]
    if hlo_check_first:
        cmd.append("--worker-hlo-check")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    hlo = [x for x in lines if "hlo" in x]
    runs = [x for x in lines if "hlo" not in x]
    return runs[0], runs[1], hlo, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partix", default=os.path.join(ROOT, "build/bin/partix_bench_llama_generate"))
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--devices", default="1,8")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt", default="What is the capital of France?")
    ap.add_argument("--jax-only", action="store_true",
                    help="no partix process: JAX alone on a fixed 30-token prompt")
    ap.add_argument("--no-hlo-check", action="store_true",
                    help="skip counting weight copies in the compiled decode programs")
    ap.add_argument("--json", action="store_true", help="print every repetition")
    ap.add_argument("--shared-processes", action="store_true",
                    help="the older way: one partix process and JAX in this process, all alive "
                         "through every repetition (an idle runtime slows the other side)")
    ap.add_argument("--worker", choices=["jax_stream", "jax_loop"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-devices", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-hlo-check", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-ids", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return jax_worker(a)
    if not a.shared_processes:
        return main_isolated(a)
    c, g = load_gguf(a.model)
    systems = ["jax_stream", "jax_loop"] if a.jax_only else ["partix", "jax_stream", "jax_loop"]
    rows, notes = [], []
    for n in [int(x) for x in a.devices.split(",")]:
        px = None if a.jax_only else Partix(a.partix, n, a.max_tokens, a.prompt, a.model)
        ids = list(range(100, 130)) if px is None else px.prompt_ids
        jx = JaxLlama(c, g, n)
        if not a.no_hlo_check:
            for prog, (found, other, shapes) in hlo_check(jx, len(ids), a.max_tokens).items():
                print(f"[{n} devices] HLO of the JAX decode {prog}: {len(found)} copies/transposes/"
                      f"all-gathers of weight size" + (f" {found}" if found else "") +
                      f"; {other} of other arrays >= 1024 elements" +
                      (f" (shapes {shapes})" if shapes else ""), flush=True)
        run = {"partix": (lambda: px.generate()),
               "jax_stream": (lambda: jx.generate(ids, a.max_tokens, "stream")),
               "jax_loop": (lambda: jx.generate(ids, a.max_tokens, "loop"))}
        # Warm up (compiles every shape on every side) and compare the greedy tokens.
        warm = {s: run[s]() for s in systems}
        ref = warm[systems[0]]["tokens"]
        for s in systems[1:]:
            same = sum(x == y for x, y in zip(ref, warm[s]["tokens"]))
            if same != len(ref):
                first = next(i for i, (x, y) in enumerate(zip(ref, warm[s]["tokens"])) if x != y)
                notes.append(f"{n} devices: {s} agrees with {systems[0]} on {same}/{len(ref)} "
                             f"greedy tokens (first difference at token {first})")
                print(f"[{n} devices] {notes[-1]}\n {systems[0]} {ref}\n {s} {warm[s]['tokens']}",
                      file=sys.stderr)
        if not a.jax_only and all(warm[s]["tokens"] == ref for s in systems):
            notes.append(f"{n} devices: the {len(ref)} greedy tokens agree exactly on all sides")
        res = {s: [] for s in systems}
        for r in range(a.reps):
            order = systems if r % 2 == 0 else systems[::-1]
            for s in order:
                out = run[s]()
                res[s].append(out)
                if a.json:
                    print(json.dumps({"devices": n, "system": s, **out}), flush=True)
        if px is not None:
            px.close()
        for phase in ("prefill", "decode"):
            v = {s: [x[phase + "_tok_s"] for x in res[s]] for s in systems}
            row = [n, phase] + [spread(v[s]) for s in systems]
            if px is not None:
                for j in ("jax_stream", "jax_loop"):
                    ratio = [p / q for p, q in zip(v["partix"], v[j])]
                    row.append(f"{statistics.median(ratio):.2f} ({min(ratio):.2f}..{max(ratio):.2f})")
            rows.append(row)
        del jx
    print_table(a, len(ids), systems, rows, notes, "")


def main_isolated(a):
    """Each repetition of each system in a fresh process while no other is alive; repetitions
    alternate the order. Also the fraction of the machine's read bandwidth partix's decode
    reaches on the weights (weight bytes x tokens/s against the bench's read_gbs)."""
    systems = ["jax_stream", "jax_loop"] if a.jax_only else ["partix", "jax_stream", "jax_loop"]
    rows, notes, bandwidth = [], [], []
    for n in [int(x) for x in a.devices.split(",")]:
        ids = list(range(100, 130))
        if not a.jax_only:  # the prompt's token ids, from partix's tokenizer
            px = Partix(a.partix, n, a.max_tokens, a.prompt, a.model)
            ids = px.prompt_ids
            px.close()
        res = {s: [] for s in systems}
        warm = {}
        for r in range(a.reps):
            order = systems if r % 2 == 0 else systems[::-1]
            for s in order:
                w, timed, hlo, weights = run_isolated(a, s, n, ids,
                                                      hlo_check_first=(r == 0 and not a.no_hlo_check))
                warm.setdefault(s, w)
                res[s].append(timed)
                if weights is not None:
                    timed["weight_bytes"], timed["read_gbs"] = (weights["weight_bytes"],
                                                                weights["read_gbs"])
                for h in hlo:
                    print(f"[{n} devices] HLO of the JAX decode {h['hlo']}: {h['weight_copies']} "
                          f"copies/transposes/all-gathers of weight size; {h['other']} of other "
                          f"arrays >= 1024 elements", flush=True)
                if a.json:
                    print(json.dumps({"devices": n, "system": s, "rep": r, **timed}), flush=True)
        ref = warm[systems[0]]["tokens"]
        agree = all(warm[s]["tokens"] == ref for s in systems)
        for s in systems[1:]:
            same = sum(x == y for x, y in zip(ref, warm[s]["tokens"]))
            if same != len(ref):
                notes.append(f"{n} devices: {s} agrees with {systems[0]} on {same}/{len(ref)} "
                             "greedy tokens")
        if agree and not a.jax_only:
            notes.append(f"{n} devices: the {len(ref)} greedy tokens agree exactly on all sides")
        for phase in ("prefill", "decode"):
            v = {s: [x[phase + "_tok_s"] for x in res[s]] for s in systems}
            row = [n, phase] + [spread(v[s]) for s in systems]
            if not a.jax_only:
                for j in ("jax_stream", "jax_loop"):
                    ratio = [p / q for p, q in zip(v["partix"], v[j])]
                    row.append(f"{statistics.median(ratio):.2f} ({min(ratio):.2f}..{max(ratio):.2f})")
            rows.append(row)
        if not a.jax_only:
            frac = [x["weight_bytes"] * x["decode_tok_s"] / (x["read_gbs"] * 1e9)
                    for x in res["partix"]]
            bandwidth.append(f"{n} devices: partix decode reads the {res['partix'][0]['weight_bytes'] / 1e6:.0f} MB "
                             f"of weights at {statistics.median(frac):.0%} ({min(frac):.0%}..{max(frac):.0%}) of "
                             f"the {statistics.median([x['read_gbs'] for x in res['partix']]):.1f} GB/s "
                             "read bandwidth the bench measures")
    print_table(a, len(ids), systems, rows, notes + bandwidth,
                ", each side in its own process with no other alive")


if __name__ == "__main__":
    main()
