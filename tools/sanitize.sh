#!/usr/bin/env bash
# Builds Piper with clang under AddressSanitizer and UndefinedBehaviorSanitizer (build-asan,
# no CUDA; tools/sanitizer-build.sh) and runs the unit tests and a few integration tests with it: the planner, a run
# against PyTorch, the command-line errors and a data-parallel run. Any report aborts the
# process (-fno-sanitize-recover=all), so the test fails.
#
#   tools/sanitize.sh             # CI runs it after tools/test.sh's build
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/sanitizer-build.sh piper_unit_tests piper-plan piper-run piper-dump piper-launch piper-export
export UBSAN_OPTIONS=print_stacktrace=1
ctest --test-dir build-asan --output-on-failure -j2 -L unit
ctest --test-dir build-asan --output-on-failure -j2 \
  -R '^integration\.(test_cli_errors|test_mlp_vs_pytorch|test_data_parallel)$'
