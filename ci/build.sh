#!/usr/bin/env bash
# Configures and builds fusetune (Release) into ${BUILD_DIR:-build}. Extra CMake arguments
# may be passed as arguments, e.g. ci/build.sh -DFUSETUNE_WITH_CUDA=OFF. BUILD_TARGET=<t>
# builds only that target (the main job builds just the fusetune binary).
# The CUDA backend is built when nvcc is found (PATH or /usr/local/cuda/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@"
target_args=()
if [[ -n ${BUILD_TARGET:-} ]]; then target_args=(--target "$BUILD_TARGET"); fi
cmake --build "$build_dir" -j"$jobs" "${target_args[@]}"
