#!/bin/bash
# Nsight Compute on a few (problem, config) pairs of the fused kernel, on a GPU host where
# ncu may read the performance counters, with .gpu-bundle/fused staged (stage_bundle.sh).
# Full reports to $OUT/ncu_<n>.txt; a grep'd summary to stdout.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=$(cd "$here/../../.." && pwd)/.gpu-bundle/fused
export LD_LIBRARY_PATH=$bundle/lib:${LD_LIBRARY_PATH:-}
out=${OUT:-/tmp/fused-out}
mkdir -p "$out"
n=0
while [[ $# -ge 2 ]]; do
  n=$((n + 1))
  echo "=== $1 $2"
  timeout 150 ncu --clock-control none --set full -k regex:Fused --launch-skip 3 --launch-count 1 \
    "$bundle/fused_dev" one "$1" "$2" 4 > "$out/ncu_$n.txt" 2>&1
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|Bank Conflicts|Block Limit|shared_bank|L1/TEX Hit|One or More Eligible|No Eligible|Active Warps Per|Eligible Warps" "$out/ncu_$n.txt" | sed 's/  */ /g' | head -40
  grep -iE "stall|bottleneck|is limited|utilization" "$out/ncu_$n.txt" | sed 's/  */ /g' | cut -c1-300 | head -14
  shift 2
done
