#!/usr/bin/env bash
# Runs ci/device/bisect_libraries.sh as a process on a small git repository made here, with
# FUSETUNE_BUILD_COMMAND set to a fake build whose library is the text of the tree's kernel.txt
# (so commits that leave it alone build the same bytes) and which fails where the tree has a
# file named `broken`. Checks the archive's layout (one folder per distinct library, symlinks
# for the commits that built the same one, broken and side-branch commits absent), that
# bisect_check.sh's lookup finds every packed commit, and the errors. No real build: seconds.
# Usage: bisect_libraries_test.sh [CI_DEVICE_DIR] (default: the folder of this script)
set -euo pipefail
dir=$(cd "${1:-$(dirname "$0")}" && pwd)
script=$dir/bisect_libraries.sh

TEST_NAME=bisect_libraries_test
# shellcheck source=ci/script_test_lib.sh
source "$dir/../script_test_lib.sh"

cat > "$work/fake-build.sh" <<'EOF'
set -euo pipefail
if [[ -e broken ]]; then echo "fake build: this tree is broken"; exit 1; fi
mkdir -p "$BUILD_DIR/kernels/capi"
echo "library of kernel $(cat kernel.txt)" > "$BUILD_DIR/kernels/capi/libfusetune_capi.so"
EOF
export FUSETUNE_BUILD_COMMAND="bash $work/fake-build.sh" HOME_DIR=$work/builds

repo=$work/repo
git init -q -b main "$repo"
commit() {  # commit MESSAGE: commits the tree, prints the commit
  git -C "$repo" add -A
  git -C "$repo" commit -q -m "$1"
  git -C "$repo" rev-parse --short=12 HEAD
}
echo A > "$repo/kernel.txt"
c1=$(commit "kernel A")
echo "notes" > "$repo/README.md"
c2=$(commit "docs only")
echo B > "$repo/kernel.txt"
c3=$(commit "kernel B")
touch "$repo/broken"
c4=$(commit "a broken tree")
rm "$repo/broken"
echo "more notes" >> "$repo/README.md"
c5=$(commit "fixed, docs")
echo A > "$repo/kernel.txt"
c6=$(commit "kernel A again")
git -C "$repo" checkout -q -b side
echo C > "$repo/kernel.txt"
side=$(commit "kernel C on a side branch")
git -C "$repo" checkout -q main
git -C "$repo" merge -q --no-ff -m "merge the side branch" side
c7=$(git -C "$repo" rev-parse --short=12 HEAD)

out=$work/out.txt
REPO=$repo bash "$script" "$c1" "$c7" "$work/libs.tar.xz" > "$out" 2>&1 || { cat "$out"; fail "packing exited $?"; }
grep -q "7 commits, 3 distinct libraries" "$out" || { cat "$out"; fail "the summary line"; }
grep -q "^$c4 does not build" "$out" || { cat "$out"; fail "the broken commit is not reported"; }
pass "7 first-parent commits, 3 distinct libraries, the broken one reported"

libs=$work/libs
mkdir -p "$libs"
tar -xJf "$work/libs.tar.xz" -C "$libs"
lib_of() { echo "$libs/$1/lib/libfusetune_capi.so"; }
for c in "$c1" "$c3" "$c7"; do
  [[ -d $libs/$c && ! -L $libs/$c ]] || fail "$c has no folder of its own"
done
[[ $(readlink "$libs/$c2") == "$c1" ]] || fail "$c2 (docs only) does not share $c1's library"
[[ $(readlink "$libs/$c5") == "$c3" ]] || fail "$c5 does not share $c3's library"
[[ $(readlink "$libs/$c6") == "$c1" ]] || fail "$c6 (kernel A again) does not share $c1's library"
[[ ! -e $libs/$c4 ]] || fail "the broken commit $c4 was packed"
[[ ! -e $libs/$side ]] || fail "the side branch's commit $side was packed"
[[ $(cat "$(lib_of "$c7")") == "library of kernel C" ]] || fail "the merge's library is not its tree's"
[[ $(cat "$(lib_of "$c6")") == "library of kernel A" ]] || fail "$c6's library is not kernel A's"
pass "one folder per distinct library, symlinks for the rest, broken and side-branch commits absent"

# bisect_check.sh's build command for a prebuilt LIBS: the file is readable through the links.
for c in "$c1" "$c2" "$c3" "$c5" "$c6" "$c7"; do
  f=$libs/$(git -C "$repo" rev-parse --short=12 "$c")/lib/libfusetune_capi.so
  [[ -r $f ]] || fail "bisect_check's lookup does not find $c"
done
pass "bisect_check's lookup finds every packed commit"

status=0
REPO=$repo bash "$script" "$c1" "$c4" "$work/bad.tar.xz" > "$out" 2>&1 || status=$?
((status == 1)) || { cat "$out"; fail "a BAD that does not build exited $status, not 1"; }
[[ ! -e $work/bad.tar.xz ]] || fail "an archive was written for a range whose end does not build"
for args in "$c1 $c7" "$c7 $c1 $work/x.tar.xz" "nosuchcommit $c7 $work/x.tar.xz"; do
  status=0
  # shellcheck disable=SC2086
  REPO=$repo bash "$script" $args > "$out" 2>&1 || status=$?
  ((status == 2)) || { cat "$out"; fail "'$args' exited $status, not 2"; }
done
pass "a BAD that does not build exits 1; usage, reversed and unknown commits exit 2"
echo "bisect_libraries_test: all passed"
