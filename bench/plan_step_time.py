#!/usr/bin/env python3
"""partix plan's predicted training step time against partix train's measured one.

One configuration (the first) is measured and calibrates the plan; every other one is
predicted from that factor and from the rates `partix plan` measures on this host, then
measured. GPT-2 small as partix train runs it (a byte vocabulary of 256), batch 8 x 128, on
8 virtual devices (1 for 1x1).

    python3 bench/plan_step_time.py [--partix build/bin/partix] [--steps 5] [--only 1x1,8x1]

Prints one row per configuration: predicted and measured seconds per step and the error.
Exit status 1 if any error exceeds --tolerance (default 0.25).
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

BATCH, SEQ = 8, 128

# name, mesh, train flags, plan flags
CONFIGS = [
    ("4x2", "4x2", [], []),
    ("1x1", "1x1", [], []),
    ("8x1", "8x1", [], []),
    ("2x4", "2x4", [], []),
    ("1x8", "1x8", [], []),
    ("8x1 fsdp", "8x1", ["--fsdp"], ["--fsdp"]),
    ("4x2 remat", "4x2", ["--remat"], ["--remat", "layer"]),
    ("4x2 fsdp remat", "4x2", ["--fsdp", "--remat"], ["--fsdp", "--remat", "layer"]),
    ("pp2 dp2 tp2 1f1b M4", "stage=2,data=2,model=2",
     ["--microbatches", "4"], ["--microbatches", "4"]),
    ("pp2 dp4 gpipe M2", "stage=2,data=4",
     ["--microbatches", "2", "--schedule", "gpipe"],
     ["--microbatches", "2", "--schedule", "gpipe"]),
    ("pp4 dp2 1f1b M4", "stage=4,data=2",
     ["--microbatches", "4"], ["--microbatches", "4"]),
    ("pp2 dp4 interleaved V2 M2", "stage=2,data=4",
     ["--microbatches", "2", "--schedule", "interleaved", "--virtual-stages", "2"],
     ["--microbatches", "2", "--schedule", "interleaved", "--virtual-stages", "2"]),
]


def measure(partix, mesh, flags, steps, work):
    """Median seconds per step of partix train, its first two steps left out."""
    metrics = os.path.join(work, "metrics.csv")
    cmd = [partix, "train", "--model", "small", "--mesh", mesh, "--batch", str(BATCH),
           "--seq", str(SEQ), "--steps", str(steps), "--warmup", "1", "--quiet",
           "--metrics", metrics] + flags
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        rows = list(csv.DictReader(f))
    seconds = [BATCH * SEQ / float(r["tokens_per_s"]) for r in rows[2:]]
    return statistics.median(seconds)


def plan(partix, mesh, flags, rates, calibrate=None, calibration=None):
    cmd = [partix, "plan", "--model", "small", "--vocab", "256", "--mesh", mesh,
           "--batch", str(BATCH), "--seq", str(SEQ), "--host-rates", rates, "--json"] + flags
    if calibrate is not None:
        cmd += ["--calibrate", repr(calibrate)]
    if calibration is not None:
        cmd += ["--calibration", repr(calibration)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["step_time"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partix", default="build/bin/partix")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--tolerance", type=float, default=0.25)
    ap.add_argument("--only", default="", help="comma-separated names (the first is always run)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    configs = [c for k, c in enumerate(CONFIGS) if k == 0 or not only or c[0] in only]
    with tempfile.TemporaryDirectory() as work:
        rates = os.path.join(work, "host_rates.json")
        name, mesh, tflags, pflags = configs[0]
        measured0 = measure(args.partix, mesh, tflags, args.steps, work)
        cal = plan(args.partix, mesh, pflags, rates, calibrate=measured0)
        factor = cal["calibration"]
        print(f"calibrated on {name}: measured {measured0:.3f} s, modelled "
              f"{cal['modelled_seconds']:.3f} s, factor {factor:.3f}")
        print(f"{'configuration':<28} {'predicted':>10} {'measured':>10} {'error':>8}   "
              f"(modelled: compute, memory, per-instruction, collectives)")
        worst = 0.0
        for name, mesh, tflags, pflags in configs[1:]:
            p = plan(args.partix, mesh, pflags, rates, calibration=factor)
            m = measure(args.partix, mesh, tflags, args.steps, work)
            err = p["seconds"] / m - 1
            worst = max(worst, abs(err))
            print(f"{name:<28} {p['seconds']:>9.3f}s {m:>9.3f}s {100 * err:>+7.1f}%   "
                  f"({p['compute']:.2f}, {p['memory']:.2f}, {p['per_instruction']:.2f}, "
                  f"{p['collectives']:.2f})", flush=True)
        print(f"largest error {100 * worst:.1f}% (tolerance {100 * args.tolerance:.0f}%)")
        return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
