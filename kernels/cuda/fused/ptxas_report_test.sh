#!/usr/bin/env bash
# Builds the Hopper (wgmma) kernels standalone, as a GPU host builds a variant of them
# (../dev/build_hopper_dev.sh: sm_90a, ptxas's report per source, the C ABI library
# libfusetune_hopper_dev.so), and checks three things, no GPU needed:
#  - no kernel has its wgmma instructions serialized (ptxas C7518, "Potential Performance
#    Loss"); a serialized kernel ran 27-43 % slower on the H200 (docs/perf.md);
#  - no kernel spills more than 32 bytes. The ping-pong persistent instances' producer warp, at
#    72 registers, keeps 28 bytes of its per-tile state on the stack (the consumers fit in their
#    216 without spilling), the other persistent ones 4 bytes at 88; a second Q buffer at 72
#    spilled 92 bytes. Both are silent in a normal build and correct on the GPU;
#  - the library exports exactly the C ABI functions it serves, and answers as c_api.h says
#    where no Hopper GPU is (fusetune_create UNAVAILABLE, a NULL handle INVALID_ARGUMENT).
# The same two ptxas checks hold for every kernel variant waiting for a GPU
# (../dev/variants/*.patch, built beside the base in the same call): each still applies to this
# tree and compiles without serialized wgmma or spills, ready to be timed. So do the development
# probes (../dev/probes/*.patch, e.g. the per-block timeline), which must measure the kernels as
# they are.
#
# Usage: ptxas_report_test.sh NVCC REPO_ROOT
set -euo pipefail
nvcc=$1 root=$2
max_spill_bytes=32
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
variants=(base)
for patch in "$root"/kernels/cuda/dev/variants/*.patch "$root"/kernels/cuda/dev/probes/*.patch; do
  [[ -e $patch ]] && variants+=("$(basename "$patch" .patch)=$patch")
done
if ! NVCC=$nvcc HOPPER_DEV_JOBS=${HOPPER_DEV_JOBS:-2} bash "$root/kernels/cuda/dev/build_hopper_dev.sh" "$out" "${variants[@]}" >"$out/build.log" 2>&1; then
  cat "$out/build.log"
  echo "FAIL: nvcc could not build the Hopper kernels standalone (base and $((${#variants[@]} - 1)) variants)"
  exit 1
fi
status=0
for spec in "${variants[@]}"; do
  name=${spec%%=*}
  cat "$out/$name"/fused_wgmma_fp16.cu.ptxas.txt "$out/$name"/fused_wgmma_bf16.cu.ptxas.txt >"$out/all.log"
  kernels=$(grep -c "Compiling entry function" "$out/all.log" || true)
  echo "ptxas report, $name: $kernels sm_90a kernels"
  if grep -E "C7518|Performance Loss" "$out/all.log"; then
    echo "FAIL: $name: wgmma instructions serialized (above)"
    status=1
  fi
  # "Function properties for KERNEL" is followed by "N bytes stack frame, S bytes spill stores, ...".
  awk -v max="$max_spill_bytes" '
    /Function properties for/ { kernel = $NF }
    /bytes spill stores/ {
      spill = 0
      for (i = 1; i < NF; ++i) {
        if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) == "stores,") spill = $i + 0
      }
      if (spill > 0) printf "%s spills %d bytes%s\n", kernel, spill, (spill > max ? " (over the limit)" : "")
      if (spill > max) bad = 1
    }
    END { exit bad }' "$out/all.log" || { echo "FAIL: $name: a kernel spills more than $max_spill_bytes bytes"; status=1; }
  [[ $kernels -gt 0 ]] || { echo "FAIL: $name: no kernel compiled"; status=1; }
done

library=$out/base/libfusetune_hopper_dev.so
exported=$(nm -D --defined-only "$library" | awk '{ print $3 }' | sort | tr '\n' ' ')
expected="fusetune_api_version fusetune_can_implement fusetune_create fusetune_describe fusetune_destroy fusetune_run fusetune_status_name fusetune_time "
if [[ $exported != "$expected" ]]; then
  echo "FAIL: the dev library exports '$exported', expected '$expected'"
  status=1
fi
if command -v python3 >/dev/null; then
  if ! python3 - "$library" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.fusetune_status_name.restype = ctypes.c_char_p
err = ctypes.create_string_buffer(256)
handle = ctypes.c_void_p()
rc = lib.fusetune_create(b"cuda", 0, ctypes.byref(handle), err, len(err))
assert lib.fusetune_api_version() == 2, lib.fusetune_api_version()
assert lib.fusetune_status_name(12) == b"UNIMPLEMENTED"
if rc == 0:
    print("dev library: a Hopper GPU is here:", end=" ")
    buf = ctypes.create_string_buffer(512)
    lib.fusetune_describe(handle, buf, len(buf))
    print(buf.value.decode())
    lib.fusetune_destroy(handle)
else:
    assert rc == 14 and not handle.value, (rc, err.value)  # UNAVAILABLE, no handle
    print("dev library without a Hopper GPU:", err.value.decode())
rc = lib.fusetune_create(b"cpu", 0, ctypes.byref(handle), err, len(err))
assert rc == 5, (rc, err.value)  # NOT_FOUND: "cuda" only
assert lib.fusetune_can_implement(None, None, None, err, len(err)) == 3  # INVALID_ARGUMENT
PY
  then
    echo "FAIL: the dev library's answers"
    status=1
  fi
fi
[[ $status == 0 ]] && echo "PASS: no serialized wgmma, spills within $max_spill_bytes bytes (base and $((${#variants[@]} - 1)) variants), the dev library's exports and answers"
exit $status
