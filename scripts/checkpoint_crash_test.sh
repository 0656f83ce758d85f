#!/usr/bin/env bash
# Crash safety of training checkpoints: `partix train --save-every 1 --keep 3` is killed with
# SIGKILL at a random moment, TRIALS times (default 30). After every kill:
#   - every committed step (step_N with its index.json) is byte-identical to step N of an
#     uninterrupted reference run (no partial step ever looks committed);
#   - the folder resumes (--resume) from its last committed step and finishes with files
#     byte-identical to the reference's last step (the continuation is bit-exact).
# Usage: scripts/checkpoint_crash_test.sh [TRIALS] [SEED]
#   PARTIX (default build/bin/partix), PARTIX_CRASH_WORK (default: a fresh temporary folder).
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-30}
RANDOM=${2:-1}
partix=${PARTIX:-build/bin/partix}
work=${PARTIX_CRASH_WORK:-$(mktemp -d)}
steps=60
args=(train --model tiny --mesh 2x2 --steps "$steps" --batch 8 --seq 64 --save-every 1 --quiet)

rm -rf "$work"
mkdir -p "$work"
"$partix" "${args[@]}" --checkpoint-dir "$work/ref" >/dev/null

committed() {  # the committed steps of folder $1, ascending
  local d
  for d in "$1"/step_*; do
    if [[ -d $d && -f $d/index.json && $(basename "$d") =~ ^step_([0-9]+)$ ]]; then
      echo "${BASH_REMATCH[1]}"
    fi
  done | sort -n
}

same_step() {  # folder $1's step $2 holds exactly the reference's files
  local a="$1/step_$2" b="$work/ref/step_$2"
  [[ "$(cd "$a" && ls)" == "$(cd "$b" && ls)" ]] || { echo "step $2: files differ: $(ls "$a")"; return 1; }
  for f in "$b"/*; do
    cmp -s "$f" "$a/$(basename "$f")" || { echo "step $2: $(basename "$f") differs"; return 1; }
  done
}

killed=0 passed=0 none=0 mid_save=0
for ((t = 1; t <= trials; t++)); do
  run="$work/run"
  rm -rf "$run"
  "$partix" "${args[@]}" --keep 3 --checkpoint-dir "$run" >/dev/null 2>&1 &
  pid=$!
  # 0 to 3 s (a run takes about 2.5): startup, compilation, steps and saves all get hit.
  sleep "$(printf '%d.%03d' $((RANDOM % 3)) $((RANDOM % 1000)))"
  kill -9 "$pid" 2>/dev/null || true
  status=0
  wait "$pid" 2>/dev/null || status=$?
  if ((status == 137)); then killed=$((killed + 1)); fi
  # A temporary left behind means the kill interrupted a save (or a deletion of an old step).
  if [[ -n $(find "$run" -maxdepth 1 -name 'step_*.tmp-*' 2>/dev/null) ]]; then
    mid_save=$((mid_save + 1))
  fi
  latest=$(committed "$run" | tail -1)
  for s in $(committed "$run"); do
    same_step "$run" "$s" || { echo "trial $t: FAILED (committed step $s)"; exit 1; }
  done
  out=$("$partix" "${args[@]}" --keep 3 --resume --checkpoint-dir "$run" 2>&1) || {
    echo "trial $t: FAILED to resume from step ${latest:-none}:"
    echo "$out"
    exit 1
  }
  if [[ -n $latest ]]; then
    grep -q "resumed from .*step_$latest (step $latest of $steps)" <<<"$out" || {
      echo "trial $t: FAILED: did not resume from step $latest:"
      echo "$out"
      exit 1
    }
  else
    none=$((none + 1))
  fi
  same_step "$run" "$steps" || { echo "trial $t: FAILED (the resumed run's last step)"; exit 1; }
  leftovers=$(find "$run" -maxdepth 1 -name '*.tmp-*')
  [[ -z $leftovers ]] || { echo "trial $t: FAILED: temporaries left: $leftovers"; exit 1; }
  passed=$((passed + 1))
  echo "trial $t: last committed step ${latest:-none}, resumed and finished bit-exactly"
done
echo "checkpoint crash test: $passed of $trials trials passed ($killed killed mid-run, $mid_save" \
  "during a save, $none before the first commit)"
