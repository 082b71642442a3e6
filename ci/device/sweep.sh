#!/usr/bin/env bash
# Run on the GPU host by gpu_check.sh: `fusetune sweep --backend cuda` on the seed preset and
# the flagship shapes (fp16 b1 h12 d64 S=2048; bf16 b4 h16 d128 S=4096, causal and not) into
# one SQLite file. Usage: sweep.sh FUSETUNE_BINARY DB_FILE
# Budget knobs (environment): SWEEP_TRIALS trials per problem and variant (default 12),
# SWEEP_SECONDS measuring seconds per problem (default 25), SWEEP_QUICK=1 one small shape.
set -uo pipefail
FT=$1
DB=$2
common=(--backend cuda --db "$DB" --max-trials "${SWEEP_TRIALS:-12}" --max-seconds "${SWEEP_SECONDS:-25}"
        --repeats 10 --timing-seconds 0.3 --label "${SWEEP_LABEL:-h200}" ${SWEEP_EXTRA:-})
# SWEEP_TIMEOUT (default 330 s) bounds the whole script: each sweep gets what is left and is
# stopped with SIGTERM (it finishes its trial in flight and commits) when that runs out.
deadline=$((SECONDS + ${SWEEP_TIMEOUT:-330}))
rc=0
sweep() {
  local left=$((deadline - SECONDS))
  if (( left < 10 )); then echo "sweep.sh: no time left for: $*"; rc=1; return; fi
  timeout --signal=TERM --kill-after=30 "$left" "$FT" sweep "$@" "${common[@]}" || rc=1
}
if [[ -n "${SWEEP_QUICK:-}" ]]; then  # one small shape: checks the pipeline end to end
  sweep --batch 1 --heads 12 --head-dim 64 --seq 512
  exit $rc
fi
# SWEEP_SHAPES=large runs the flagship shapes alone, without the seed preset (e.g. for an
# exhaustive fused-only pass:
# SWEEP_EXTRA="--variants fused --strategy exhaustive --max-trials 0").
[[ "${SWEEP_SHAPES:-all}" == large ]] || sweep --preset seed
sweep --dtype fp16 --batch 1 --heads 12 --head-dim 64 --seq 2048
sweep --dtype bf16 --batch 4 --heads 16 --head-dim 128 --seq 4096
sweep --dtype bf16 --batch 4 --heads 16 --head-dim 128 --seq 4096 --causal
exit $rc
