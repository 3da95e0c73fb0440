#!/usr/bin/env bash
# Instructions the NEON kernels execute for one call, counted under qemu-user: a run's time
# under emulation says nothing about an arm64 core, but its instruction counts show what a
# kernel costs per weight and token. Builds bench/arm64_kernel_insns.cpp with neon.cpp and
# neon_dotprod.cpp at OPT (default -O3, as CMake's Release) against the other core objects of
# scripts/test-arm64.sh's build, then runs it under `qemu-aarch64 -singlestep -d exec,nochain`
# with the log filtered to the two kernel objects' code: one line per executed instruction.
# Usage: bench/arm64_kernel_insns.sh [OPT]   (env: NS token counts, SETS "1 0" = sdot, plain)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
opt=${1:--O3}
build=$root/build-arm64
out=$build/insns
ns=${NS:-2 3 5 8 9 16}
sets=${SETS:-1 0}
cxx=${CXX_AARCH64:-aarch64-linux-gnu-g++}
launcher=$(command -v ccache || true)
[[ -d $build/obj ]] || { echo "run scripts/test-arm64.sh first (it builds $build/obj)" >&2; exit 1; }
mkdir -p "$out"

pids=()
$launcher "$cxx" -std=c++20 "$opt" -I"$root/src" -c "$root/src/core/kernels/arm/neon.cpp" -o "$out/neon.o" &
pids+=($!)
$launcher "$cxx" -std=c++20 "$opt" -march=armv8.2-a+dotprod -I"$root/src" -c "$root/src/core/kernels/arm/neon_dotprod.cpp" \
  -o "$out/neon_dotprod.o" &
pids+=($!)
$launcher "$cxx" -std=c++20 -O2 -I"$root/src" -c "$root/bench/arm64_kernel_insns.cpp" -o "$out/main.o" &
pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
core=()
for object in "$build"/obj/*_src_core_*.o; do [[ $object == *_kernels_arm_neon* ]] || core+=("$object"); done
# Static, so the kernels sit at the addresses the link map gives.
"$cxx" -static -pthread "$out/main.o" "${core[@]}" "$out/neon.o" "$out/neon_dotprod.o" -o "$out/arm64_kernel_insns" \
  -Wl,-Map,"$out/link.map"
text_of() { awk -v f="$1" '$1 == ".text" && $4 == f { print $2, $3 }' "$out/link.map"; }
read -r neon_at _ < <(text_of "$out/neon.o")
read -r dotprod_at dotprod_size < <(text_of "$out/neon_dotprod.o")
range=$(printf '0x%x..0x%x' $((neon_at)) $((dotprod_at + dotprod_size - 1)))

count() {
  qemu-aarch64 -cpu max -singlestep -d exec,nochain -dfilter "$range" -D /dev/stderr "$out/arm64_kernel_insns" "$@" \
    2>&1 >/dev/null | grep -c '^Trace'
}

echo "instructions executed, $opt; quant types 32 x 1024 (interleaved copy)"
printf '%-6s %-5s %3s %12s %12s %12s %8s\n' set type n one-token-xN own-kernel small-batch sb/own
for sdot in $sets; do
  for type in q4_0 q8_0 q4_k q6_k; do
    for n in $ns; do
      one=$(count "$type" 0 "$n" "$sdot")
      own=$(count "$type" 1 "$n" "$sdot")
      small=$(count "$type" 2 "$n" "$sdot")
      printf '%-6s %-5s %3s %12s %12s %12s %8s\n' "$([[ $sdot == 1 ]] && echo sdot || echo plain)" "$type" "$n" "$one" "$own" \
        "$small" "$(awk -v a="$small" -v b="$own" 'BEGIN { printf "%.2f", a / b }')"
    done
  done
done
echo "float types 64 x 2048, sdot set: file rows against 16-row groups"
printf '%-5s %3s %12s %12s %8s\n' type n rows groups g/r
for type in f32 f16 bf16; do
  for n in 1 4 16; do
    rows=$(count "$type" 0 "$n")
    groups=$(count "$type" 1 "$n")
    printf '%-5s %3s %12s %12s %8s\n' "$type" "$n" "$rows" "$groups" "$(awk -v a="$groups" -v b="$rows" 'BEGIN { printf "%.2f", a / b }')"
  done
done
