#!/usr/bin/env bash
# Fails, naming the files, when a tracked C++ file is not as clang-format (.clang-format)
# writes it. Fix with: clang-format -i FILE...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
git ls-files -z '*.cc' '*.h' '*.cu' '*.cuh' | xargs -0 clang-format --dry-run -Werror
echo "check-format: $(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | wc -l) files as clang-format writes them"
