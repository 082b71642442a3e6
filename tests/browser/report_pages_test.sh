#!/bin/bash
# The HTML reports as a user makes and views them: the built `fusetune` writes each page
# (`report --html`, `regress --html`, `history --html`) from a small database it fills itself
# (a sweep, bench runs, an A/A regress run on the CPU), and headless Chromium renders each page.
# The rendered DOM must hold the page's elements and the mark of its inline script
# (<body data-script="ok">, and no data-script-error), and Chromium's log must show no script
# error. Exit 77 (ctest: skipped) when Chromium is not installed, saying why.
#
# Usage: report_pages_test.sh FUSETUNE_BINARY
set -u
fusetune=${1:?usage: report_pages_test.sh FUSETUNE_BINARY}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIP: chromium is not installed (apt-get install --no-install-recommends chromium; ci/setup-debian.sh installs it)"
  exit 77
fi
work=$(mktemp -d)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() {  # run CMD...: prints the command's output only when it fails
  if ! "$@" >"$work/out.txt" 2>&1; then
    fail "$* exited $?"
    cat "$work/out.txt"
    return 1
  fi
}

cat >"$work/suite.json" <<'JSON'
{"name": "tiny", "block": {"warmup": 1, "repeats": 3, "max_seconds": 0.2, "flush_l2": false}, "blocks": 3, "cells": [
  {"problem": "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32", "config": "fused/bm16/bs16/t1/fp32/st1", "role": "best"},
  {"problem": "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32", "config": "materialized/bm16/bs16/t1/fp32/st1", "role": "materialized"}]}
JSON
db="$work/f.db"
commit=$("$fusetune" --version | sed -n 's/.*commit \([0-9a-z]*\).*/\1/p')
run "$fusetune" sweep --seq 64,96 --heads 2 --head-dim 32 --db "$db" --max-seconds 2
run "$fusetune" report --db "$db" --html "$work/report.html"
for _ in 1 2 3; do run "$fusetune" bench --suite "$work/suite.json" --db "$db"; done
run "$fusetune" history --db "$db" --suite tiny --html "$work/history.html" --html-regress-link regress.html
# An A/A calibration: the same build on both sides (exit 0 whatever its timing verdicts).
run "$fusetune" regress --suite "$work/suite.json" --baseline "$commit" --commit "$commit" \
  --baseline-binary "$fusetune" --db "$db" --html "$work/regress.html" --html-history-link history.html

# render PAGE: the DOM Chromium rendered into $work/PAGE.dom, its log into $work/PAGE.log.
render() {
  timeout 60 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/profile" \
    --enable-logging=stderr --v=0 --dump-dom "file://$work/$1.html" >"$work/$1.dom" 2>"$work/$1.log"
}
# expect PAGE TEXT...: each TEXT occurs in the rendered DOM.
expect() {
  local page=$1
  shift
  for text in "$@"; do
    grep -qF -- "$text" "$work/$page.dom" || fail "$page: the rendered page lacks '$text'"
  done
}
# The sort script at work: a copy of the tuning page clicks the "median µs" header twice and
# writes what the rows' order was after each click into the DOM.
sed 's|</body>|<script>\
var table = document.querySelector("table.sortable");\
var header = table.querySelectorAll("thead th")[4];\
function medians() { return Array.from(table.tBodies[0].rows).map(function (r) { return Number(r.cells[4].getAttribute("data-sort")); }); }\
header.click(); var up = medians(); header.click(); var down = medians();\
var sorted = up.length > 1 \&\& up[0] < up[up.length - 1] \&\& down[0] > down[down.length - 1];\
document.body.setAttribute("data-sort-check", (sorted ? "ok " : "failed ") + up.join(",") + " then " + down.join(","));\
</script></body>|' "$work/report.html" >"$work/report-sorted.html"

for page in report regress history report-sorted; do
  if [ ! -s "$work/$page.html" ]; then
    fail "$page.html was not written"
    continue
  fi
  if ! render "$page"; then
    fail "chromium failed on $page.html"
    cat "$work/$page.log"
    continue
  fi
  expect "$page" 'data-script="ok"' 'title="click to sort"'
  if grep -qF 'data-script-error="' "$work/$page.dom"; then
    fail "$page: a script failed: $(grep -o 'data-script-error="[^"]*"' "$work/$page.dom")"
  fi
  if grep -E 'Uncaught|CONSOLE.*(Error|error)' "$work/$page.log"; then
    fail "$page: the console shows an error"
  fi
done
expect report-sorted 'data-sort-check="ok '
expect report '<table class="sortable index">' 'class="heatmap"' 'class="config outcome-ok' 'class="pick"' \
  'class="variants"' 'unknown peak' 'class="env"'
expect regress '<table class="sortable verdicts">' 'class="strip"' 'class="block"' 'class="floor"' \
  'href="history.html#cell-prefill-b1-hq2-hkv2-q64-k64' 'A/A calibration' 'id="accuracy"'
expect history '<table class="sortable index">' 'class="x-label"' 'href="regress.html#cell-prefill-b1-hq2-hkv2-q64-k64' \
  "finished " "$commit"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s); the pages, DOMs and logs are in $work"
  exit 1
fi
rm -rf "$work"
echo "PASS: report, regress and history pages render in $("$browser" --version 2>/dev/null | head -1) without script errors"
