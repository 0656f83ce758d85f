#!/usr/bin/env bash
# Configures and builds partix (Release) into ./build, or the folder given as $BUILD_DIR.
# Extra arguments go to cmake's configure step, e.g. -DPARTIX_SANITIZE=thread.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# The Python package builds when the project's venv (made by scripts/setup.sh) has nanobind.
venv=${PARTIX_CACHE:-$HOME/.cache/partix}/venv
python_args=()
if [[ ${PARTIX_PYTHON:-auto} != OFF ]] && "$venv/bin/python" -c "import nanobind" 2>/dev/null; then
  python_args=(-DPARTIX_PYTHON=ON -DPython_EXECUTABLE="$venv/bin/python")
fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DPARTIX_WERROR=ON \
  "${python_args[@]}" "$@" >/dev/null
cmake --build "$build_dir" -j "$jobs"
# The venv imports the package from this build (python -c "import partix").
if ((${#python_args[@]})); then
  site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$(cd "$build_dir" && pwd)/python" > "$site/partix-build.pth"
fi
# Tools (clangd, clang-tidy) find the compile commands at the root.
ln -sf "$build_dir/compile_commands.json" compile_commands.json
