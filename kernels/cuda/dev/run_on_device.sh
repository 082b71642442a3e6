#!/bin/bash
# Runs on a GPU host, from a checkout holding .gpu-bundle/fused (stage_bundle.sh): correctness
# checks, then timing, then PyTorch SDPA reference timings on the same shapes. Results go to
# $OUT (default /tmp/fused-out). Usage:
#   kernels/cuda/dev/run_on_device.sh [check|bench|quick|all|final] [samples]
# final = checks, full bench (no torch).
set -uo pipefail
mode=${1:-all}
samples=${2:-30}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bundle=$root/.gpu-bundle/fused
export LD_LIBRARY_PATH=$bundle/lib:${LD_LIBRARY_PATH:-}
out=${OUT:-/tmp/fused-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
rc=0
if [[ $mode == check || $mode == all || $mode == final ]]; then
  "$bundle/fused_dev" check > "$out/check.log" 2>&1 || rc=1
fi
if [[ $mode == final ]]; then
  "$bundle/fused_dev" bench "$out/bench.csv" "$samples" > "$out/bench.log" 2>&1 || rc=1
  grep -h SUMMARY "$out/check.log"
  sed -n '/BEST PER SHAPE/,$p' "$out/bench.log"
fi
if [[ $mode == bench || $mode == all || $mode == quick ]]; then
  bm=bench; [[ $mode == quick ]] && bm=quick
  "$bundle/fused_dev" $bm "$out/bench.csv" "$samples" 2>&1 | tee "$out/bench.log" || rc=1
  PYTHONUNBUFFERED=1 timeout 240 python3 "$here/torch_sdpa_times.py" 2>&1 | tee "$out/torch.log"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$out/gpu.txt"
grep -E "SUMMARY|FAIL|error" "$out/check.log" 2>/dev/null | tail -20
sed -n '/BEST PER SHAPE/,$p' "$out/bench.log" 2>/dev/null
tail -12 "$out/torch.log" 2>/dev/null
exit $rc
