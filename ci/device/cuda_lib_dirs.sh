# Sourced by the on-device scripts (gpu_check.sh, worker_check.sh).
# device_cuda_lib_dirs: prints ":dir[:dir...]" where the device image keeps libcublas.so.13 and
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
