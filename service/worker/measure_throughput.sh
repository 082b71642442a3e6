#!/usr/bin/env bash
# Worker throughput: jobs per hour of one `fusetune worker` driving 1, 2, ... CPU devices
# (--cpu-devices) on the same fixed job set, against a fresh `fusetune serve` each time.
#
#   service/worker/measure_throughput.sh BUILD/service/cli/fusetune [JOBS] [DEVICES...]
#   e.g. service/worker/measure_throughput.sh build/service/cli/fusetune 8 1 2
#
# Job i tunes prefill/b1/hq4/hkv4/q{128+16i}/k{128+16i}/d64/causal0/fp32, variants fused and
# materialized, 4 trials each (8 trials per job). The clock runs from the first submit to
# the worker's exit (--max-jobs JOBS). Prints one table row per device count.
set -euo pipefail
bin=${1:?path to the fusetune binary}
jobs=${2:-8}
shift 2 || true
device_counts=("${@:-1 2}")
[[ $# -eq 0 ]] && device_counts=(1 2)

echo "| CPU devices | jobs | trials | wall s | jobs/hour |"
echo "|---|---|---|---|---|"
for devices in "${device_counts[@]}"; do
  dir=$(mktemp -d)
  trap 'kill $spid 2>/dev/null || true; rm -rf "$dir"' EXIT
  echo "throughput-token" > "$dir/token"
  "$bin" serve --listen 127.0.0.1:0 --db "$dir/db" --token-file "$dir/token" --metrics off \
    --refresh-ms 200 --port-file "$dir/port" >/dev/null 2>"$dir/server.log" &
  spid=$!
  for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  port=$(cut -d' ' -f1 "$dir/port")
  FUSETUNE_TOKEN=throughput-token "$bin" worker --server "127.0.0.1:$port" --spool "$dir/spool" \
    --worker-id tp --cpu-devices "$devices" --max-jobs "$jobs" --lease-wait-ms 1000 2>"$dir/worker.log" &
  wpid=$!
  for _ in $(seq 100); do grep -q registered "$dir/worker.log" && break; sleep 0.1; done
  device_class=$(grep -o 'registered [^ ]*' "$dir/worker.log" | head -1 | cut -d' ' -f2)
  start=$(date +%s.%N)
  for i in $(seq 0 $((jobs - 1))); do
    len=$((128 + 16 * i))
    FUSETUNE_TOKEN=throughput-token "$bin" submit --server "127.0.0.1:$port" --device-class "$device_class" \
      --max-trials 4 --variants fused materialized \
      --problem "prefill/b1/hq4/hkv4/q$len/k$len/d64/causal0/fp32" >/dev/null
  done
  wait "$wpid"
  end=$(date +%s.%N)
  trials=$(grep -o '[0-9]* trials recorded' "$dir/worker.log" | tail -1 | cut -d' ' -f1)
  awk -v d="$devices" -v j="$jobs" -v t="$trials" -v s="$start" -v e="$end" \
    'BEGIN { w = e - s; printf "| %d | %d | %s | %.1f | %.0f |\n", d, j, t, w, j * 3600 / w }'
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  rm -rf "$dir"
  trap - EXIT
done
