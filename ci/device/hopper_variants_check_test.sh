#!/usr/bin/env bash
# hopper_variants_check.sh's control flow without a GPU or a build: fake nvidia-smi,
# compute-sanitizer and python (they log their arguments and answer as told), the libraries
# present as empty files, the build step skipped (VARIANT_STEPS). Checks that every variant is
# checked with the keys given, that only variants that passed are sanitized and timed, that a
# variant failing its check makes the exit status 1 without stopping the others, and that the
# timing names the full library, base and the passing variants.
#
# Usage: hopper_variants_check_test.sh REPO_ROOT
set -euo pipefail
root=$(cd "$1" && pwd)

TEST_NAME=hopper_variants_check_test
# shellcheck source=ci/script_test_lib.sh
source "$root/ci/script_test_lib.sh"

mkdir -p "$work/bin" "$work/repo/kernels/cuda/dev/variants" "$work/repo/ci/device" "$work/out/libs"
cp "$root/ci/device/hopper_variants_check.sh" "$work/repo/ci/device/"
for name in good bad; do
  printf -- '--- a/x\n+++ b/x\n' > "$work/repo/kernels/cuda/dev/variants/$name.patch"
done
for name in base good bad; do
  mkdir -p "$work/out/libs/$name"
  : > "$work/out/libs/$name/libfusetune_hopper_dev.so"
done
: > "$work/full.so"
cat > "$work/bin/nvidia-smi" <<'EOF'
#!/bin/bash
echo "name, driver_version"
echo "fake, 0"
EOF
cat > "$work/bin/compute-sanitizer" <<'EOF'
#!/bin/bash
echo "compute-sanitizer $*" >> "$FAKE_LOG"
while [[ $1 == --* ]]; do
  case $1 in --tool|--error-exitcode) shift 2 ;; *) shift ;; esac
done
"$@"
rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
EOF
# The fake python: check_hopper_dev.py fails for variant "bad"; compare_torch.py writes a report.
cat > "$work/bin/python" <<'EOF'
#!/bin/bash
echo "python $*" >> "$FAKE_LOG"
if [[ $1 == *compare_torch.py ]]; then
  while [[ $# -gt 0 ]]; do [[ $1 == --out ]] && out=$2; shift; done
  mkdir -p "$out"
  printf '| shape | pair | median ratio |\n|---|---|---:|\n| s | ours+good / cudnn | 0.95 |\n\n' > "$out/compare.md"
  exit 0
fi
if [[ " $* " == *" --variant bad="* ]]; then
  echo "FAIL b1 q256 bad: error 1 > 0.03"
  echo "check_hopper_dev: 0 passed, 1 failed, 0 skipped"
  exit 1
fi
echo "check_hopper_dev: 5 passed, 0 failed, 0 skipped"
EOF
chmod +x "$work/bin"/*

export FAKE_LOG=$work/log
rc=0
PATH=$work/bin:$PATH PYTHON=python FULL_LIB=$work/full.so OUT=$work/out VARIANT_STEPS="check sanitize time" \
  VARIANT_CONFIGS="k1/{p} k2/{p}" VARIANT_PROBLEMS=7 bash "$work/repo/ci/device/hopper_variants_check.sh" \
  > "$work/stdout" 2>&1 || rc=$?
[[ $rc == 1 ]] || { cat "$work/stdout"; fail "exit status $rc with a failing variant, expected 1"; }
grep -q "hopper_variants_check summary" "$work/stdout" || fail "no summary"
for name in base good bad; do
  grep -q "check_hopper_dev.py --lib $work/full.so --no-full --variant $name=$work/out/libs/$name/libfusetune_hopper_dev.so --config k1/{p} --config k2/{p} --problems 7" "$FAKE_LOG" \
    || fail "variant $name not checked with both keys"
done
grep -q "tool memcheck.*--variant good=.*--small --reference-on-cpu" "$FAKE_LOG" || fail "good not under memcheck on small problems"
grep -q "tool racecheck.*--variant good=" "$FAKE_LOG" || fail "good not under racecheck"
if grep -q "compute-sanitizer.*--variant \(base\|bad\)=" "$FAKE_LOG"; then fail "base or a failing variant sanitized"; fi
timing=$(grep "compare_torch.py" "$FAKE_LOG") || fail "nothing timed"
[[ $timing == *"--lib $work/full.so"* ]] || fail "timing without the full library: $timing"
[[ $timing == *"--also base="* && $timing == *"--also good="* ]] || fail "base or good not timed: $timing"
[[ $timing != *"--also bad="* ]] || fail "a failing variant was timed: $timing"
grep -q "ours+good / cudnn" "$work/stdout" || fail "the pair table is not printed"
grep -q "check bad: rc 1" "$work/stdout" || fail "the failing check is not in the summary"

# Unknown variant: refused before anything runs.
rc=0
PATH=$work/bin:$PATH PYTHON=python FULL_LIB=$work/full.so OUT=$work/out2 bash "$work/repo/ci/device/hopper_variants_check.sh" nosuch \
  > "$work/stdout2" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "no variant" "$work/stdout2" || fail "an unknown variant is not refused (rc $rc)"
pass "checked, sanitized and timed the variants that passed; an unknown variant refused"
