#!/usr/bin/env bash
# Run on the GPU host with .gpu-bundle/backend (ci/device/stage.sh) in place: the wall time of
# a default `fusetune sweep --backend cuda` per shape, fused only and with the baselines,
# each into its own database under $OUT, with the sweep's progress lines in tune_times.log;
# then ci/device/trial_overhead.py over those databases (trial_overhead.md).
# Knobs: TUNE_SHAPES (a file of "name|sweep flags" lines; default: two flagship shapes
# below), TUNE_EXTRA (extra sweep flags for every tune), TUNE_VARIANTS ("fused all").
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/fusetune-out}
mkdir -p "$OUT"
source "$ROOT/ci/device/cuda_lib_dirs.sh"
B=/tmp/fusetune-bundle
unpack_bundle "$ROOT/.gpu-bundle/backend" "$B" || exit 1
export LD_LIBRARY_PATH=$(bundle_library_path "$B")
default_shapes="fp16-b1-h12-d64-s2048|--seq 2048 --heads 12 --head-dim 64 --dtype fp16
bf16-b4-h16-d128-s4096|--seq 4096 --batch 4 --heads 16 --head-dim 128 --dtype bf16"
shapes=$(if [[ -n "${TUNE_SHAPES:-}" ]]; then cat "$TUNE_SHAPES"; else echo "$default_shapes"; fi)
{
  printf '| shape | variants | wall s | trials | best |\n|---|---|---:|---:|---|\n'
  while IFS='|' read -r name flags; do
    [[ -z "$name" ]] && continue
    for variants in ${TUNE_VARIANTS:-fused all}; do
      db="$OUT/tune-$name-$variants.db"
      vflag=""
      [[ "$variants" != all ]] && vflag="--variants $variants"
      t0=$(date +%s.%N)
      # shellcheck disable=SC2086
      "$B/bin/fusetune" sweep --backend cuda --db "$db" $flags $vflag ${TUNE_EXTRA:-} --label "tune-$variants" \
        >> "$OUT/tune_times.log" 2>&1
      rc=$?
      t1=$(date +%s.%N)
      line=$(grep -E '^\[1/1\]' "$OUT/tune_times.log" | tail -1)
      trials=$(sed -n 's/.*: \([0-9]*\) trials.*/\1/p' <<<"$line")
      best=$(sed -n 's/.*best \([^ ]*\) \([0-9.]*\) us.*/\1 \2 us/p' <<<"$line")
      printf '| %s | %s | %.2f | %s | %s (rc %d) |\n' "$name" "$variants" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" \
        "$trials" "$best" "$rc"
    done
  done <<<"$shapes"
} | tee "$OUT/tune_times.md"
python3 "$ROOT/ci/device/trial_overhead.py" "$OUT"/tune-*.db | tee "$OUT/trial_overhead.md"
