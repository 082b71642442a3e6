#!/usr/bin/env bash
# Installs a built fusetune tree into a temporary folder and builds and runs consumers of it, as
# a user outside the project would: a CMake project with find_package(fusetune CONFIG), and
# plain compiler lines with pkg-config; and, when the build has the Python package, imports it
# from the prefix's site-packages in a fresh venv. Usage (ctest passes these, see CMakeLists.txt):
#   install_test.sh BUILD_DIR CONSUMER_SRC LIBDIR VERSION C_API_VERSION WITH_CLIENT CC CXX LAUNCHER \
#                   [PYTHON PYTHON_INSTALL_DIR]
set -euo pipefail
build_dir=$1 consumer_src=$2 libdir=$3 version=$4 c_api_version=$5 with_client=$6 cc=$7 cxx=$8
launcher=${9:-} python=${10:-} python_dir=${11:-}

work=$(mktemp -d "${TMPDIR:-/tmp}/fusetune-install-test.XXXXXX")
keep_work() { echo "install_test: FAILED; work files kept in $work" >&2; }
trap keep_work ERR
fail() { echo "install_test: $*" >&2; exit 1; }
prefix=$work/prefix

# Installed into one folder, used from another: the package and the .pc files are relocatable.
echo "== cmake --install $build_dir --prefix $work/staging, then moved to $prefix"
cmake --install "$build_dir" --prefix "$work/staging" > "$work/install.log" || { cat "$work/install.log"; fail "cmake --install failed"; }
[[ -d $work/staging ]] || fail "cmake --install installed nothing"
mv "$work/staging" "$prefix"

expected=(bin/fusetune include/fusetune/c_api.h "$libdir/libfusetune_capi.so"
          "$libdir/libfusetune_capi.so.$c_api_version" "$libdir/libfusetune_capi.so.$version"
          "$libdir/cmake/fusetune/fusetuneConfig.cmake" "$libdir/cmake/fusetune/fusetuneConfigVersion.cmake"
          "$libdir/pkgconfig/fusetune-capi.pc" share/fusetune/dashboards/grafana/fusetune.json)
if [[ $with_client == ON ]]; then
  expected+=(include/fusetune/client/config_cache.h include/fusetune/wire/provenance.h
             include/fusetune/kernels/problem.h
             include/fusetune/kernels/config.h "$libdir/libfusetune_client.a"
             "$libdir/pkgconfig/fusetune-client.pc")
fi
if [[ -n $python ]]; then
  expected+=("$python_dir/fusetune/__init__.py" "$python_dir/fusetune/proto/fusetune_pb2_grpc.py"
             "$python_dir/fusetune/_build.py" "$python_dir/fusetune/libfusetune_capi.so.$c_api_version")
fi
for f in "${expected[@]}"; do
  [[ -e $prefix/$f ]] || fail "not installed: $f (installed: $(cd "$prefix" 2>/dev/null && find . -type f | sort | tr '\n' ' '))"
done
# Inference code linking the client does not pull in the tuning records.
[[ ! -e $prefix/$libdir/libfusetune_records.a ]] || fail "the client exports fusetune_records"
soname=$(readelf -d "$prefix/$libdir/libfusetune_capi.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "soname: $soname"
[[ $soname == "libfusetune_capi.so.$c_api_version" ]] || fail "soname '$soname', expected libfusetune_capi.so.$c_api_version"

installed_version=$("$prefix/bin/fusetune" --version)
echo "fusetune --version: $installed_version"
[[ $installed_version == "$version "* ]] || fail "the installed fusetune says '$installed_version', expected $version"

# Output lines every consumer run must print.
check_capi() {
  grep -qx "c_api version: header $c_api_version, library $c_api_version" <<<"$1" || fail "no C ABI version line"
  grep -q "^c_api cpu run: OK, max error " <<<"$1" || fail "no C ABI CPU run line"
}
check_client() {
  grep -q "^lookup .*: .* \[fallback\] (the default config)$" <<<"$1" || fail "no fallback lookup line"
  grep -q "^c_api cpu run of .*: OK, max error " <<<"$1" || fail "no C ABI run of the looked-up config"
}
run() {  # run NAME BINARY: runs a consumer, shows its output, returns it in $out
  echo "== $1"
  out=$("$2" 2>&1) || { echo "$out"; fail "$1 exited non-zero"; }
  echo "$out"
}

echo "== find_package(fusetune CONFIG): configure and build the consumer project"
launcher_args=()
if [[ -n $launcher ]]; then
  launcher_args=(-DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")
fi
# Only the temporary prefix may provide fusetune (never the build tree or a package registry).
if ! cmake -S "$consumer_src" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" "${launcher_args[@]}" \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
      -DCONSUMER_WITH_CLIENT="$with_client" > "$work/consumer-configure.log" 2>&1; then
  cat "$work/consumer-configure.log"; fail "consumer configure failed"
fi
grep -q "consumer: fusetune $version from $prefix/" "$work/consumer-configure.log" ||
  { cat "$work/consumer-configure.log"; fail "the consumer did not find fusetune $version in $prefix"; }
cmake --build "$work/consumer" -j2 > "$work/consumer-build.log" 2>&1 ||
  { cat "$work/consumer-build.log"; fail "consumer build failed"; }
run capi_consumer "$work/consumer/capi_consumer"; check_capi "$out"
if [[ $with_client == ON ]]; then
  run client_consumer "$work/consumer/client_consumer"; check_client "$out"
fi

echo "== pkg-config: compile with \$(pkg-config --cflags --libs ...)"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
[[ $(pkg-config --modversion fusetune-capi) == "$version" ]] || fail "pkg-config fusetune-capi version"
# shellcheck disable=SC2046  # the flags are meant to split
"$cc" -o "$work/capi_consumer_pc" "$consumer_src/capi_consumer.c" $(pkg-config --cflags --libs fusetune-capi) \
  -lm -Wl,-rpath,"$prefix/$libdir"
run "capi_consumer (pkg-config)" "$work/capi_consumer_pc"; check_capi "$out"
if [[ $with_client == ON ]]; then
  # shellcheck disable=SC2046
  "$cxx" -std=c++20 -O1 -o "$work/client_consumer_pc" "$consumer_src/client_consumer.cc" \
    $(pkg-config --cflags --libs fusetune-client fusetune-capi) -Wl,-rpath,"$prefix/$libdir"
  run "client_consumer (pkg-config)" "$work/client_consumer_pc"; check_client "$out"
fi

if [[ -n $python ]]; then
  # A fresh venv that sees the system's packages (Debian's grpc, protobuf, numpy) and the
  # prefix's site-packages, as /usr/local's is seen after `cmake --install` to the default prefix.
  echo "== Python: import fusetune from $prefix/$python_dir in a fresh venv"
  "$python" -m venv --system-site-packages --without-pip "$work/venv"
  out=$(cd "$work" && env -u FUSETUNE_CAPI_LIBRARY PYTHONPATH="$prefix/$python_dir" "$work/venv/bin/python" -c '
import sys, numpy as np, fusetune
from fusetune import _capi
print("fusetune", fusetune.__version__, "library", _capi._library_path())
q = np.ones((1, 4, 2, 32), np.float32)
print("attention sum", float(fusetune.attention(q, q, q).sum()))
' 2>&1) || { echo "$out"; fail "importing the installed package failed"; }
  echo "$out"
  grep -qx "fusetune $version library $prefix/$python_dir/fusetune/libfusetune_capi.so.$c_api_version" <<<"$out" ||
    fail "the installed package is not version $version with its library beside it"
  grep -qx "attention sum 256.0" <<<"$out" || fail "the installed package's attention is wrong"
fi

trap - ERR
rm -rf "$work"
echo "install_test: OK"
