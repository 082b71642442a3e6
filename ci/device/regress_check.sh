#!/usr/bin/env bash
# The regression method on a GPU: A/A comparisons of one build against itself and planted
# slowdowns, each a real `fusetune regress` of a suite with both sides measured interleaved
# (two bench-serve processes of the same binary; the planted side scales its measured samples
# of chosen cells by 1 + fraction, so the noise is the device's and the effect exact).
#
# Usage: regress_check.sh FUSETUNE OUT
#   SUITE            the suite (default suites/h200.json)
#   AA_RUNS          A/A comparisons (default 3)
#   PLANT_RUNS       comparisons per planted fraction (default 2)
#   PLANT_FRACTIONS  fractions planted (default "0.03 0.02")
#   PLANT_CELLS      ';'-separated substrings of "<problem key> <config key>" (default: five best cells)
# The first run ("calibrate") is an A/A comparison whose rows every later run's database starts
# from: the per-cell A/A differences regress folds into its floors (bench/.../compare.h).
# Writes per run OUT/<name>/{report.md,junit.xml,regress.db,log}, OUT/smi.csv (clock, power,
# throttle reasons every 500 ms) and OUT/regress_summary.md.
set -uo pipefail
FT=$1
OUT=$2
SUITE=${SUITE:-suites/h200.json}
AA_RUNS=${AA_RUNS:-3}
PLANT_RUNS=${PLANT_RUNS:-2}
PLANT_FRACTIONS=${PLANT_FRACTIONS:-0.03 0.02}
PLANT_CELLS=${PLANT_CELLS:-"q2048/k2048/d64/causal0/fp16 fused/bm192;b4/hq16/hkv16/q4096/k4096/d128/causal1/bf16 fused/bm128;b8/hq8/hkv8/q1000/k1000/d64/causal1/bf16 fused/bm128;q1024/k1024/d64/causal0/fp32 fused/bm32;decode/b8/hq32/hkv8/q1/k4096/d128/causal0/fp16 materialized"}
mkdir -p "$OUT"
COMMIT=$("$FT" --version | sed -n 's/.*commit \([0-9a-z]*\).*/\1/p')
BACKEND=${BACKEND:-cuda}

nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 500 > "$OUT/smi.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT

runs=()
run() {  # name [extra regress args...]
  local name=$1
  shift
  mkdir -p "$OUT/$name"
  [[ -f "$OUT/calibrate/regress.db" ]] && cp "$OUT/calibrate/regress.db" "$OUT/$name/regress.db"
  local t0=$SECONDS
  "$FT" regress --suite "$SUITE" --baseline "$COMMIT" --commit "$COMMIT" --baseline-binary "$FT" --backend "$BACKEND" \
    --db "$OUT/$name/regress.db" --junit "$OUT/$name/junit.xml" --markdown "$OUT/$name/report.md" "$@" \
    > "$OUT/$name/log" 2>&1
  local rc=$?
  runs+=("$name rc=$rc $((SECONDS - t0))s")
  echo "regress $name: rc=$rc $((SECONDS - t0))s"
  tail -3 "$OUT/$name/log"
}

run calibrate
for i in $(seq 1 "$AA_RUNS"); do run "aa$i"; done
IFS=';' read -r -a cells <<<"$PLANT_CELLS"
for f in $PLANT_FRACTIONS; do
  plants=()
  for c in "${cells[@]}"; do plants+=(--plant-slowdown "$c=$f"); done
  for i in $(seq 1 "$PLANT_RUNS"); do run "plant${f}_$i" "${plants[@]}"; done
done

python3 - "$OUT" "$PLANT_CELLS" "${runs[@]}" > "$OUT/regress_summary.md" <<'PY'
import os, sqlite3, sys
out, cells = sys.argv[1], sys.argv[2].split(';')
print("| run | status | latency cells | regressed | improved | same | unknown | planted found | mean blocks/side | measure s |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for entry in sys.argv[3:]:
    name = entry.split()[0]
    db = os.path.join(out, name, "regress.db")
    if not os.path.exists(db):
        print(f"| {entry} | no database |"); continue
    c = sqlite3.connect(db)
    first = 0
    calib = os.path.join(out, "calibrate", "regress.db")
    if name != "calibrate" and os.path.exists(calib):
        first = sqlite3.connect(calib).execute("SELECT COALESCE(MAX(regression_id), 0) FROM regressions").fetchone()[0]
    rows = c.execute("SELECT problem_key, config_key, verdict FROM regressions WHERE metric IN ('latency','planted_latency') "
                     "AND regression_id > ?", (first,)).fetchall()
    counts = {v: sum(1 for r in rows if r[2] == v) for v in ("regressed", "improved", "same", "unknown")}
    planted = [r for r in rows if any(all(part in (r[0] + " " + r[1]) for part in [cell]) for cell in cells)]
    found = sum(1 for r in planted if r[2] == "regressed") if name.startswith("plant") else "-"
    false_alarms = [r for r in rows if r[2] == "regressed" and r not in planted] if name.startswith("plant") else []
    # A planted run stores no bench run (it is a check of the method): its blocks are not in the database.
    blocks = c.execute("SELECT AVG(json_array_length(blocks_json)) FROM bench_cells WHERE run_id = (SELECT MAX(run_id) FROM bench_cells)").fetchone()[0]
    blocks = f"{blocks:.1f}" if blocks is not None and not name.startswith("plant") else "-"
    log = open(os.path.join(out, name, "log")).read()
    secs = log.split(" blocks measured in ")[1].split(" s")[0] if " blocks measured in " in log else "?"
    extra = f" (other cells regressed: {len(false_alarms)})" if false_alarms else ""
    print(f"| {name} | {' '.join(entry.split()[1:])} | {len(rows)} | {counts['regressed']} | {counts['improved']} | {counts['same']} | {counts['unknown']} | {found}{' of ' + str(len(planted)) if name.startswith('plant') else ''}{extra} | {blocks} | {secs} |")
PY
cat "$OUT/regress_summary.md"
