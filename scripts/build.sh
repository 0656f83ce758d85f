#!/usr/bin/env bash
# Configures and builds partix (Release) into ./build, or the folder given as $BUILD_DIR:
# the library, the CLI, the tests, benchmarks, examples and the Python package.
# `--cli` as the first argument builds only the library and the CLI (the README's main job).
# Other arguments go to cmake's configure step, e.g. -DPARTIX_SANITIZE=thread.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cli_only=0
if [[ ${1:-} == --cli ]]; then
  cli_only=1
  shift
fi
# The Python package builds when the project's venv (made by scripts/setup.sh) has nanobind.
venv=${PARTIX_CACHE:-$HOME/.cache/partix}/venv
python_args=(-DPARTIX_PYTHON=OFF)
if ((!cli_only)) && [[ ${PARTIX_PYTHON:-auto} != OFF ]] &&
    "$venv/bin/python" -c "import nanobind" 2>/dev/null; then
  python_args=(-DPARTIX_PYTHON=ON -DPython_EXECUTABLE="$venv/bin/python")
fi
# Both modes state every part, so one build folder switches between them.
parts=(-DPARTIX_BUILD_TESTS=ON -DPARTIX_BUILD_BENCH=ON -DPARTIX_BUILD_TOOLS=ON)
if ((cli_only)); then parts=(-DPARTIX_BUILD_TESTS=OFF -DPARTIX_BUILD_BENCH=OFF -DPARTIX_BUILD_TOOLS=ON); fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DPARTIX_WERROR=ON \
  "${parts[@]}" "${python_args[@]}" "$@" >/dev/null
if ((cli_only)); then
  cmake --build "$build_dir" -j "$jobs" --target partix_cli
else
  cmake --build "$build_dir" -j "$jobs"
fi
# The venv imports the package from this build (python -c "import partix").
if [[ ${python_args[0]} == -DPARTIX_PYTHON=ON ]]; then
  site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$(cd "$build_dir" && pwd)/python" > "$site/partix-build.pth"
fi
# Tools (clangd, clang-tidy) find the compile commands at the root.
ln -sf "$build_dir/compile_commands.json" compile_commands.json
