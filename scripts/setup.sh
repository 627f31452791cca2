#!/usr/bin/env bash
# Installs what moescope needs on a fresh Debian 12 machine, skipping what is already there.
# Idempotent: a second run only checks and takes seconds.
#   MOESCOPE_SKIP_TORCH=1  do not install the torch wheel (profiler/CLI/viewer still build).
set -euo pipefail

DEBIAN_PACKAGES=(
  cmake ninja-build ccache pkg-config g++ clang-format
  libimgui-dev libglfw3-dev libgl-dev nlohmann-json3-dev libzstd-dev zlib1g-dev libcli11-dev libstb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libjemalloc2
  xvfb xauth libgl1-mesa-dri
)
TORCH_VERSION="2.11.0"   # pinned to the GPU machine's torch (CUDA 13.0 build, matching nvcc 13.0)
PYTHON="${PYTHON:-python3}"

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${MOESCOPE_SKIP_TORCH:-0}" != 1 ]; then
  have=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
  if [ "${have%%+*}" != "$TORCH_VERSION" ]; then
    echo "setup: installing torch==$TORCH_VERSION from PyPI (found: ${have:-none})"
    "$PYTHON" -m pip install -q "torch==$TORCH_VERSION" numpy
  fi
  "$PYTHON" -c 'import numpy, psutil, hta.trace_analysis, nvtx, pytest' >/dev/null 2>&1 ||
    "$PYTHON" -m pip install -q numpy psutil HolisticTraceAnalysis nvtx pytest
  # Real models for the zero-code capture's tests (docs/autocapture-adapters.md): transformers
  # 5.x in the environment, 4.57 in .cache/py-transformers4 (put first on PYTHONPATH by the
  # 4.x tests), torchtitan and Megatron-Core. torchtitan's `datasets` dependency downgrades
  # huggingface-hub below what transformers 5 needs: restored after.
  if ! "$PYTHON" -c 'import transformers, torchtitan, megatron.core' >/dev/null 2>&1; then
    echo "setup: installing transformers, torchtitan and megatron-core from PyPI"
    "$PYTHON" -m pip install -q 'transformers==5.25.0' 'torchtitan==0.3.0' 'megatron-core==0.16.1'
    "$PYTHON" -m pip install -q 'huggingface-hub==2.4.0'
  fi
  transformers4="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/py-transformers4"
  if [ ! -d "$transformers4/transformers" ]; then
    "$PYTHON" -m pip install -q --target "$transformers4" --no-deps 'transformers==4.57.*' \
      'tokenizers==0.22.*' 'huggingface-hub==0.36.*'
  fi
fi
echo "setup: ok"
