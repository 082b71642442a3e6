#!/usr/bin/env bash
# Builds the Hopper prefill kernels as C ABI libraries with nvcc alone (no CMake, no absl), one
# per variant, in parallel: OUT/<name>/libfusetune_hopper_dev.so (hopper_dev_capi.cu beside this
# file says what it serves) with ptxas's report per source in OUT/<name>/*.ptxas.txt. A variant
# is the source tree as it is, or with a patch applied to a copy of kernels/ and base/:
#
#   kernels/cuda/dev/build_hopper_dev.sh OUT [NAME[=PATCH]]...   (default: one variant, "base")
#
# e.g. build_hopper_dev.sh /tmp/hd base pingpong2=/tmp/pingpong2.patch, then on the GPU
#   python3 ci/device/compare_torch.py --lib BUNDLE/lib/libfusetune_capi.so --candidates ours,cudnn \
#     --config bf16-d128-s4096=fused/bm128/bs128/t384/bf16/st2/persistent \
#     --also base=fused/bm128/bs128/t384/{p}/st2/persistent@/tmp/hd/base/libfusetune_hopper_dev.so \
#     --also pp2=fused/bm128/bs128/t384/{p}/st2/persistent@/tmp/hd/pingpong2/libfusetune_hopper_dev.so
# (the full library parses config keys and runs "ours"; every --also library runs in the same
# rounds). Patches are relative to the repository root, as `git diff` writes them.
#
# Environment: NVCC (default nvcc), HOPPER_DEV_ARCH (default sm_90a code; the kernels need it),
# HOPPER_DEV_JOBS (parallel nvcc processes, default nproc), CUOBJDUMP (default cuobjdump; where it
# runs, OUT/<name>/sass_loops.txt counts each kernel's loops (sass_loops.py) and the d128
# st2/persistent kernels' key loop and producer loop are printed; where it does not, e.g. on a
# build machine, cubin_opcodes.py reads the objects' sm_90a code and prints those kernels' softmax
# G, and which kernels of each variant differ from the base's: OUT/<name>/cubin_opcodes_*.txt).
# Exit status: 0 built; 1 a compile or link failed (its log is printed); 2 usage.
# ptxas's report is summarised per variant: spill stores and serialized wgmma (ptxas C7518),
# both of which cost real time on the H200 (kernels/cuda/fused/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
nvcc=${NVCC:-nvcc}
cuobjdump=${CUOBJDUMP:-cuobjdump}
arch=${HOPPER_DEV_ARCH:---generate-code=arch=compute_90a,code=sm_90a}
jobs=${HOPPER_DEV_JOBS:-$(nproc 2>/dev/null || echo 2)}
(($# >= 1)) || { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=$1
shift
variants=("$@")
((${#variants[@]} > 0)) || variants=(base)
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The sources of a library, relative to the repository root; the .cu files carry the kernels.
sources=(kernels/cuda/fused/fused_wgmma_bf16.cu kernels/cuda/fused/fused_wgmma_fp16.cu
         kernels/cuda/fused/fused_tensor_map.cc kernels/cuda/l2_flush.cu base/src/median.cc
         kernels/capi/status_name.cc kernels/cuda/dev/hopper_dev_capi.cu)

declare -A tree
for spec in "${variants[@]}"; do
  name=${spec%%=*}
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "build_hopper_dev: bad variant name '$name'" >&2; exit 2; }
  [[ -z ${tree[$name]:-} ]] || { echo "build_hopper_dev: variant '$name' given twice" >&2; exit 2; }
  dir=$out/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  if [[ $spec == *=* ]]; then
    patch_file=${spec#*=}
    [[ -r $patch_file ]] || { echo "build_hopper_dev: cannot read $patch_file" >&2; exit 2; }
    mkdir -p "$dir/src"
    cp -r "$root/kernels" "$root/base" "$dir/src/"
    if ! patch -p1 --forward --batch -d "$dir/src" < "$patch_file" > "$dir/patch.log" 2>&1; then
      cat "$dir/patch.log" >&2
      echo "build_hopper_dev: $patch_file does not apply (variant $name)" >&2
      exit 2
    fi
    tree[$name]=$dir/src
  else
    tree[$name]=$root
  fi
done

# Every (variant, source) compile, at most $jobs at a time.
compile() {  # compile NAME SOURCE
  local name=$1 src=${tree[$1]} file=$2 base
  base=$(basename "$file")
  "$nvcc" -std=c++17 -O3 -DNDEBUG -lineinfo $arch -Xcompiler -fPIC -Xptxas -v \
    "-DFUSETUNE_HOPPER_DEV_LABEL=\"$name\"" \
    -I"$src/kernels/cuda" -I"$src/kernels/include" -I"$src/base/include" \
    -x cu -c "$src/$file" -o "$out/$name/$base.o" > "$out/$name/$base.ptxas.txt" 2>&1
}
pids=() labels=()
failed=0
for spec in "${variants[@]}"; do
  name=${spec%%=*}
  for file in "${sources[@]}"; do
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n || failed=1; done
    compile "$name" "$file" &
    pids+=($!) labels+=("$name/$(basename "$file")")
  done
done
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "build_hopper_dev: ${labels[$i]} did not compile:" >&2
    grep -v "^ptxas info" "$out/${labels[$i]}.ptxas.txt" | head -40 >&2
    failed=1
  fi
done
((failed == 0)) || exit 1

for spec in "${variants[@]}"; do
  name=${spec%%=*}
  dir=$out/$name
  objects=()
  for file in "${sources[@]}"; do objects+=("$dir/$(basename "$file").o"); done
  # Only the fusetune_* functions are exported, and the library binds its own symbols, so that
  # several variants and the full library load side by side in one process.
  if ! "$nvcc" -shared $arch -o "$dir/libfusetune_hopper_dev.so" "${objects[@]}" \
      -Xlinker --version-script="${tree[$name]}/kernels/capi/exports.map" -Xlinker -Bsymbolic > "$dir/link.log" 2>&1; then
    cat "$dir/link.log" >&2
    echo "build_hopper_dev: linking variant $name failed" >&2
    exit 1
  fi
  spills=$(cat "$dir"/*.ptxas.txt | awk '/bytes spill stores/ { for (i = 1; i < NF; ++i) if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) == "stores,") s += $i } END { print s + 0 }')
  serialized=$(cat "$dir"/*.ptxas.txt | grep -c -E "C7518|Performance Loss" || true)
  echo "built $dir/libfusetune_hopper_dev.so (spill stores, all kernels: $spills bytes; serialized wgmma warnings: $serialized)"
  # Where cuobjdump is (a GPU host's toolkit), each kernel's loops holding HGMMA or TMA loads,
  # counted (sass_loops.py), and of the d128 st2/persistent flagship kernels the consumers' key
  # loop and the producer's per-step loop (the innermost with two or more TMA loads): a
  # variant's loops beside the base's before any timing (the key loop's GAPS-WITH-FMNMX near 1:
  # ptxas took both rows' maxima before the exponentials, the schedule that ran 3-5 % slower).
  if command -v "$cuobjdump" > /dev/null 2>&1 && command -v python3 > /dev/null 2>&1; then
    if python3 "$here/sass_loops.py" --cuobjdump "$cuobjdump" "$dir/libfusetune_hopper_dev.so" FusedWgmmaKernel \
        > "$dir/sass_loops.txt" 2>&1; then
      awk 'function count(name,   i) { for (i = 1; i < NF; ++i) if ($i == name) return $(i + 1) + 0; return 0 }
           /^[^ ]/ { kernel = ($0 ~ /Li128ELi128ELi128ELi2ELb0ELb1EEELb0E/) ? ($0 ~ /nv_bfloat16/ ? "bf16" : "fp16") : ""; key = producer = 0 }
           kernel != "" && !key && count("HGMMA") == 16 { line = $0; sub(/^ +loop [^:]*: /, "", line); print "  key loop, " kernel " d128 st2/persistent: " line; key = 1 }
           kernel != "" && !producer && count("HGMMA") == 0 && count("UTMALDG") >= 2 { line = $0; sub(/^ +loop [^:]*: /, "", line); print "  producer loop, " kernel " d128 st2/persistent: " line; producer = 1 }' \
        "$dir/sass_loops.txt"
    else
      echo "  sass_loops.py failed: $(tail -n 1 "$dir/sass_loops.txt")"
    fi
  elif command -v python3 > /dev/null 2>&1; then
    # No cuobjdump (a build machine): the d128 st2/persistent kernels' softmax G read from the
    # objects' sm_90a code (cubin_opcodes.py), beside the base's where it was built too, and
    # which kernels differ from the base's.
    for t in fp16 bf16; do
      base_obj=$out/base/fused_wgmma_$t.cu.o
      base_args=()
      [[ $name != base && -r $base_obj ]] && base_args=(--base "$base_obj")
      python3 "$here/cubin_opcodes.py" "${base_args[@]}" "$dir/fused_wgmma_$t.cu.o" > "$dir/cubin_opcodes_$t.txt" 2>&1 ||
        echo "  cubin_opcodes.py failed: $(tail -n 1 "$dir/cubin_opcodes_$t.txt")"
      sed -n 's/^  \(_ZN.*\): \([0-9]* instructions.*\)/  '"$t"' d128 st2\/persistent: \2/p; s/^  \([0-9]* kernels: .*\)/  '"$t"': \1/p' \
        "$dir/cubin_opcodes_$t.txt"
    done
  fi
done
