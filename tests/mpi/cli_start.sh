#!/usr/bin/env bash
# Start-up under mpirun is bounded and the processes agree before any work:
#   stopped:      process 1 is stopped before MPI_Init: process 0 ends after the collective
#                 timeout, saying what it waited for, and the job ends;
#   flags:        processes given different --seed / --lr fail at once, naming the flag and
#                 both processes (instead of training silently apart);
#   unknown_flag: process 1 cannot parse its flags: process 0 stops at once naming it and
#                 its error, instead of waiting for it the whole collective timeout.
# Usage: cli_start.sh PARTIX_BINARY CASE
set -uo pipefail
partix=$1
what=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
train="$partix train --model tiny --mesh 2x1 --steps 200 --batch 4 --seq 16 --quiet"
if [[ $what == stopped ]]; then
  export PARTIX_COLLECTIVE_TIMEOUT_S=5
  # The bound: the timeout, plus start-up and mpirun ending the job.
  bound=35
  want='\[distributed::initialize\] timed out after 5 s in MPI_Init waiting for the job.s 2 processes'
  cmd="if [ \$OMPI_COMM_WORLD_RANK = 1 ]; then kill -STOP \$\$; fi; exec $train"
else
  # A long timeout: ending well before it shows that nobody waited for it.
  export PARTIX_COLLECTIVE_TIMEOUT_S=60
  bound=30
  if [[ $what == flags ]]; then
    want='\[partix train\] process [01] has --(seed|lr) [0-9.e-]+ but process [01] has --(seed|lr) '
    cmd="exec $train --seed \$OMPI_COMM_WORLD_RANK --lr 0.00\$((OMPI_COMM_WORLD_RANK + 1))"
  else
    want='\[partix train\] process 1 stopped: The following argument was not expected: --bogus'
    cmd="if [ \$OMPI_COMM_WORLD_RANK = 1 ]; then exec $train --bogus; fi; exec $train"
  fi
fi
err=$(mktemp)
trap 'rm -f "$err"' EXIT
start=$(date +%s)
timeout -s KILL $((bound + 30)) mpirun -np 2 --oversubscribe bash -c "$cmd" >/dev/null 2>"$err"
rc=$?
took=$(($(date +%s) - start))
cat "$err" | grep '^partix' || true
if ((rc == 0)); then echo "FAIL: the job succeeded"; exit 1; fi
if ((took > bound)); then echo "FAIL: the job took $took s (bound $bound s)"; exit 1; fi
if ! grep -Eq "$want" "$err"; then echo "FAIL: no error matching: $want"; cat "$err"; exit 1; fi
echo "$what: ended in $took s (exit $rc) with the expected error"
