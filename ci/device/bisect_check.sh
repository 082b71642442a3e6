#!/usr/bin/env bash
# A real bisect of this repository's own history on a GPU: `fusetune bisect` over the
# first-parent commits between GOOD and BAD for one cell, each commit's build being its C ABI
# library (libfusetune_capi.so, which every commit since the C ABI's version 1 ships), served
# through the running build's `bench-serve --capi-library` and measured interleaved against the
# good endpoint with the regression verdict rules.
#
# Usage: bisect_check.sh FUSETUNE OUT
#   GOOD, BAD      the endpoints (commits of REPO)
#   CELL           'PROBLEM_KEY CONFIG_KEY'
#   IMPROVEMENT    1 (default) looks for the commit that made the cell faster, 0 for a slowdown
#   REPO           the git repository (default: this checkout; a bundle is cloned first when
#                  REPO_BUNDLE names one, for a GPU host whose copy has no .git)
#   LIBS           prebuilt libraries as LIBS/<12-hex commit>/lib/libfusetune_capi.so (built on
#                  another machine with `ci/build-commit.sh --library`); unset, each probed commit
#                  is built here with ci/build-commit.sh --library (needs the build dependencies)
#   LIBS_ARCHIVE   the archive `ci/device/bisect_libraries.sh` packs (every commit of the range):
#                  unpacked into a temporary LIBS
#   BLOCKS         first-pass blocks per side (default 10)
#   BACKEND        cuda (default) or cpu
# Writes OUT/bisect.log, OUT/bisect.db (the culprit row), OUT/smi.csv (clock, power, throttle
# reasons every 500 ms); prints the wall time.
set -uo pipefail
FT=$1
OUT=$2
mkdir -p "$OUT"
: "${GOOD:?GOOD must name the good commit}" "${BAD:?BAD must name the bad commit}" "${CELL:?CELL must name the cell}"
REPO=${REPO:-$(pwd)}
if [[ -n ${REPO_BUNDLE:-} ]]; then
  REPO=$(mktemp -d)/repo
  git clone -q "$REPO_BUNDLE" "$REPO" || { echo "bisect_check: cannot clone $REPO_BUNDLE" >&2; exit 2; }
fi
if [[ -n ${LIBS_ARCHIVE:-} ]]; then
  LIBS=$(mktemp -d)/libs
  mkdir -p "$LIBS"
  tar -xJf "$LIBS_ARCHIVE" -C "$LIBS" || { echo "bisect_check: cannot unpack $LIBS_ARCHIVE" >&2; exit 2; }
fi
if [[ -n ${LIBS:-} ]]; then
  # The build of a commit is the prebuilt library; a commit without one does not build (125).
  build_command="f=$LIBS/\$(git -C '$REPO' rev-parse --short=12 {commit})/lib/libfusetune_capi.so; [ -r \"\$f\" ] || exit 125; echo \"\$f\""
else
  build_command="'$REPO/ci/build-commit.sh' --repo '$REPO' --library --cmake-args '-DFUSETUNE_WITH_CUDA=ON -DFUSETUNE_WITH_SERVICE=OFF' {commit}"
fi
args=(bisect --repo "$REPO" --good "$GOOD" --bad "$BAD" --cell "$CELL" --backend "${BACKEND:-cuda}" --db "$OUT/bisect.db"
      --build-command "$build_command" --blocks "${BLOCKS:-10}")
[[ ${IMPROVEMENT:-1} == 1 ]] && args+=(--improvement)
# The database holds the cell as a nightly's bench run would (bisect reads the cell's problem
# from it and records the culprit there): a one-cell suite benched by the running build.
problem_key=${CELL%% *} config_key=${CELL#* }
cat > "$OUT/cell.json" <<JSON
{"name": "bisect-cell", "blocks": 5, "cells": [{"problem": "$problem_key", "config": "$config_key", "role": "best"}]}
JSON
"$FT" bench --suite "$OUT/cell.json" --backend "${BACKEND:-cuda}" --db "$OUT/bisect.db" > "$OUT/bench.log" 2>&1 ||
  { cat "$OUT/bench.log"; echo "bisect_check: benching the cell failed" >&2; exit 2; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 500 > "$OUT/smi.csv" 2>/dev/null &
smi=$!
t0=$SECONDS
"$FT" "${args[@]}" > "$OUT/bisect.log" 2>&1
rc=$?
kill "$smi" 2>/dev/null
cat "$OUT/bisect.log"
echo "bisect_check: exit $rc after $((SECONDS - t0)) s"
exit "$rc"
