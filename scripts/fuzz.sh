#!/usr/bin/env bash
# Coverage-guided fuzzing of partix's parsers of untrusted input (fuzz/).
#
#   scripts/fuzz.sh TARGET SECONDS   build the libFuzzer harnesses, fuzz TARGET for SECONDS
#   scripts/fuzz.sh all SECONDS      every target in turn, SECONDS each
#   scripts/fuzz.sh list             the targets
#
# Targets: gguf gguf_tokenizer safetensors safetensors_index tokenizer_json program_text
# checkpoint_index checkpoint_data cli_flags.
# The build (clang, libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer) goes to
# ./build-fuzz, or $BUILD_DIR. Each run starts from the committed seeds in fuzz/corpus/TARGET,
# which it only reads: inputs that find new coverage, crash inputs and the log go to
# $FUZZ_WORK/TARGET (default /tmp/partix-fuzz), so later runs resume from what earlier ones found.
# Prints executions and coverage per target; exits non-zero when a target crashed, hung, leaked
# or raised anything but partix::Error. Runs under `nice` ($NICE, default 10); extra libFuzzer
# flags come from $FUZZ_ARGS (e.g. FUZZ_ARGS=-jobs=2).
# Reproduce a crash: build-fuzz/bin/partix_fuzz_TARGET CRASH_FILE
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(gguf gguf_tokenizer safetensors safetensors_index tokenizer_json program_text
         checkpoint_index checkpoint_data cli_flags)
usage() {
  echo "usage: $0 TARGET|all SECONDS   (targets: ${targets[*]})" >&2
  exit 2
}
[[ ${1:-} == list ]] && { printf '%s\n' "${targets[@]}"; exit 0; }
[[ $# -eq 2 && $2 =~ ^[1-9][0-9]*$ ]] || usage
if [[ $1 == all ]]; then
  selected=("${targets[@]}")
else
  [[ " ${targets[*]} " == *" $1 "* ]] || usage
  selected=("$1")
fi
seconds=$2
build_dir=${BUILD_DIR:-build-fuzz}
work=${FUZZ_WORK:-/tmp/partix-fuzz}
nice_level=${NICE:-10}

cmake -S . -B "$build_dir" -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARTIX_FUZZ=ON -DPARTIX_BUILD_TESTS=OFF \
  -DPARTIX_BUILD_BENCH=OFF -DPARTIX_BUILD_TOOLS=OFF >/dev/null
build_targets=()
for t in "${selected[@]}"; do build_targets+=(--target "partix_fuzz_$t"); done
nice -n "$nice_level" cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" "${build_targets[@]}"

# Leaks are reported by libFuzzer at exit of each input's run; undefined behaviour aborts
# (the build passes -fno-sanitize-recover).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=()
summary=()
for t in "${selected[@]}"; do
  dir="$work/$t"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  # The harnesses write every input to a file (the readers take paths): on tmpfs that costs
  # nothing, on a disk filesystem the truncations dominate the run.
  tmp_root=${FUZZ_TMPDIR:-/dev/shm}
  [[ -d $tmp_root && -w $tmp_root ]] || tmp_root=$dir
  tmp=$(mktemp -d "$tmp_root/partix-fuzz-$t.XXXXXX")
  log="$dir/fuzz.log"
  dict=()
  [[ -f fuzz/dict/$t.dict ]] && dict=(-dict="fuzz/dict/$t.dict")
  echo "== $t: fuzzing for ${seconds}s (log: $log)"
  start=$(date +%s)
  status=0
  # The first corpus folder receives new inputs; the committed seeds are only read.
  # -timeout: an input running 10 s is a hang; -rss_limit_mb: a reader allocating more than
  # 2 GiB for a small input is a bug (every size in a file must be checked against the file).
  # shellcheck disable=SC2086
  TMPDIR="$tmp" nice -n "$nice_level" "$build_dir/bin/partix_fuzz_$t" "$dir/corpus" \
    "fuzz/corpus/$t" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/artifacts/" -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1 ||
    status=$?
  rm -rf "$tmp"
  elapsed=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  corpus=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 || true)
  line="$t: ${execs:-?} executions in ${elapsed}s (${rate:-?}/s), ${cov:-cov: ?}, ${corpus:-corp: ?}, peak RSS ${rss:-?} MB"
  if [[ $status -ne 0 ]]; then
    line+=" -- FAILED (exit $status): $(grep -m1 -E 'ERROR|partix fuzz:|SUMMARY' "$log" || true)"
    line+="; artifacts: $(ls "$dir/artifacts" | tr '\n' ' ')"
    failed+=("$t")
    tail -n 60 "$log" >&2
  fi
  echo "$line"
  summary+=("$line")
done

echo "== summary"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
