#!/usr/bin/env bash
# GPU host, from the repository root, no bundle needed (nvcc builds the decode family's
# development driver from source): build, then the random-problem check against the fp64
# reference, compute-sanitizer memcheck and racecheck on small problems, then the timing of
# every decode instance and split on the decode preset's shapes with the read ceiling of the
# same bytes. Everything under $OUT (default /tmp/decode-dev); a summary is printed last.
#   bash ci/device/decode_dev_check.sh [problems]
# Knobs: DECODE_CHECK_SEED (1), DECODE_BENCH_LAUNCHES (20), DECODE_SKIP_BENCH=1.
set -uo pipefail
out=${OUT:-/tmp/decode-dev}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-decode-dev
problems=${1:-600}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,clocks_event_reasons.active \
  --format=csv | tee "$out/gpu.txt"
t0=$(date +%s)
bash "$root/kernels/cuda/decode/build_dev.sh" "$build" 2>&1 | tee "$out/build.log" || exit 1
cp "$build"/*.ptxas.txt "$out/" 2>/dev/null || true
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
"$build/decode_dev" check "$problems" "${DECODE_CHECK_SEED:-1}" > "$out/check.log" 2>&1 || rc=1
echo "check: $(( $(date +%s) - t0 )) s"
if command -v compute-sanitizer > /dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 "$build/decode_dev" check 16 7 small \
    > "$out/memcheck.log" 2>&1 || rc=1
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 "$build/decode_dev" check 3 9 small \
    > "$out/racecheck.log" 2>&1 || rc=1
  echo "sanitizers: $(( $(date +%s) - t0 )) s"
fi
if [[ ${DECODE_SKIP_BENCH:-0} != 1 ]]; then
  "$build/decode_dev" bench "$out/bench.csv" "${DECODE_BENCH_LAUNCHES:-20}" > "$out/bench.log" 2>&1 || rc=1
  echo "bench: $(( $(date +%s) - t0 )) s"
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader | tee -a "$out/gpu.txt"
echo "---- summary"
grep -E "^FAIL" "$out/check.log" | head -20
grep -h SUMMARY "$out/check.log"
for f in memcheck racecheck; do
  [[ -f $out/$f.log ]] && echo "$f: $(grep -E "ERROR SUMMARY|SUMMARY check" "$out/$f.log" | tr '\n' ' ')"
done
sed -n '/BEST PER SHAPE/,$p' "$out/bench.log" 2>/dev/null
exit $rc
