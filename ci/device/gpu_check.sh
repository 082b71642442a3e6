#!/usr/bin/env bash
# Run on the GPU host, from the repository root of a checkout holding .gpu-bundle/backend
# (packed by ci/device/stage.sh on the build machine and copied here). Unpacks the binaries,
# then runs
# the steps named as arguments (default: all), each logged under $OUT:
#   tests    the GPU tests (cuda_backend_test)                     -> gpu_tests.log
#   bench    the Google Benchmark binary                           -> bench.txt
#   compare  ci/device/compare_torch.py (ours vs PyTorch SDPA,
#            interleaved rounds; COMPARE_ARGS)                     -> compare.csv, compare.md
#   cupti    compare_torch.py --cupti-check (our timer vs CUPTI
#            kernel durations; CUPTI_ARGS; not in the default)      -> cupti_check.csv, cupti_check.md
#   sweep    fusetune sweep --backend cuda on the seed and flagship shapes (sweep.sh),
#            then fusetune report                                  -> fusetune.db, report.txt
#   regress  the regression method on the GPU (regress_check.sh: A/A runs and planted
#            slowdowns of suites/h200.json; not in the default)    -> regress_summary.md, */
#   decode   decode against a KV cache: compare_decode.py (ours contiguous and paged vs SDPA
#            cudnn/flash, interleaved; DECODE_COMPARE_ARGS), then fusetune sweep --preset
#            decode --backend cuda (DECODE_SWEEP_SECONDS per problem, default 15) and fusetune
#            audit of its picks (fused space, DECODE_AUDIT_ROUNDS, default 7); not in the
#            default                                                -> decode/compare.md, decode.db,
#                                                                      decode_sweep.log, decode_audit.json
#   bisect   a real bisect of this repository's history (bisect_check.sh: GOOD, BAD, CELL,
#            LIBS or REPO_BUNDLE; not in the default)                -> bisect.log, bisect.db
# Everything else printed goes to run.log. Prints a short summary last.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/fusetune-out}
mkdir -p "$OUT"
STEPS=${*:-tests bench compare sweep}
SWEEP_TRIALS=${SWEEP_TRIALS:-0}   # 0 = the CLI's default budget
exec > >(tee -a "$OUT/run.log") 2>&1

# The bundle's binaries and libraries, with cuBLAS/cudart of the GPU host (the toolkit's
# folders, else PyTorch's wheels) on LD_LIBRARY_PATH.
source "$ROOT/ci/device/cuda_lib_dirs.sh"
B=/tmp/fusetune-bundle
unpack_bundle "$ROOT/.gpu-bundle/backend" "$B" || exit 1
export LD_LIBRARY_PATH=$(bundle_library_path "$B")
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv || true
report_missing_libs "$LD_LIBRARY_PATH" "$B"/bin/*

summary=()
step() { [[ " $STEPS " == *" $1 "* ]]; }

if step tests; then
  t0=$SECONDS
  "$B/bin/cuda_backend_test" --gtest_brief=1 > "$OUT/gpu_tests.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED)|info \]|Failure|error|SKIPPED" "$OUT/gpu_tests.log" | head -60
  summary+=("tests: rc=$rc ($(grep -E '^\[  PASSED' "$OUT/gpu_tests.log" | head -1)) $((SECONDS - t0))s")
fi

if step bench; then
  t0=$SECONDS
  "$B/bin/cuda_attention_bench" --benchmark_min_time=0.2 > "$OUT/bench.txt" 2>&1
  rc=$?
  cat "$OUT/bench.txt"
  summary+=("bench: rc=$rc $((SECONDS - t0))s")
fi

if step compare; then
  t0=$SECONDS
  PYTHONUNBUFFERED=1 python3 "$ROOT/ci/device/compare_torch.py" --lib "$B/lib/libfusetune_capi.so" --out "$OUT" ${COMPARE_ARGS:-}
  rc=$?
  summary+=("compare: rc=$rc $((SECONDS - t0))s")
fi

if step cupti; then
  t0=$SECONDS
  PYTHONUNBUFFERED=1 python3 "$ROOT/ci/device/compare_torch.py" --lib "$B/lib/libfusetune_capi.so" --out "$OUT" \
    --cupti-check ${CUPTI_ARGS:-}
  rc=$?
  summary+=("cupti: rc=$rc $((SECONDS - t0))s")
fi

if step decode; then
  t0=$SECONDS
  mkdir -p "$OUT/decode"
  PYTHONUNBUFFERED=1 python3 "$ROOT/ci/device/compare_decode.py" --lib "$B/lib/libfusetune_capi.so" \
    --out "$OUT/decode" ${DECODE_COMPARE_ARGS:-}
  summary+=("decode compare: rc=$? $((SECONDS - t0))s")
  if [[ -x "$B/bin/fusetune" ]]; then
    t1=$SECONDS
    "$B/bin/fusetune" sweep --backend cuda --preset decode --db "$OUT/decode.db" \
      --max-seconds "${DECODE_SWEEP_SECONDS:-15}" > "$OUT/decode_sweep.log" 2>&1
    summary+=("decode sweep: rc=$? $((SECONDS - t1))s")
    t1=$SECONDS
    "$B/bin/fusetune" audit --backend cuda --preset decode --db "$OUT/decode.db" --variants fused \
      --rounds "${DECODE_AUDIT_ROUNDS:-7}" --json > "$OUT/decode_audit.json" 2> "$OUT/decode_audit.log"
    summary+=("decode audit: rc=$? $((SECONDS - t1))s")
    "$B/bin/fusetune" report --db "$OUT/decode.db" > "$OUT/decode_report.txt" 2>&1
    tail -30 "$OUT/decode_sweep.log"
    python3 - "$OUT/decode_audit.json" <<'PY' || true
import json, sys
for a in json.load(open(sys.argv[1])):
    print(f"{a.get('problem')}: recorded {a.get('recorded_config')} {a.get('recorded_us', 0):.2f} us, best "
          f"{a.get('best_config')} {a.get('best_us', 0):.2f} us, regret {100 * a.get('regret', 0):.2f} % "
          f"[{100 * a.get('regret_low', 0):.2f}, {100 * a.get('regret_high', 0):.2f}]")
PY
  fi
fi

if step bisect; then
  t0=$SECONDS
  bash "$ROOT/ci/device/bisect_check.sh" "$B/bin/fusetune" "$OUT"
  summary+=("bisect: rc=$? $((SECONDS - t0))s")
fi

if step regress; then
  t0=$SECONDS
  bash "$ROOT/ci/device/regress_check.sh" "$B/bin/fusetune" "$OUT"
  summary+=("regress: $((SECONDS - t0))s")
fi

if step sweep; then
  t0=$SECONDS
  if [[ -x "$B/bin/fusetune" ]]; then
    bash "$ROOT/ci/device/sweep.sh" "$B/bin/fusetune" "$OUT/fusetune.db" > "$OUT/sweep.log" 2>&1
    rc=$?
    tail -20 "$OUT/sweep.log"
    "$B/bin/fusetune" report --db "$OUT/fusetune.db" > "$OUT/report.txt" 2>&1
    echo >> "$OUT/report.txt"
    python3 "$ROOT/ci/device/sweep_summary.py" "$OUT/fusetune.db" >> "$OUT/report.txt" 2>&1
    cat "$OUT/report.txt"
    summary+=("sweep: rc=$rc $((SECONDS - t0))s")
  else
    summary+=("sweep: skipped (no fusetune binary in the bundle)")
  fi
fi

echo "==== summary"
printf '%s\n' "${summary[@]}"
[[ -f "$OUT/compare.md" ]] && cat "$OUT/compare.md"
[[ -f "$OUT/cupti_check.md" ]] && cat "$OUT/cupti_check.md"
[[ -f "$OUT/decode/compare.md" ]] && cat "$OUT/decode/compare.md"
exit 0
