#!/usr/bin/env bash
# The nightly regression run: builds one commit (ci/build-commit.sh), then with that build
# either calibrates (the first night: nothing to compare against yet; the build against itself,
# which stores its bench run and each cell's A/A difference) or judges the
# commit against the previous nightly of the same suite and device class with
# `fusetune regress`, writing JUnit XML and a markdown report, and exits with its verdict.
# Safe under cron: absolute paths throughout, a lock against overlapping runs, never prompts.
#
#   ci/nightly.sh [--commit REV] [--fetch] [--suite FILE] [--backend cpu|cuda] [--device N]
#                 [--home DIR] [--db PATH] [--server ADDR] [--token-file FILE] [--repo DIR]
#                 [--cmake-args "ARGS"] [--report-dir DIR]
#
#   --commit REV        the commit to judge (default: HEAD of the repository, or with --fetch
#                       the head of origin's default branch after `git fetch origin`)
#   --suite FILE        the bench suite (default: suites/cpu.json or suites/h200.json, by
#                       backend, as checked in at the commit)
#   --backend cpu|cuda  default cuda when `nvidia-smi -L` works, else cpu; --device N its device
#   --home DIR          HOME_DIR, where everything goes (default: $FUSETUNE_NIGHTLY_HOME,
#                       else ${XDG_CACHE_HOME:-$HOME/.cache}/fusetune-nightly)
#   --db PATH           the database of bench runs and verdicts (default: HOME_DIR/nightly.db)
#   --server ADDR       also send the verdicts to this fusetune server (--token-file FILE)
#   --repo DIR          the repository (default: the one this script lives in)
#   --cmake-args "..."  passed to ci/build-commit.sh, for this build and baseline rebuilds
#   --report-dir DIR    this run's reports go to DIR (default: HOME_DIR/reports/<date>-<commit>)
#
# Writes HOME_DIR/logs/<date>-<commit>.log (a copy of stdout and stderr) and
# HOME_DIR/reports/<date>-<commit>/ (the suite used; junit.xml and report.md once there is a
# baseline; --report-dir DIR puts them in DIR instead, e.g. for a CI job to upload). Exit status: 0 clean (or the first night), 1 regression, 2 error (another run
# holds the lock, unknown commit, the commit does not build, or regress failed).
# Read whole before running (a checkout updated during a run must not change it).
{
set -euo pipefail
# An unexpected failure is an error (2), never to be read as a regression (1).
trap 'echo "nightly: unexpected failure at line $LINENO" >&2; exit 2' ERR

usage() {
  sed -n '8,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}
die() {
  echo "nightly: $*" >&2
  exit 2
}
need_value() {  # need_value OPTION ARGC
  (($2 >= 2)) || die "$1 needs a value (see --help)"
}
# Quotes one word for a POSIX shell (the rebuild command is run by one).
shell_quote() {
  printf "'%s'" "${1//\'/\'\\\'\'}"
}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=ci/nightly_common.sh
source "$script_dir/nightly_common.sh"

# cron's environment: a minimal PATH, no terminal. Nothing may wait for input.
for dir in /usr/local/bin /usr/bin /bin; do
  [[ :$PATH: == *:$dir:* ]] || PATH=$PATH:$dir
done
export PATH
nightly_add_cuda_to_path
export GIT_TERMINAL_PROMPT=0
export GIT_SSH_COMMAND=${GIT_SSH_COMMAND:-ssh -o BatchMode=yes}
exec < /dev/null

build_commit=$script_dir/build-commit.sh
rev="" fetch=0 suite="" backend="" device="" home="" db="" server="" token_file="" repo="" cmake_args=""
report_dir_option=""
while (($#)); do
  case $1 in
    --commit) need_value "$1" $#; rev=$2; shift 2 ;;
    --fetch) fetch=1; shift ;;
    --suite) need_value "$1" $#; suite=$2; shift 2 ;;
    --backend) need_value "$1" $#; backend=$2; shift 2 ;;
    --device) need_value "$1" $#; device=$2; shift 2 ;;
    --home) need_value "$1" $#; home=$2; shift 2 ;;
    --db) need_value "$1" $#; db=$2; shift 2 ;;
    --server) need_value "$1" $#; server=$2; shift 2 ;;
    --token-file) need_value "$1" $#; token_file=$2; shift 2 ;;
    --repo) need_value "$1" $#; repo=$2; shift 2 ;;
    --cmake-args) need_value "$1" $#; cmake_args=$2; shift 2 ;;
    --report-dir) need_value "$1" $#; report_dir_option=$(realpath -m "$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -z $backend || $backend == cpu || $backend == cuda ]] || die "--backend must be cpu or cuda, not '$backend'"
[[ -z $device || $device =~ ^[0-9]+$ ]] || die "--device must be a device number, not '$device'"
if [[ -z $repo ]]; then
  repo=$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null) ||
    die "$script_dir is not inside a git repository; pass --repo DIR"
fi
repo=$(git -C "$repo" rev-parse --show-toplevel 2>/dev/null) || die "--repo $repo is not a git repository"
home=$(nightly_home "$home")
db=$(realpath -m "${db:-$home/nightly.db}")
if [[ -n $suite ]]; then
  [[ -f $suite ]] || die "no suite file at $suite"
  suite=$(realpath "$suite")
fi
if [[ -n $token_file ]]; then
  [[ -f $token_file ]] || die "no token file at $token_file"
  token_file=$(realpath "$token_file")
fi

mkdir -p "$home/logs" "$home/reports" "$home/markers"
exec 9> "$home/nightly.lock"
flock -n 9 || die "another nightly run holds $home/nightly.lock; not starting a second one"

if [[ $fetch == 1 ]]; then
  git -C "$repo" fetch --quiet origin || die "git fetch origin failed in $repo"
  if [[ -z $rev ]]; then
    git -C "$repo" remote set-head origin --auto > /dev/null 2>&1 || true
    rev=$(git -C "$repo" symbolic-ref --quiet --short refs/remotes/origin/HEAD) ||
      die "origin in $repo has no default branch (refs/remotes/origin/HEAD); pass --commit"
  fi
fi
rev=${rev:-HEAD}
full=$(git -C "$repo" rev-parse --verify --quiet "$rev^{commit}") || die "unknown commit '$rev' in $repo"
# The commit's canonical name (records/include/fusetune/records/commit.h): what the build
# reports and the database stores, so --commit and --baseline need no resolving.
short=${full:0:12}

if [[ -z $backend ]]; then
  if nvidia-smi -L > /dev/null 2>&1; then backend=cuda; else backend=cpu; fi
fi
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
log=$home/logs/$stamp-$short.log
report_dir=$home/reports/$stamp-$short
[[ -z $report_dir_option ]] || report_dir=$report_dir_option
mkdir -p "$report_dir"
# A report folder given again (a CI workspace) must not show an earlier run's verdict.
rm -f "$report_dir/junit.xml" "$report_dir/report.md"

# The run itself, its output copied into the log. Returns 0 clean or benched,
# $regressed_status for a regression, anything else for an error.
regressed_status=101
run() {
  set -e
  echo "nightly: $full on $backend${device:+ device $device} ($(uname -n), $(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo "nightly: home $home, database $db"

  # The suite is copied beside the reports: the run's record of what it measured, and a file
  # that stays put while rebuilds of a baseline check other commits out.
  local suite_used
  if [[ -n $suite ]]; then
    suite_used=$report_dir/$(basename "$suite")
    [[ $suite -ef $suite_used ]] || cp "$suite" "$suite_used"
  else
    local checked_in=suites/cpu.json
    [[ $backend == cuda ]] && checked_in=suites/h200.json
    suite_used=$report_dir/$(basename "$checked_in")
    git -C "$repo" show "$full:$checked_in" > "$suite_used" 2> /dev/null || {
      echo "nightly: $short has no $checked_in; pass --suite FILE" >&2
      return 2
    }
  fi
  echo "nightly: suite $suite_used"

  local build_args=(--repo "$repo" --home "$home")
  [[ -n $cmake_args ]] && build_args+=(--cmake-args "$cmake_args")
  local build_output status=0
  build_output=$("$build_commit" "${build_args[@]}" "$full") || status=$?
  if ((status != 0)); then
    if ((status == 125)); then
      echo "nightly: $short does not build; build log: $(nightly_build_dir "$home" "$full")/build.log" >&2
    else
      echo "nightly: building $short failed (ci/build-commit.sh exit $status)" >&2
    fi
    return 2
  fi
  local binary=${build_output##*$'\n'}
  echo "nightly: binary $binary"

  local device_args=(--backend "$backend")
  [[ -n $device ]] && device_args+=(--device "$device")

  # Whether this suite, device and database have a bench run of another commit to compare
  # against: the commits this runner stored, one a line.
  local marker db_key
  db_key=$(sha256sum <<< "$db" | cut -c1-12)
  marker=$home/markers/$backend-device${device:-0}-$(basename "$suite_used" .json)-$db_key.commits
  [[ -f $db ]] || rm -f "$marker"
  local command first_night=""
  if [[ -f $marker ]] && grep -qvxF "$short" "$marker"; then
    local rebuild_command
    rebuild_command="$(shell_quote "$build_commit") --repo $(shell_quote "$repo") --home $(shell_quote "$home")"
    [[ -n $cmake_args ]] && rebuild_command+=" --cmake-args $(shell_quote "$cmake_args")"
    rebuild_command+=" {commit}"
    command=("$binary" regress --suite "$suite_used" --baseline previous --commit "$short" --db "$db"
             "${device_args[@]}" --builds-dir "$(nightly_builds_dir "$home")" --rebuild-command "$rebuild_command"
             --junit "$report_dir/junit.xml" --markdown "$report_dir/report.md")
    [[ -n $server ]] && command+=(--server "$server")
    [[ -n $token_file ]] && command+=(--token-file "$token_file")
  else
    # The first night calibrates: this build against itself, interleaved, which stores its bench
    # run (the next night's baseline) and each cell's A/A difference (later floors include it).
    echo "nightly: no earlier nightly of this suite on $backend${device:+ device $device} in $db:" \
         "calibrating (A/A) and benching only"
    first_night=1
    command=("$binary" regress --suite "$suite_used" --baseline "$short" --commit "$short" --baseline-binary "$binary"
             --db "$db" "${device_args[@]}" --junit "$report_dir/junit.xml" --markdown "$report_dir/report.md")
  fi
  echo "nightly: running $(printf '%q ' "${command[@]}")"
  status=0
  "${command[@]}" || status=$?
  # A bench, and a regress that reached a verdict, stored this commit's bench run.
  case $status in
    0 | 1) echo "$short" >> "$marker" ;;
  esac
  if [[ -n $first_night ]]; then
    case $status in
      0 | 1) echo "nightly: benched $short (the baseline for the next night; A/A calibration in $report_dir)"; return 0 ;;
      *) echo "nightly: the first night's calibration failed (exit $status)" >&2; return 2 ;;
    esac
  fi
  case ${command[1]}:$status in
    regress:0) echo "nightly: $short clean; reports in $report_dir" ;;
    regress:1) echo "nightly: $short REGRESSED; reports in $report_dir"; return "$regressed_status" ;;
    *)
      echo "nightly: fusetune regress failed (exit $status); if it found no bench run to compare" \
           "with, removing $marker makes the next night bench first" >&2
      return 2 ;;
  esac
  return 0
}

# errexit stays on inside run() (set there: its pipeline subshell is not a condition); its
# status is mapped below.
trap - ERR
set +e
run 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
set -e
echo "nightly: log $log" | tee -a "$log"
case $status in
  0) exit 0 ;;
  "$regressed_status") exit 1 ;;
  *) exit 2 ;;
esac
}
