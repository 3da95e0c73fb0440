#!/usr/bin/env bash
# Issue-2 benchmark: prompt (pp512) and generation (tg128) tok/s of a TinyLlama-shaped model at
# Q4_0, Q8_0, Q4_K_M and F16 with 1 and 2 threads, beside the machine's read bandwidth
# measured in the same run, so generation reads as a fraction of the bandwidth limit
# (weight bytes per token × tok/s ÷ bandwidth).
#
#   bench/engine.sh [BUILD_DIR]        (default: build; models go to $ORCHARD_BENCH_MODELS or /tmp/orchard-bench)
set -euo pipefail
build=${1:-build}
models=${ORCHARD_BENCH_MODELS:-/tmp/orchard-bench}
types=${ORCHARD_BENCH_TYPES:-"q4_0 q8_0 q4_k_m f16"}
threads=${ORCHARD_BENCH_THREADS:-"1 2"}
mkdir -p "$models"
for type in $types; do
  f="$models/tinyllama-1.1b-$type.gguf"
  [ -f "$f" ] || "$build/orchard" make-model --arch llama --shape tinyllama-1.1b --type "$type" --seed 1 -o "$f"
done

echo "== read bandwidth (same run)"
bandwidth=$("$build/bench/membw")
echo "$bandwidth"
echo
printf '%-8s %7s %10s %10s %12s %14s\n' type threads pp512 tg128 "GB/s read" "of bandwidth"
for type in $types; do
  for t in $threads; do
    bw=$(echo "$bandwidth" | awk -v t="$t" '$3 == t {print $(NF-1); exit}')
    "$build/orchard" bench -m "$models/tinyllama-1.1b-$type.gguf" -p 512 -n 128 -r 2 -t "$t" --json |
      python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
name, threads, bw = sys.argv[1], sys.argv[2], float(sys.argv[3] or "nan")
pp, tg, gbs = r["prompt_tok_s"], r["gen_tok_s"], r["rank0_gen_gb_s"]
print(f"{name:<8} {threads:>7} {pp:>10.1f} {tg:>10.1f} {gbs:>12.1f} {gbs / bw:>13.0%}")
' "$type" "$t" "$bw"
  done
done
