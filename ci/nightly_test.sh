#!/usr/bin/env bash
# Runs ci/build-commit.sh and ci/nightly.sh as processes on a small git repository made here,
# with FUSETUNE_BUILD_COMMAND set to a fake build whose `fusetune` is a shell script that logs
# its arguments and exits with FAKE_FUSETUNE_STATUS. Checks build reuse, the first night
# (bench), later nights (regress with its flags, exit 0/1/2 passed on), the lock, unknown and
# broken commits, pruning and --fetch. No real build, no timing: seconds.
# Usage: nightly_test.sh [CI_DIR] (default: the folder of this script)
set -euo pipefail
ci_dir=$(cd "${1:-$(dirname "$0")}" && pwd)
build_commit=$ci_dir/build-commit.sh
nightly=$ci_dir/nightly.sh

TEST_NAME=nightly_test
# shellcheck source=ci/script_test_lib.sh
source "$ci_dir/script_test_lib.sh"

# The fake build: records each build (commit) it runs, keeps a file in the build folder to show
# that the folder persists, fails when the tree has a file named `broken`, and leaves a fake
# fusetune that logs "<commit> <subcommand> [arg] [arg]..." and creates the --db file.
export FAKE_BUILD_RECORD=$work/builds-run.txt FAKE_FUSETUNE_LOG=$work/fusetune-calls.txt
cat > "$work/fake-build.sh" <<'EOF'
set -euo pipefail
commit=$(git rev-parse HEAD)
echo "$commit" >> "$FAKE_BUILD_RECORD"
echo "$commit" >> "$BUILD_DIR/commits-built-here"
echo "fake build of $commit"
if [[ -e broken ]]; then echo "fake build: this tree is broken"; exit 1; fi
mkdir -p "$BUILD_DIR/service/cli"
cat > "$BUILD_DIR/service/cli/fusetune" <<FAKE
#!/usr/bin/env bash
line="${commit:0:12} \$1"
shift
db=""
while ((\$#)); do
  line+=" [\$1]"
  [[ \$1 == --db ]] && db=\$2
  shift
done
echo "\$line" >> "\$FAKE_FUSETUNE_LOG"
[[ -z \$db ]] || touch "\$db"
exit "\${FAKE_FUSETUNE_STATUS:-0}"
FAKE
chmod +x "$BUILD_DIR/service/cli/fusetune"
mkdir -p "$BUILD_DIR/kernels/capi"
echo "C ABI library of $commit" > "$BUILD_DIR/kernels/capi/libfusetune_capi.so"
EOF
export FUSETUNE_BUILD_COMMAND="bash $work/fake-build.sh"

# The repository: suites at every commit, a broken commit on a side branch.
repo=$work/repo
git init -q -b main "$repo"
mkdir -p "$repo/suites"
echo '{"name": "cpu"}' > "$repo/suites/cpu.json"
echo '{"name": "h200"}' > "$repo/suites/h200.json"
commits=()
for i in 1 2 3 4 5 6; do
  echo "$i" > "$repo/kernel.txt"
  git -C "$repo" add -A
  git -C "$repo" commit -q -m "commit $i"
  commits+=("$(git -C "$repo" rev-parse HEAD)")
done
git -C "$repo" checkout -q -b side
touch "$repo/broken"
git -C "$repo" add broken
git -C "$repo" commit -q -m "broken"
broken=$(git -C "$repo" rev-parse HEAD)
git -C "$repo" checkout -q main
short() { echo "${1:0:12}"; }
c1=${commits[0]} c2=${commits[1]} c3=${commits[2]} c4=${commits[3]} c5=${commits[4]} c6=${commits[5]}
builds_run() { [[ -f $FAKE_BUILD_RECORD ]] && wc -l < "$FAKE_BUILD_RECORD" || echo 0; }
last_call() { tail -n 1 "$FAKE_FUSETUNE_LOG"; }
calls() { [[ -f $FAKE_FUSETUNE_LOG ]] && wc -l < "$FAKE_FUSETUNE_LOG" || echo 0; }

s=""  # the last exit status, set by run_status
# run_status VAR COMMAND...: runs COMMAND, its combined output in $output, its status in VAR.
run_status() {
  local var=$1
  shift
  local run_exit=0
  output=$("$@" 2>&1) || run_exit=$?
  printf -v "$var" '%s' "$run_exit"
}
expect_status() {  # expect_status WANT GOT WHAT
  [[ $2 == "$1" ]] || fail "$3: exit $2, expected $1; output:"$'\n'"$output"
}

# --- build-commit.sh -------------------------------------------------------------------------
home=$work/home
run_status s "$build_commit" --repo "$repo" --home "$home" "$c1"
expect_status 0 "$s" "build-commit.sh of a good commit"
path=${output##*$'\n'}
[[ $path == "$home/builds/$(short "$c1")/bin/fusetune" ]] || fail "build-commit.sh printed '$path' last"
[[ -x $path && -f $home/builds/$(short "$c1")/build.log ]] || fail "no binary or build.log kept for $c1"
[[ $(git -C "$home/src" rev-parse HEAD) == "$c1" ]] || fail "the worktree is not at $c1"
[[ $(builds_run) == 1 ]] || fail "the fake build ran $(builds_run) times, expected once"
grep -q "C ABI library of $c1" "$home/builds/$(short "$c1")/lib/libfusetune_capi.so" ||
  fail "the commit's C ABI library is not kept beside its binary"
pass "build-commit.sh builds a commit into builds/<12-hex>/bin/fusetune with its build.log and its C ABI library in lib/"

run_status s "$build_commit" --repo "$repo" --home "$home" "$(short "$c1")"
expect_status 0 "$s" "build-commit.sh of a commit already built"
[[ ${output##*$'\n'} == "$path" ]] || fail "a reused build printed '${output##*$'\n'}'"
[[ $(builds_run) == 1 ]] || fail "the same commit was built again"
pass "build-commit.sh reuses the build of a commit without building"

run_status s "$build_commit" --repo "$repo" --home "$home" 0123456789abcdef
expect_status 2 "$s" "build-commit.sh of an unknown commit"
grep -q "unknown commit '0123456789abcdef'" <<< "$output" || fail "no 'unknown commit' message: $output"
[[ $(builds_run) == 1 ]] || fail "an unknown commit started a build"
pass "build-commit.sh: an unknown commit is exit 2 with a message, nothing built"

run_status s "$build_commit" --repo "$repo" --home "$home" "$broken"
expect_status 125 "$s" "build-commit.sh of a commit that does not build"
broken_log=$home/builds/$(short "$broken")/build.log
grep -q "this tree is broken" "$broken_log" || fail "the failed build's log was not kept at $broken_log"
grep -qF "$broken_log" <<< "$output" || fail "the failure message does not name $broken_log: $output"
[[ ! -e $home/builds/$(short "$broken")/bin/fusetune ]] || fail "a failed build left a binary"
pass "build-commit.sh: a commit that does not build is exit 125, its log kept and named"

run_status s "$build_commit" --repo "$repo" --home "$home" "$c2"
expect_status 0 "$s" "build-commit.sh of a second commit"
[[ $(wc -l < "$home/build/commits-built-here") == 3 ]] || fail "the build folder did not persist across commits"
pass "build-commit.sh reuses one worktree and one build folder across commits"

run_status s "$build_commit" --repo "$repo" --home "$home" --keep 0 "$c1"
expect_status 2 "$s" "--keep 0"
run_status s "$build_commit" --repo "$repo" --home "$home" --bogus "$c1"
expect_status 2 "$s" "an unknown option"
pass "build-commit.sh: bad options are exit 2"

# Pruning keeps the N most recently built or reused commits, whatever the file times say.
prune_home=$work/prune-home
for c in "$c1" "$c2" "$c3"; do
  "$build_commit" --repo "$repo" --home "$prune_home" --keep 2 "$c" > /dev/null 2>&1 || fail "building $c"
done
kept_builds() { find "$prune_home/builds" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort | tr '\n' ' '; }
short_set() { for c in "$@"; do short "$c"; done | sort | tr '\n' ' '; }
kept=$(kept_builds)
[[ $kept == "$(short_set "$c2" "$c3")" ]] ||
  fail "--keep 2 after c1, c2, c3 kept: $kept"
"$build_commit" --repo "$repo" --home "$prune_home" --keep 2 "$c2" > /dev/null 2>&1  # reused: newest again
"$build_commit" --repo "$repo" --home "$prune_home" --keep 2 "$c4" > /dev/null 2>&1
kept=$(kept_builds)
[[ $kept == "$(short_set "$c2" "$c4")" ]] ||
  fail "--keep 2 after reusing c2 then building c4 kept: $kept"
pass "build-commit.sh --keep N keeps the N most recently built or reused commits"

# The default home is under XDG_CACHE_HOME or ~/.cache.
run_status s "$build_commit" --repo "$repo" "$c1"
expect_status 0 "$s" "build-commit.sh with the default home"
[[ ${output##*$'\n'} == "$HOME/.cache/fusetune-nightly/builds/$(short "$c1")/bin/fusetune" ]] ||
  fail "the default home is not ~/.cache/fusetune-nightly: ${output##*$'\n'}"
pass "build-commit.sh's default home is \${XDG_CACHE_HOME:-\$HOME/.cache}/fusetune-nightly"
FUSETUNE_NIGHTLY_HOME=$work/env-home run_status s "$build_commit" --repo "$repo" "$c1"
expect_status 0 "$s" "build-commit.sh with FUSETUNE_NIGHTLY_HOME"
[[ ${output##*$'\n'} == "$work/env-home/builds/$(short "$c1")/bin/fusetune" ]] ||
  fail "FUSETUNE_NIGHTLY_HOME was not the home: ${output##*$'\n'}"
pass "build-commit.sh: FUSETUNE_NIGHTLY_HOME is the home when there is no --home"

# --- nightly.sh ------------------------------------------------------------------------------
home=$work/nightly-home
rm -f "$FAKE_BUILD_RECORD"
nightly_run() {  # nightly_run VAR FUSETUNE_STATUS ARGS...: nightly.sh on the CPU in $home
  local var=$1 status=$2
  shift 2
  FAKE_FUSETUNE_STATUS=$status run_status "$var" "$nightly" --repo "$repo" --home "$home" --backend cpu "$@"
}

nightly_run s 0 --commit "$c1"
expect_status 0 "$s" "the first night"
call=$(last_call)
[[ $call == "$(short "$c1") regress [--suite] [$home/reports/"*"-$(short "$c1")/cpu.json] [--baseline] [$(short "$c1")] [--commit] [$(short "$c1")] [--baseline-binary] ["*"/$(short "$c1")/bin/fusetune] [--db] [$home/nightly.db] [--backend] [cpu] [--junit] "* ]] ||
  fail "the first night ran: $call"
grep -q '"name": "cpu"' "$home/reports/"*"-$(short "$c1")/cpu.json" || fail "the suite was not copied from the commit"
log=$(ls "$home/logs/"*"-$(short "$c1").log")
grep -qF "benched $(short "$c1")" "$log" || fail "the log $log lacks the run's output"
grep -qF "benched $(short "$c1")" <<< "$output" || fail "stdout lacks the run's output"
pass "nightly.sh: the first night calibrates (the build against itself), storing the commit's bench run, exit 0, logged"

nightly_run s 2 --commit "$c1" --db "$work/failing-bench.db"
expect_status 2 "$s" "a first night whose calibration fails"
nightly_run s 0 --commit "$c2" --db "$work/failing-bench.db"
expect_status 0 "$s" "the night after a failed bench"
[[ $(last_call) == "$(short "$c2") regress [--suite] "*"[--baseline] [$(short "$c2")] [--commit] [$(short "$c2")] "* ]] ||
  fail "the night after a failed bench ran: $(last_call)"
nightly_run s 0 --commit "$c1"
expect_status 0 "$s" "a second night at the same commit"
[[ $(last_call) == "$(short "$c1") regress [--suite] "*"[--baseline] [$(short "$c1")] [--commit] [$(short "$c1")] "* ]] ||
  fail "the same commit again ran: $(last_call)"
[[ -z $(sort "$FAKE_BUILD_RECORD" | uniq -d) ]] || fail "a commit was built twice over several nights"
pass "nightly.sh: a failed first night is exit 2 and no baseline; the same commit again is calibrated again, not rebuilt"

for want in 0 1 2; do
  c_var=c$((want + 2)) && c=${!c_var}
  nightly_run s "$want" --commit "$c" --server 127.0.0.1:50051 --token-file "$repo/suites/cpu.json"
  expect_status "$want" "$s" "a later night whose regress exits $want"
  call=$(last_call)
  [[ $call == "$(short "$c") regress "* ]] || fail "a later night ran: $call"
  report_dir=$(ls -d "$home/reports/"*"-$(short "$c")")
  for flags in "[--suite] [$report_dir/cpu.json]" "[--baseline] [previous]" "[--commit] [$(short "$c")]" \
               "[--db] [$home/nightly.db]" "[--backend] [cpu]" "[--builds-dir] [$home/builds]" \
               "[--junit] [$report_dir/junit.xml]" "[--markdown] [$report_dir/report.md]" \
               "[--server] [127.0.0.1:50051]" "[--token-file] [$repo/suites/cpu.json]"; do
    grep -qF -- "$flags" <<< "$call" || fail "regress lacks $flags: $call"
  done
done
pass "nightly.sh: later nights run regress against the previous nightly and exit with its status (0, 1, 2)"

# --report-dir: the reports go there, and an earlier run's reports there are removed first.
mkdir -p "$work/ci-reports"
touch "$work/ci-reports/junit.xml" "$work/ci-reports/report.md"
nightly_run s 1 --commit "$c5" --report-dir "$work/ci-reports"
expect_status 1 "$s" "a night with --report-dir"
for flags in "[--suite] [$work/ci-reports/cpu.json]" "[--junit] [$work/ci-reports/junit.xml]" \
             "[--markdown] [$work/ci-reports/report.md]"; do
  grep -qF -- "$flags" <<< "$(last_call)" || fail "regress lacks $flags: $(last_call)"
done
[[ ! -e $work/ci-reports/junit.xml && ! -e $work/ci-reports/report.md ]] ||
  fail "an earlier run's reports were left in the --report-dir folder"
pass "nightly.sh --report-dir DIR: the reports go to DIR, an earlier run's removed first"

nightly_run s 139 --commit "$c5"
expect_status 2 "$s" "a regress that crashed"
pass "nightly.sh: any other regress status (a crash) is exit 2"

# The rebuild command regress is given builds the baseline it names and prints its binary last.
rebuild=$(sed -n 's/.*\[--rebuild-command\] \[\(.*{commit}\)\].*/\1/p' <<< "$(last_call)")
[[ -n $rebuild ]] || fail "no --rebuild-command with {commit}: $(last_call)"
rm -rf "$home/builds/$(short "$c2")"
out=$(sh -c "${rebuild//\{commit\}/$(short "$c2")}" 2> /dev/null)
[[ ${out##*$'\n'} == "$home/builds/$(short "$c2")/bin/fusetune" ]] || fail "the rebuild command printed '$out'"
pass "nightly.sh: the rebuild command (run by sh, {commit} replaced) prints the baseline's binary"

# HEAD by default; the fake nvidia-smi makes the default backend cuda and the suite h200.json.
mkdir -p "$work/gpu-bin"
printf '#!/bin/sh\necho "GPU 0: NVIDIA H200"\n' > "$work/gpu-bin/nvidia-smi"
chmod +x "$work/gpu-bin/nvidia-smi"
run_status s env PATH="$work/gpu-bin:$PATH" "$nightly" --repo "$repo" --home "$home" --device 1
expect_status 0 "$s" "a night with the defaults on a GPU host"
[[ $(last_call) == "$(short "$c6") regress [--suite] [$home/reports/"*"-$(short "$c6")/h200.json] "*"[--db] [$home/nightly.db] [--backend] [cuda] [--device] [1] "* ]] ||
  fail "the default night on a GPU host ran: $(last_call)"
pass "nightly.sh: defaults: HEAD, cuda when nvidia-smi works, suites/h200.json; a new device class benches first"

calls_before=$(calls) builds_before=$(builds_run)
exec 7> "$home/nightly.lock"
flock -n 7 || fail "could not take the lock for the test"
nightly_run s 0 --commit "$c4"
exec 7>&-
expect_status 2 "$s" "a night while another holds the lock"
grep -q "another nightly run holds" <<< "$output" || fail "no lock message: $output"
[[ $(calls) == "$calls_before" && $(builds_run) == "$builds_before" ]] || fail "a locked-out night built or ran something"
pass "nightly.sh: a held lock is exit 2 with a message, nothing built or run"

nightly_run s 0 --commit no-such-commit
expect_status 2 "$s" "a night at an unknown commit"
grep -q "unknown commit 'no-such-commit'" <<< "$output" || fail "no 'unknown commit' message: $output"
[[ $(calls) == "$calls_before" && $(builds_run) == "$builds_before" ]] || fail "an unknown commit built or ran something"
pass "nightly.sh: an unknown commit is exit 2 with a message, nothing built or run"

nightly_run s 0 --commit "$broken"
expect_status 2 "$s" "a night at a commit that does not build"
grep -qF "build log: $home/builds/$(short "$broken")/build.log" <<< "$output" || fail "no build log path: $output"
[[ $(calls) == "$calls_before" ]] || fail "fusetune ran after a failed build"
pass "nightly.sh: a commit that does not build is exit 2, naming the build log"

nightly_run s 0 --commit "$c1" --suite "$work/missing.json"
expect_status 2 "$s" "a missing --suite file"
nightly_run s 0 --commit "$c1" --backend rocm
expect_status 2 "$s" "--backend rocm"
touch "$work/a-file"
nightly_run s 0 --commit "$c1" --report-dir "$work/a-file"
expect_status 2 "$s" "a --report-dir that cannot be made"
pass "nightly.sh: bad options are exit 2, and so is an unexpected failure (never 1)"

# A new database is a first night again, whatever the markers say.
nightly_run s 0 --commit "$c2" --db "$work/other.db"
expect_status 0 "$s" "the first night of another database"
[[ $(last_call) == "$(short "$c2") regress [--suite] "*"[--baseline] [$(short "$c2")] "*"[--db] [$work/other.db] "* ]] ||
  fail "another database ran: $(last_call)"
pass "nightly.sh: another database starts with a bench"

# --fetch: origin's default branch, fetched without prompting.
clone=$work/clone
git clone -q "$repo" "$clone"
echo 7 > "$repo/kernel.txt"
git -C "$repo" commit -q -am "commit 7"
c7=$(git -C "$repo" rev-parse HEAD)
FAKE_FUSETUNE_STATUS=0 run_status s "$nightly" --repo "$clone" --home "$work/fetch-home" --backend cpu --fetch
expect_status 0 "$s" "a night with --fetch"
[[ $(last_call) == "$(short "$c7") regress "*"[--commit] [$(short "$c7")] "* ]] || fail "--fetch did not judge origin's head $c7: $(last_call)"
pass "nightly.sh --fetch judges the head of origin's default branch"

# --library: the C ABI library of a commit, kept and reused like a binary.
lib_home=$work/lib-home
run_status s "$build_commit" --repo "$repo" --home "$lib_home" --library "$c3"
expect_status 0 "$s" "build-commit.sh --library"
lib=${output##*$'\n'}
[[ $lib == "$lib_home/builds/$(short "$c3")/lib/libfusetune_capi.so" ]] || fail "--library printed '$lib' last"
grep -q "C ABI library of $c3" "$lib" || fail "the kept library is not $c3's"
before=$(builds_run)
run_status s "$build_commit" --repo "$repo" --home "$lib_home" --library "$c3"
expect_status 0 "$s" "build-commit.sh --library of a commit already built"
[[ ${output##*$'\n'} == "$lib" && $(builds_run) == "$before" ]] || fail "--library rebuilt a kept library"
pass "build-commit.sh --library builds and reuses a commit's C ABI library"

echo "nightly_test: all passed"
