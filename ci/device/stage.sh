#!/usr/bin/env bash
# Run on the build machine (nvcc and the build dependencies; no GPU needed): builds
# build-cuda and packs what the GPU checks need into .gpu-bundle/backend/bundle.tar.xz
# (stripped binaries, libfusetune_capi.so and the shared libraries a GPU host without the
# build dependencies lacks). The fused kernels' fatbins compress about 10x with xz.
#
# Usage: ci/device/stage.sh, then copy .gpu-bundle/backend to the same path in a checkout on
# the GPU host and run `bash ci/device/gpu_check.sh` there. On a GPU host that has the build
# dependencies, run stage.sh there too and skip the copy.
# To stage exactly a commit, run the stage.sh of a `git worktree` of it with DEST pointing
# at this checkout's .gpu-bundle/backend (and BUILD at a build folder of that worktree).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-cuda}
DEST=${DEST:-$ROOT/.gpu-bundle/backend}
JOBS=${JOBS:-2}

cmake -S "$ROOT" -B "$BUILD" -DFUSETUNE_WITH_CUDA=ON -DFUSETUNE_WITH_SERVICE=OFF \
  -DFUSETUNE_WITH_HIP=OFF >/dev/null

# STAGE_TARGETS="a b" packs only those targets (e.g. the kernel checks need no CLI).
# fusetune_python packs the Python package's modules under python/ (its library is the bundle's
# lib/libfusetune_capi.so: stage fusetune_capi with it; ci/device/python_check.sh uses both).
read -r -a targets <<<"${STAGE_TARGETS:-cuda_backend_test cuda_attention_bench fusetune_capi fusetune}"
echo "stage: building ${targets[*]}"
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib"
for t in "${targets[@]}"; do
  if [[ $t == fusetune_python ]]; then
    mkdir -p "$STAGE/python"
    (cd "$BUILD/python" && find fusetune -name '*.py' -print0 | xargs -0 cp --parents -t "$STAGE/python")
    continue
  fi
  # lib$t.so is the development symlink to the versioned file (strip reads through it).
  f=$(find "$BUILD" \( -type f -o -type l \) \( -name "$t" -o -name "lib$t.so" \) -perm -u+x | head -1)
  [[ -n "$f" ]] || { echo "stage: no file for target $t" >&2; exit 1; }
  case "$f" in
    *.so) strip --strip-unneeded -o "$STAGE/lib/$(basename "$f")" "$f" ;;
    *) strip -o "$STAGE/bin/$(basename "$f")" "$f" ;;
  esac
done

# Shared libraries to pack: everything ldd resolves except glibc/libstdc++/libgcc (the GPU
# host's own, usually newer) and cuBLAS (the GPU host's CUDA toolkit or PyTorch has it; too
# big to pack). libcudart is small: packed.
# nullglob: STAGE_TARGETS may name no shared library.
shopt -s nullglob
for f in "$STAGE"/bin/* "$STAGE"/lib/*.so; do
  ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|libpthread.so*|libdl.so*|librt.so*) ;;
    ld-linux*|libcublas*|libcuda.so*|libnvidia-ml*) ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done

mkdir -p "$DEST"
rm -f "$DEST"/bundle.tar.xz
tar -C "$STAGE" -cf - $(cd "$STAGE" && ls -d bin lib python 2>/dev/null) | xz -T"$JOBS" -6 > "$DEST/bundle.tar.xz"
git -C "$ROOT" rev-parse --short=12 HEAD > "$DEST/commit.txt"
(cd "$STAGE" && find bin lib $(ls -d python 2>/dev/null) -type f -printf '%p %s\n') > "$DEST/manifest.txt"
size=$(stat -c %s "$DEST/bundle.tar.xz")
echo "stage: $DEST/bundle.tar.xz $((size / 1024 / 1024)) MiB ($(wc -l < "$DEST/manifest.txt") files)"
# A bundle this large means something unstripped or unintended was packed.
max_mib=${MAX_BUNDLE_MIB:-48}
if (( size > max_mib * 1024 * 1024 )); then
  echo "stage: bundle over $max_mib MiB (MAX_BUNDLE_MIB): check $DEST/manifest.txt" >&2
  exit 1
fi
