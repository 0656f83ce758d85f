#!/usr/bin/env bash
# The CLI under mpirun against one process: `partix train --model tiny --mesh 4x2` logs the
# same losses (within 1e-5 relative) with 2 processes of 4 devices as with 1 process of 8, and
# `partix generate --devices 8 --greedy` writes the same text (generate_quantized: with
# --weights quantized); process 0 alone prints.
# save_trace: `--save` under mpirun writes the model one process writes (within 1e-3 of each
# tensor's largest value: Adam's update, m / sqrt(v), turns reduction-order differences of
# near-zero gradients into differences up to the learning rate), and `--trace` holds every
# process's devices.
# train_explicit: the same 2-process run with --explicit-sharding against the 1-process Auto one.
# train_pipeline: 2 processes pipelining the layers over a 'stage' axis (stage=2,data=2,model=2,
# 1F1B over 2 microbatches; each process holds one stage) against the unpipelined 1-process run.
# Usage: cli_equal.sh PARTIX_BINARY WORK_DIR
#          [train|train_explicit|train_pipeline|generate|generate_quantized|save_trace]...
set -euo pipefail
partix=$1
work=$2
shift 2
what=("${@:-train generate}")
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PARTIX_COLLECTIVE_TIMEOUT_S=${PARTIX_COLLECTIVE_TIMEOUT_S:-120}
mpi=(mpirun -np 2 --oversubscribe)

for w in ${what[*]}; do
  if [[ $w == train || $w == train_explicit || $w == train_pipeline ]]; then
    args=(train --model tiny --mesh 4x2 --steps 10 --batch 8 --seq 32 --quiet)
    "$partix" "${args[@]}" --metrics "$work/one.csv" >"$work/one.out"
    # train_explicit: 2 processes with the mesh's axes Explicit against 1 process with Auto.
    [[ $w == train_explicit ]] && args+=(--explicit-sharding)
    [[ $w == train_pipeline ]] && args=(train --model tiny --mesh stage=2,data=2,model=2 --microbatches 2
                                        --schedule 1f1b --steps 10 --batch 8 --seq 32 --quiet)
    "${mpi[@]}" "$partix" "${args[@]}" --metrics "$work/two.csv" >"$work/two.out"
    [[ $(grep -c '^GPT-2' "$work/two.out") == 1 ]] || { echo "expected one banner:"; cat "$work/two.out"; exit 1; }
    paste -d, "$work/one.csv" "$work/two.csv" | awk -F, 'NR > 1 {
        d = $2 - $5; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2);
        if (r > 1e-5) { printf "step %s: loss %s (1 process) vs %s (2 processes)\n", $1, $2, $5; bad = 1 }
        n++ }
      END { if (n != 10) { print "expected 10 steps, got " n; exit 1 } exit bad }'
    echo "$w: 10 losses equal within 1e-5 relative"
  elif [[ $w == save_trace ]]; then
    args=(train --model tiny --mesh 4x2 --steps 5 --batch 8 --seq 32 --quiet)
    "$partix" "${args[@]}" --save "$work/one" >/dev/null
    "${mpi[@]}" "$partix" "${args[@]}" --save "$work/two" >/dev/null
    python3 "$(dirname "$0")/safetensors_close.py" "$work/one/model.safetensors" \
      "$work/two/model.safetensors" 1e-3
    "${mpi[@]}" "$partix" generate --devices 8 --greedy --max-tokens 3 --quiet \
      --trace "$work/trace.json" >/dev/null
    python3 - "$work/trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
tracks = sorted({(e["pid"], e["tid"]) for e in events if e["ph"] == "X"})
want = [(d // 4, d) for d in range(8)]
assert tracks == want, f"trace tracks {tracks}, expected {want}"
print(f"trace: {len(events)} events on the 8 devices of both processes")
PY
  else
    args=(generate --devices 8 --greedy --max-tokens 12 --prompt "The capital of France is" --quiet)
    # generate_quantized: the GGUF's quantized matrices kept as they are, split over devices
    # of both processes (device_put reshards them on device, in whole blocks).
    [[ $w == generate_quantized ]] && args+=(--weights quantized)
    "$partix" "${args[@]}" --output "$work/one.txt" >/dev/null
    "${mpi[@]}" "$partix" "${args[@]}" --output "$work/two.txt" >"$work/two.out"
    cmp "$work/one.txt" "$work/two.txt" || { echo "texts differ:"; cat "$work/one.txt" "$work/two.txt"; exit 1; }
    [[ $(grep -c '^prefill:' "$work/two.out") == 1 ]] || { echo "expected one report:"; cat "$work/two.out"; exit 1; }
    echo "$w: the same text: $(cat "$work/one.txt")"
  fi
done
