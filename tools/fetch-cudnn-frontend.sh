#!/usr/bin/env bash
# Fetches NVIDIA's cudnn-frontend C++ headers (header-only, MIT licence) into
# third_party/cudnn-frontend/include, where the CUDA build finds them and builds cuDNN's fused
# attention (docs/gpu.md). PyPI's nvidia-cudnn-frontend wheel carries the headers; the version
# and the wheel's SHA-256 are pinned here. Idempotent; needs pip and PyPI, not root.
#
#   tools/fetch-cudnn-frontend.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=1.32.0
wheel=nvidia_cudnn_frontend-${version}-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
dest=third_party/cudnn-frontend

if [[ -f $dest/VERSION && $(cat "$dest/VERSION") == "$version" ]]; then
  echo "fetch-cudnn-frontend: cudnn-frontend $version is in $dest"
  exit 0
fi

python=$(command -v python3)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --dest "$scratch" "nvidia-cudnn-frontend==$version"
if ! echo "$sha256  $scratch/$wheel" | sha256sum --check --status; then
  echo "fetch-cudnn-frontend: error: $wheel does not have the pinned SHA-256 $sha256" >&2
  exit 1
fi
"$python" -m zipfile -e "$scratch/$wheel" "$scratch/wheel"
rm -rf "$dest"
mkdir -p "$dest"
mv "$scratch/wheel/include" "$dest/include"
echo "$version" >"$dest/VERSION"
echo "fetch-cudnn-frontend: cudnn-frontend $version headers in $dest/include"
