#!/usr/bin/env bash
# Compiles the Hopper (wgmma) kernel sources for sm_90a with ptxas's report and fails when a
# kernel has its wgmma instructions serialized (ptxas C7518, "Potential Performance Loss") or
# spills more than 32 bytes. Both are silent in a normal build and correct on the GPU; a
# serialized kernel ran 27-43 % slower on the H200 (docs/perf.md). The ping-pong persistent
# instances' producer warp, at 72 registers, keeps 28 bytes of its per-tile state on the stack
# (the consumers fit in their 216 without spilling), the other persistent ones 4 bytes at 88; a
# second Q buffer at 72 spilled 92 bytes. No GPU needed.
#
# Usage: ptxas_report_test.sh NVCC REPO_ROOT
set -euo pipefail
nvcc=$1 root=$2
max_spill_bytes=32
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pids=()
for dtype in fp16 bf16; do
  "$nvcc" -std=c++17 -O3 -DNDEBUG --generate-code=arch=compute_90a,code=sm_90a -Xptxas -v \
    -I"$root/kernels/cuda" -I"$root/kernels/include" -I"$root/base/include" \
    -x cu -c "$root/kernels/cuda/fused/fused_wgmma_$dtype.cu" -o "$out/$dtype.o" >"$out/$dtype.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || { cat "$out"/*.log; echo "FAIL: nvcc could not compile the Hopper kernels"; exit 1; }
done
cat "$out"/fp16.log "$out"/bf16.log >"$out/all.log"
kernels=$(grep -c "Compiling entry function" "$out/all.log" || true)
echo "ptxas report: $kernels sm_90a kernels"
status=0
if grep -E "C7518|Performance Loss" "$out/all.log"; then
  echo "FAIL: wgmma instructions serialized (above)"
  status=1
fi
# "Function properties for KERNEL" is followed by "N bytes stack frame, S bytes spill stores, ...".
awk -v max="$max_spill_bytes" '
  /Function properties for/ { kernel = $NF }
  /bytes spill stores/ {
    spill = 0
    for (i = 1; i < NF; ++i) {
      if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) == "stores,") spill = $i + 0
    }
    if (spill > 0) printf "%s spills %d bytes%s\n", kernel, spill, (spill > max ? " (over the limit)" : "")
    if (spill > max) bad = 1
  }
  END { exit bad }' "$out/all.log" || { echo "FAIL: a kernel spills more than $max_spill_bytes bytes"; status=1; }
[[ $kernels -gt 0 ]] || { echo "FAIL: no kernel compiled"; status=1; }
[[ $status == 0 ]] && echo "PASS: no serialized wgmma, spills within $max_spill_bytes bytes"
exit $status
