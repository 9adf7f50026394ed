#!/usr/bin/env bash
# Installs the Debian 12 packages Piper needs to build and test, then the Python
# venv the HuggingFace, checkpoint, export and metrics tests run in (third_party/hf-venv:
# /usr/bin/python3 with its system packages, torch among them, plus transformers,
# safetensors, onnxruntime and tensorboard from PyPI). Idempotent: when everything is
# already installed it touches nothing (and needs no root).
#
#   tools/install-deps.sh            # as root
#
# The CUDA toolkit is optional and not installed here (see docs/user-guide.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(
  # build
  cmake g++ make
  # libraries
  libonnx-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev libcli11-dev
  libgtest-dev libopenblas-dev libgloo-dev libssl-dev zlib1g-dev
  # the sanitizer and fuzzing builds (clang, its ASan/UBSan/libFuzzer runtimes), the format check
  clang libclang-rt-dev clang-format
  # reference and test data: PyTorch and ONNX for the sample export and the
  # integration tests, the ONNX backend test cases for conformance tests
  python3-torch python3-onnx python3-numpy python3-venv libonnx-testdata
  # /usr/bin/time -v measures a CPU rank's resident memory (tests/gpu/test_cli_device.py)
  time
)

# transformers 4.40 is the last release that runs on Debian's torch 1.13; safetensors reads
# Piper's checkpoint shards in tests/integration/test_checkpoint.py and test_export.py;
# onnxruntime (1.20.1: wheels for Python 3.11, works with Debian's numpy 1.24) runs
# piper-export --inference's graph there; tensorboard writes and reads event files for
# tools/metrics-to-tensorboard.py (2.19 takes Debian's protobuf 4.21 as it is).
hf_venv="$root/third_party/hf-venv"
hf_requirements=("transformers==4.40.2" "safetensors==0.8.0" "onnxruntime==1.20.1"
                 "tensorboard==2.19.0")

install_hf_venv() {
  local check="import importlib.metadata as m, sys
sys.exit(any(m.version(r.split('==')[0]) != r.split('==')[1] for r in sys.argv[1:]))"
  if "$hf_venv/bin/python" -c "$check" "${hf_requirements[@]}" 2>/dev/null; then
    echo "install-deps: $hf_venv has ${hf_requirements[*]}"
    return
  fi
  echo "install-deps: creating $hf_venv with ${hf_requirements[*]}"
  /usr/bin/python3 -m venv --system-site-packages "$hf_venv"
  "$hf_venv/bin/pip" install --quiet --disable-pip-version-check "${hf_requirements[@]}"
}

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  install_hf_venv
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: error: installing packages needs root; run as root, or:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y "${missing[@]}"
install_hf_venv
