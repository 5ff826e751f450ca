#!/usr/bin/env bash
# The installed engine as an outside project uses it (ctest "anvil_install_test", label
# system): `cmake --install` into a fresh prefix; examples/ configured on its own with
# find_package(Anvil CONFIG) against that prefix alone, built and run; and one example built
# with nothing but `pkg-config --cflags --libs anvil`.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
src="$(cd "$2" && pwd)"
work="$(mktemp -d /tmp/anvil-install-XXXXXX)"
trap 'rm -rf "${work}"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "${build}" --prefix "${work}/prefix" > "${work}/install.log" || fail "cmake --install: $(tail "${work}/install.log")"
for f in include/anvil/core/anvil.h include/anvil/core/ops/op_table.def lib/libanvil_core.a lib/libanvil_nn.a \
         lib/cmake/Anvil/AnvilConfig.cmake lib/cmake/Anvil/AnvilTargets.cmake lib/pkgconfig/anvil.pc; do
  [[ -f "${work}/prefix/${f}" ]] || fail "not installed: ${f}"
done
# Nothing of the service's layers among the engine's headers.
if find "${work}/prefix/include/anvil" -path '*/server/*' -o -path '*/workers/*' | grep -q .; then
  fail "service headers installed with the engine"
fi

# The examples, an outside CMake project: only the installed prefix on its search path.
cmake -S "${src}/examples" -B "${work}/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="${work}/prefix" > "${work}/configure.log" 2>&1 || fail "configure: $(tail -20 "${work}/configure.log")"
cmake --build "${work}/examples" > "${work}/build.log" 2>&1 || fail "build: $(tail -30 "${work}/build.log")"
"${work}/examples/fit_regression" > "${work}/fit.txt" || fail "fit_regression exited $?"
grep -qi "loss" "${work}/fit.txt" || fail "fit_regression printed: $(cat "${work}/fit.txt")"
"${work}/examples/define_by_run" > /dev/null || fail "define_by_run exited $?"

# pkg-config alone.
export PKG_CONFIG_PATH="${work}/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
c++ -O1 -o "${work}/fit_pc" "${src}/examples/fit_regression.cc" $(pkg-config --cflags --libs anvil) \
  2> "${work}/pc.log" || fail "pkg-config build: $(tail -20 "${work}/pc.log")"
"${work}/fit_pc" > /dev/null || fail "the pkg-config build exited $?"
echo "ok: installed tree builds and runs the examples (CMake package and pkg-config)"
