# shellcheck shell=bash
# What ci/nightly.sh and ci/build-commit.sh share (sourced by both, not run): where the home
# folder is and how builds are laid out in it.

# The home folder: --home, else FUSETUNE_NIGHTLY_HOME, else under the user's cache folder.
# Usage: nightly_home [DIR_FROM_OPTION]; prints an absolute path.
nightly_home() {
  realpath -m "${1:-${FUSETUNE_NIGHTLY_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/fusetune-nightly}}"
}

# The kept builds, one folder per commit (what `fusetune regress --builds-dir` reads).
# Usage: nightly_builds_dir HOME
nightly_builds_dir() {
  echo "$1/builds"
}

# A commit's folder there: bin/fusetune, build.log. Usage: nightly_build_dir HOME COMMIT
nightly_build_dir() {
  echo "$(nightly_builds_dir "$1")/${2:0:12}"
}

# nvcc for the CUDA backend where the toolkit is installed but not on PATH (cron, CI shells).
nightly_add_cuda_to_path() {
  if ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=$PATH:/usr/local/cuda/bin
  fi
}
