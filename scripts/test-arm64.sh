#!/usr/bin/env bash
# Cross-compiles orchard_core and the tests/core suite (with the model's element-wise ops and
# their test, whose loops are vectorized for NEON by the compiler) for arm64 with Debian's
# aarch64-linux-gnu-g++ and runs them under qemu-aarch64, so the NEON kernels (plain and
# dotprod: `-cpu max` emulates FEAT_DotProd) are tested on an x86 machine.
# googletest is built from /usr/src/googletest and fmt is used header-only, so no arm64
# packages beyond the cross compiler and libc are needed.
# Usage: scripts/test-arm64.sh [build dir (default build-arm64)] [gtest args...]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-arm64}
shift || true
cxx=${CXX_AARCH64:-aarch64-linux-gnu-g++}
launcher=$(command -v ccache || true)
jobs=$(nproc)

mkdir -p "$build/obj" "$build/include"
ln -sfn /usr/include/fmt "$build/include/fmt"  # header-only: the host's headers, no arm64 library

flags=(-std=c++20 -O2 -Wall -Wextra -DFMT_HEADER_ONLY -I"$root/src" -I"$root/tests" -isystem "$build/include"
  -isystem /usr/src/googletest/googletest/include -isystem /usr/src/googletest/googletest -pthread)

sources=("$root"/src/core/*.cpp "$root"/src/core/kernels/generic/activations.cpp "$root"/src/core/kernels/generic/generic.cpp
  "$root"/src/core/kernels/generic/layouts.cpp "$root"/src/core/kernels/arm/*.cpp "$root"/tests/core/*.cpp
  "$root"/src/model/ops.cpp "$root"/src/model/attention_amx.cpp "$root"/src/model/kv_cache.cpp "$root"/tests/model/test_ops.cpp
  /usr/src/googletest/googletest/src/gtest-all.cc /usr/src/googletest/googletest/src/gtest_main.cc)

object_of() { echo "$build/obj/$(echo "${1#/}" | tr / _).o"; }

compile() {
  local src=$1 extra=()
  # Per-file ISA flags, as src/core/CMakeLists.txt sets them.
  [[ $src == */neon_dotprod.cpp ]] && extra=(-march=armv8.2-a+dotprod)
  [[ $src == */generic/generic.cpp ]] && extra=(-ffp-contract=off)
  [[ $src == /usr/src/* ]] && extra=(-w)
  $launcher "$cxx" "${flags[@]}" "${extra[@]}" -c "$src" -o "$(object_of "$src")"
}

start=$(date +%s)
objects=()
for src in "${sources[@]}"; do
  compile "$src" &
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  objects+=("$(object_of "$src")")
done
while (($(jobs -rp | wc -l) > 0)); do wait -n; done
"$cxx" -pthread "${objects[@]}" -o "$build/core_tests"
built=$(date +%s)
echo "built $build/core_tests in $((built - start)) s"

# The loader and every library from the cross compiler's own sysroot, which the binary was linked
# against: -L alone takes the loader from there, but the loader then finds libc.so.6 in
# /lib/aarch64-linux-gnu first once the multiarch libc6:arm64 is installed (scripts/install-arm64.sh),
# a newer glibc whose libc reads the loader's private data at other offsets (its _rtld_global
# is 8 bytes longer): pthread_create can then loop forever walking the thread-stack cache's list
# (docs/arm64.md).
sysroot=/usr/aarch64-linux-gnu
qemu-aarch64 -L "$sysroot" -E LD_LIBRARY_PATH="$sysroot/lib" -cpu max "$build/core_tests" --gtest_brief=1 "$@"
echo "qemu run took $(($(date +%s) - built)) s"
