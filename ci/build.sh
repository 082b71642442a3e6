#!/usr/bin/env bash
# Configures and builds fusetune (Release) into ${BUILD_DIR:-build}. Extra CMake arguments
# may be passed as arguments, e.g. ci/build.sh -DFUSETUNE_WITH_CUDA=OFF. BUILD_TARGET=<t>
# builds only that target (the main job builds just the fusetune binary).
# The CUDA backend is built when nvcc is found (PATH or /usr/local/cuda/bin), the HIP backend
# (compile-only without an AMD GPU: gfx90a, gfx940, gfx1030) when hipcc is; an explicit
# -DFUSETUNE_WITH_HIP=... argument wins.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc 2>/dev/null || echo 2)
hip_args=()
if command -v hipcc > /dev/null && [[ " $* " != *" -DFUSETUNE_WITH_HIP="* ]]; then
  hip_args=(-DFUSETUNE_WITH_HIP=ON)
fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${hip_args[@]}" "$@"
target_args=()
if [[ -n ${BUILD_TARGET:-} ]]; then target_args=(--target "$BUILD_TARGET"); fi
cmake --build "$build_dir" -j"$jobs" "${target_args[@]}"
