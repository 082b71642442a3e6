#!/usr/bin/env bash
# The README's main job: install, build, sweep the seed preset on the CPU into
# ./fusetune.db (resuming an unfinished sweep of the same commit), print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/setup-debian.sh
BUILD_TARGET=fusetune ci/build.sh  # only the binary: tests and benchmarks are not needed here
fusetune=${BUILD_DIR:-build}/service/cli/fusetune
"$fusetune" sweep --preset seed --db ./fusetune.db
"$fusetune" report --db ./fusetune.db
