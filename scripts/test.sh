#!/usr/bin/env bash
# Builds partix and runs the default test suite (well under 20 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh "$@"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}"
