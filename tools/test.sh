#!/usr/bin/env bash
# Builds Piper with warnings as errors and runs the whole test suite (unit,
# conformance and integration). This is what CI runs (.ci/run).
#
#   tools/test.sh              # as root on Debian 12, from anywhere
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/install-deps.sh
cmake -S . -B build -DPIPER_WERROR=ON -DPIPER_TESTS=ON
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
