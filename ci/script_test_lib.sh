# Sourced by the scripts' process tests (ci/nightly_test.sh, ci/device/bisect_libraries_test.sh,
# ci/device/hopper_variants_check_test.sh)
# after they set TEST_NAME: $work, a fresh folder kept only when the test fails; fail MESSAGE
# and pass MESSAGE; and an isolated HOME and git identity, so no user configuration or cache
# leaks in and nothing is written outside $work.
work=$(mktemp -d "${TMPDIR:-/tmp}/fusetune-$TEST_NAME.XXXXXX")
failed=0
finish() {
  if ((failed)); then
    echo "$TEST_NAME: FAILED; work files kept in $work" >&2
  else
    rm -rf "$work"
  fi
}
trap 'failed=1' ERR
trap finish EXIT
fail() {
  failed=1
  echo "$TEST_NAME: FAILED: $*" >&2
  exit 1
}
pass() { echo "ok      $*"; }

export HOME=$work/user GIT_CONFIG_NOSYSTEM=1
unset XDG_CACHE_HOME FUSETUNE_NIGHTLY_HOME
mkdir -p "$HOME"
export GIT_AUTHOR_NAME=test GIT_AUTHOR_EMAIL=test@example.invalid
export GIT_COMMITTER_NAME=test GIT_COMMITTER_EMAIL=test@example.invalid
