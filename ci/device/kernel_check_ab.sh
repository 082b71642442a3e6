#!/usr/bin/env bash
# Run on the GPU host: checks a kernel change against the build before it, in one run. Needs
# two bundles made by ci/device/stage.sh on the build machine (STAGE_TARGETS="cuda_backend_test
# cuda_attention_bench fusetune_capi" is enough): $AB_DIR/before/bundle.tar.xz (the previous
# commit, e.g. staged from a `git worktree` of it) and $AB_DIR/after/bundle.tar.xz.
#   1. after: every GPU test (fp64 reference on fresh random inputs)        -> after_tests.log
#   2. before: the tests named by AB_BEFORE_FILTER (the new ones), to show
#      what they catch on the old kernels                                   -> before_tests.log
#   3. after: compute-sanitizer memcheck on AB_SANITIZER_FILTER (small)      -> memcheck.log
#   4. timing: cuda_attention_bench, before/after interleaved AB_ROUNDS times
#      on AB_BENCH_FILTER                                                    -> bench_{before,after}_N.txt
# Prints a summary table last (median of the rounds per benchmark, after / before).
# Usage (on the GPU host, with the folder AB_DIR copied to the same path):
#   AB_DIR=.gpu-bundle/ab bash ci/device/kernel_check_ab.sh
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/kernel-ab-out}
AB_DIR=${AB_DIR:-.gpu-bundle/ab}
AB_ROUNDS=${AB_ROUNDS:-3}
AB_BEFORE_FILTER=${AB_BEFORE_FILTER:-*}
AB_SANITIZER_FILTER=${AB_SANITIZER_FILTER:-*fp16_fp16_d64*}
AB_BENCH_FILTER=${AB_BENCH_FILTER:-S2048|S4096}
AB_MIN_TIME=${AB_MIN_TIME:-0.3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1

source "$ROOT/ci/device/cuda_lib_dirs.sh"
declare -A side_libpath
for side in before after; do
  echo -n "$side: "
  unpack_bundle "$ROOT/$AB_DIR/$side" "/tmp/ab-$side" || exit 1
  side_libpath[$side]=$(bundle_library_path "/tmp/ab-$side")
done
with_libs() {  # with_libs SIDE CMD...: runs CMD with that side's libraries
  local side=$1
  shift
  LD_LIBRARY_PATH="${side_libpath[$side]}" "$@"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv || true

t0=$SECONDS
with_libs after timeout 200 /tmp/ab-after/bin/cuda_backend_test --gtest_brief=1 > "$OUT/after_tests.log" 2>&1
after_rc=$?
after_s=$((SECONDS - t0))
t0=$SECONDS
with_libs before timeout 100 /tmp/ab-before/bin/cuda_backend_test --gtest_brief=1 \
  --gtest_filter="$AB_BEFORE_FILTER" > "$OUT/before_tests.log" 2>&1
before_rc=$?
before_s=$((SECONDS - t0))
t0=$SECONDS
if command -v compute-sanitizer >/dev/null; then
  with_libs after timeout 120 compute-sanitizer --tool memcheck --print-limit 20 \
    /tmp/ab-after/bin/cuda_backend_test --gtest_brief=1 --gtest_filter="$AB_SANITIZER_FILTER" > "$OUT/memcheck.log" 2>&1
  memcheck_rc=$?
else
  echo "no compute-sanitizer" > "$OUT/memcheck.log"
  memcheck_rc=127
fi
memcheck_s=$((SECONDS - t0))

t0=$SECONDS
for ((r = 1; r <= AB_ROUNDS; ++r)); do
  for side in before after; do
    with_libs "$side" timeout 45 "/tmp/ab-$side/bin/cuda_attention_bench" --benchmark_filter="$AB_BENCH_FILTER" \
      --benchmark_min_time="$AB_MIN_TIME" > "$OUT/bench_${side}_$r.txt" 2>&1
  done
done
bench_s=$((SECONDS - t0))
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader || true

echo "==== GPU tests after (rc=$after_rc, ${after_s}s)"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran" "$OUT/after_tests.log" | head -30
echo "==== GPU tests before, filter $AB_BEFORE_FILTER (rc=$before_rc, ${before_s}s)"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran" "$OUT/before_tests.log" | head -40
echo "==== memcheck (rc=$memcheck_rc, ${memcheck_s}s)"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -8
echo "==== timing (${bench_s}s): median over $AB_ROUNDS rounds, us"
python3 - "$OUT" "$AB_ROUNDS" <<'PY'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
times = {}
for side in ("before", "after"):
    for r in range(1, rounds + 1):
        try:
            text = open(f"{out}/bench_{side}_{r}.txt").read()
        except OSError:
            continue
        for line in text.splitlines():
            m = re.match(r"^(\S+)/manual_time\s+([\d.]+) us", line)
            if m:
                times.setdefault(m.group(1), {}).setdefault(side, []).append(float(m.group(2)))
print(f"{'benchmark':58s} {'before':>9s} {'after':>9s} {'ratio':>6s}  rounds")
for name, sides in times.items():
    b, a = sides.get("before", []), sides.get("after", [])
    if not b or not a:
        continue
    mb, ma = statistics.median(b), statistics.median(a)
    print(f"{name:58s} {mb:9.1f} {ma:9.1f} {ma / mb:6.3f}  {' '.join(f'{x:.1f}' for x in b)} | {' '.join(f'{x:.1f}' for x in a)}")
PY
exit 0
