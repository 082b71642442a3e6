#!/bin/sh
# Copies the stripped dev driver and the shared libraries the device image lacks (abseil,
# cudart) into .device-carry/fused, for the device tool's `carry`.
set -eu
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
build=${1:-$root/build-cuda-fused}
dst=$root/.device-carry/fused
rm -rf "$dst" && mkdir -p "$dst/lib"
strip -o "$dst/fused_dev" "$build/fused_dev"
ldd "$build/fused_dev" | awk '/libabsl_|libcudart/ {print $3}' | while read -r lib; do
  cp -L "$lib" "$dst/lib/"
done
du -sh "$dst"
