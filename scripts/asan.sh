#!/usr/bin/env bash
# Builds the AddressSanitizer + UndefinedBehaviorSanitizer preset and runs the unit tests
# under it (the long model tests are left out unless a filter is given: ./scripts/asan.sh '*').
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset asan >/dev/null
cmake --build build-asan -j "${JOBS:-$(nproc)}" --target partix_tests
# allocator_may_return_null: some tests allocate absurd sizes on purpose to check the error path
# (operator new still aborts under ASan, so the test that allocates 4 TiB with new is left out).
export ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1 detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1 print_stacktrace=1}"
build-asan/bin/partix_tests --gtest_filter="${1:--Gpt2Train*:LlamaGolden*:Gpt2Golden*:BadInput.HugeButRepresentableShapesFailCleanly}"
