#!/usr/bin/env bash
# partix's collectives across 2 processes x 4 devices next to MPI_Allreduce / MPI_Allgather,
# in one run (bench/mpi_collectives_bench.cpp). Builds nothing: run scripts/build.sh first.
#   bench/mpi_collectives.sh [--sizes-mib 1,4,16] [--reps N] [--warmup N]
# NP and DEVICES override the process count and devices per process; BUILD_DIR the build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/${BUILD_DIR:-build}/bin/partix_bench_mpi_collectives"
if [[ ! -x "${bin}" ]]; then
  echo "missing ${bin}: build first (scripts/build.sh)" >&2
  exit 1
fi
np="${NP:-2}"
per="${DEVICES:-4}"
# Open MPI refuses to run as root without both variables (containers often run as root).
if [[ "$(id -u)" == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# A large all_reduce on a busy machine can take seconds; do not let the collective timeout
# cut a slow repetition short.
export PARTIX_COLLECTIVE_TIMEOUT_S="${PARTIX_COLLECTIVE_TIMEOUT_S:-300}"
# --oversubscribe: each process runs several device threads, often on fewer cores.
exec mpirun -np "${np}" --oversubscribe -x PARTIX_NUM_CPU_DEVICES="${per}" \
  -x PARTIX_COLLECTIVE_TIMEOUT_S "${bin}" "$@"
