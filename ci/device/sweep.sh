#!/usr/bin/env bash
# Run ON THE DEVICE by gpu_check.sh: `fusetune sweep --backend cuda` on the issue-3 target
# shapes into one SQLite file. Usage: sweep.sh FUSETUNE_BINARY DB_FILE
# Budget knobs (environment): SWEEP_TRIALS trials per problem and variant (default 12),
# SWEEP_SECONDS measuring seconds per problem (default 25), SWEEP_QUICK=1 one small shape.
set -uo pipefail
FT=$1
DB=$2
common=(--backend cuda --db "$DB" --max-trials "${SWEEP_TRIALS:-12}" --max-seconds "${SWEEP_SECONDS:-25}"
        --repeats 10 --timing-seconds 0.3 --label h200)
rc=0
if [[ -n "${SWEEP_QUICK:-}" ]]; then  # one small shape: checks the pipeline end to end
  "$FT" sweep --batch 1 --heads 12 --head-dim 64 --seq 512 "${common[@]}"
  exit $?
fi
"$FT" sweep --preset seed "${common[@]}" || rc=1
"$FT" sweep --dtype fp16 --batch 1 --heads 12 --head-dim 64 --seq 2048 "${common[@]}" || rc=1
"$FT" sweep --dtype bf16 --batch 4 --heads 16 --head-dim 128 --seq 4096 "${common[@]}" || rc=1
"$FT" sweep --dtype bf16 --batch 4 --heads 16 --head-dim 128 --seq 4096 --causal "${common[@]}" || rc=1
exit $rc
