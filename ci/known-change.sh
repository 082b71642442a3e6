#!/usr/bin/env bash
# Makes a commit of known effect, for checking what `fusetune regress` finds on real hardware:
# PATCH (ci/known_change/*.patch) applied on top of BASE and committed without touching any
# checkout. The commit's message is the patch's text before its first "diff --git" line; its
# author, committer and dates are fixed (the base's commit date), so one patch on one base
# always gives the same hash, and a database that holds its runs keeps meaning the same build.
# It is kept under refs/known-change/<patch name without .patch>, and its full hash is the last
# line of stdout. Build it like any commit (ci/build-commit.sh HASH) and judge it against the
# base's build, both ways round:
#
#   base=$(ci/build-commit.sh HEAD); variant=$(ci/build-commit.sh "$(ci/known-change.sh ci/known_change/cpu_task_stretch.patch)")
#   fusetune regress --suite suites/cpu.json --baseline-binary "$base" --baseline <base commit> \
#       --candidate-binary "$variant" --commit <variant commit> --db known.db
#
#   ci/known-change.sh [--repo DIR] [--base COMMIT] PATCH
#
#   --repo DIR     the repository (default: the one this script lives in)
#   --base COMMIT  the commit to apply PATCH to (default HEAD)
#
# Exit status: 0 made (or already there, the same hash); 2 usage error, unknown base commit,
# or a patch that does not apply to it (git's message says where).
{
set -euo pipefail
trap 'echo "known-change: unexpected failure at line $LINENO" >&2; exit 2' ERR
export GIT_TERMINAL_PROMPT=0

die() {
  echo "known-change: $1" >&2
  exit 2
}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo="" base=HEAD patch=""
while (($#)); do
  case $1 in
    --repo) (($# >= 2)) || die "--repo needs a value"; repo=$2; shift 2 ;;
    --base) (($# >= 2)) || die "--base needs a value"; base=$2; shift 2 ;;
    -h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      [[ -z $patch ]] || die "one PATCH only (got '$patch' and '$1')"
      patch=$1; shift ;;
  esac
done
[[ -n $patch ]] || die "no PATCH given (see --help)"
[[ -r $patch ]] || die "cannot read the patch $patch"
patch=$(realpath "$patch")
[[ -z $repo ]] && repo=$script_dir
repo=$(git -C "$repo" rev-parse --show-toplevel 2>/dev/null) || die "$repo is not inside a git repository; pass --repo DIR"
full=$(git -C "$repo" rev-parse --verify --quiet "$base^{commit}") || die "unknown commit '$base' in $repo"

name=$(basename "$patch" .patch)
grep -q '^diff --git ' "$patch" || die "$patch holds no 'diff --git' section"
message=$(sed '/^diff --git /,$d' "$patch")
[[ -n ${message//[[:space:]]/} ]] || die "$patch has no description before its first 'diff --git' line"

index=$(mktemp)
trap 'rm -f "$index"' EXIT
export GIT_INDEX_FILE=$index
git -C "$repo" read-tree "$full"
# --3way: a base where the patched lines moved still takes it, as long as they merge cleanly.
git -C "$repo" apply --cached --3way --whitespace=nowarn "$patch" || die "$patch does not apply to ${full:0:12}"
tree=$(git -C "$repo" write-tree)
unset GIT_INDEX_FILE

when=$(git -C "$repo" show -s --format=%cI "$full")
commit=$(GIT_AUTHOR_NAME="fusetune known change" GIT_AUTHOR_EMAIL="known-change@fusetune" \
  GIT_COMMITTER_NAME="fusetune known change" GIT_COMMITTER_EMAIL="known-change@fusetune" \
  GIT_AUTHOR_DATE=$when GIT_COMMITTER_DATE=$when \
  git -C "$repo" -c commit.gpgsign=false commit-tree "$tree" -p "$full" -m "$message")
git -C "$repo" update-ref "refs/known-change/$name" "$commit"
echo "known-change: $name on ${full:0:12} is ${commit:0:12} (refs/known-change/$name)" >&2
echo "$commit"
exit 0
}
