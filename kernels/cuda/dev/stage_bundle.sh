#!/bin/sh
# Copies the stripped dev driver and the shared libraries a GPU host may lack (abseil,
# cudart) into .gpu-bundle/fused; copy that folder to the GPU host (same path under the
# repository root) and run run_on_device.sh there.
set -eu
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
build=${1:-$root/build-cuda-fused}
dst=$root/.gpu-bundle/fused
rm -rf "$dst" && mkdir -p "$dst/lib"
strip -o "$dst/fused_dev" "$build/fused_dev"
ldd "$build/fused_dev" | awk '/libabsl_|libcudart/ {print $3}' | while read -r lib; do
  cp -L "$lib" "$dst/lib/"
done
du -sh "$dst"
