#!/usr/bin/env bash
# Installs what moescope needs on a Debian 12 machine, skipping what is already there.
# Idempotent: a second run only checks and takes seconds.
#
# It expects: Debian 12 (bookworm) with apt and network access, root or sudo, bash and make.
# It installs:
#   - Debian packages: compilers, CMake, Ninja, ccache, the libraries the build links, Xvfb.
#   - One Python environment that the build, the tests and the demo all use (the Makefile asks
#     `scripts/setup.sh --print-python` and puts that interpreter's bin/ first on PATH):
#       1. $MOESCOPE_PYTHON when set (an interpreter; its environment gets the packages);
#       2. else the active virtual or conda environment ($VIRTUAL_ENV, $CONDA_PREFIX) when it
#          already has torch;
#       3. else the project's .venv (`python3 -m venv`, Debian's python3-venv), made with
#          --system-site-packages when the python3 on PATH already has the pinned torch, so it
#          is not downloaded twice.
#     PyPI packages go into that environment: torch (pinned, CUDA 13.0 build), numpy, psutil,
#     HolisticTraceAnalysis, nvtx, pytest, tensorboard, wandb (the live metrics' tests),
#     dask[distributed] (moescope.fanout's test), and the real models the capture tests train.
#   - CUDA: the torch wheel brings the CUDA runtime, CUPTI, NVTX and NCCL (headers included) as
#     NVIDIA wheels. When no CUDA toolkit is installed (no nvcc on PATH or in /usr/local/cuda),
#     the compiler comes from the NVIDIA wheels of the CUDA version torch pins
#     (cuda-toolkit[nvcc,crt,nvvm,cccl]), and .cache/cuda-toolkit is assembled as a toolkit root
#     (links only) that CMake finds (cmake/MoescopeDependencies.cmake).
#
#   scripts/setup.sh                 install what is missing
#   scripts/setup.sh --print-python  print the interpreter the build uses; installs nothing
# Environment:
#   MOESCOPE_PYTHON=/path/to/python  use this interpreter's environment (see above)
#   MOESCOPE_SKIP_TORCH=1  no torch (profiler, CLI and viewer still build)
#   MOESCOPE_SKIP_CUDA=1   no CUDA compiler wheels (the kernels build their CPU references only)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"

has_torch() {  # INTERPRETER: true when it can import torch (without importing it: fast)
  "$1" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' \
    >/dev/null 2>&1
}

choose_python() {
  if [ -n "${MOESCOPE_PYTHON:-}" ]; then command -v "$MOESCOPE_PYTHON" || echo "$MOESCOPE_PYTHON"; return; fi
  local prefix
  for prefix in "${VIRTUAL_ENV:-}" "${CONDA_PREFIX:-}"; do
    if [ -n "$prefix" ] && [ "$prefix" != "$venv" ] && has_torch "$prefix/bin/python"; then
      echo "$prefix/bin/python"; return
    fi
  done
  echo "$venv/bin/python"
}

if [ "${1:-}" = --print-python ]; then choose_python; exit 0; fi

DEBIAN_PACKAGES=(
  cmake ninja-build ccache pkg-config g++ clang-format
  libimgui-dev libglfw3-dev libgl-dev nlohmann-json3-dev libzstd-dev zlib1g-dev libcli11-dev libstb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libjemalloc2
  xvfb xauth libgl1-mesa-dri fonts-dejavu-core
  python3 python3-venv ca-certificates
)
TORCH_VERSION="2.11.0"   # pinned to the GPU machine's torch (CUDA 13.0 build, matching nvcc 13.0)

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

PYTHON=$(choose_python)
if [ "$PYTHON" = "$venv/bin/python" ] && [ ! -x "$PYTHON" ]; then
  base=$(command -v python3 || echo /usr/bin/python3)
  share=()
  if [ "${MOESCOPE_SKIP_TORCH:-0}" != 1 ] &&
     [[ $("$base" "$root/scripts/setup_state.py" "$TORCH_VERSION" 2>/dev/null) != *torch* ]]; then
    share=(--system-site-packages)   # reuse the torch this python3 already has
  fi
  echo "setup: creating the project environment .venv from $base ${share[*]}"
  "$base" -m venv "${share[@]}" "$venv"
fi
echo "setup: Python environment: $PYTHON"
pip_install() { "$PYTHON" -m pip install -q "$@"; }
# missing package groups, torch's CUDA version, the cuda-toolkit wheel version torch pins
read -r missing_groups torch_cuda torch_toolkit < <("$PYTHON" "$root/scripts/setup_state.py" "$TORCH_VERSION")
wants() { [[ ,$missing_groups, == *,$1,* ]]; }

if [ "${MOESCOPE_SKIP_TORCH:-0}" != 1 ]; then
  if wants torch; then
    echo "setup: installing torch==$TORCH_VERSION from PyPI (about 3 GB with its CUDA wheels)"
    pip_install "torch==$TORCH_VERSION" numpy
  fi
  if wants tools; then
    # tensorboard and wandb: the live metrics' tests write into and read back real runs
    # (docs/metrics.md); dask[distributed]: moescope.fanout's test runs a LocalCluster. All three
    # optional for users.
    echo "setup: installing numpy, psutil, HolisticTraceAnalysis, nvtx, pytest, tensorboard," \
         "wandb and dask[distributed] from PyPI"
    pip_install numpy psutil HolisticTraceAnalysis nvtx pytest tensorboard wandb 'dask[distributed]'
  fi
  # Real models for the zero-code capture's tests (docs/autocapture-adapters.md): transformers
  # 5.x in the environment, 4.57 in .cache/py-transformers4 (put first on PYTHONPATH by the
  # 4.x tests), torchtitan and Megatron-Core. torchtitan's `datasets` dependency downgrades
  # huggingface-hub below what transformers 5 needs: restored after.
  if wants models; then
    echo "setup: installing transformers, torchtitan and megatron-core from PyPI"
    pip_install 'transformers==5.25.0' 'torchtitan==0.3.0' 'megatron-core==0.16.1'
    pip_install 'huggingface-hub==2.4.0'
  fi
  transformers4="$root/.cache/py-transformers4"
  if [ ! -d "$transformers4/transformers" ]; then
    pip_install --target "$transformers4" --no-deps 'transformers==4.57.*' \
      'tokenizers==0.22.*' 'huggingface-hub==0.36.*'
  fi
  wants torch && read -r _ torch_cuda torch_toolkit < <("$PYTHON" "$root/scripts/setup_state.py" "$TORCH_VERSION")
fi

# ---- CUDA: what the build needs from the NVIDIA wheels of torch's CUDA version -------------------
# NVTX3 headers (header-only) are needed by the shim even without CUDA; torch's CUDA build brings
# them, otherwise the nvidia-nvtx wheel does.
nvidia_include_dirs() {
  "$PYTHON" -c 'import nvidia, os; print("\n".join(os.path.join(p, d, "include") for p in nvidia.__path__ for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, "include"))))' 2>/dev/null || true
}
have_nvtx=0
for dir in /usr/local/cuda/include $(nvidia_include_dirs); do
  [ -e "$dir/nvtx3/nvToolsExt.h" ] && have_nvtx=1
done
if [ $have_nvtx = 0 ]; then
  echo "setup: installing the NVTX3 headers (nvidia-nvtx) from PyPI"
  pip_install 'nvidia-nvtx'
fi

system_nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
toolkit="$root/.cache/cuda-toolkit"
if [ "${MOESCOPE_SKIP_CUDA:-0}" = 1 ] || [ "$torch_cuda" = - ]; then
  rm -rf "$toolkit"
  why="torch is not a CUDA build"; [ "${MOESCOPE_SKIP_CUDA:-0}" = 1 ] && why="MOESCOPE_SKIP_CUDA=1"
  echo "setup: no CUDA compiler ($why): the kernels build their CPU references only"
elif [ -n "$system_nvcc" ]; then
  rm -rf "$toolkit"
  echo "setup: CUDA toolkit: $system_nvcc (torch is built with CUDA $torch_cuda)"
else
  major=${torch_cuda%%.*}
  if [ "$torch_toolkit" != - ]; then
    toolkit_requirement="cuda-toolkit[nvcc,crt,nvvm,cccl,cudart,cupti,nvtx]==$torch_toolkit"
  else
    toolkit_requirement="cuda-toolkit[nvcc,crt,nvvm,cccl,cudart,cupti,nvtx]==$torch_cuda.*"
  fi
  pip_nvcc() { "$PYTHON" -c "import nvidia, os, sys; sys.exit(not any(os.path.exists(os.path.join(p, 'cu$major', 'bin', 'nvcc')) for p in nvidia.__path__))" 2>/dev/null; }
  if ! pip_nvcc; then
    echo "setup: installing the CUDA $torch_cuda compiler from PyPI ($toolkit_requirement)"
    pip_install "$toolkit_requirement"
  fi
  # A toolkit root of links, merged from every nvidia/ folder the environment sees (a venv with
  # --system-site-packages has two), with the unversioned library names CMake looks for.
  if [ ! -x "$toolkit/bin/nvcc" ] || [ ! -e "$toolkit/include/nccl.h" ]; then
    echo "setup: assembling $toolkit from the NVIDIA wheels"
    rm -rf "$toolkit.tmp"
    mkdir -p "$toolkit.tmp/bin" "$toolkit.tmp/include" "$toolkit.tmp/lib"
    while read -r nvidia_root; do
      for part in "cu$major" nccl; do
        for sub in bin include lib; do
          [ -d "$nvidia_root/$part/$sub" ] || continue
          for entry in "$nvidia_root/$part/$sub"/*; do
            [ -e "$toolkit.tmp/$sub/${entry##*/}" ] || ln -s "$entry" "$toolkit.tmp/$sub/"
          done
        done
      done
      [ -d "$nvidia_root/cu$major/nvvm" ] && [ ! -e "$toolkit.tmp/nvvm" ] && ln -s "$nvidia_root/cu$major/nvvm" "$toolkit.tmp/nvvm"
    done < <("$PYTHON" -c 'import nvidia; print("\n".join(nvidia.__path__))')
    for library in "$toolkit.tmp/lib"/lib*.so.*; do
      unversioned=${library%%.so.*}.so
      [ -e "$unversioned" ] || ln -s "${library##*/}" "$unversioned"
    done
    ln -s lib "$toolkit.tmp/lib64"
    rm -rf "$toolkit" && mv "$toolkit.tmp" "$toolkit"
  fi
  echo "setup: CUDA toolkit: $toolkit/bin/nvcc (NVIDIA wheels for CUDA $torch_cuda)"
fi
echo "setup: ok"
