#!/usr/bin/env bash
# Builds the decode family's development driver with nvcc alone (no CMake, no absl), for the
# GPU of this host, in parallel: decode_dev and the ptxas resource reports (registers, shared
# memory, spills) land in DIR (default build-decode-dev at the repository root).
#   kernels/cuda/decode/build_dev.sh [DIR]
# DECODE_DEV_ARCH overrides the target (e.g. "-arch=sm_90"); by default the compute capability
# nvidia-smi reports.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../../build-decode-dev}
mkdir -p "$out"
if [[ -z ${DECODE_DEV_ARCH:-} ]]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  DECODE_DEV_ARCH="-arch=sm_${cc:-90}"
fi
base=$here/../../../base  # the project's one Median (plain C++)
pids=()
nvcc -std=c++17 -O3 -I"$base/include" -c "$base/src/median.cc" -o "$out/median.o" > "$out/median.ptxas.txt" 2>&1 &
pids+=($!)
for f in decode_fp32 decode_fp16 decode_bf16 decode_e4m3 decode_dev ../l2_flush; do
  nvcc -std=c++17 -O3 -lineinfo $DECODE_DEV_ARCH -I"$here/.." -I"$here/../../gpu" -I"$base/include" -Xptxas -v \
    -c "$here/$f.cu" -o "$out/$(basename $f).o" > "$out/$(basename $f).ptxas.txt" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
if (( rc != 0 )); then
  grep -h -B2 -A2 error "$out"/*.ptxas.txt >&2 || true
  exit 1
fi
nvcc $DECODE_DEV_ARCH -o "$out/decode_dev" "$out"/decode_fp32.o "$out"/decode_fp16.o "$out"/decode_bf16.o "$out"/decode_e4m3.o \
  "$out"/decode_dev.o "$out"/l2_flush.o "$out"/median.o
# Spills or a stack frame in a kernel are worth knowing before timing it.
grep -h "spill" "$out"/*.ptxas.txt | sort | uniq -c | sort -rn | head -3
echo "built $out/decode_dev"
