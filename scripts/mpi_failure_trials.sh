#!/usr/bin/env bash
# Failure between processes is loud and bounded. Runs `partix train` under
# mpirun (2 processes x 4 devices) TRIALS times in each of two ways:
#   kill:  one process, chosen at random, is killed (SIGKILL) at a random moment mid-training;
#   throw: one process raises an error of its own (a device memory limit only it has).
# A trial passes when the job ends within the bound (collective timeout + 60 s) and the other
# process ended with a partix error naming the failed process. mpirun is told to leave the
# survivors running (--enable-recovery, orte_abort_on_non_zero_status 0), so that partix, not
# mpirun, must end them. Prints the counts; exits non-zero on any hang or unclear ending.
#   scripts/mpi_failure_trials.sh [TRIALS] [PARTIX_BINARY]   (default 20, build/bin/partix)
set -uo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20}
partix=${2:-build/bin/partix}
timeout_s=${PARTIX_COLLECTIVE_TIMEOUT_S:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PARTIX_COLLECTIVE_TIMEOUT_S=$timeout_s
bound=$((timeout_s + 60))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The seed marks this script's jobs among other partix processes on the machine.
train=(train --model tiny --mesh 4x2 --steps 100000 --batch 8 --seq 32 --quiet --seed $$)
hangs=0 unclear=0 kill_ok=0 throw_ok=0

rank_pid() {  # the pid of process $1 of the running job
  for p in $(pgrep -f -- "$partix ${train[*]}"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return
    fi
  done
}

for ((i = 1; i <= trials; ++i)); do
  # --enable-recovery: mpirun leaves the survivors running, so partix itself must end them.
  mpirun -np 2 --oversubscribe --enable-recovery "$partix" "${train[@]}" \
    >"$work/out" 2>"$work/err" &
  job=$!
  sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", 2 + 4 * rand() }')"
  victim=$((RANDOM % 2))
  pid=$(rank_pid "$victim")
  if [[ -z $pid ]]; then
    echo "kill trial $i: process $victim not found (the job ended early?)"
    unclear=$((unclear + 1))
    pkill -9 -f -- "$partix ${train[*]}"; wait "$job" 2>/dev/null
    continue
  fi
  kill -9 "$pid"
  start=$(date +%s)
  while kill -0 "$job" 2>/dev/null && (($(date +%s) - start < bound)); do sleep 0.2; done
  if kill -0 "$job" 2>/dev/null; then
    hangs=$((hangs + 1))
    echo "kill trial $i: HANG (process $victim killed)"
    pkill -9 -f -- "$partix ${train[*]}"; kill -9 "$job"
    wait "$job" 2>/dev/null
    continue
  fi
  wait "$job"; rc=$?
  survivor=$((1 - victim))
  if grep -q "partix: .*process(es) $victim" "$work/err" &&
     grep -q "partix: process $survivor stops" "$work/err"; then
    kill_ok=$((kill_ok + 1))
    echo "kill trial $i: process $victim killed; ended in $(($(date +%s) - start)) s (mpirun exit $rc): $(grep -m1 'partix: \[' "$work/err" | cut -c1-160)"
  else
    unclear=$((unclear + 1))
    echo "kill trial $i: exit $rc without an error naming process $victim (survivor $survivor):"
    tail -5 "$work/err"
  fi
done

for ((i = 1; i <= trials; ++i)); do
  victim=$((RANDOM % 2))
  cmds=()
  for r in 0 1; do
    [[ $r -gt 0 ]] && cmds+=(:)
    if ((r == victim)); then
      cmds+=(-np 1 env PARTIX_DEVICE_MEMORY_BYTES=100000 "$partix" "${train[@]}")
    else
      cmds+=(-np 1 "$partix" "${train[@]}")
    fi
  done
  start=$(date +%s)
  timeout -s KILL "$bound" mpirun --oversubscribe --mca orte_abort_on_non_zero_status 0 \
    "${cmds[@]}" >"$work/out" 2>"$work/err"
  rc=$?
  if ((rc == 137)); then
    hangs=$((hangs + 1))
    echo "throw trial $i: HANG"
  elif grep -q "process $victim stopped" "$work/err" &&
       grep -q "partix: process $((1 - victim)) stops" "$work/err"; then
    throw_ok=$((throw_ok + 1))
    echo "throw trial $i: process $victim raised; ended in $(($(date +%s) - start)) s (mpirun exit $rc)"
  else
    unclear=$((unclear + 1))
    echo "throw trial $i: exit $rc without the other process naming process $victim:"
    tail -5 "$work/err"
  fi
done

echo "kill trials: $kill_ok of $trials clear; throw trials: $throw_ok of $trials clear; hangs: $hangs; unclear: $unclear"
((hangs == 0 && unclear == 0))
