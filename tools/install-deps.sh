#!/usr/bin/env bash
# Installs the Debian 12 packages Piper needs to build and test. Idempotent: when
# everything is already installed it touches nothing (and needs no root).
#
#   tools/install-deps.sh            # as root
#
# The CUDA toolkit is optional and not installed here (see docs/user-guide.md).
set -euo pipefail

packages=(
  # build
  cmake g++ make
  # libraries
  libonnx-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev libcli11-dev
  libgtest-dev libopenblas-dev libgloo-dev
  # reference and test data: PyTorch and ONNX for the sample export and the
  # integration tests, the ONNX backend test cases for conformance tests
  python3-torch python3-onnx python3-numpy libonnx-testdata
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
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
