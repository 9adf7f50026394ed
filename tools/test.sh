#!/usr/bin/env bash
# Checks the C++ formatting, builds Piper with warnings as errors and runs the whole test
# suite (unit, conformance and integration), then the unit and a few integration tests
# under AddressSanitizer and UndefinedBehaviorSanitizer (tools/sanitize.sh) and each fuzz
# target for 30 s (tools/fuzz.sh). This is what CI runs (.ci/run).
#
#   tools/test.sh              # as root on Debian 12, from anywhere
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/install-deps.sh
tools/check-format.sh
# With the CUDA toolkit here, the CUDA backend builds too, cuDNN's fused attention with it when
# the cudnn-frontend headers can be fetched (without them attention builds on cuBLASLt alone).
if [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null; then
  tools/fetch-cudnn-frontend.sh || echo "test: cudnn-frontend not fetched; building without it" >&2
fi
cmake -S . -B build -DPIPER_WERROR=ON -DPIPER_TESTS=ON
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
tools/sanitize.sh
tools/fuzz.sh 30
