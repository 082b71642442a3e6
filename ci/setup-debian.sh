#!/usr/bin/env bash
# Installs what fusetune needs to build on Debian 12, idempotently: packages already present
# are skipped, and apt-get runs only when something is missing. Uses sudo when not root.
#
#   ci/setup-debian.sh          build dependencies (enough for the main job), and what the Python
#                               package imports (python3-grpcio, python3-protobuf, python3-numpy)
#   ci/setup-debian.sh --tests  plus what the test suite runs (the Prometheus server; the PostgreSQL
#                               15 server, whose binaries the store's tests start a throw-away
#                               cluster from; pytest, torch, pandas and venv for the Python
#                               package's tests; Chromium, which renders the HTML reports headless)
#   ci/setup-debian.sh --hip    plus hipcc and the HIP runtime (Debian's ROCm 5.2, ~630 MiB with
#                               clang-15), so ci/build.sh compiles the HIP backend
#
# CUDA is not installed here: GPU hosts and CI machines bring their own toolkit
# (/usr/local/cuda); without nvcc the build configures with the CPU backend only.
set -euo pipefail

packages=(
  build-essential cmake git pkg-config
  libabsl-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libsqlite3-dev sqlite3 libpq-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev
  python3 python3-grpcio python3-protobuf python3-numpy
)
# Without recommends: the server alone, not ~350 MiB of exporters. python3-torch (CPU) is what
# the Python package's kernel tests run on (~150 MB of packages); python3-venv makes the fresh
# environments the packaging tests install into. chromium renders the HTML reports in
# report_pages_browser_test (headless; without recommends).
# postgresql: the server binaries (/usr/lib/postgresql/15/bin) the store's PostgreSQL tests run;
# the tests start their own cluster and never use one the package may have created.
test_packages=(prometheus postgresql python3-pytest python3-torch python3-pandas python3-venv chromium)
# The HIP backend's compiler and runtime library (compile-only without an AMD GPU).
hip_packages=(hipcc libamdhip64-dev)

want_tests=0
want_hip=0
for arg in "$@"; do
  case "$arg" in
    --tests) want_tests=1 ;;
    --hip) want_hip=1 ;;
    *) echo "usage: $0 [--tests] [--hip]" >&2; exit 2 ;;
  esac
done
if [[ $want_tests == 1 ]]; then packages+=("${test_packages[@]}"); fi
if [[ $want_hip == 1 ]]; then packages+=("${hip_packages[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} == 0 ]]; then
  echo "setup-debian: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) != 0 ]]; then sudo=(sudo); fi
echo "setup-debian: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
