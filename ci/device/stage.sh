#!/usr/bin/env bash
# Run HERE (the build machine, no GPU): builds build-cuda and packs what the H200 run needs
# into .device-carry/backend/bundle.tar.xz (stripped binaries, libfusetune_capi.so and the
# shared libraries the device image lacks). The device tool's carry limit is 64 MiB for the
# working tree plus carried paths; the fused kernels' fatbins compress about 10x with xz.
#
# Usage: ci/device/stage.sh            (then: run with carry [".device-carry/backend"]
#                                        and command "bash ci/device/gpu_check.sh")
# To stage exactly a commit, run the stage.sh of a `git worktree` of it with DEST pointing
# at this checkout's .device-carry/backend (and BUILD at a build folder of that worktree).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-cuda}
DEST=${DEST:-$ROOT/.device-carry/backend}
JOBS=${JOBS:-2}

cmake -S "$ROOT" -B "$BUILD" -DFUSETUNE_WITH_CUDA=ON -DFUSETUNE_WITH_SERVICE=OFF \
  -DFUSETUNE_WITH_HIP=OFF >/dev/null

# Targets that exist in this checkout (the CLI and the fused dev driver land separately);
# STAGE_TARGETS="a b" packs only those (e.g. the kernel checks need no CLI).
read -r -a wanted <<<"${STAGE_TARGETS:-cuda_backend_test cuda_attention_bench fusetune_capi fusetune}"
available=$(cmake --build "$BUILD" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
targets=()
for t in "${wanted[@]}"; do
  if grep -qx "$t" <<<"$available"; then targets+=("$t"); fi
done
echo "stage: building ${targets[*]}"
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib"
for t in "${targets[@]}"; do
  # lib$t.so is the development symlink to the versioned file (strip reads through it).
  f=$(find "$BUILD" \( -type f -o -type l \) \( -name "$t" -o -name "lib$t.so" \) -perm -u+x | head -1)
  [[ -n "$f" ]] || { echo "stage: no file for target $t" >&2; exit 1; }
  case "$f" in
    *.so) strip --strip-unneeded -o "$STAGE/lib/$(basename "$f")" "$f" ;;
    *) strip -o "$STAGE/bin/$(basename "$f")" "$f" ;;
  esac
done

# Shared libraries to carry: everything ldd resolves except glibc/libstdc++/libgcc (newer on
# the device) and cuBLAS (the device has it; too big to carry). libcudart is small: carried.
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
tar -C "$STAGE" -cf - bin lib | xz -T"$JOBS" -6 > "$DEST/bundle.tar.xz"
git -C "$ROOT" rev-parse --short=12 HEAD > "$DEST/commit.txt"
(cd "$STAGE" && find bin lib -type f -printf '%p %s\n') > "$DEST/manifest.txt"
size=$(stat -c %s "$DEST/bundle.tar.xz")
echo "stage: $DEST/bundle.tar.xz $((size / 1024 / 1024)) MiB ($(wc -l < "$DEST/manifest.txt") files)"
if (( size > 48 * 1024 * 1024 )); then
  echo "stage: bundle over 48 MiB; the 64 MiB carry limit includes the working tree" >&2
  exit 1
fi
