#!/usr/bin/env bash
# Prints the md5 of the sm_80 and sm_90a cubins of every CUDA file that includes the shared
# headers (no -lineinfo, so line shifts do not count), to check that an edit for HIP leaves the
# CUDA device code byte-identical: run it on a copy of the tree before the edit and after, from
# the SAME path (nvcc names anonymous-namespace kernels after the source path).
#   kernels/gpu/cubin_md5s.sh [SRC_ROOT] [OUT_DIR]     (needs nvcc; no GPU)
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
out=${2:-$(mktemp -d)}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$out"
files=(cuda/softmax_rows.cu cuda/partial_scores.cu cuda/fused/fused_simt_fp32.cu
       cuda/fused/fused_simt_half.cu cuda/fused/fused_mma_fp16_d64.cu cuda/fused/fused_mma_fp16_d128.cu
       cuda/fused/fused_mma_bf16_d64.cu cuda/fused/fused_mma_bf16_d128.cu cuda/fused/fused_mma_tf32.cu
       cuda/fused/fused_wgmma_fp16.cu cuda/fused/fused_wgmma_bf16.cu)
compile() {  # FILE ARCH
  "$nvcc" -I"$root/kernels/cuda" -I"$root/kernels/include" -I"$root/base/include" -O3 -DNDEBUG \
    -std=c++17 -Xcompiler=-fPIC -cubin -arch="sm_$2" -x cu "$root/kernels/$1" \
    -o "$out/$(basename "$1" .cu).sm_$2.cubin"
}
for f in "${files[@]}"; do
  compile "$f" 80 &
  compile "$f" 90a
  wait
done
(cd "$out" && md5sum ./*.cubin)
