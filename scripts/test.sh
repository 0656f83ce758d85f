#!/usr/bin/env bash
# Builds partix and runs the default test suite, C++ and Python (well under 20 minutes on 2
# cores). The Python tests need the project's venv (scripts/setup.sh); PARTIX_PYTHON=OFF runs
# the C++ suite alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh "$@"
build_dir=${BUILD_DIR:-build}
if [[ ${PARTIX_PYTHON:-auto} != OFF ]] && ! grep -q '^PARTIX_PYTHON:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  echo "test: the Python package was not built (no venv with nanobind at" \
       "${PARTIX_CACHE:-~/.cache/partix}/venv): run scripts/setup.sh, or set PARTIX_PYTHON=OFF" >&2
  exit 1
fi
ctest --test-dir "$build_dir" --output-on-failure -j "${JOBS:-$(nproc)}"
