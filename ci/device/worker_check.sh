#!/usr/bin/env bash
# Run on the GPU host, from the repository root of a checkout holding .gpu-bundle/worker
# (packed by ci/device/stage_worker.sh and copied there). The service end to end on the GPU:
#   1. `fusetune serve` on 127.0.0.1 (ephemeral port, temp DB, token file; /metrics on an
#      ephemeral port, WORKER_METRICS=host:port or off to change it);
#   2. `fusetune worker --backend cuda --devices all` (registers each GPU's device class);
#   3. `fusetune submit --wait` of job A (fp16 b1 h12 d64, S = 1024, 2048) and job B
#      (fp32 S = 512), WORKER_TRIALS (4) trials per problem and variant, each timed;
#   4. `fusetune best --server` for each tuned problem and one untuned (nearest) shape,
#      `fusetune jobs`, a /metrics scrape;
#   5. SIGTERM mid-job: job C (fp16 S = 4096, more trials) is leased, the worker gets SIGTERM
#      after its first trials and must release it and exit 0; a second worker resumes and
#      finishes it (skipped when less than RESUME_MIN_LEFT_S of WORKER_CHECK_BUDGET_S is left);
#   6. SIGTERM to the server (exit 0), then `fusetune report --db` on the server's database.
# Files under $OUT (<= 8): run.log server.log worker.log worker2.log report.txt metrics.txt
# server.db. Prints a summary last.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/fusetune-worker-out}
mkdir -p "$OUT"
TRIALS=${WORKER_TRIALS:-4}
BUDGET=${WORKER_CHECK_BUDGET_S:-300}
RESUME_MIN_LEFT_S=${RESUME_MIN_LEFT_S:-90}
exec > >(tee -a "$OUT/run.log") 2>&1
T0=$SECONDS
elapsed() { echo $((SECONDS - T0)); }
summary=()

echo "== nvidia-smi -L"; nvidia-smi -L || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv || true

B=/tmp/fusetune-worker-bundle
BIN=${FUSETUNE_BIN:-$B/bin/fusetune}   # FUSETUNE_BIN: a local binary instead (CPU dry run)
BACKEND=${WORKER_BACKEND:-cuda}
source "$ROOT/ci/device/cuda_lib_dirs.sh"
if [[ -z "${FUSETUNE_BIN:-}" ]]; then
  unpack_bundle "$ROOT/.gpu-bundle/worker" "$B" || exit 1
fi
LIBPATH=$(bundle_library_path "$B")
echo "LD_LIBRARY_PATH=$LIBPATH"
# Only fusetune sees the bundle's libraries (curl, nvidia-smi keep the host's own). The
# daemons start as plain commands (not through ft), so $! is their own pid for SIGTERM.
ft() { LD_LIBRARY_PATH="$LIBPATH" "$BIN" "$@"; }
if LD_LIBRARY_PATH="$LIBPATH" ldd "$BIN" | grep "not found"; then echo "MISSING LIBS"; exit 1; fi

D=$(mktemp -d)
echo "worker-check-token-$RANDOM$RANDOM" > "$D/token"
LD_LIBRARY_PATH="$LIBPATH" "$BIN" serve --listen 127.0.0.1:0 --db "$D/server.db" --token-file "$D/token" --metrics "${WORKER_METRICS:-127.0.0.1:0}" \
  --refresh-ms 200 --port-file "$D/port" > "$OUT/server.log" 2>&1 &
spid=$!
for _ in $(seq 100); do [[ -s "$D/port" ]] && break; sleep 0.1; done
port=$(cut -d" " -f1 "$D/port" 2>/dev/null); mport=$(cut -s -d" " -f2 "$D/port" 2>/dev/null)
[[ -n "$port" ]] || { echo "server did not start"; cat "$OUT/server.log"; exit 1; }
S=127.0.0.1:$port
echo "server pid $spid grpc $S metrics $mport"

LD_LIBRARY_PATH="$LIBPATH" "$BIN" worker --server "$S" --token-file "$D/token" --backend "$BACKEND" --devices all --spool "$D/spool" \
  --worker-id h200 --lease-wait-ms 1000 > "$OUT/worker.log" 2>&1 &
wpid=$!
for _ in $(seq 600); do grep -q registered "$OUT/worker.log" && break; kill -0 $wpid 2>/dev/null || break; sleep 0.1; done
cat "$OUT/worker.log"
DC=$(grep -o 'registered [^ ]*' "$OUT/worker.log" | head -1 | cut -d' ' -f2)
[[ -n "$DC" ]] || { echo "worker did not register"; kill $spid; exit 1; }
echo "device class: $DC (worker registered after $(elapsed) s)"
summary+=("device class $DC")

submit_timed() {  # label, submit args...
  local label=$1; shift
  local t=$(date +%s.%N)
  ft submit --server "$S" --token-file "$D/token" --device-class "$DC" --max-trials "$TRIALS" \
    --wait --wait-timeout 120 "$@"
  local rc=$?
  local w=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  echo "$label: rc=$rc wall ${w} s"
  summary+=("$label: submit rc=$rc, ${w} s wall (submit to done)")
}
echo "== job A"
submit_timed "job A fp16 S=1024,2048" --kind prefill --batch 1 --heads 12 --head-dim 64 --dtype fp16 --seq 1024,2048
echo "== job B"
submit_timed "job B fp32 S=512" --kind prefill --batch 1 --heads 12 --head-dim 64 --dtype fp32 --seq 512

echo "== jobs"; ft jobs --server "$S" --token-file "$D/token"
for id in 1 2; do ft jobs --server "$S" --token-file "$D/token" --id $id; done
echo "== best --server"
for spec in "fp16 1024" "fp16 2048" "fp32 512" "fp16 1536" "bf16 1024"; do
  set -- $spec
  echo "-- $1 S=$2"
  ft best --server "$S" --token-file "$D/token" --device-class "$DC" --kind prefill --batch 1 --heads 12 \
    --head-dim 64 --dtype "$1" --seq "$2"
done
[[ -n "${mport:-}" && "$mport" != 0 ]] && curl -s "http://127.0.0.1:$mport/metrics" > "$OUT/metrics.txt"
[[ -f "$OUT/metrics.txt" ]] && grep -E '^fusetune_(best_latency_seconds|best_speedup|jobs|workers_alive|trials_recorded)' "$OUT/metrics.txt" | head -30

echo "== SIGTERM mid-job (job C), t=$(elapsed) s"
ft submit --server "$S" --token-file "$D/token" --device-class "$DC" --max-trials "${JOBC_TRIALS:-24}" \
  --kind prefill --batch 1 --heads 12 --head-dim 64 --dtype fp16 --seq "${JOBC_SEQ:-4096,8192}"
# The worker logs progress per finished problem: signal once the first one is done (or 20 s).
for _ in $(seq 200); do grep -q 'job 3 problem 1/' "$OUT/worker.log" && break; sleep 0.1; done
grep 'job 3' "$OUT/worker.log" | tail -3
ts=$(date +%s.%N); kill -TERM $wpid
timeout 90 tail --pid=$wpid -f /dev/null; wait $wpid; wrc=$?
wstop=$(awk -v a="$ts" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
echo "worker exit rc=$wrc ${wstop} s after SIGTERM"; tail -6 "$OUT/worker.log"
summary+=("worker SIGTERM mid-job: rc=$wrc, exited ${wstop} s after the signal")
ft jobs --server "$S" --token-file "$D/token" --id 3
if (( BUDGET - $(elapsed) >= RESUME_MIN_LEFT_S )); then
  echo "== second worker resumes job C, t=$(elapsed) s"
  t=$(date +%s.%N)
  LD_LIBRARY_PATH="$LIBPATH" "$BIN" worker --server "$S" --token-file "$D/token" --backend "$BACKEND" --devices all --spool "$D/spool" \
    --worker-id h200 --lease-wait-ms 1000 --max-jobs 1 > "$OUT/worker2.log" 2>&1 &
  w2=$!
  timeout $((BUDGET - $(elapsed) - 20)) tail --pid=$w2 -f /dev/null
  if kill -0 $w2 2>/dev/null; then kill -TERM $w2; fi
  wait $w2; w2rc=$?
  w=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  cat "$OUT/worker2.log"
  ft jobs --server "$S" --token-file "$D/token" --id 3
  summary+=("job C resumed by a second worker: rc=$w2rc, ${w} s; $(ft jobs --server "$S" --token-file "$D/token" --id 3 | head -1)")
else
  summary+=("job C resume skipped (time)")
fi

kill -TERM $spid
timeout 30 tail --pid=$spid -f /dev/null; wait $spid; src=$?
echo "server exit rc=$src"; tail -5 "$OUT/server.log"
summary+=("server SIGTERM: rc=$src")
ft report --db "$D/server.db" > "$OUT/report.txt" 2>&1
cat "$OUT/report.txt"
cp "$D/server.db" "$OUT/server.db"
echo "== trials per run and outcome"
python3 - "$D/server.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for row in db.execute("select run_id, outcome, count(*) from trials group by run_id, outcome order by run_id, outcome"):
    print("run %d  %-14s %d" % row)
PY

echo "==== summary (t=$(elapsed) s)"
printf '%s\n' "${summary[@]}"
exit 0
