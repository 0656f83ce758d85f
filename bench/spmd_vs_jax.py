#!/usr/bin/env python3
"""Bytes each device sends per collective kind: partix vs JAX/XLA, scenario by scenario.

Exact commands (from the repository root; JAX lives in a venv outside the repo):

  python3 -m venv ~/.cache/partix-jax-venv
  ~/.cache/partix-jax-venv/bin/pip install jax
  BUILD_DIR=build scripts/build.sh            # builds build/bin/partix_bench_spmd_scenarios
  ~/.cache/partix-jax-venv/bin/python bench/spmd_vs_jax.py

Options: --partix PATH (the scenario program), --only NAME[,NAME] (a subset),
--hlo NAME (print XLA's compiled HLO of one scenario and exit), --json (one JSON
line per scenario with both sides' numbers instead of the table).

The scenarios mirror bench/spmd_scenarios_bench.cpp: same shapes (f32), meshes,
argument shardings (pinned with device_put and in_shardings) and out_shardings.
The partix program prints its definitions; this script refuses to compare if they
differ from the ones below. XLA runs on CPU with 8 forced host devices.

Bytes follow partix's CostAnalysis convention: n devices in
the group, B the bytes of the local operand: all-reduce 2(n-1)/n*B; all-gather
(n-1)/n*B_out; reduce-scatter and all-to-all (n-1)/n*B; collective-permute B.
Each collective in the compiled HLO is counted once: async *-start ops are
counted, their *-done halves are not; a combined (tuple) collective counts
every operand.
"""

import argparse
import collections
import json
import math
import os
import re
import subprocess
import sys

# Must be set before jax is imported.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

KINDS = [
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
    "collective_permute"
]

# ---- scenarios (keep in step with bench/spmd_scenarios_bench.cpp) ----

# Sharded matmuls: A[I, J] @ B[J, K].
I, J, K = 256, 512, 384
# MLP: x[N, E] -> [N, G] -> [N, E].
N, E, G = 64, 512, 2048
# Transformer block: B batch, T sequence, C channels, H heads, D head dim, F MLP hidden.
B, T, C, H, D, F = 8, 128, 256, 8, 32, 1024


def matmul2(a):
    return a[0] @ a[1]


def mlp(a):
    x, w1, b1, w2, b2 = a
    h = jax.nn.gelu(x @ w1 + b1, approximate=True)  # [N, G]
    return h @ w2 + b2  # [N, E]


def layer_norm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    d = x - mu
    v = jnp.mean(d * d, -1, keepdims=True)
    return d * jax.lax.rsqrt(v + eps) * g + b


def softmax(x):
    e = jnp.exp(x - jax.lax.stop_gradient(jnp.max(x, -1, keepdims=True)))
    return e / jnp.sum(e, -1, keepdims=True)


def block(a):
    x, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w_fc, b_fc, w_proj, b_proj = a
    h = layer_norm(x, ln1_g, ln1_b)  # [B, T, C]
    q = jnp.einsum("btc,chd->bthd", h, wq)  # [B, T, H, D]
    k = jnp.einsum("btc,chd->bthd", h, wk)
    v = jnp.einsum("btc,chd->bthd", h, wv)
    t = x.shape[1]
    s = jnp.einsum("bthd,bshd->bhts", q, k) * (1.0 / math.sqrt(D)
                                              )  # [B, H, T, T]
    mask = (jax.lax.broadcasted_iota(jnp.int32, (t, t), 0)
            >= jax.lax.broadcasted_iota(jnp.int32, (t, t), 1))
    s = jnp.where(mask, s, -1e9)
    p = softmax(s)
    o = jnp.einsum("bhts,bshd->bthd", p, v)  # [B, T, H, D]
    x1 = x + jnp.einsum("bthd,hdc->btc", o, wo)  # [B, T, C]
    h2 = layer_norm(x1, ln2_g, ln2_b)
    f = jax.nn.gelu(jnp.einsum("btc,cf->btf", h2, w_fc) + b_fc,
                    approximate=True)  # [B, T, F]
    return x1 + jnp.einsum("btf,fc->btc", f, w_proj) + b_proj  # [B, T, C]


def scenario(name, mesh, args, out, fn):
    """mesh: {axis: size}; args: [(name, shape, spec)]; spec: list of None | str | [str]."""
    return dict(name=name, mesh=mesh, args=args, out=out, fn=fn)


def matmul_scenarios():
    xy = {"X": 4, "Y": 2}
    x8 = {"X": 8}
    return [
        # Neither contracting dimension sharded: C[I_X, K_Y] is local.
        scenario("matmul_IX_KY", xy, [("A", [I, J], ["X", None]),
                                      ("B", [J, K], [None, "Y"])], ["X", "Y"],
                 matmul2),
        # Contracting dimension sharded on both sides: partial sums, all-reduced.
        scenario("matmul_JX_out_replicated", x8, [("A", [I, J], [None, "X"]),
                                                  ("B", [J, K], ["X", None])],
                 [], matmul2),
        # Same with C[I, K_X]: reduce-scatter.
        scenario("matmul_JX_out_KX", x8, [("A", [I, J], [None, "X"]),
                                          ("B", [J, K], ["X", None])],
                 [None, "X"], matmul2),
        # Conflicting: A's rows and B's contracting rows both on X.
        scenario("matmul_IX_JX_conflict", x8, [("A", [I, J], ["X", None]),
                                               ("B", [J, K], ["X", None])],
                 ["X", None], matmul2),
        # 2-D mesh: A[I_X, J_Y] @ B[J_Y, K] -> C[I_X, K].
        scenario("matmul_IX_JY_2d", xy, [("A", [I, J], ["X", "Y"]),
                                         ("B", [J, K], ["Y", None])],
                 ["X", None], matmul2),
    ]


def mlp_scenarios():

    def args(x_spec):
        return [("x", [N, E], x_spec), ("w1", [E, G], [None, "model"]),
                ("b1", [G], ["model"]), ("w2", [G, E], ["model", None]),
                ("b2", [E], [])]

    return [
        scenario("tp_mlp", {"model": 8}, args([]), [], mlp),
        scenario("dp_tp_mlp", {
            "data": 4,
            "model": 2
        }, args(["data", None]), ["data", None], mlp),
    ]


def block_scenario(name, mesh, x, vec, wqkv, wo, wfc, bfc, wproj, t=T):
    args = [("x", [B, t, C], x), ("ln1_g", [C], vec), ("ln1_b", [C], vec),
            ("wq", [C, H, D], wqkv), ("wk", [C, H, D], wqkv),
            ("wv", [C, H, D], wqkv), ("wo", [H, D, C], wo), ("ln2_g", [C], vec),
            ("ln2_b", [C], vec), ("w_fc", [C, F], wfc), ("b_fc", [F], bfc),
            ("w_proj", [F, C], wproj), ("b_proj", [C], vec)]
    return scenario(name, mesh, args, ["data", None, None], block)


def block_scenarios():
    batch = ["data", None, None]
    d0 = ["data"]
    mesh_8x1 = {"data": 8, "model": 1}
    dp = dict(x=batch, vec=[], wqkv=[], wo=[], wfc=[], bfc=[], wproj=[])
    fsdp = dict(x=batch, vec=d0, wqkv=d0, wo=d0, wfc=d0, bfc=d0, wproj=d0)
    tp = dict(x=batch,
              vec=[],
              wqkv=[None, "model", None],
              wo=["model", None, None],
              wfc=[None, "model"],
              bfc=["model"],
              wproj=["model", None])
    return [
        # Data parallel, mesh (8,1): batch over 'data', parameters replicated.
        block_scenario("block_dp", mesh_8x1, **dp),
        # FSDP, mesh (8,1): batch over 'data', every parameter's first dimension
        # over 'data'.
        block_scenario("block_fsdp", mesh_8x1, **fsdp),
        # The same with T = 16: activations smaller than each weight matrix.
        block_scenario("block_fsdp_t16", mesh_8x1, **fsdp, t=16),
        # T = 64: activations half the size of w_fc, the MLP hidden twice it.
        block_scenario("block_fsdp_t64", mesh_8x1, **fsdp, t=64),
        # Megatron TP, mesh (1,8).
        block_scenario("block_tp", {
            "data": 1,
            "model": 8
        }, **tp),
        # DP + TP, mesh (4,2).
        block_scenario("block_dp_tp", {
            "data": 4,
            "model": 2
        }, **tp),
    ]


def reshape_scenarios():
    return [
        # [64, 32] over 'data' -> [4, 16, 32]: 4-way on dim 0, 2-way on dim 1.
        scenario("reshape_split", {"data": 8}, [("x", [64, 32], ["data"])], [],
                 lambda a: jnp.sum(a[0].reshape(4, 16, 32), axis=2)),
        # Split, compute, merge back.
        scenario("reshape_split_merge", {"data": 8}, [("x", [64, 32], ["data"])],
                 ["data"], lambda a: (a[0].reshape(4, 16, 32) * 2.0).reshape(64, 32)),
        # [4, 16, 32] over ('X', 'Y') -> [64, 32] over ('X', 'Y').
        scenario("reshape_merge", {"X": 4, "Y": 2},
                 [("x", [4, 16, 32], ["X", "Y"])], [["X", "Y"]],
                 lambda a: a[0].reshape(64, 32) * 2.0),
    ]


def all_scenarios():
    return (matmul_scenarios() + reshape_scenarios() + mlp_scenarios() +
            block_scenarios())


# ---- JAX side ----


def make_mesh(axes):
    shape = tuple(axes.values())
    devices = np.array(jax.devices()[:math.prod(shape)]).reshape(
        shape)  # row-major, as partix
    return Mesh(devices, tuple(axes.keys()))


def pspec(spec):
    return P(*[tuple(e) if isinstance(e, list) else e for e in spec])


def compile_xla(sc):
    mesh = make_mesh(sc["mesh"])
    shardings = [NamedSharding(mesh, pspec(spec)) for _, _, spec in sc["args"]]
    args = [
        jax.device_put(jnp.zeros(shape, jnp.float32), s)
        for (_, shape, _), s in zip(sc["args"], shardings)
    ]
    f = jax.jit(sc["fn"],
                in_shardings=(shardings,),
                out_shardings=NamedSharding(mesh, pspec(sc["out"])))
    return f.lower(args).compile()


# ---- HLO parsing ----

DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16
}

# op name -> kind; *-done halves are absent on purpose (the *-start was counted).
HLO_KINDS = {
    "all-reduce": "all_reduce",
    "all-reduce-start": "all_reduce",
    "all-gather": "all_gather",
    "all-gather-start": "all_gather",
    "reduce-scatter": "reduce_scatter",
    "all-to-all": "all_to_all",
    "collective-permute": "collective_permute",
    "collective-permute-start": "collective_permute",
}
UNHANDLED = ("ragged-all-to-all", "collective-broadcast", "all-reduce-scatter")

INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][\w\-]*)\(")
ARRAY_TYPE = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")


def array_bytes(type_text):
    """Total bytes of every array type in `type_text` (one type or a tuple of them)."""
    total = 0
    for dtype, dims in ARRAY_TYPE.findall(type_text):
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown HLO dtype {dtype!r} in {type_text!r}")
        total += DTYPE_BYTES[dtype] * math.prod(
            int(d) for d in dims.split(",") if d)
    return total


def split_top_level(text, open_paren):
    """(the text between the '(' at open_paren and its ')', the rest of the line)."""
    depth = 0
    for i in range(open_paren, len(text)):
        if text[i] in "({[":
            depth += 1
        elif text[i] in ")}]":
            depth -= 1
            if depth == 0:
                return text[open_paren + 1:i], text[i + 1:]
    raise ValueError(f"unbalanced HLO line: {text}")


def operand_names(operands):
    """Operand names of an instruction; the compiled text may or may not print their types."""
    return re.findall(r"%([\w.\-]+)", operands)


def group_size(attrs, num_devices):
    """Devices per replica group. Forms: {{0,1},{2,3}}; iota [G,S]<=[..]; the mesh form
  mesh['a'=4,'b'=2] {'b'} (axes listed in braces, a sub-axis as 'a':(pre)size); {} (all)."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attrs)
    if m:
        sizes = {
            a: int(n) for a, n in re.findall(r"'([^']+)'=(\d+)", m.group(1))
        }
        n = 1
        for axis, sub in re.findall(r"'([^']+)'(:\(\d+\)\d+)?", m.group(2)):
            n *= int(re.search(r"\)(\d+)",
                               sub).group(1)) if sub else sizes[axis]
        return n
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=\{(\{[\d,]*\})", attrs)
    if m:
        return len([d for d in m.group(1).strip("{}").split(",") if d])
    if re.search(r"replica_groups=\{\}",
                 attrs) or "replica_groups" not in attrs:
        return num_devices
    raise ValueError(f"cannot read replica groups from: {attrs}")


# One collective of a compiled module. sliced: an all-reduce whose every user is a
# dynamic-slice (or a fusion named after one): XLA's CPU pipeline leaves that pair as it is
# where GPU/TPU pipelines turn it into a reduce-scatter.
Collective = collections.namedtuple(
    "Collective", "kind op group operand_bytes sent sliced line")


def collectives(hlo_text, num_devices):
    """Every collective of the module, counted once."""
    types = {}  # instruction name -> its result type text
    users = collections.defaultdict(
        list)  # instruction name -> (user name, user op)
    parsed = []
    for line in hlo_text.splitlines():
        m = INSTR.match(line)
        if not m:
            continue
        types[m.group(1)] = m.group(2)
        operands, attrs = split_top_level(line, m.end() - 1)
        for name in operand_names(operands):
            users[name].append((m.group(1), m.group(3)))
        parsed.append((m, operands, attrs, line))
    found = []
    for m, operands, attrs, line in parsed:
        op = m.group(3)
        if op in UNHANDLED:
            raise ValueError(f"collective {op} is not handled: {line.strip()}")
        if op not in HLO_KINDS:
            continue
        kind = HLO_KINDS[op]
        b = sum(array_bytes(types[name]) for name in operand_names(operands))
        n = group_size(attrs, num_devices)
        if kind == "all_reduce":
            sent = 2 * (n - 1) / n * b
        elif kind == "all_gather":
            sent = (n - 1) / n * (b * n)  # the output is n operands
        elif kind in ("reduce_scatter", "all_to_all"):
            sent = (n - 1) / n * b
        else:
            sent = float(b)
        us = users[m.group(1)]
        sliced = op == "all-reduce" and bool(us) and all(
            u_op == "dynamic-slice" or
            (u_op == "fusion" and "dynamic-slice" in u_name)
            for u_name, u_op in us)
        found.append(Collective(kind, op, n, b, sent, sliced, line.strip()))
    return found


def xla_bytes(compiled, num_devices):
    """(bytes per kind, total if every sliced all-reduce were a reduce-scatter)."""
    per_kind = dict.fromkeys(KINDS, 0.0)
    as_reduce_scatter = 0.0
    for c in collectives(compiled.as_text(), num_devices):
        per_kind[c.kind] += c.sent
        as_reduce_scatter += c.sent / 2 if c.sliced else c.sent  # (n-1)/n*B instead of 2(n-1)/n*B
    return per_kind, as_reduce_scatter


def xla_flops(compiled):
    cost = compiled.cost_analysis()
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    return float(cost.get("flops", float("nan"))) if cost else float("nan")


# ---- partix side ----


def run_partix(binary):
    out = subprocess.run([binary], check=True, capture_output=True,
                         text=True).stdout
    return {
        r["name"]: r
        for r in (json.loads(l) for l in out.splitlines() if l.startswith("{"))
    }


def norm_spec(spec):
    """Drops trailing Nones and wraps single axes: a comparable form of a spec."""
    s = [e if e is None or isinstance(e, list) else [e] for e in spec]
    while s and s[-1] is None:
        s.pop()
    return s


def check_same_definition(sc, px):
    problems = []
    if px["mesh"] != sc["mesh"]:
        problems.append(f"mesh {px['mesh']} vs {sc['mesh']}")
    theirs = [(a["name"], a["shape"], norm_spec(a["spec"])) for a in px["args"]]
    ours = [(n, s, norm_spec(p)) for n, s, p in sc["args"]]
    if theirs != ours:
        problems.append(f"args {theirs} vs {ours}")
    if norm_spec(px["out"]) != norm_spec(sc["out"]):
        problems.append(f"out {px['out']} vs {sc['out']}")
    if problems:
        raise SystemExit(
            f"scenario {sc['name']}: partix and this script disagree: " +
            "; ".join(problems))


# ---- report ----


def fmt_bytes(v):
    return f"{v:,.0f}"


def fmt_ratio(px, xla):
    if xla == 0:
        return "-" if px == 0 else "inf"
    return f"{px / xla:.3f}"


def print_table(rows):
    header = ("scenario", "kind", "XLA bytes", "partix bytes", "ratio")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(5)]
    line = lambda r: "| " + " | ".join(
        str(c).ljust(w) if i < 2 else str(c).rjust(w)
        for i, (c, w) in enumerate(zip(r, widths))) + " |"
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--partix",
                        default=os.path.join(here, "..", "build", "bin",
                                             "partix_bench_spmd_scenarios"))
    parser.add_argument("--only",
                        default="",
                        help="comma-separated scenario names")
    parser.add_argument("--hlo",
                        default="",
                        help="print XLA's compiled HLO of one scenario")
    parser.add_argument("--json",
                        action="store_true",
                        help="JSON lines instead of a table")
    opts = parser.parse_args()

    scenarios = all_scenarios()
    if opts.hlo:
        sc = next((s for s in scenarios if s["name"] == opts.hlo), None)
        if sc is None:
            raise SystemExit(f"unknown scenario {opts.hlo!r}")
        compiled = compile_xla(sc)
        print(compiled.as_text())
        for c in collectives(compiled.as_text(),
                             math.prod(sc["mesh"].values())):
            print(
                f"# {c.op}: group {c.group}, operand bytes {c.operand_bytes}, sent per device "
                f"{c.sent:,.0f}{' (feeds only a dynamic-slice)' if c.sliced else ''}",
                file=sys.stderr)
        return

    if opts.only:
        keep = set(opts.only.split(","))
        scenarios = [s for s in scenarios if s["name"] in keep]
    partix = run_partix(opts.partix)
    rows, summary, records = [], [], []
    for sc in scenarios:
        px = partix.get(sc["name"])
        if px is None:
            raise SystemExit(f"partix printed no scenario {sc['name']!r}")
        check_same_definition(sc, px)
        compiled = compile_xla(sc)
        xb, x_rs = xla_bytes(compiled, math.prod(sc["mesh"].values()))
        pb = {k: float(px["bytes_per_device"].get(k, 0.0)) for k in KINDS}
        for k in KINDS:
            if xb[k] or pb[k]:
                rows.append((sc["name"], k, fmt_bytes(xb[k]), fmt_bytes(pb[k]),
                             fmt_ratio(pb[k], xb[k])))
        xt, pt = sum(xb.values()), sum(pb.values())
        rows.append((sc["name"], "TOTAL", fmt_bytes(xt), fmt_bytes(pt),
                     fmt_ratio(pt, xt)))
        summary.append(
            (sc["name"], xt, x_rs, pt, xla_flops(compiled), float(px["flops"]),
             float(px["duplicated_flops_fraction"])))
        records.append(
            dict(name=sc["name"],
                 mesh=sc["mesh"],
                 xla_bytes=xb,
                 partix_bytes=pb,
                 xla_total_sliced_all_reduce_as_reduce_scatter=x_rs,
                 xla_flops=summary[-1][4],
                 partix_flops=summary[-1][5],
                 partix_duplicated_flops_fraction=summary[-1][6]))

    if opts.json:
        for r in records:
            print(json.dumps(r))
        return
    print_table(rows)
    print()
    # "XLA, AR+slice as RS": XLA's total had its CPU pipeline turned each all-reduce that only
    # feeds a dynamic-slice into the reduce-scatter GPU/TPU pipelines emit. Flops per device as
    # each side's cost analysis counts them; "dup." is partix's duplicated_flops_fraction.
    print(
        "| scenario | XLA total | XLA, AR+slice as RS | partix total | partix <= XLA |"
        " XLA flops/dev | partix flops/dev | partix dup. |")
    print("|---|---:|---:|---:|:---:|---:|---:|---:|")
    for name, xt, x_rs, pt, xf, pf, dup in summary:
        print(
            f"| {name} | {fmt_bytes(xt)} | {fmt_bytes(x_rs)} | {fmt_bytes(pt)} | "
            f"{'yes' if pt <= xt else 'NO'} | {xf:,.0f} | {pf:,.0f} | {dup:.3f} |"
        )


if __name__ == "__main__":
    main()
