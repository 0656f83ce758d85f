#!/usr/bin/env bash
# Training checkpoints under mpirun: `partix train --model tiny --mesh 4x2` with 2 processes
# saves steps 3 and 6 (one data file per process and the index in each step), resumes to step
# 10 with 2 processes and, from a copy of the same checkpoints, with 1 process; both resumed
# runs log the losses of steps 7..10 of an uninterrupted 1-process run (within 1e-5 relative).
# The 2-process run's --save (gathered, written by process 0) holds the uninterrupted run's
# parameters (within 1e-4).
# Usage: cli_checkpoint.sh PARTIX_BINARY WORK_DIR
set -euo pipefail
partix=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PARTIX_COLLECTIVE_TIMEOUT_S=${PARTIX_COLLECTIVE_TIMEOUT_S:-120}
mpi=(mpirun -np 2 --oversubscribe)
args=(train --model tiny --mesh 4x2 --batch 8 --seq 32 --quiet)

# Losses of steps 7..10 in $1 against the uninterrupted run's (the CSV counts steps from 0).
same_losses() {
  awk -F, -v what="$2" 'NR == FNR { if (FNR > 1) want[$1] = $2; next }
    FNR > 1 { d = $2 - want[$1]; if (d < 0) d = -d; r = d / (want[$1] < 0 ? -want[$1] : want[$1]);
      if (r > 1e-5) { printf "%s: step %s loss %s, uninterrupted %s\n", what, $1, $2, want[$1]; bad = 1 }
      steps = steps " " $1 }
    END { if (steps != " 6 7 8 9") { print what ": expected rows 6 7 8 9, got" steps; exit 1 }
      exit bad }' "$work/one.csv" "$1"
}

"$partix" "${args[@]}" --steps 10 --metrics "$work/one.csv" --save "$work/hf_one" >"$work/one.out"

"${mpi[@]}" "$partix" "${args[@]}" --steps 6 --checkpoint-dir "$work/ck" --save-every 3 \
  >"$work/first.out"
grep -q 'checkpoints in .*: steps 3, 6$' "$work/first.out" || { echo "expected steps 3, 6:"; cat "$work/first.out"; exit 1; }
for step in 3 6; do
  got=$(cd "$work/ck/step_$step" && ls | tr '\n' ' ')
  want="data-00000-of-00002.safetensors data-00001-of-00002.safetensors index.json "
  [[ $got == "$want" ]] || { echo "step_$step holds: $got (expected $want)"; exit 1; }
done
[[ $(ls "$work/ck" | tr '\n' ' ') == "step_3 step_6 " ]] || { echo "left over: $(ls "$work/ck")"; exit 1; }
cp -r "$work/ck" "$work/ck_one"

"${mpi[@]}" "$partix" "${args[@]}" --steps 10 --checkpoint-dir "$work/ck" --save-every 3 --resume \
  --metrics "$work/two.csv" --save "$work/hf_two" >"$work/two.out"
grep -q 'resumed from .*step_6 (step 6 of 10)' "$work/two.out" || { echo "not resumed:"; cat "$work/two.out"; exit 1; }
grep -q 'checkpoints in .*: steps 3, 6, 9, 10$' "$work/two.out" || { echo "expected steps 3, 6, 9, 10:"; cat "$work/two.out"; exit 1; }
same_losses "$work/two.csv" "resumed with 2 processes"
cmp "$work/hf_one/config.json" "$work/hf_two/config.json"
python3 - "$work/hf_one/model.safetensors" "$work/hf_two/model.safetensors" <<'PY'
import array, json, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        lo, hi = t["data_offsets"]
        out[name] = (t["shape"], array.array("f", data[lo:hi]))
    return out
one, two = load(sys.argv[1]), load(sys.argv[2])
assert one.keys() == two.keys(), (sorted(one), sorted(two))
worst = 0.0
for name in one:
    assert one[name][0] == two[name][0], name
    for a, b in zip(one[name][1], two[name][1]):
        worst = max(worst, abs(a - b) / max(1.0, abs(a)))
assert len(one) > 0
if worst > 1e-4:
    sys.exit(f"--save of 2 processes differs from 1 process's by {worst}")
print(f"--save: {len(one)} tensors, largest difference {worst:.2e}")
PY

"$partix" "${args[@]}" --steps 10 --checkpoint-dir "$work/ck_one" --resume \
  --metrics "$work/one_resumed.csv" >"$work/one_resumed.out"
grep -q 'resumed from .*step_6' "$work/one_resumed.out" || { echo "not resumed:"; cat "$work/one_resumed.out"; exit 1; }
same_losses "$work/one_resumed.csv" "resumed with 1 process"
echo "checkpoint: steps 7..10 resumed with 2 processes and with 1 equal the uninterrupted run"
