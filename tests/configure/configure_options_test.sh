#!/usr/bin/env bash
# Configures the source tree (configure only, no build) with every combination of the build
# options this machine can satisfy: FUSETUNE_BUILD_TESTS × FUSETUNE_BUILD_BENCHMARKS ×
# FUSETUNE_WITH_CUDA × FUSETUNE_WITH_SERVICE, where CUDA and the service are tried ON only
# when the calling build has them (their tools are here); and that FUSETUNE_WITH_HIP=ON
# fails with its message (there is no HIP backend yet). Each configure takes seconds.
# Usage: configure_options_test.sh SOURCE_DIR CC CXX WITH_CUDA WITH_SERVICE [CUDA_COMPILER]
set -euo pipefail
src=$1 cc=$2 cxx=$3 with_cuda=$4 with_service=$5 cuda_compiler=${6:-}

work=$(mktemp -d "${TMPDIR:-/tmp}/fusetune-configure-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
cuda_values=(OFF) service_values=(OFF)
[[ $with_cuda == ON ]] && cuda_values+=(ON)
[[ $with_service == ON ]] && service_values+=(ON)
compiler_args=(-DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx")
[[ -n $cuda_compiler ]] && compiler_args+=(-DCMAKE_CUDA_COMPILER="$cuda_compiler")

failed=0 total=0
for tests in ON OFF; do
  for benchmarks in ON OFF; do
    for cuda in "${cuda_values[@]}"; do
      for service in "${service_values[@]}"; do
        name="tests=$tests benchmarks=$benchmarks cuda=$cuda service=$service"
        dir=$work/t$tests-b$benchmarks-c$cuda-s$service
        total=$((total + 1))
        if cmake -S "$src" -B "$dir" "${compiler_args[@]}" -DCMAKE_BUILD_TYPE=Release \
             -DFUSETUNE_BUILD_TESTS="$tests" -DFUSETUNE_BUILD_BENCHMARKS="$benchmarks" \
             -DFUSETUNE_WITH_CUDA="$cuda" -DFUSETUNE_WITH_SERVICE="$service" -DFUSETUNE_WITH_HIP=OFF \
             > "$dir.log" 2>&1; then
          echo "ok      $name"
        else
          failed=$((failed + 1))
          echo "FAILED  $name:"
          grep -A4 "CMake Error" "$dir.log" | sed 's/^/    /'
        fi
        rm -rf "$dir"
      done
    done
  done
done
echo "$((total - failed)) of $total combinations configured"

# FUSETUNE_WITH_HIP=ON needs hipcc: without it the configure must fail and name it, never
# configure a build that silently lacks the backend; with it, it configures.
dir=$work/hip-on
if command -v hipcc > /dev/null; then
  if cmake -S "$src" -B "$dir" "${compiler_args[@]}" -DCMAKE_BUILD_TYPE=Release \
       -DFUSETUNE_WITH_CUDA=OFF -DFUSETUNE_WITH_SERVICE=OFF -DFUSETUNE_WITH_HIP=ON > "$dir.log" 2>&1; then
    echo "ok      FUSETUNE_WITH_HIP=ON configures (hipcc present)"
  else
    failed=$((failed + 1))
    echo "FAILED  FUSETUNE_WITH_HIP=ON with hipcc present:"
    grep -A4 "CMake Error" "$dir.log" | sed 's/^/    /'
  fi
elif cmake -S "$src" -B "$dir" "${compiler_args[@]}" -DCMAKE_BUILD_TYPE=Release \
     -DFUSETUNE_WITH_CUDA=OFF -DFUSETUNE_WITH_SERVICE=OFF -DFUSETUNE_WITH_HIP=ON > "$dir.log" 2>&1; then
  failed=$((failed + 1))
  echo "FAILED  FUSETUNE_WITH_HIP=ON configured without hipcc"
elif ! grep -q "FUSETUNE_HIPCC" "$dir.log"; then
  failed=$((failed + 1))
  echo "FAILED  FUSETUNE_WITH_HIP=ON without hipcc failed without naming hipcc:"
  grep -A4 "CMake Error" "$dir.log" | sed 's/^/    /'
else
  echo "ok      FUSETUNE_WITH_HIP=ON without hipcc fails and names hipcc"
fi
rm -rf "$dir"
[[ $failed -eq 0 ]]
