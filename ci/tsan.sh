#!/usr/bin/env bash
# Builds the worker tests with ThreadSanitizer (-DFUSETUNE_SANITIZE=thread, CUDA off) in
# ${BUILD_DIR:-build-tsan} and runs them. Any report fails the run.
#
# Debian's gRPC, protobuf and abseil are not built with TSan: absl::Mutex and CondVar are
# made visible to it by preloading ci/tsan/absl_mutex_annotations.cc, and races whose
# accessing frame is inside those libraries are suppressed (ci/tsan/suppressions.txt).
# TESTS="a b" overrides the test list.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-tsan}
jobs=${JOBS:-2}
tests=${TESTS:-"worker_job_state_test worker_launch_failure_streak_test worker_spool_test worker_metrics_test worker_connection_test worker_test"}
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUSETUNE_WITH_CUDA=OFF -DFUSETUNE_WITH_HIP=OFF \
  -DFUSETUNE_BUILD_BENCHMARKS=OFF -DFUSETUNE_SANITIZE=thread "${launcher[@]}"
# shellcheck disable=SC2086
cmake --build "$build_dir" -j"$jobs" --target $tests
shim="$build_dir/libabsl_mutex_annotations.so"
"${CXX:-c++}" -std=c++20 -O1 -g -fPIC -shared -fsanitize=thread ci/tsan/absl_mutex_annotations.cc -o "$shim" -ldl
export LD_PRELOAD="$PWD/$shim"
export TSAN_OPTIONS="suppressions=$PWD/ci/tsan/suppressions.txt halt_on_error=0 exitcode=66 second_deadlock_stack=1 history_size=4"
regex="^($(echo $tests | tr ' ' '|'))\$"
ctest --test-dir "$build_dir" -R "$regex" --output-on-failure -j"$jobs"
