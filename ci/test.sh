#!/usr/bin/env bash
# The README's test command (and what .ci/run calls): install, build, run every test, then
# the worker and its state machine under ThreadSanitizer (ci/tsan.sh, its own build dir).
set -euo pipefail
cd "$(dirname "$0")/.."
# --hip: CI compiles the HIP backend too (ci/build.sh turns it on when hipcc is present).
ci/setup-debian.sh --tests --hip
ci/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)")
ci/tsan.sh
