#!/usr/bin/env bash
# Run on the GPU host, from the repository root of a checkout holding .gpu-bundle/backend
# with the fusetune binary (packed by ci/device/stage.sh and copied there). The tuner's
# regret study, in one run:
#   1. every shape of the list is tuned twice with the default `fusetune sweep --backend cuda`,
#      into A.db (--seed 1) and B.db (--seed 2), A then B shape by shape; the wall time of each
#      tune (process included) and the sweep's own seconds for the problem are kept;
#   2. `fusetune audit --json` of each shape's recorded best in A.db and then in B.db
#      (`--problem KEY`, one process each, so that a failing audit costs only its own result
#      and a deadline leaves A and B audited on the same shapes; REGRET_AUDIT_MODE=all runs one
#      `audit --all` per database instead): the pick re-measured against its whole space,
#      interleaved: regret (recorded / best - 1) with its 90 % CI;
#   3. ci/device/regret_summary.py: per shape the tune seconds, both picks, both regrets, and
#      whether the two picks' times differ by <= 1 % ((1 + regret_A) / (1 + regret_B): both
#      audits measure the same space, so each pick's time over its audit's best compares
#      them); the median and worst regret and the agreement rate, as markdown.
# Files under $OUT (7): run.log, tunes.tsv, A.db, B.db, audit_A.json, audit_B.json, regret.md.
#
# Knobs: REGRET_SHAPES a file of "label|fusetune sweep problem flags" lines, or "cpu" for the
#   dry-run list (default: the 14 GPU shapes below); REGRET_TIMEOUT whole study, s (480);
#   REGRET_TUNE_BUDGET s for step 1 (240; what is left goes to the audits); REGRET_SEEDS ("1 2");
#   REGRET_SWEEP_EXTRA / REGRET_AUDIT_EXTRA extra flags; REGRET_BACKEND (cuda);
#   REGRET_AUDIT_MODE "per-problem" (default) or "all" (one `audit --all` per database; A gets
#   at most half of the time left; a run that fails part-way prints no JSON at all).
# CPU dry run here (no GPU; a fusetune built with the audit command; about a minute):
#   FUSETUNE_BIN=build/service/cli/fusetune REGRET_BACKEND=cpu REGRET_SHAPES=cpu OUT=/tmp/regret \
#     REGRET_SWEEP_EXTRA="--max-seconds 3" REGRET_AUDIT_EXTRA="--rounds 5 --repeats 3 --variants fused" \
#     bash ci/device/regret_study.sh
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/fusetune-regret-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
BACKEND=${REGRET_BACKEND:-cuda}
read -r -a SEEDS <<<"${REGRET_SEEDS:-1 2}"
(( ${#SEEDS[@]} == 2 )) || { echo "REGRET_SEEDS needs two seeds"; exit 2; }
START=$SECONDS
DEADLINE=$((START + ${REGRET_TIMEOUT:-480}))
TUNE_DEADLINE=$((START + ${REGRET_TUNE_BUDGET:-240}))

source "$ROOT/ci/device/cuda_lib_dirs.sh"
B=/tmp/fusetune-bundle
if [[ -n "${FUSETUNE_BIN:-}" ]]; then   # a local binary (CPU dry run): nothing to unpack
  BIN=$FUSETUNE_BIN
else
  unpack_bundle "$ROOT/.gpu-bundle/backend" "$B" || exit 1
  BIN=$B/bin/fusetune
fi
[[ -x "$BIN" ]] || { echo "no fusetune binary at $BIN (stage.sh packs it when the CLI target exists)"; exit 1; }
LIBPATH=$(bundle_library_path "$B")
report_missing_libs "$LIBPATH" "$BIN" || exit 1
ft() { LD_LIBRARY_PATH="$LIBPATH" "$BIN" "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,clocks_event_reasons.active \
  --format=csv 2>/dev/null || true

# label|flags. Mixed head dims, storage types, causal, GQA/MQA, odd and unequal lengths,
# decode, batch 1..8; two of them are the hand-tuned shapes (for the tune-time targets).
gpu_shapes() {
  cat <<'EOF'
fp16-b1-h12-d64-s2048|--dtype fp16 --batch 1 --heads 12 --head-dim 64 --seq 2048
bf16-b4-h16-d128-s4096|--dtype bf16 --batch 4 --heads 16 --head-dim 128 --seq 4096
fp16-b2-h16-d64-s1024|--dtype fp16 --batch 2 --heads 16 --head-dim 64 --seq 1024
fp16-b1-h32-kv8-d128-s2048-causal|--dtype fp16 --batch 1 --heads 32 --kv-heads 8 --head-dim 128 --seq 2048 --causal
bf16-b8-h8-d64-s1000-causal|--dtype bf16 --batch 8 --heads 8 --head-dim 64 --seq 1000 --causal
bf16-b2-h16-kv2-d128-s3000|--dtype bf16 --batch 2 --heads 16 --kv-heads 2 --head-dim 128 --seq 3000
fp32-b1-h12-d64-s777|--dtype fp32 --batch 1 --heads 12 --head-dim 64 --seq 777
fp32-b2-h8-d128-s1024-causal|--dtype fp32 --batch 2 --heads 8 --head-dim 128 --seq 1024 --causal
fp16-b4-h8-kv1-d64-s1536-causal|--dtype fp16 --batch 4 --heads 8 --kv-heads 1 --head-dim 64 --seq 1536 --causal
bf16-b1-h24-d128-q1024-k3072-causal|--dtype bf16 --batch 1 --heads 24 --head-dim 128 --seq 1024 --kv-seq 3072 --causal
fp16-b8-h12-d64-s513|--dtype fp16 --batch 8 --heads 12 --head-dim 64 --seq 513
bf16-b3-h20-kv4-d64-s2047-causal|--dtype bf16 --batch 3 --heads 20 --kv-heads 4 --head-dim 64 --seq 2047 --causal
fp16-decode-b8-h32-kv8-d128-k4096|--kind decode --dtype fp16 --batch 8 --heads 32 --kv-heads 8 --head-dim 128 --seq 4096
fp16-b2-h16-kv4-d128-s777|--dtype fp16 --batch 2 --heads 16 --kv-heads 4 --head-dim 128 --seq 777
EOF
}
cpu_shapes() {
  cat <<'EOF'
cpu-fp32-b1-h2-d64-s64|--dtype fp32 --batch 1 --heads 2 --head-dim 64 --seq 64
cpu-fp32-b2-h2-kv1-d32-s33-causal|--dtype fp32 --batch 2 --heads 2 --kv-heads 1 --head-dim 32 --seq 33 --causal
cpu-fp16-b1-h2-d64-s48|--dtype fp16 --batch 1 --heads 2 --head-dim 64 --seq 48
EOF
}
case "${REGRET_SHAPES:-gpu}" in
  gpu) shapes=$(gpu_shapes) ;;
  cpu) shapes=$(cpu_shapes) ;;
  *) shapes=$(grep -v '^[[:space:]]*\(#\|$\)' "$REGRET_SHAPES") || { echo "cannot read $REGRET_SHAPES"; exit 2; } ;;
esac

now() { date +%s.%N; }
# run_bounded DEADLINE CMD...: runs CMD with SIGTERM at DEADLINE (a stopped sweep finishes its
# trial in flight and commits; timeout then returns 124); NOT_STARTED when no time was left.
NOT_STARTED=200
run_bounded() {
  local deadline=$1 left
  shift
  left=$((deadline - SECONDS))
  if (( left < 5 )); then echo "regret_study: no time left for: $*"; return $NOT_STARTED; fi
  timeout --signal=TERM --kill-after=20 "$left" "$@"
}

printf 'label\tproblem_key\tseconds_a\trc_a\tprogress_a\tseconds_b\trc_b\tprogress_b\tflags\n' > "$OUT/tunes.tsv"
echo "==== step 1: tunes (${SEEDS[*]}), budget $((TUNE_DEADLINE - SECONDS)) s"
while IFS='|' read -r label flags; do
  [[ -n "$label" ]] || continue
  read -r -a shape_flags <<<"$flags"
  row=("$label" "")
  for side in A B; do
    seed=${SEEDS[0]}; [[ $side == B ]] && seed=${SEEDS[1]}
    log=$(mktemp)
    t0=$(now)
    run_bounded "$TUNE_DEADLINE" env LD_LIBRARY_PATH="$LIBPATH" "$BIN" sweep --backend "$BACKEND" \
      --db "$OUT/$side.db" --seed "$seed" --label "regret-$side" "${shape_flags[@]}" ${REGRET_SWEEP_EXTRA:-} < /dev/null > "$log" 2>&1
    rc=$?
    t1=$(now)
    seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    (( rc == NOT_STARTED )) && { seconds=""; rc=skipped; }
    sed "s/^/  [$label $side] /" "$log"
    # The sweep's progress line: "[i/n] <problem key>: N trials (...) in X s; best ..."
    progress=$(grep -E '^\[[0-9]+/[0-9]+\] ' "$log" | tail -1 | tr '\t' ' ')
    key=$(sed -n 's/^\[[0-9]*\/[0-9]*\] \([^ ]*\): .*/\1/p' <<<"$progress")
    if [[ -z "$key" && -s "$OUT/$side.db" && $rc != skipped ]]; then  # the newest run's problem
      key=$(python3 - "$OUT/$side.db" <<'PY' 2>/dev/null
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
row = db.execute("SELECT problem_key FROM trials WHERE run_id = (SELECT MAX(run_id) FROM runs) LIMIT 1").fetchone()
print(row[0] if row else "")
PY
)
    fi
    [[ -n "$key" ]] && row[1]=$key
    row+=("$seconds" "$rc" "$progress")
    echo "tune $side $label: ${seconds} s wall, rc=$rc"
    rm -f "$log"
  done
  row+=("$flags")
  (IFS=$'\t'; echo "${row[*]}") >> "$OUT/tunes.tsv"
done <<<"$shapes"

echo "==== step 2: audits (${REGRET_AUDIT_MODE:-per-problem}), $((DEADLINE - SECONDS)) s left"
audit_rc=()
audit() {  # audit SIDE DEADLINE [--all | --problem KEY]: the audit's JSON on stdout
  local side=$1 deadline=$2
  shift 2
  run_bounded "$deadline" env LD_LIBRARY_PATH="$LIBPATH" "$BIN" audit --backend "$BACKEND" --db "$OUT/$side.db" \
    "$@" --json ${REGRET_AUDIT_EXTRA:-} < /dev/null
}
if [[ "${REGRET_AUDIT_MODE:-per-problem}" == per-problem ]]; then
  # One audit process per problem, A then B for each, so that when time runs out both
  # databases have results for the same shapes. The outputs are merged into one list.
  tmp=$(mktemp -d)
  n=0
  while IFS=$'\t' read -r label key _; do
    [[ -n "$key" && "$label" != label ]] || continue
    n=$((n + 1))
    for side in A B; do
      [[ -s "$OUT/$side.db" ]] || continue
      t0=$(now)
      audit "$side" "$DEADLINE" --problem "$key" > "$tmp/$side.$n.json"
      rc=$?
      echo "audit $side $label: rc=$rc, $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
      (( rc == 0 )) || audit_rc+=("$side/$label=$rc")
    done
  done < "$OUT/tunes.tsv"
  for side in A B; do
    python3 - "$tmp" "$side" > "$OUT/audit_$side.json" <<'PY'
import glob, json, sys
merged = []
for path in sorted(glob.glob(f"{sys.argv[1]}/{sys.argv[2]}.*.json"), key=lambda p: int(p.split(".")[-2])):
    text = open(path).read().strip()
    if not text:
        continue
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        continue
    if isinstance(data, dict):
        data = data.get("audits", data.get("results", [data]))
    merged.extend(data if isinstance(data, list) else [data])
print(json.dumps(merged, indent=1))
PY
  done
  rm -rf "$tmp"
else
  for side in A B; do
    : > "$OUT/audit_$side.json"
    if [[ ! -s "$OUT/$side.db" ]]; then echo "no $side.db: no audit"; audit_rc+=("$side=skipped"); continue; fi
    # A gets at most half of what is left so that B is measured too.
    deadline=$DEADLINE
    [[ $side == A ]] && deadline=$((SECONDS + (DEADLINE - SECONDS) / 2))
    t0=$(now)
    audit "$side" "$deadline" --all > "$OUT/audit_$side.json"
    rc=$?
    t1=$(now)
    echo "audit $side: rc=$rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s, $(wc -c < "$OUT/audit_$side.json") bytes of JSON"
    audit_rc+=("$side=$rc")
  done
fi

# One file per database (a GPU host run brings back at most 8 files): fold the WAL back in.
for side in A B; do
  [[ -s "$OUT/$side.db" ]] && python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA journal_mode=DELETE"); c.close()' "$OUT/$side.db"
done
echo "==== step 3: summary (study took $((SECONDS - START)) s; audits not ok: ${audit_rc[*]:-none})"
python3 "$ROOT/ci/device/regret_summary.py" --tunes "$OUT/tunes.tsv" --audit-a "$OUT/audit_A.json" \
  --audit-b "$OUT/audit_B.json" --db-a "$OUT/A.db" --db-b "$OUT/B.db" > "$OUT/regret.md"
summary_rc=$?
cat "$OUT/regret.md"
exit $summary_rc
