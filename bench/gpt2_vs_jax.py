#!/usr/bin/env python3
"""GPT-2 small training step, partix vs JAX: tokens/s on 8 virtual CPU devices.

Commands (from the repository root; JAX lives in a venv outside the repo):

  ~/.cache/partix-jax-venv/bin/pip install jax optax numpy
  BUILD_DIR=build scripts/build.sh          # builds build/bin/partix_bench_gpt2_train
  ~/.cache/partix-jax-venv/bin/python bench/gpt2_vs_jax.py --check        # same losses?
  ~/.cache/partix-jax-venv/bin/python bench/gpt2_vs_jax.py --meshes 8x1,4x2 --rounds 3

Results on the 2-core development VM (docs/performance.md): partix/JAX tokens/s
1.40 (8x1), 1.65 (4x2), 1.49 (2x4), 1.63 (1x8), 1.41 (8x1 FSDP), 1.51 (4x2 FSDP).

What runs on both sides (bench/gpt2_train_bench.cpp is the partix side):
- GPT-2 small as `partix train --model small` builds it: 12 layers, C 768, 12 heads,
  1024 positions, tied embeddings, tanh GELU, LayerNorm eps 1e-5, dropout 0.1 (embedding,
  attention probabilities, residual branches; threefry bits on both sides), and the byte
  vocabulary (V = 256) partix uses because its corpus is bytes. f32 throughout.
- The same step: value_and_grad of the mean next-token cross entropy, clipping to global
  norm 1, AdamW (b1 0.9, b2 0.95, eps 1e-8, weight decay 0.1 on every parameter, a constant
  learning rate passed in as an argument); optax here (clip_by_global_norm, scale_by_adam,
  add_decayed_weights: optax.adamw's own chain); parameters and optimizer state donated.
- The same shardings on a (data, model) mesh: sharding_rules() of src/models/gpt2/gpt2.cpp
  (Megatron over 'model': c_attn [C, 3, C] and c_fc column-parallel, attention c_proj and
  mlp c_proj row-parallel, wte vocab-parallel; batch over 'data'; with --fsdp parameters also
  over 'data'), the same activation constraints (residual stream P('data'), qkv heads over
  'model'). The script refuses to run if partix reports different parameter specs.
- The same global batch and sequence length; batches are a fixed formula of (step, row,
  position) computed on both sides; each step also ships its batch and a fresh dropout key
  to the devices and reads the loss back (a real training loop's host work).
--check runs 3 steps without dropout from partix's own initial parameters (saved with
save_safetensors) on both sides and compares the losses.

Timing: each system runs in its own process (8 replicas of GPT-2 small with AdamW state do
not fit twice in 24 GB), compiles, runs --warmup steps, then --steps timed steps; the
processes alternate (partix, JAX, JAX, partix, ...) for --rounds rounds. Tokens/s is batch *
seq / median step time of a round; the table gives the median over rounds (min..max), and
the ratio is computed per round.
"""

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---- the model (mirrors src/models/gpt2/gpt2.cpp) ------------------------------------------

L, C, H, NPOS, V = 12, 768, 12, 1024, 256
F = 4 * C


def logical_axes():
    """param_specs(): each parameter's shape and logical axes."""
    p = {"transformer.wte.weight": ((V, C), ("vocab", "embed")),
         "transformer.wpe.weight": ((NPOS, C), ("", "embed")),
         "transformer.ln_f.weight": ((C,), ("norm",)),
         "transformer.ln_f.bias": ((C,), ("norm",))}
    for i in range(L):
        l = f"transformer.h.{i}."
        p[l + "ln_1.weight"] = ((C,), ("norm",))
        p[l + "ln_1.bias"] = ((C,), ("norm",))
        p[l + "attn.c_attn.weight"] = ((C, 3, C), ("embed", "", "heads"))
        p[l + "attn.c_attn.bias"] = ((3, C), ("", "heads"))
        p[l + "attn.c_proj.weight"] = ((C, C), ("heads", "embed"))
        p[l + "attn.c_proj.bias"] = ((C,), ("norm",))
        p[l + "ln_2.weight"] = ((C,), ("norm",))
        p[l + "ln_2.bias"] = ((C,), ("norm",))
        p[l + "mlp.c_fc.weight"] = ((C, F), ("embed", "mlp"))
        p[l + "mlp.c_fc.bias"] = ((F,), ("mlp",))
        p[l + "mlp.c_proj.weight"] = ((F, C), ("mlp", "embed"))
        p[l + "mlp.c_proj.bias"] = ((C,), ("norm",))
    return p


def rules(fsdp):
    """sharding_rules(fsdp), in order: the first rule whose axis is still unused wins."""
    r = [("batch", "data"), ("vocab", "model"), ("heads", "model"), ("mlp", "model")]
    if fsdp:
        r += [("embed", "data"), ("norm", "data"), ("vocab", "data")]
    return r + [("embed", None), ("act", None)]


def to_spec(axes, rs):
    used, out = set(), []
    for name in axes:
        pick = None
        for k, ax in rs:
            if k != name:
                continue
            if ax is None:
                break
            if ax not in used:
                pick = ax
                used.add(ax)
                break
        out.append(pick)
    while out and out[-1] is None:
        out.pop()
    return tuple(out)


def spec_text(spec):
    """partix's PartitionSpec::to_string, e.g. P(None, 'model')."""
    return "P(" + ", ".join("None" if a is None else f"'{a}'" for a in spec) + ")"


def token_batch(step, rows, seq, shift):
    import numpy as np
    b = np.arange(rows, dtype=np.int64)[:, None]
    t = np.arange(seq, dtype=np.int64)[None, :] + shift
    return ((b * 131 + t * 31 + step * 17 + (b * t) % 7) % 256).astype(np.int32)


def read_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], np.float32).reshape(v["shape"])
    return out


def jax_worker(a):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    d, m = (int(x) for x in a.mesh.split("x"))
    mesh = Mesh(np.array(jax.devices()[:d * m]).reshape(d, m), ("data", "model"))
    rs = rules(a.fsdp)
    axes = logical_axes()
    specs = {k: to_spec(ax, rs) for k, (_, ax) in axes.items()}
    psh = {k: NamedSharding(mesh, P(*s)) for k, s in specs.items()}
    rep = NamedSharding(mesh, P())
    bsh = NamedSharding(mesh, P("data"))
    act = NamedSharding(mesh, P(*to_spec(("batch", "", "act"), rs)))
    qkv_sh = NamedSharding(mesh, P(*to_spec(("batch", "", "", "heads", ""), rs)))
    rate = a.dropout

    if a.init:
        host = read_safetensors(a.init)
    else:
        rng = np.random.default_rng(0)
        host = {}
        for k, (shape, _) in axes.items():
            if k.endswith("ln_1.weight") or k.endswith("ln_2.weight") or k.endswith("ln_f.weight"):
                host[k] = np.ones(shape, np.float32)
            elif k.endswith("bias"):
                host[k] = np.zeros(shape, np.float32)
            else:
                host[k] = (rng.standard_normal(shape, np.float32) * 0.02).astype(np.float32)
    params = {k: jax.device_put(host[k], psh[k]) for k in axes}
    del host

    def dropout(x, key, salt):
        if key is None or rate <= 0:
            return x
        keep = jax.random.bernoulli(jax.random.fold_in(key, salt), 1.0 - rate, x.shape)
        return jnp.where(keep, x / (1.0 - rate), 0.0)

    def layer_norm(x, g, b):
        mu = jnp.mean(x, -1, keepdims=True)
        dx = x - mu
        v = jnp.mean(dx * dx, -1, keepdims=True)
        return dx * jax.lax.rsqrt(v + 1e-5) * g + b

    def loss_fn(p, ids, targets, key):
        B, T = ids.shape
        D = C // H
        x = jnp.take(p["transformer.wte.weight"], ids, axis=0) + p["transformer.wpe.weight"][:T]
        x = dropout(x, key, 1)
        x = jax.lax.with_sharding_constraint(x, act)
        causal = jnp.arange(T)[:, None] >= jnp.arange(T)[None, :]
        for i in range(L):
            l = f"transformer.h.{i}."
            h = layer_norm(x, p[l + "ln_1.weight"], p[l + "ln_1.bias"])
            qkv = jnp.einsum("btc,csk->btsk", h, p[l + "attn.c_attn.weight"]) + p[l + "attn.c_attn.bias"]
            qkv = jax.lax.with_sharding_constraint(qkv.reshape(B, T, 3, H, D), qkv_sh)
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
            s = jnp.einsum("bthd,bshd->bhts", q, k) * (1.0 / np.sqrt(D))
            s = jnp.where(causal, s, -1e9)
            att = dropout(jax.nn.softmax(s, -1), key, 100 + 3 * i)
            y = jnp.einsum("bhts,bshd->bthd", att, v).reshape(B, T, C)
            y = y @ p[l + "attn.c_proj.weight"] + p[l + "attn.c_proj.bias"]
            x = jax.lax.with_sharding_constraint(x + dropout(y, key, 101 + 3 * i), act)
            h = layer_norm(x, p[l + "ln_2.weight"], p[l + "ln_2.bias"])
            h = jax.nn.gelu(h @ p[l + "mlp.c_fc.weight"] + p[l + "mlp.c_fc.bias"], approximate=True)
            y = h @ p[l + "mlp.c_proj.weight"] + p[l + "mlp.c_proj.bias"]
            x = jax.lax.with_sharding_constraint(x + dropout(y, key, 102 + 3 * i), act)
        x = layer_norm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"])
        logits = jnp.einsum("btc,vc->btv", x, p["transformer.wte.weight"])
        lp = jax.nn.log_softmax(logits, -1)
        return -jnp.mean(jnp.take_along_axis(lp, targets[..., None], -1))

    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.scale_by_adam(b1=0.9, b2=0.95, eps=1e-8),
                     optax.add_decayed_weights(0.1))
    opt = jax.jit(tx.init)(params)
    # Moments like their parameters; the step count replicated.
    osh = jax.tree.map(lambda x: x.sharding if len(x.sharding.device_set) > 1 else rep, opt)
    opt = jax.device_put(opt, osh)
    use_key = rate > 0

    def step(p, s, ids, targets, lr, key):
        loss, g = jax.value_and_grad(loss_fn)(p, ids, targets, key if use_key else None)
        u, s = tx.update(g, s, p)
        p = jax.tree.map(lambda w, du: w - lr * du, p, u)
        return p, s, loss

    step = jax.jit(step, in_shardings=(psh, osh, bsh, bsh, rep, rep),
                   out_shardings=(psh, osh, rep), donate_argnums=(0, 1))
    lr = jax.device_put(np.float32(a.lr), rep)
    base_key = jax.device_put(jax.random.fold_in(jax.random.key(0), 7), rep)
    t = time.perf_counter()
    ids0 = jax.device_put(token_batch(0, a.batch, a.seq, 0), bsh)
    step.lower(params, opt, ids0, ids0, lr, base_key).compile()
    compile_s = time.perf_counter() - t
    times, losses = [], []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        ids = jax.device_put(token_batch(s, a.batch, a.seq, 0), bsh)
        tg = jax.device_put(token_batch(s, a.batch, a.seq, 1), bsh)
        key = jax.device_put(jax.random.fold_in(base_key, s), rep)
        params, opt, loss = step(params, opt, ids, tg, lr, key)
        losses.append(float(loss))
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"system": "jax", "compile_s": compile_s, "step_s": times, "loss": losses,
                      "tokens_per_step": a.batch * a.seq,
                      "specs": {k: spec_text(s) for k, s in specs.items()}}))


# ---- orchestration --------------------------------------------------------------------------

def run_side(system, a, mesh, extra=()):
    common = ["--mesh", mesh, "--batch", str(a.batch), "--seq", str(a.seq), "--warmup",
              str(a.warmup), "--steps", str(a.steps), "--dropout", str(a.dropout), "--lr",
              str(a.lr)] + (["--fsdp"] if a.fsdp else []) + list(extra)
    if system == "partix":
        cmd = [a.partix] + common
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker"] + common
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_specs(p, j):
    want = {k: v for k, v in j["specs"].items()}
    got = p["specs"]
    bad = [k for k in want if got.get(k) != want[k]]
    if bad or set(got) != set(want):
        raise SystemExit("parameter shardings differ, e.g. " +
                         ", ".join(f"{k}: partix {got.get(k)} jax {want[k]}" for k in bad[:3]))


def spread(xs, fmt="{:.1f}"):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mesh", default="8x1", help=argparse.SUPPRESS)
    ap.add_argument("--init", default="", help=argparse.SUPPRESS)
    ap.add_argument("--partix", default=os.path.join(ROOT, "build/bin/partix_bench_gpt2_train"))
    ap.add_argument("--meshes", default="8x1,4x2")
    ap.add_argument("--fsdp", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--check", action="store_true",
                    help="same initial parameters, no dropout: compare 3 steps' losses")
    a = ap.parse_args()
    if a.worker:
        return jax_worker(a)
    if a.check:
        a.dropout, a.warmup, a.steps = 0.0, 0, 3
        init = "/tmp/partix_gpt2_init.safetensors"
        for mesh in a.meshes.split(","):
            p = run_side("partix", a, mesh, ["--save-init", init])
            j = run_side("jax", a, mesh, ["--init", init])
            check_specs(p, j)
            print(f"{mesh}: partix losses {p['loss']}\n{'':{len(mesh)}}  jax losses    {j['loss']}")
            worst = max(abs(x - y) / abs(y) for x, y in zip(p["loss"], j["loss"]))
            print(f"{'':{len(mesh)}}  max relative difference {worst:.2e}")
            if worst > 1e-3:
                raise SystemExit("losses differ")
        os.remove(init)
        return
    rows = []
    for mesh in a.meshes.split(","):
        tps = {"partix": [], "jax": []}
        compile_s = {"partix": [], "jax": []}
        for r in range(a.rounds):
            order = ["partix", "jax"] if r % 2 == 0 else ["jax", "partix"]
            res = {}
            for system in order:
                res[system] = run_side(system, a, mesh)
                s = res[system]
                tps[system].append(s["tokens_per_step"] / statistics.median(s["step_s"]))
                compile_s[system].append(s["compile_s"])
                print(f"# {mesh} round {r} {system}: step_s {['%.3f' % x for x in s['step_s']]} "
                      f"loss {s['loss'][-1]:.4f} compile {s['compile_s']:.1f}s", file=sys.stderr)
            check_specs(res["partix"], res["jax"])
        ratio = [p / j for p, j in zip(tps["partix"], tps["jax"])]
        rows.append((mesh + (" fsdp" if a.fsdp else ""), spread(tps["partix"]), spread(tps["jax"]),
                     spread(ratio, "{:.2f}"), f"{statistics.median(compile_s['partix']):.1f} / "
                     f"{statistics.median(compile_s['jax']):.1f}"))
    print(f"\nGPT-2 small (V=256) f32, batch {a.batch} x seq {a.seq}, dropout {a.dropout}, "
          f"{a.rounds} alternating rounds of {a.steps} timed steps: median (min..max)")
    print("| mesh | partix tok/s | JAX tok/s | partix/JAX | compile s partix / JAX |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
