#!/usr/bin/env bash
# GPU host, from the repository root: the Hopper kernel variants waiting for a GPU
# (kernels/cuda/dev/variants/*.patch, or the NAMEs given) against this tree's own kernels, in one
# run, each step under a time limit so a hung variant costs minutes, not the call:
#   1. build: kernels/cuda/dev/build_hopper_dev.sh, the tree ("base") and every variant (nvcc
#      alone, ~40 s on 16 cores; each variant's ptxas report and, where cuobjdump runs, its loops);
#   2. check: check_hopper_dev.py, every variant on the fixed and VARIANT_PROBLEMS random problems
#      against a float64 reference, for each key of VARIANT_CONFIGS;
#   3. sanitize: compute-sanitizer memcheck, then racecheck, on --small problems of each variant
#      that passed (not base: the tree's kernels have their own sanitizer runs);
#   4. time: compare_torch.py, cuDNN, the full library's kernels ("ours"), base and every variant
#      that passed 2 and 3, interleaved on VARIANT_SHAPES for VARIANT_ROUNDS rounds, L2 flushed.
# The full C ABI library comes from a bundle staged on the build machine (ci/device/stage.sh
# with STAGE_TARGETS="fusetune_capi fusetune cuda_backend_test"): FULL_LIB=path, or the one under
# /tmp/m/lib (tar -xJf .gpu-bundle/main/bundle.tar.xz -C /tmp/m; LD_LIBRARY_PATH=/tmp/m/lib).
#
#   bash ci/device/hopper_variants_check.sh [NAME...]
#
# VARIANT_STEPS picks steps (default "build check sanitize time"); a later call on the same host
# may skip the build ("check time") and reuse $OUT/libs. Steps 2-3 on one variant take about 3
# minutes, step 4 on four shapes about 5: two calls of 10 minutes hold them with room to spare.
# Knobs: VARIANT_CONFIGS (space-separated keys, {p} = precision; default the d128 st2 persistent
# keys, plain and ping-pong), VARIANT_SHAPES (compare_torch.py ids; default the four d128 flagships),
# VARIANT_TIME_KEY (the key timed; default fused/bm128/bs128/t384/{p}/st2/persistent),
# VARIANT_PROBLEMS (40), VARIANT_ROUNDS (15), VARIANT_STEP_TIMEOUT (seconds per step, 240).
# Everything under $OUT (default /tmp/hopper-variants); a summary last.
# Exit status: 0 when every step ran and every variant passed its checks, 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/hopper-variants}
mkdir -p "$out"
full_lib=${FULL_LIB:-/tmp/m/lib/libfusetune_capi.so}
configs=${VARIANT_CONFIGS:-"fused/bm128/bs128/t384/{p}/st2/persistent fused/bm128/bs128/t384/{p}/st2/pingpong/persistent"}
shapes=${VARIANT_SHAPES:-bf16-d128-s4096,fp16-d128-s1024-b8,bf16-d128-s4096-causal,bf16-d128-s4096-gqa-causal}
time_key=${VARIANT_TIME_KEY:-"fused/bm128/bs128/t384/{p}/st2/persistent"}
problems=${VARIANT_PROBLEMS:-40}
rounds=${VARIANT_ROUNDS:-15}
step_timeout=${VARIANT_STEP_TIMEOUT:-240}
steps=" ${VARIANT_STEPS:-build check sanitize time} "
python=${PYTHON:-python3}
summary=()
status=0

[[ -r $full_lib ]] || { echo "hopper_variants_check: no full library at $full_lib (set FULL_LIB)" >&2; exit 1; }
names=("$@")
if ((${#names[@]} == 0)); then
  for patch in "$root"/kernels/cuda/dev/variants/*.patch; do
    [[ -e $patch ]] && names+=("$(basename "$patch" .patch)")
  done
fi
specs=(base)
for name in "${names[@]}"; do
  patch=$root/kernels/cuda/dev/variants/$name.patch
  [[ -r $patch ]] || { echo "hopper_variants_check: no variant $patch" >&2; exit 1; }
  specs+=("$name=$patch")
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,clocks_event_reasons.active \
  --format=csv | tee "$out/gpu.txt"

# 1. build
if [[ $steps == *" build "* ]]; then
  t0=$(date +%s)
  if ! timeout "$step_timeout" bash "$root/kernels/cuda/dev/build_hopper_dev.sh" "$out/libs" "${specs[@]}" \
      > "$out/build.log" 2>&1; then
    cat "$out/build.log"
    echo "hopper_variants_check: the build failed" >&2
    exit 1
  fi
  grep -E "^built|key loop|producer loop" "$out/build.log"
  summary+=("build: base and ${#names[@]} variants in $(($(date +%s) - t0)) s")
fi
for name in base "${names[@]}"; do
  [[ -r $out/libs/$name/libfusetune_hopper_dev.so ]] || { echo "hopper_variants_check: $name not built" >&2; exit 1; }
done

config_args=()
for key in $configs; do config_args+=(--config "$key"); done
lib_of() { echo "$out/libs/$1/libfusetune_hopper_dev.so"; }

# 2. check and 3. sanitize, per variant (base checked too: the same checks' reference)
passed=()
for name in base "${names[@]}"; do
  lib=$(lib_of "$name")
  if [[ $steps != *" check "* ]]; then
    passed+=("$name")
    continue
  fi
  timeout "$step_timeout" "$python" "$root/ci/device/check_hopper_dev.py" --lib "$full_lib" --no-full \
    --variant "$name=$lib" "${config_args[@]}" --problems "$problems" --out "$out/check-$name" \
    > "$out/check-$name.log" 2>&1
  rc=$?
  line=$(tail -n 1 "$out/check-$name.log")
  summary+=("check $name: rc $rc: $line")
  if ((rc != 0)); then
    grep FAIL "$out/check-$name.log" | head -5
    status=1
    continue
  fi
  ok=1
  if [[ $steps == *" sanitize "* && $name != base ]]; then
    for tool in memcheck racecheck; do
      timeout "$step_timeout" compute-sanitizer --tool "$tool" --error-exitcode 9 "$python" \
        "$root/ci/device/check_hopper_dev.py" --lib "$full_lib" --no-full --variant "$name=$lib" \
        "${config_args[@]}" --small --reference-on-cpu --problems 4 --out "$out/$tool-$name" \
        > "$out/$tool-$name.log" 2>&1
      rc=$?
      summary+=("$tool $name: rc $rc: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/$tool-$name.log" | tail -n 1)")
      ((rc == 0)) || { ok=0; status=1; }
    done
  fi
  ((ok)) && passed+=("$name")
done

# 4. time
if [[ $steps != *" time "* ]]; then
  :
elif ((${#passed[@]} > 0)); then
  args=(--lib "$full_lib" --out "$out/compare" --rounds "$rounds" --shapes "$shapes" --candidates ours,cudnn)
  IFS=, read -r -a shape_list <<< "$shapes"
  for shape in "${shape_list[@]}"; do args+=(--config "$shape=$time_key"); done
  for name in "${passed[@]}"; do args+=(--also "$name=$time_key@$(lib_of "$name")"); done
  timeout $((step_timeout * 2)) "$python" "$root/ci/device/compare_torch.py" "${args[@]}" > "$out/compare.log" 2>&1
  rc=$?
  summary+=("compare_torch (${passed[*]}; $rounds rounds): rc $rc")
  ((rc == 0)) || status=1
  sed -n '/^| shape | pair /,/^$/p' "$out/compare/compare.md" 2>/dev/null | head -60
else
  summary+=("compare_torch: not run, no variant passed its checks")
fi
echo "==== hopper_variants_check summary"
printf '%s\n' "${summary[@]}"
exit $status
