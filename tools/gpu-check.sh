#!/usr/bin/env bash
# The GPU checks of the CUDA backend (issue 6, item 5), for one call on a machine with a
# GPU, CUDA 13 and Python but no Debian packages and no network.
#
#   tools/gpu-check.sh bundle [BUILD_DIR]   # here: build, then gather into .gpu-bundle/ the
#                                           # binaries, their non-CUDA shared libraries, the
#                                           # ONNX node tests and the benchmark's model
#   tools/gpu-check.sh run [OUT_DIR]        # there, from the repository root, with
#                                           # .gpu-bundle/ carried along
#
# `run` does, each step bounded in time and logged to OUT_DIR (default $OUT):
#   (a) the ONNX conformance cases on CUDA (piper_conformance --device cuda)
#   (b) samples/gpt, 20 steps fp32, CUDA vs CPU: losses within 1e-4 relative, and every
#       CUDA kernel against the CPU's (piper_gpu_tests)
#   (c) samples/gpt, 50 steps: bf16 vs fp32 on CUDA within 2e-2, bf16 CUDA vs bf16 CPU
#       within 1e-2, tf32 vs fp32 on CUDA within 1e-2
#   (d) samples/gpt with dp=2 ZeRO (3 when the planner has it, else 2), two ranks on the
#       one GPU with cuda+gloo (piper-launch), against one rank
#   (e) NCCL in a world of one (piper_gpu_tests), and piper-run --comm nccl
#   (f) the benchmark: tools/gpu-benchmark.py, Piper vs PyTorch eager
# and prints a table of the results last. GPU_CHECKS=abce (say) runs only those steps.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUNDLE=.gpu-bundle

bundle() {
  local build=${1:-build-cuda}
  set -e
  tools/fetch-cudnn-frontend.sh
  cmake -S . -B "$build" -DPIPER_WERROR=ON -DPIPER_TESTS=ON -DPIPER_CUDA=ON >/dev/null
  cmake --build "$build" -j2 --target piper-plan piper-run piper-launch piper-dump \
    piper_gpu_tests piper_conformance
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/stage/bin" "$BUNDLE/stage/lib"
  grep -qx "/$BUNDLE/" .git/info/exclude 2>/dev/null || echo "/$BUNDLE/" >>.git/info/exclude
  local binaries=("$build"/tools/piper-{plan,run,launch,dump} "$build"/tests/gpu/piper_gpu_tests
                  "$build"/tests/conformance/piper_conformance)
  for binary in "${binaries[@]}"; do
    strip --strip-debug -o "$BUNDLE/stage/bin/$(basename "$binary")" "$binary"
  done
  # Every shared library but the C runtime's and CUDA's (the GPU machine has its own, matching
  # its driver): ONNX, protobuf, Gloo, OpenBLAS and what they pull in.
  ldd "${binaries[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libcuda.so* | \
        libcudart.so* | libcublas* | libnccl.so* | libcudnn*) ;;
      *) cp -L "$lib" "$BUNDLE/stage/lib/" ;;
    esac
  done
  # The CUDA backend, which the binaries load for --device cuda (through LD_LIBRARY_PATH there).
  cp "$build/lib/libpiper_cuda.so" "$BUNDLE/stage/lib/"
  cp -r /usr/share/libonnx-testdata/data/node "$BUNDLE/stage/node"
  /usr/bin/python3 tools/gpu-benchmark.py skeleton "$BUNDLE/stage/gpt-skeleton.onnx"
  tar -C "$BUNDLE/stage" -cJf "$BUNDLE/bundle.tar.xz" .
  rm -rf "$BUNDLE/stage"
  echo "gpu-check: $(du -h "$BUNDLE/bundle.tar.xz" | cut -f1) in $BUNDLE/bundle.tar.xz; on the GPU" \
    "machine run tools/gpu-check.sh run, carrying $BUNDLE"
}

# Library directories of the GPU machine's CUDA: the toolkit's and PyTorch's wheels'.
cuda_library_path() {
  local dirs=/usr/local/cuda/lib64
  dirs+=:$(python3 - <<'EOF' 2>/dev/null
import glob, os, nvidia
roots = [os.path.join(p) for p in nvidia.__path__]
print(":".join(sorted({os.path.dirname(f) for r in roots for f in glob.glob(r + "/*/lib/lib*.so*")})))
EOF
)
  echo "$dirs"
}

RESULTS=()
# check ID LABEL SECONDS COMMAND...: runs COMMAND (a program or one of the functions below)
# with its output in OUT_DIR/ID.log, and adds a line to the table.
check() {
  local id=$1 label=$2 seconds=$3
  shift 3
  local start=$SECONDS status verdict=PASS
  [[ ${GPU_CHECKS:-abcdef} == *"${id:0:1}"* ]] || return 0
  timeout "$seconds" bash -c '"$@"' _ "$@" >"$OUT_DIR/$id.log" 2>&1
  status=$?
  [[ $status -eq 124 ]] && verdict="TIMEOUT (${seconds} s)"
  [[ $status -ne 0 && $status -ne 124 ]] && verdict="FAIL (exit $status)"
  RESULTS+=("$(printf '%-44s %-18s %4d s' "$label" "$verdict" $((SECONDS - start)))")
  echo "== $label: $verdict" && tail -n 3 "$OUT_DIR/$id.log"
}

# The losses of two metrics files agree within a relative tolerance.
same_losses() {
  python3 - "$@" <<'EOF'
import json, sys
a, b, rtol = sys.argv[1], sys.argv[2], float(sys.argv[3])
la = [json.loads(l)["loss"] for l in open(a)]
lb = [json.loads(l)["loss"] for l in open(b)]
assert len(la) == len(lb) > 0, (len(la), len(lb))
for step, (x, y) in enumerate(zip(la, lb), 1):
    print(f"step {step}: {x:.6f} vs {y:.6f}")
    assert abs(x - y) <= rtol * abs(y), f"step {step}: {x} vs {y}"
EOF
}

# (c): the strategy's precision on CUDA, samples/gpt for 50 steps on synthetic data.
precision() {
  local work=$1 p
  mkdir -p "$work"
  for p in fp32 bf16 tf32; do
    printf '{"precision": "%s", "batch": {"global": 8}, "frozen": ["*mask*"],
      "optimizer": {"type": "adamw", "lr": 0.001}}' "$p" >"$work/$p.json"
    "$BIN/piper-plan" samples/gpt/model.onnx "$work/$p.json" -o "$work/$p" &&
      "$BIN/piper-run" --plan "$work/$p/rank0.plan" --device cuda --steps 50 \
        --metrics "$work/$p.jsonl" || return 1
  done
  "$BIN/piper-run" --plan "$work/bf16/rank0.plan" --device cpu --steps 50 \
    --metrics "$work/bf16_cpu.jsonl" || return 1
  echo "bf16 vs fp32 on cuda" && same_losses "$work/bf16.jsonl" "$work/fp32.jsonl" 2e-2 &&
    echo "bf16: cuda vs cpu" && same_losses "$work/bf16.jsonl" "$work/bf16_cpu.jsonl" 1e-2 &&
    echo "tf32 vs fp32 on cuda" && same_losses "$work/tf32.jsonl" "$work/fp32.jsonl" 1e-2
}

# (d): dp=2 over the one GPU through Gloo, against one rank on CUDA.
data_parallel() {
  local work=$1 stage
  mkdir -p "$work"
  for stage in 3 2; do
    printf '{"batch": {"global": 16}, "optimizer": {"type": "adamw", "lr": 0.01},
      "frozen": ["*mask*"], "directives": [{"op": "zero", "stage": %d, "devices": [0, 1]}]}' \
      "$stage" >"$work/dp.json"
    "$BIN/piper-plan" samples/gpt/model.onnx "$work/dp.json" -o "$work/dp" && break
  done
  echo "ZeRO stage $stage"
  echo '{"batch": {"global": 16}, "optimizer": {"type": "adamw", "lr": 0.01}, "frozen": ["*mask*"]}' \
    >"$work/one.json"
  "$BIN/piper-plan" samples/gpt/model.onnx "$work/one.json" -o "$work/one" &&
    "$BIN/piper-run" --plan "$work/one/rank0.plan" --device cuda --steps 6 \
      --metrics "$work/one.jsonl" &&
    "$BIN/piper-launch" --plans "$work/dp" --device cuda --comm gloo --steps 6 \
      --metrics "$work/dp.jsonl" --timeout 60 &&
    same_losses "$work/dp.jsonl" "$work/one.jsonl" 1e-5
}

# (e): a one-rank plan with --comm nccl.
nccl_one_rank() {
  local work=$1
  mkdir -p "$work"
  echo '{"batch": {"global": 32}, "optimizer": {"type": "sgd", "lr": 0.05}}' >"$work/s.json"
  "$BIN/piper-plan" samples/mlp/model.onnx "$work/s.json" -o "$work/plans" &&
    "$BIN/piper-run" --plan "$work/plans/rank0.plan" --device cuda --comm nccl --steps 5 \
      --data samples/mlp/data
}

run() {
  OUT_DIR=${1:-${OUT:-gpu-check-out}}
  mkdir -p "$OUT_DIR"
  local root=/tmp/piper-gpu-check
  rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xJf "$BUNDLE/bundle.tar.xz" || {
    echo "gpu-check: no $BUNDLE/bundle.tar.xz; run tools/gpu-check.sh bundle first and carry" \
      "$BUNDLE"
    exit 2
  }
  BIN=$root/bin
  export LD_LIBRARY_PATH="$root/lib:$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export BIN
  export -f same_losses precision data_parallel nccl_one_rank
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  check a_conformance "(a) ONNX conformance on CUDA" 150 "$BIN/piper_conformance" \
    --device cuda --data "$root/node" --unsupported tests/conformance/unsupported.txt
  check b_gpu_tests "(b)+(e) GPU tests: kernels, gpt, NCCL, gloo" 180 "$BIN/piper_gpu_tests" \
    --gtest_output="xml:$OUT_DIR/b_gpu_tests.xml"
  check c_precision "(c) bf16 and tf32 vs fp32, gpt 50 steps" 120 precision "$root/precision"
  check d_data_parallel "(d) dp=2 on one GPU, cuda+gloo vs 1 rank" 90 data_parallel "$root/dp"
  check e_nccl "(e) piper-run --comm nccl, one rank" 30 nccl_one_rank "$root/nccl"
  check f_benchmark "(f) benchmark (not a test)" 240 python3 tools/gpu-benchmark.py run \
    "$root/gpt-skeleton.onnx" --bin "$BIN"
  echo
  python3 - "$OUT_DIR/b_gpu_tests.xml" <<'EOF'
import os, sys, xml.etree.ElementTree as ET
if not os.path.exists(sys.argv[1]):
    sys.exit("no results of piper_gpu_tests (it crashed?): see b_gpu_tests.log")
for case in ET.parse(sys.argv[1]).iter("testcase"):
    failed = case.find("failure") is not None
    skipped = case.find("skipped") is not None
    if failed or skipped or "Gpt" in case.get("name") or "Nccl" in case.get("name"):
        print(("FAIL " if failed else "SKIP " if skipped else "ok   ") + case.get("classname") +
              "." + case.get("name"))
EOF
  tail -n 12 "$OUT_DIR/f_benchmark.log"
  printf '%s\n' "${RESULTS[@]}"
}

case "${1:-}" in
  bundle) shift && bundle "$@" ;;
  run) shift && run "$@" ;;
  *) echo "usage: tools/gpu-check.sh bundle [BUILD_DIR] | run [OUT_DIR]" >&2 && exit 2 ;;
esac
