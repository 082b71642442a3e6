#!/usr/bin/env bash
# Builds the C ABI library of every first-parent commit of a bisect range on this machine (the
# build machine: the GPU host lacks the build dependencies) and packs them into one archive for
# `bisect_check.sh` on the GPU host, which then never builds.
#
#   ci/device/bisect_libraries.sh GOOD BAD ARCHIVE
#
# Environment:
#   REPO        the repository (default: the checkout this script lives in)
#   HOME_DIR    build-commit.sh's --home (default: its own default); builds are kept there
#   CMAKE_ARGS  configure arguments (default: the CUDA library for sm_90a alone, without the
#               service: "-DFUSETUNE_WITH_CUDA=ON -DFUSETUNE_WITH_SERVICE=OFF
#               -DCMAKE_CUDA_ARCHITECTURES=90a-real")
#   JOBS        parallel build jobs (default: nproc)
#
# GOOD and every first-parent commit after it up to BAD go through
# `ci/build-commit.sh --library`: one worktree and one build folder, incremental, with ccache,
# so a commit that changes nothing the library is built from rebuilds nothing and takes seconds.
# Commits whose libraries are byte for byte the same share one copy: ARCHIVE (tar.xz) holds
# LIBS/<12-hex commit>/lib/libfusetune_capi.so for the first commit of each distinct library and
# a symlink LIBS/<12-hex commit> -> <that commit> for every later one; the libraries are
# stripped and compressed solid (one xz stream with a dictionary larger than a library), so 120
# commits with 31 distinct libraries take 7.3 MB. A commit that does not build is left out
# (bisect skips it). On the GPU host:
#   mkdir L && tar -xJf ARCHIVE -C L && LIBS=L GOOD=... BAD=... CELL=... bash ci/device/bisect_check.sh ...
# or LIBS_ARCHIVE=ARCHIVE, which bisect_check.sh unpacks itself. Prints one line per commit
# (built, same as COMMIT, or does not build) and the archive's size.
# Exit status: 0 packed; 1 GOOD or BAD does not build, or packing failed; 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
(($# == 3)) || { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
good=$1 bad=$2 archive=$3
repo=${REPO:-$(cd "$here/../.." && pwd)}
cmake_args=${CMAKE_ARGS:--DFUSETUNE_WITH_CUDA=ON -DFUSETUNE_WITH_SERVICE=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real}
good_full=$(git -C "$repo" rev-parse --verify --quiet "$good^{commit}") || { echo "bisect_libraries: unknown commit $good" >&2; exit 2; }
bad_full=$(git -C "$repo" rev-parse --verify --quiet "$bad^{commit}") || { echo "bisect_libraries: unknown commit $bad" >&2; exit 2; }
git -C "$repo" merge-base --is-ancestor "$good_full" "$bad_full" ||
  { echo "bisect_libraries: $good is not an ancestor of $bad" >&2; exit 2; }
mapfile -t commits < <(echo "$good_full"; git -C "$repo" rev-list --first-parent --reverse "$good_full..$bad_full")

build_args=(--repo "$repo" --library --keep $((${#commits[@]} + 8)) --cmake-args "$cmake_args")
[[ -n ${HOME_DIR:-} ]] && build_args+=(--home "$HOME_DIR")
[[ -n ${JOBS:-} ]] && build_args+=(--jobs "$JOBS")

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
declare -A first_with  # library checksum -> the first commit that built it
for full in "${commits[@]}"; do
  short=${full:0:12}
  status=0
  lib=$("$here/../build-commit.sh" "${build_args[@]}" "$full" 2> "$stage/build.err" | tail -n 1) || status=$?
  if ((status != 0)) || [[ ! -r $lib ]]; then
    if [[ $full == "$good_full" || $full == "$bad_full" ]]; then
      cat "$stage/build.err" >&2
      echo "bisect_libraries: $short (an end of the range) does not build" >&2
      exit 1
    fi
    echo "$short does not build (exit $status): left out"
    continue
  fi
  sum=$(sha256sum < "$lib" | cut -d' ' -f1)
  if [[ -n ${first_with[$sum]:-} ]]; then
    ln -s "${first_with[$sum]}" "$stage/$short"
    echo "$short same as ${first_with[$sum]}"
  else
    first_with[$sum]=$short
    mkdir -p "$stage/$short/lib"
    cp -L "$lib" "$stage/$short/lib/libfusetune_capi.so"
    strip --strip-unneeded "$stage/$short/lib/libfusetune_capi.so" 2> /dev/null || true
    echo "$short built"
  fi
done
# Solid: the libraries differ in a few kernels, so a dictionary that spans one whole library
# (about 36 MB unstripped) finds the rest in the previous one.
(cd "$stage" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | sort | tar -cf - -T - |
  xz -T1 --lzma2=preset=6,dict=192MiB) > "$archive.partial"
mv -f "$archive.partial" "$archive"
echo "bisect_libraries: ${#commits[@]} commits, ${#first_with[@]} distinct libraries, $(du -h "$archive" | cut -f1) in $archive"
