#!/usr/bin/env bash
# The README's test command (and what .ci/run calls): install, build, run every test, then
# the worker and its state machine under ThreadSanitizer (ci/tsan.sh, its own build dir).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/setup-debian.sh --tests
ci/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)")
ci/tsan.sh
