#!/usr/bin/env bash
# Run on a GPU host with two or more GPUs, from the repository root of a checkout holding
# .gpu-bundle/worker (packed by ci/device/stage_worker.sh and copied there).
# The multi-GPU measurement: one `fusetune worker` driving every GPU of the host.
#   phase "one": serve (fresh DB) + worker --devices 0,   N identical jobs, wall time to all done
#   phase "all": serve (fresh DB) + worker --devices all, the same N jobs
# Jobs/hour = N / wall for each phase; ci/device/multi_gpu_summary.py then compares, cell by cell
# ((problem, config) measured by jobs that ran on different GPUs), the medians of the two GPUs
# against each cell's own p10-p90 spread. Knobs: MGPU_JOBS (4), MGPU_TRIALS (4 per problem and
# variant), MGPU_SEQ (1024,2048), MGPU_DTYPE (fp16). Files under $OUT (8): run.log, one.db, all.db, worker_one.log, worker_all.log, submit_one.log,
# submit_all.log, summary.txt (the servers' logs go to the temp folder). CPU dry run of the script itself (no GPU):
#   FUSETUNE_BIN=build/service/cli/fusetune MGPU_BACKEND=cpu MGPU_SEQ=128 MGPU_DTYPE=fp32 \
#     bash ci/device/multi_gpu_check.sh   (one CPU device against two)
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/fusetune-mgpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
N=${MGPU_JOBS:-4}
TRIALS=${MGPU_TRIALS:-4}
SEQ=${MGPU_SEQ:-1024,2048}
DTYPE=${MGPU_DTYPE:-fp16}

nvidia-smi -L || true
B=/tmp/fusetune-worker-bundle
BIN=${FUSETUNE_BIN:-$B/bin/fusetune}
BACKEND=${MGPU_BACKEND:-cuda}
source "$ROOT/ci/device/cuda_lib_dirs.sh"
if [[ -z "${FUSETUNE_BIN:-}" ]]; then
  unpack_bundle "$ROOT/.gpu-bundle/worker" "$B" || exit 1
fi
LIBPATH=$(bundle_library_path "$B")
ft() { LD_LIBRARY_PATH="$LIBPATH" "$BIN" "$@"; }

phase() {  # name, device flags
  local name=$1; shift
  local devices=("$@")
  local D; D=$(mktemp -d)
  echo "mgpu-token-$RANDOM$RANDOM" > "$D/token"
  LD_LIBRARY_PATH="$LIBPATH" "$BIN" serve --listen 127.0.0.1:0 --db "$OUT/$name.db" --token-file "$D/token" \
    --metrics off --refresh-ms 200 --port-file "$D/port" > "$D/server.log" 2>&1 &
  local spid=$!
  for _ in $(seq 100); do [[ -s "$D/port" ]] && break; sleep 0.1; done
  local S=127.0.0.1:$(cut -d" " -f1 "$D/port")
  LD_LIBRARY_PATH="$LIBPATH" "$BIN" worker --server "$S" --token-file "$D/token" --backend "$BACKEND" \
    "${devices[@]}" --spool "$D/spool" --worker-id "mgpu-$name" --lease-wait-ms 200 \
    > "$OUT/worker_$name.log" 2>&1 &
  local wpid=$!
  for _ in $(seq 300); do
    [[ $(grep -c registered "$OUT/worker_$name.log") -ge 1 ]] && break; sleep 0.1
  done
  sleep 1  # every device of the worker registers within a second of the first
  local dc; dc=$(grep -o 'registered [^ ]*' "$OUT/worker_$name.log" | head -1 | cut -d' ' -f2)
  echo "== phase $name: ${devices[*]}, $(grep -c registered "$OUT/worker_$name.log") registered, class $dc"
  local t0; t0=$(date +%s.%N)
  local pids=()
  for i in $(seq "$N"); do
    ft submit --server "$S" --token-file "$D/token" --device-class "$dc" --max-trials "$TRIALS" --wait \
      --wait-timeout 240 --kind prefill --batch 1 --heads 12 --head-dim 64 --dtype "$DTYPE" --seq "$SEQ" \
      > "$D/submit_$i.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$D"/submit_*.log > "$OUT/submit_$name.log"
  local wall; wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
  echo "phase $name: $N jobs, submit rc=$rc, wall $wall s, $(awk -v n="$N" -v w="$wall" 'BEGIN{printf "%.0f", n*3600/w}') jobs/hour"
  echo "$name $N $wall $rc" >> "$PH"
  kill -TERM "$wpid"; timeout 60 tail --pid="$wpid" -f /dev/null
  kill -TERM "$spid"; timeout 30 tail --pid="$spid" -f /dev/null
  grep -E "job [0-9]+ (done|failed)|device" "$OUT/worker_$name.log" | tail -8
}

PH=$(mktemp)
if [[ $BACKEND == cpu ]]; then
  phase one --cpu-devices 1
  phase all --cpu-devices 2
else
  phase one --devices 0
  phase all --devices all
fi
python3 "$ROOT/ci/device/multi_gpu_summary.py" "$PH" "$OUT/one.db" "$OUT/all.db" | tee "$OUT/summary.txt"
