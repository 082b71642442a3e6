#!/usr/bin/env bash
# `fusetune regress` of one candidate build against several baseline builds on a GPU, each a
# first night (a fresh database), as a nightly would run it: the A/A check of two builds of the
# same kernels and the check of a change of known sign, judged against a side-by-side
# measurement of the same two builds (ci/device/compare_torch.py --also).
#
# Usage: regress_builds_check.sh FUSETUNE OUT RUN...
#   FUSETUNE  the candidate's fusetune (its libfusetune_capi.so in ../lib/, as stage.sh packs it)
#   RUN       NAME[:DB]=BASELINE_BUILD@BASELINE_COMMIT[~CANDIDATE_BUILD@CANDIDATE_COMMIT][,REGRESS_ARG...]:
#             a baseline's fusetune or libfusetune_capi.so and the full commit it was built at;
#             after '~' another candidate than FUSETUNE (e.g. a variant's library, measured
#             through FUSETUNE's bench-serve); extra regress arguments after commas
#             (e.g. aa2=base/lib/libfusetune_capi.so@08a1ac1...,--separate-processes). Runs
#             naming the same DB share its database (an A/A calibration first, then runs whose
#             floors read it); a run naming none starts from a new one (a first night)
#   SUITE     the suite (default suites/h200.json); BACKEND (default cuda)
#   DEADLINE  seconds after the start by which every run has ended (each is stopped there; a run
#             that would start with under 60 s left is skipped), so the results are packed in time
#   RESUME    a results.tar.xz of an earlier call: its runs, databases and trace are unpacked into
#             OUT first, so a nightly series (calibrations, then nights) goes on across calls of a
#             limited length and the new results.tar.xz holds the whole series
# Writes OUT/<name>.{json,md,log,db}, OUT/smi.csv (clock, power, throttle reasons every 500 ms),
# OUT/runs.txt (exit status and seconds per run) and OUT/spread.md (regress_spread.py over the
# runs: per-round spread by round order and by what preceded the blocks), then packs them all into OUT/results.tar.xz
# (one file: a transfer that limits the number of files keeps it whole).
set -uo pipefail
FT=$1
OUT=$2
shift 2
SUITE=${SUITE:-suites/h200.json}
BACKEND=${BACKEND:-cuda}
DEADLINE=${DEADLINE:-100000}
mkdir -p "$OUT/runs"
if [[ -n ${RESUME:-} ]]; then
  tar -xJf "$RESUME" -C "$OUT" || { echo "RESUME=$RESUME: not a results archive" >&2; exit 2; }
  # Each call's clock and power trace keeps its own file.
  [[ -f $OUT/runs/smi.csv ]] && mv "$OUT/runs/smi.csv" "$OUT/runs/smi-$(date +%s).csv"
fi
COMMIT=$("$FT" --version | sed -n 's/.*commit \([0-9a-z]*\).*/\1/p')

nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 500 > "$OUT/runs/smi.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT

for spec in "$@"; do
  name=${spec%%=*}
  rest=${spec#*=}
  db=${name#*:}
  name=${name%%:*}
  IFS=',' read -r -a parts <<<"$rest"
  sides=${parts[0]}
  build=${sides%%~*}
  build=${build%@*}
  commit=${sides%%~*}
  commit=${commit##*@}
  candidate=("--commit" "$COMMIT")
  if [[ $sides == *~* ]]; then
    other=${sides#*~}
    candidate=("--candidate-binary" "${other%@*}" "--commit" "${other##*@}")
  fi
  extra=("${parts[@]:1}")
  if (( DEADLINE - SECONDS < 60 )); then
    echo "$name skipped: $((DEADLINE - SECONDS)) s left" | tee -a "$OUT/runs/runs.txt"
    continue
  fi
  t0=$SECONDS
  timeout $((DEADLINE - SECONDS)) "$FT" regress --suite "$SUITE" --baseline "$commit" "${candidate[@]}" --baseline-binary "$build" \
    --backend "$BACKEND" --db "$OUT/runs/$db.db" --json "$OUT/runs/$name.json" --markdown "$OUT/runs/$name.md" \
    "${extra[@]}" > "$OUT/runs/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/runs/runs.txt"
  grep -E "^[0-9]+ cells:|blocks measured" "$OUT/runs/$name.log" | head -2
done
kill $SMI 2>/dev/null
# How widely each run's per-round ratios spread, by round order and by what preceded the blocks.
if command -v python3 >/dev/null && compgen -G "$OUT/runs/*.json" >/dev/null; then
  python3 "$(dirname "$0")/regress_spread.py" "$OUT"/runs/*.json > "$OUT/runs/spread.md" 2>&1 || true
fi
tar -C "$OUT" -cJf "$OUT/results.tar.xz" runs && rm -rf "$OUT/runs"
