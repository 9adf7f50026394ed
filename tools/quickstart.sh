#!/usr/bin/env bash
# From nothing to a trained sample: installs what is missing, builds Piper into
# build/, plans samples/mlp for one CPU rank, trains it for 20 steps on the
# sample's data (printing the loss per step) and shows the start of the plan's
# dump.
#
#   tools/quickstart.sh        # as root on Debian 12, from anywhere
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/install-deps.sh

echo "== build"
cmake -S . -B build -DPIPER_WERROR=ON
cmake --build build -j"$(nproc)" --target piper-plan piper-run piper-dump

echo "== plan: samples/mlp/model.onnx with samples/strategies/single.json"
build/tools/piper-plan samples/mlp/model.onnx samples/strategies/single.json -o build/plans/mlp

echo "== train 20 steps on samples/mlp/data"
build/tools/piper-run --plan build/plans/mlp/rank0.plan --steps 20 --data samples/mlp/data

echo "== the plan: its summary and first instructions (all of it: build/plans/mlp/rank0.txt)"
build/tools/piper-dump build/plans/mlp/rank0.plan > build/plans/mlp/rank0.txt
sed -n '1,/^loss:/p' build/plans/mlp/rank0.txt
echo
awk '/^stream /{shown=1} shown && n++ < 12' build/plans/mlp/rank0.txt
echo "  ..."
