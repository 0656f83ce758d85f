#!/usr/bin/env bash
# The CLI under mpirun against one process: `partix train --model tiny --mesh 4x2` logs the
# same losses (within 1e-5 relative) with 2 processes of 4 devices as with 1 process of 8, and
# `partix generate --devices 8 --greedy` writes the same text; process 0 alone prints.
# Usage: cli_equal.sh PARTIX_BINARY WORK_DIR [train|generate]...
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
  if [[ $w == train ]]; then
    args=(train --model tiny --mesh 4x2 --steps 10 --batch 8 --seq 32 --quiet)
    "$partix" "${args[@]}" --metrics "$work/one.csv" >"$work/one.out"
    "${mpi[@]}" "$partix" "${args[@]}" --metrics "$work/two.csv" >"$work/two.out"
    [[ $(grep -c '^GPT-2' "$work/two.out") == 1 ]] || { echo "expected one banner:"; cat "$work/two.out"; exit 1; }
    paste -d, "$work/one.csv" "$work/two.csv" | awk -F, 'NR > 1 {
        d = $2 - $5; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2);
        if (r > 1e-5) { printf "step %s: loss %s (1 process) vs %s (2 processes)\n", $1, $2, $5; bad = 1 }
        n++ }
      END { if (n != 10) { print "expected 10 steps, got " n; exit 1 } exit bad }'
    echo "train: 10 losses equal within 1e-5 relative"
  else
    args=(generate --devices 8 --greedy --max-tokens 12 --prompt "The capital of France is" --quiet)
    "$partix" "${args[@]}" --output "$work/one.txt" >/dev/null
    "${mpi[@]}" "$partix" "${args[@]}" --output "$work/two.txt" >"$work/two.out"
    cmp "$work/one.txt" "$work/two.txt" || { echo "texts differ:"; cat "$work/one.txt" "$work/two.txt"; exit 1; }
    [[ $(grep -c '^prefill:' "$work/two.out") == 1 ]] || { echo "expected one report:"; cat "$work/two.out"; exit 1; }
    echo "generate: the same text: $(cat "$work/one.txt")"
  fi
done
