#!/usr/bin/env bash
# Builds the ThreadSanitizer preset and runs the runtime, collective, shard_map and pipeline tests
# under it.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset tsan >/dev/null
cmake --build build-tsan -j "${JOBS:-$(nproc)}" --target partix_tests
# libgomp is not TSan-instrumented: its internal synchronisation shows up as false reports.
# allocator_may_return_null: a test allocates 4 TiB on purpose to check the error path.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1 suppressions=$PWD/scripts/tsan.supp}"
export OMP_NUM_THREADS=1
# The isolation stress test runs its long version here (PARTIX_STRESS_ITERATIONS).
PARTIX_STRESS_ITERATIONS=${PARTIX_STRESS_ITERATIONS:-400} \
build-tsan/bin/partix_tests --gtest_filter='Fiber*:LocalCollectives*:Collectives*:ThreadCommunicator*:Runtime*:Smoke*:Equivalence.ShardMap*:VjpFiniteDifferences.Collectives*:Profiler*:Isolation*:Gpt2Pipeline*:CondGrad*'
