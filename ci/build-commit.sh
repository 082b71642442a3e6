#!/usr/bin/env bash
# Builds the `fusetune` binary of one commit and prints its absolute path as the last line of
# stdout: HOME_DIR/builds/<12-hex commit>/bin/fusetune, beside the build's log (build.log).
# A commit already built there is reused without building. Builds happen in one persistent
# detached worktree (HOME_DIR/src) and one persistent Release build folder (HOME_DIR/build),
# with ccache as the compiler launcher when it is installed, so that moving from one commit to
# the next recompiles only what the change touches. The `fusetune` and `fusetune_capi` targets
# are built: the C ABI library is kept beside the binary (HOME_DIR/builds/<commit>/lib/
# libfusetune_capi.so), where `regress` finds it to measure two builds in one process. With
# --library only the library is built and printed, for commits older than `fusetune
# bench-serve`: regress and bisect serve such a library through the running build's
# bench-serve --capi-library.
#
#   ci/build-commit.sh [--repo DIR] [--home DIR] [--cmake-args "ARGS"] [--keep N] [--jobs N] [--library] COMMIT
#
#   --repo DIR          the repository to build from (default: the one this script lives in)
#   --home DIR          HOME_DIR (default: $FUSETUNE_NIGHTLY_HOME, else ${XDG_CACHE_HOME:-$HOME/.cache}/fusetune-nightly)
#   --cmake-args "..."  extra configure arguments, split on whitespace (e.g. -DFUSETUNE_WITH_CUDA=OFF)
#   --keep N            keep the N most recently built or reused commits in builds/ (default 8)
#   --jobs N            parallel build jobs (default: nproc)
#   --library           build and print the C ABI library instead of the fusetune binary
#
# FUSETUNE_BUILD_COMMAND, when set, replaces the configure and build step: it runs with bash in
# the worktree, with BUILD_DIR set to the build folder, and must leave the binary at
# $BUILD_DIR/service/cli/fusetune (with --library: $BUILD_DIR/kernels/capi/libfusetune_capi.so);
# a library it leaves at $BUILD_DIR/kernels/capi/libfusetune_capi.so is kept beside the binary.
#
# Exit status: 0 built or reused; 2 usage error, unknown commit, or a binary that needs
# libraries from the build or source folder; 125 the commit does not build (its log is kept),
# which `git bisect run` reads as "skip this commit". Never prompts.
# Read whole before running (a checkout updated during a run must not change it).
{
set -euo pipefail
trap 'echo "build-commit: unexpected failure at line $LINENO" >&2; exit 2' ERR
export GIT_TERMINAL_PROMPT=0

usage() {
  sed -n '12,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}
die() {  # die STATUS MESSAGE
  echo "build-commit: $2" >&2
  exit "$1"
}
need_value() {  # need_value OPTION ARGC
  (($2 >= 2)) || die 2 "$1 needs a value (see --help)"
}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=ci/nightly_common.sh
source "$script_dir/nightly_common.sh"
repo="" home="" cmake_args="" keep=8 jobs="" commit="" library=0
while (($#)); do
  case $1 in
    --repo) need_value "$1" $#; repo=$2; shift 2 ;;
    --home) need_value "$1" $#; home=$2; shift 2 ;;
    --cmake-args) need_value "$1" $#; cmake_args=$2; shift 2 ;;
    --keep) need_value "$1" $#; keep=$2; shift 2 ;;
    --jobs) need_value "$1" $#; jobs=$2; shift 2 ;;
    --library) library=1; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) die 2 "unknown option $1 (see --help)" ;;
    *)
      [[ -z $commit ]] || die 2 "one COMMIT only (got '$commit' and '$1')"
      commit=$1; shift ;;
  esac
done
[[ -n $commit ]] || die 2 "no COMMIT given (see --help)"
[[ $keep =~ ^[1-9][0-9]*$ ]] || die 2 "--keep must be a positive integer, not '$keep'"
[[ -z $jobs || $jobs =~ ^[1-9][0-9]*$ ]] || die 2 "--jobs must be a positive integer, not '$jobs'"
jobs=${jobs:-$(nproc 2>/dev/null || echo 2)}

if [[ -z $repo ]]; then
  repo=$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null) ||
    die 2 "$script_dir is not inside a git repository; pass --repo DIR"
fi
repo=$(git -C "$repo" rev-parse --show-toplevel 2>/dev/null) || die 2 "--repo $repo is not a git repository"
home=$(nightly_home "$home")

full=$(git -C "$repo" rev-parse --verify --quiet "$commit^{commit}") ||
  die 2 "unknown commit '$commit' in $repo (fetch it first, or check the name)"
short=${full:0:12}
builds=$(nightly_builds_dir "$home")
dest=$(nightly_build_dir "$home" "$full")
binary=$dest/bin/fusetune
targets=(fusetune fusetune_capi) built_rel=service/cli/fusetune
# The library kept beside the binary (none with --library, where it is the binary).
beside=$dest/lib/libfusetune_capi.so beside_rel=kernels/capi/libfusetune_capi.so
if ((library)); then
  binary=$dest/lib/libfusetune_capi.so targets=(fusetune_capi) built_rel=kernels/capi/libfusetune_capi.so beside=
fi
src=$home/src
build=$home/build

mkdir -p "$builds"
# One build at a time per home: the worktree and the build folder are shared by every commit.
exec 8> "$home/build.lock"
flock 8

# Recency for pruning: a counter, not file times, so that order never depends on the clock.
mark_used() {
  local sequence_file=$builds/.sequence sequence=0
  [[ -f $sequence_file ]] && sequence=$(< "$sequence_file")
  sequence=$((sequence + 1))
  echo "$sequence" > "$sequence_file"
  echo "$sequence" > "$dest/used"
}
prune() {  # removes all but the newest $keep commit folders under builds/
  local dir used
  for dir in "$builds"/*/; do
    dir=${dir%/}
    [[ $(basename "$dir") =~ ^[0-9a-f]{12}$ ]] || continue
    used=0
    [[ -f $dir/used ]] && used=$(< "$dir/used")
    echo "$used $dir"
  done | sort -rn | tail -n +$((keep + 1)) | while read -r _ dir; do
    rm -rf -- "$dir"
  done
}

# A build kept before libraries were kept beside binaries is built again (incrementally);
# one whose build made no library says so (no-library).
if [[ (-x $binary && (-z $beside || -r $beside || -e $dest/no-library)) || (library -eq 1 && -r $binary) ]]; then
  echo "build-commit: reusing the build of $short" >&2
  mark_used
  prune
  echo "$binary"
  exit 0
fi

mkdir -p "$dest"
log=$dest/build.log
build_failed() {  # build_failed MESSAGE: keeps the log, exits 125
  {
    echo "build-commit: $1"
    echo "build-commit: the last lines of $log:"
    tail -n 20 "$log" | sed 's/^/    /'
  } >&2
  echo "build-commit: $1" >> "$log"
  mark_used
  prune
  exit 125
}

# The worktree: created once, detached, from the repository; replaced when it is missing or
# belongs to another repository.
common_dir=$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir)
if [[ -e $src ]]; then
  src_top=$(git -C "$src" rev-parse --show-toplevel 2>/dev/null || true)
  src_common=$(git -C "$src" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
  if [[ $src_top != "$(realpath "$src")" || $src_common != "$common_dir" ]]; then
    echo "build-commit: $src is not a worktree of $repo; recreating it" >&2
    rm -rf -- "$src"
  fi
fi
if [[ ! -e $src ]]; then
  git -C "$repo" worktree prune
  git -C "$repo" worktree add --quiet --detach "$src" "$full" >&2
else
  # Only files that differ between the commits are rewritten (and so rebuilt).
  git -C "$src" checkout --quiet --detach --force "$full" >&2
  git -C "$src" clean -ffdxq >&2
fi

{
  echo "# fusetune $full, built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $src into $build"
} > "$log"
echo "build-commit: building $short (log: $log)" >&2
export CCACHE_BASEDIR=$src
nightly_add_cuda_to_path
built=$build/$built_rel
mkdir -p "$build"
if [[ -n ${FUSETUNE_BUILD_COMMAND:-} ]]; then
  (cd "$src" && BUILD_DIR=$build bash -c "$FUSETUNE_BUILD_COMMAND") >> "$log" 2>&1 < /dev/null ||
    build_failed "$short does not build (FUSETUNE_BUILD_COMMAND failed)"
else
  configure_args=(-S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release)
  if ccache=$(command -v ccache); then
    configure_args+=(-DCMAKE_C_COMPILER_LAUNCHER="$ccache" -DCMAKE_CXX_COMPILER_LAUNCHER="$ccache"
                     -DCMAKE_CUDA_COMPILER_LAUNCHER="$ccache")
  fi
  read -ra extra_args <<< "$cmake_args"
  configure_args+=("${extra_args[@]}")
  (cmake "${configure_args[@]}" && cmake --build "$build" --target "${targets[@]}" -j"$jobs") >> "$log" 2>&1 < /dev/null ||
    build_failed "$short does not build"
fi
[[ -e $built ]] || build_failed "the build of $short left nothing at $built"

# The copies outlive the build folder (the next commit rebuilds it), so they must not load
# libraries from there or from the worktree.
keep() {  # keep BUILT KEPT: checks BUILT's libraries, then copies it to KEPT
  local from=$1 to=$2 ldd_output bad escaped_build escaped_src
  if ldd_output=$(ldd "$from" 2>&1); then
    {
      echo "# ldd $from"
      echo "$ldd_output"
    } >> "$log"
    escaped_build=$(sed 's/[][\.*^$/]/\\&/g' <<< "$build")
    escaped_src=$(sed 's/[][\.*^$/]/\\&/g' <<< "$src")
    if bad=$(grep -E "not found|=> ($escaped_build|$escaped_src)/" <<< "$ldd_output"); then
      echo "build-commit: $from of $short needs libraries from the build or source folder, or missing ones:" >> "$log"
      die 2 "the build of $short cannot be kept apart from its build folder: $(tr -s ' \t\n' ' ' <<< "$bad")(log: $log)"
    fi
  fi
  mkdir -p "$(dirname "$to")"
  cp -L "$from" "$to.partial"
  mv -f "$to.partial" "$to"
}
keep "$built" "$binary"
if [[ -n $beside && -e $build/$beside_rel ]]; then
  keep "$build/$beside_rel" "$beside"
elif [[ -n $beside ]]; then
  echo "build-commit: the build of $short made no C ABI library: regress measures it in a process of its own" >&2
  touch "$dest/no-library"
fi
echo "$full" > "$dest/commit"
echo "build-commit: built $short" | tee -a "$log" >&2
mark_used
prune
echo "$binary"
exit 0
}
