#!/usr/bin/env bash
# Configures and builds partix (Release) into ./build, or the folder given as $BUILD_DIR.
# Extra arguments go to cmake's configure step, e.g. -DPARTIX_SANITIZE=thread.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DPARTIX_WERROR=ON "$@" >/dev/null
cmake --build "$build_dir" -j "$jobs"
# Tools (clangd, clang-tidy) find the compile commands at the root.
ln -sf "$build_dir/compile_commands.json" compile_commands.json
