#!/usr/bin/env bash
# Differential fuzzing of the SPMD compiler: N random programs under random shardings on
# meshes of 1-8 devices, each compared with the single-device run.
#   scripts/fuzz_spmd.sh N [SEED]
# A disagreement prints the case and how to replay it; the exit status is 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: scripts/fuzz_spmd.sh N [SEED]}
seed=${2:-$(date +%s)}
build_dir=${BUILD_DIR:-build}
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target partix_fuzz_spmd >/dev/null
echo "fuzz_spmd: $n cases, seed $seed"
exec "$build_dir/bin/partix_fuzz_spmd" --cases "$n" --seed "$seed"
