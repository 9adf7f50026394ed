#!/usr/bin/env bash
# Configures build-asan, the build tools/sanitize.sh and tools/fuzz.sh share: clang,
# AddressSanitizer and UndefinedBehaviorSanitizer (any report aborts), libFuzzer's coverage
# instrumentation and the fuzz targets, no CUDA. One build for both compiles the tree once;
# the coverage instrumentation costs the tests little.
#
#   tools/sanitizer-build.sh TARGET...   # configures, then builds TARGET...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build-asan -DCMAKE_CXX_COMPILER=clang++ -DPIPER_CUDA=OFF -DPIPER_TESTS=ON \
  -DPIPER_WERROR=ON -DPIPER_SANITIZE=address,undefined -DPIPER_FUZZ=ON >/dev/null
cmake --build build-asan -j2 --target "$@"
