#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz (in build-asan: clang, libFuzzer, AddressSanitizer
# and UndefinedBehaviorSanitizer; tools/sanitizer-build.sh) and runs each over its seed
# corpus for SECONDS (default 30), one after another, printing the executions each made. A
# crash, sanitizer report, leak, hang (-timeout) or memory blow-up (-rss_limit_mb) fails the
# run; the input that did it is kept in build-asan/artifacts/ (replay:
# build-asan/tests/fuzz/fuzz_TARGET FILE).
#
#   tools/fuzz.sh [SECONDS]       # CI runs tools/fuzz.sh 30
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-30}
targets=(onnx_import strategy plan npy store)

tools/sanitizer-build.sh piper_fuzz_targets

mkdir -p build-asan/artifacts
for target in "${targets[@]}"; do
  # New inputs go to build-asan/corpus/TARGET; the checked-in seeds stay as they are.
  found=build-asan/corpus/$target
  log=build-asan/fuzz-$target.log
  mkdir -p "$found"
  dict=()
  [[ -f tests/fuzz/$target.dict ]] && dict=(-dict="tests/fuzz/$target.dict")
  if ! UBSAN_OPTIONS=print_stacktrace=1 build-asan/tests/fuzz/fuzz_"$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="build-asan/artifacts/$target-" "${dict[@]}" \
    "$found" "tests/fuzz/corpus/$target" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz: error: $target failed (log $log; input in build-asan/artifacts/)" >&2
    exit 1
  fi
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "fuzz: $target: ${executions:-?} executions in ${seconds} s, no crash, leak or hang"
done
