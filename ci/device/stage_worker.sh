#!/usr/bin/env bash
# Run on the build machine (no GPU needed): builds the `fusetune` CLI with the CUDA backend
# AND the service (`serve`, `worker`, `submit`, `best --server`), and packs it with the
# shared libraries a GPU host without the build dependencies lacks (gRPC, absl, re2, c-ares,
# protobuf, prometheus-cpp core, fmt, cudart, ...) into .gpu-bundle/worker/bundle.tar.xz, for
# ci/device/worker_check.sh. Same exclusions as stage.sh: glibc, libstdc++, libgcc and
# cuBLAS/the driver are the GPU host's own.
#
# Usage: ci/device/stage_worker.sh, then copy .gpu-bundle/worker to the same path in a
# checkout on the GPU host and run `bash ci/device/worker_check.sh` there.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-devwrk}
DEST=${DEST:-$ROOT/.gpu-bundle/worker}
JOBS=${JOBS:-2}

cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFUSETUNE_WITH_CUDA=ON \
  -DFUSETUNE_WITH_SERVICE=ON -DFUSETUNE_WITH_HIP=OFF >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target fusetune

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib"
bin=$(find "$BUILD" -type f -name fusetune -perm -u+x | head -1)
[[ -n "$bin" ]] || { echo "stage_worker: no fusetune binary under $BUILD" >&2; exit 1; }
strip -o "$STAGE/bin/fusetune" "$bin"

ldd "$STAGE/bin/fusetune" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|libpthread.so*|libdl.so*|librt.so*) ;;
    ld-linux*|libcublas*|libcuda.so*|libnvidia-ml*) ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done
for f in "$STAGE"/lib/*; do strip --strip-unneeded "$f" 2>/dev/null || true; done

mkdir -p "$DEST"
rm -f "$DEST"/bundle.tar.xz
tar -C "$STAGE" -cf - bin lib | xz -T"$JOBS" -6 > "$DEST/bundle.tar.xz"
git -C "$ROOT" rev-parse --short=12 HEAD > "$DEST/commit.txt"
(cd "$STAGE" && find bin lib -type f -printf '%p %s\n' | sort) > "$DEST/manifest.txt"
size=$(stat -c %s "$DEST/bundle.tar.xz")
echo "stage_worker: $DEST/bundle.tar.xz $((size / 1024 / 1024)) MiB ($(wc -l < "$DEST/manifest.txt") files)"
# A bundle this large means something unstripped or unintended was packed.
max_mib=${MAX_BUNDLE_MIB:-48}
if (( size > max_mib * 1024 * 1024 )); then
  echo "stage_worker: bundle over $max_mib MiB (MAX_BUNDLE_MIB): check $DEST/manifest.txt" >&2
  exit 1
fi
