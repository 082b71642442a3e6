# Sourced by the GPU-host scripts (gpu_check.sh, regret_study.sh, worker_check.sh, ...).
# device_cuda_lib_dirs: prints ":dir[:dir...]" where the GPU host keeps libcublas.so.13 and
# cudart (the toolkit's folders, else PyTorch's nvidia wheels), or nothing if none is found.
device_cuda_lib_dirs() {
  local dirs="" d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -e "$d/libcublas.so.13" ]] && dirs="$dirs:$d"
  done
  if [[ -z "$dirs" ]]; then
    local wheel_dir
    wheel_dir=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
for root in site.getsitepackages():
    for hit in glob.glob(os.path.join(root, "nvidia", "**", "libcublas.so.13"), recursive=True):
        print(os.path.dirname(hit)); raise SystemExit
PY
)
    [[ -n "$wheel_dir" ]] && dirs=":$wheel_dir"
  fi
  printf '%s' "$dirs"
}

# unpack_bundle BUNDLE_DIR DEST: unpacks BUNDLE_DIR/bundle.tar.xz (made by stage.sh) into DEST
# (emptied first) and prints the bundle's commit. Returns 1 when it cannot.
unpack_bundle() {
  local bundle=$1 dest=$2
  rm -rf "$dest" && mkdir -p "$dest"
  tar -C "$dest" -xJf "$bundle/bundle.tar.xz" || { echo "cannot unpack $bundle/bundle.tar.xz"; return 1; }
  echo "bundle commit $(cat "$bundle/commit.txt" 2>/dev/null)"
}

# bundle_library_path DEST: the LD_LIBRARY_PATH for a bundle unpacked in DEST: its lib folder,
# the host's cuBLAS/cudart folders, then the current LD_LIBRARY_PATH.
bundle_library_path() {
  printf '%s' "$1/lib$(device_cuda_lib_dirs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# report_missing_libs LIBPATH FILE...: prints the shared libraries each FILE lacks under
# LIBPATH; returns 1 if any is missing.
report_missing_libs() {
  local libpath=$1 f rc=0
  shift
  for f in "$@"; do
    if LD_LIBRARY_PATH="$libpath" ldd "$f" | grep -q "not found"; then
      echo "MISSING LIBS for $f:"
      LD_LIBRARY_PATH="$libpath" ldd "$f" | grep "not found"
      rc=1
    fi
  done
  return $rc
}
