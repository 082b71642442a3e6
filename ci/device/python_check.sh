#!/usr/bin/env bash
# Run on the GPU host, from the repository root of a checkout of the staged commit holding
# .gpu-bundle/python, packed on the build machine by
#   DEST=$PWD/.gpu-bundle/python STAGE_TARGETS="fusetune_capi fusetune_python" ci/device/stage.sh
# and copied here. Checks the Python package's CUDA path with the GPU host's python3 and torch:
#   tests     python/tests/test_cuda.py (under pytest when the host has it, else as a script):
#             the flagship prefill shapes and the decode preset's shape against a float64
#             reference and torch's SDPA, a non-default stream, CUDA graph capture and replay,
#             what a capture refuses                                     -> cuda_tests.log
#   overhead  python/bench/overhead.py on the GPU and on the CPU: a ConfigCache hit, and what
#             fusetune.attention adds per call over the same fusetune_run_on_stream call made
#             directly (OVERHEAD_ARGS, e.g. "--pairs 50000")              -> overhead_cuda.txt, overhead_cpu.txt
# Everything is logged under $OUT (default /tmp/fusetune-python-out); the numbers are printed
# last. Exit status: that of the tests.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/fusetune-python-out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1

source "$ROOT/ci/device/cuda_lib_dirs.sh"
B=/tmp/fusetune-python-bundle
unpack_bundle "$ROOT/.gpu-bundle/python" "$B" || exit 1
[[ -d "$B/python/fusetune" ]] || { echo "no python/fusetune in the bundle: stage fusetune_python"; exit 1; }
export LD_LIBRARY_PATH=$(bundle_library_path "$B")
export PYTHONPATH=$B/python${PYTHONPATH:+:$PYTHONPATH}
export FUSETUNE_CAPI_LIBRARY=$B/lib/libfusetune_capi.so
export PYTHONDONTWRITEBYTECODE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv || true
report_missing_libs "$LD_LIBRARY_PATH" "$FUSETUNE_CAPI_LIBRARY"
"$PYTHON" - <<'PY' || exit 1
import sys, torch, fusetune
try:
    device = fusetune.device_class(0)
except fusetune.FusetuneError as e:  # the tests then say why they skip or fail
    device = f"no CUDA device through fusetune: {e}"
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "fusetune", fusetune.__version__, device)
PY

t0=$SECONDS
if "$PYTHON" -c "import pytest" 2>/dev/null; then
  "$PYTHON" -m pytest -v -rs -s -p no:cacheprovider "$ROOT/python/tests/test_cuda.py" > "$OUT/cuda_tests.log" 2>&1
else
  "$PYTHON" "$ROOT/python/tests/test_cuda.py" > "$OUT/cuda_tests.log" 2>&1
fi
rc_tests=$?
grep -E "PASSED|FAILED|SKIPPED|info \]|passed|failed|Error" "$OUT/cuda_tests.log" | head -80
tests_line="tests: rc=$rc_tests $((SECONDS - t0))s"

t0=$SECONDS
# shellcheck disable=SC2086  # OVERHEAD_ARGS are meant to split
"$PYTHON" "$ROOT/python/bench/overhead.py" --device cuda ${OVERHEAD_ARGS:-} > "$OUT/overhead_cuda.txt" 2>&1
rc_cuda=$?
# shellcheck disable=SC2086
"$PYTHON" "$ROOT/python/bench/overhead.py" --device cpu ${OVERHEAD_ARGS:-} > "$OUT/overhead_cpu.txt" 2>&1
rc_cpu=$?
overhead_line="overhead: rc=$rc_cuda (cuda) $rc_cpu (cpu) $((SECONDS - t0))s"

echo "==== summary"
echo "$tests_line"
echo "$overhead_line"
echo "== overhead, CUDA"
cat "$OUT/overhead_cuda.txt"
echo "== overhead, CPU"
cat "$OUT/overhead_cpu.txt"
exit $rc_tests
