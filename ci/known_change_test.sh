#!/usr/bin/env bash
# Checks ci/known-change.sh and the patches in ci/known_change/ against the source tree they
# were checked in with: every patch applies to the tree's HEAD, and the commit the script makes
# is HEAD plus exactly that patch, with the patch's description as its message, the same hash
# when made again, and a ref naming it. Works on a shared clone made here, so the checkout under
# test is never touched. Also: a patch that does not apply, a file that is not a patch and an
# unknown base exit 2. Skipped (exit 77) where the source tree is not a git checkout.
# Usage: known_change_test.sh [SOURCE_DIR] (default: the repository this script lives in)
set -euo pipefail
ci_dir=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "${1:-$ci_dir/..}" && pwd)
if ! top=$(git -C "$source_dir" rev-parse --show-toplevel 2>/dev/null) || ! git -C "$top" rev-parse --verify --quiet HEAD > /dev/null; then
  echo "known_change_test: skipped: $source_dir is not a git checkout with a commit"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fusetune-known-change-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() {
  echo "known_change_test: FAILED: $*" >&2
  exit 1
}
pass() { echo "ok      $*"; }
export HOME=$work/user GIT_CONFIG_NOSYSTEM=1
mkdir -p "$HOME"

# The clone is of the working tree's files at HEAD plus the checked-in patches and script as
# they are now (the test runs on uncommitted edits too).
git clone --quiet --shared --no-checkout "$top" "$work/repo"
head=$(git -C "$work/repo" rev-parse HEAD)
index_before=$(git -C "$work/repo" ls-files --stage | sha1sum)
script=$ci_dir/known-change.sh

shopt -s nullglob
patches=("$ci_dir"/known_change/*.patch)
((${#patches[@]} > 0)) || fail "no patches in $ci_dir/known_change"
for patch in "${patches[@]}"; do
  name=$(basename "$patch" .patch)
  commit=$("$script" --repo "$work/repo" "$patch" 2> "$work/$name.err") ||
    fail "$name does not apply to HEAD ${head:0:12}: $(cat "$work/$name.err")"
  [[ $commit =~ ^[0-9a-f]{40}$ ]] || fail "$name: last line '$commit' is not a full hash"
  [[ $(git -C "$work/repo" rev-parse "$commit^") == "$head" ]] || fail "$name: the commit's parent is not HEAD"
  # The commit's change is the patch's: the same files and the same patch-id.
  made_id=$(git -C "$work/repo" diff "$head" "$commit" | git patch-id --stable | cut -d' ' -f1)
  patch_id=$(sed -n '/^diff --git /,$p' "$patch" | git patch-id --stable | cut -d' ' -f1)
  [[ -n $made_id && $made_id == "$patch_id" ]] || fail "$name: the commit's diff is not the patch (patch-id $made_id, expected $patch_id)"
  subject=$(git -C "$work/repo" show -s --format=%s "$commit")
  [[ $subject == "$(head -n 1 "$patch")" ]] || fail "$name: subject '$subject' is not the patch's first line"
  again=$("$script" --repo "$work/repo" "$patch" 2> /dev/null)
  [[ $again == "$commit" ]] || fail "$name: made again it is $again, not $commit"
  [[ $(git -C "$work/repo" rev-parse "refs/known-change/$name") == "$commit" ]] || fail "$name: refs/known-change/$name does not name it"
  [[ $(git -C "$work/repo" ls-files --stage | sha1sum) == "$index_before" &&
     $(git -C "$work/repo" rev-parse HEAD) == "$head" ]] || fail "$name: the clone's index or HEAD changed"
  pass "$name applies to HEAD as one commit ${commit:0:12}, made again the same"
done

# Refusals: exit 2 with a message, no ref written.
printf 'Not a change\n\nno diff here\n' > "$work/no-diff.patch"
set +e
"$script" --repo "$work/repo" "$work/no-diff.patch" > /dev/null 2> "$work/err"
status=$?
set -e
((status == 2)) && grep -q "holds no 'diff --git' section" "$work/err" || fail "a file without a diff: exit $status, $(cat "$work/err")"
pass "a file without a diff is refused (exit 2)"

{
  printf 'Does not apply\n\n'
  printf 'diff --git a/no/such/file.cc b/no/such/file.cc\n--- a/no/such/file.cc\n+++ b/no/such/file.cc\n'
  printf '@@ -1,1 +1,1 @@\n-old\n+new\n'
} > "$work/stale.patch"
set +e
"$script" --repo "$work/repo" "$work/stale.patch" > /dev/null 2> "$work/err"
status=$?
set -e
((status == 2)) && grep -q "does not apply" "$work/err" || fail "a stale patch: exit $status, $(cat "$work/err")"
git -C "$work/repo" rev-parse --verify --quiet refs/known-change/stale > /dev/null && fail "a stale patch left a ref"
pass "a patch that does not apply is refused (exit 2), no ref written"

set +e
"$script" --repo "$work/repo" --base 0000000000000000000000000000000000000bad "${patches[0]}" > /dev/null 2> "$work/err"
status=$?
set -e
((status == 2)) && grep -q "unknown commit" "$work/err" || fail "an unknown base: exit $status, $(cat "$work/err")"
pass "an unknown base is refused (exit 2)"
echo "known_change_test: all passed"
