#!/usr/bin/env bash
# Engine benchmark: prompt (pp512) and generation (tg128) tok/s of a TinyLlama-shaped model at
# Q4_0, Q8_0, Q4_K_M and F16 with 1 and 2 threads, beside the machine's read bandwidth, so
# generation reads as a fraction of the bandwidth limit (weight bytes per token × tok/s ÷
# bandwidth).
#
# This machine's bandwidth moves with its neighbours (the same probe reads 33 to 60 GB/s within
# an hour), so one probe at the start says little about a run minutes later. Each round measures
# the bandwidth right before each run, and the table gives medians over the rounds of each
# figure and of each per-round ratio. With LLAMA_BENCH naming a llama-bench binary, llama.cpp
# runs right after ours on the same file in every round, and the ratios are side by side.
#
# The same runs measure a mixture of experts: ORCHARD_BENCH_ARCH=qwen3moe ORCHARD_BENCH_SHAPE=moe-3b
# (Qwen3-30B-A3B's layer, 16 layers, 4 of 32 experts active). "GB/s read" then counts the bytes a
# token reads — attention, router and 4/32 of the experts — so "of bandwidth" is against the
# limit set by active, not total, parameters.
#
#   bench/engine.sh [BUILD_DIR]     (default: build)
#   env: ORCHARD_BENCH_MODELS (default /tmp/orchard-bench), ORCHARD_BENCH_TYPES, ORCHARD_BENCH_THREADS,
#        ORCHARD_BENCH_ROUNDS (default 3), ORCHARD_BENCH_ARCH (default llama),
#        ORCHARD_BENCH_SHAPE (default tinyllama-1.1b), LLAMA_BENCH
set -euo pipefail
build=${1:-build}
arch=${ORCHARD_BENCH_ARCH:-llama}
shape=${ORCHARD_BENCH_SHAPE:-tinyllama-1.1b}
models=${ORCHARD_BENCH_MODELS:-/tmp/orchard-bench}
types=${ORCHARD_BENCH_TYPES:-"q4_0 q8_0 q4_k_m f16"}
threads=${ORCHARD_BENCH_THREADS:-"1 2"}
rounds=${ORCHARD_BENCH_ROUNDS:-3}
llama=${LLAMA_BENCH:-}
mkdir -p "$models"
for type in $types; do
  f="$models/$arch-$shape-$type.gguf"
  [ -f "$f" ] || "$build/orchard" make-model --arch "$arch" --shape "$shape" --type "$type" --seed 1 -o "$f"
done

# One line per run: type threads probe_gb_s pp tg gb_s_read [llama_pp llama_tg]
for round in $(seq "$rounds"); do
  for type in $types; do
    f="$models/$arch-$shape-$type.gguf"
    for t in $threads; do
      bw=$("$build/bench/membw" "$t" | awk '{print $(NF-1)}')
      ours=$("$build/orchard" bench -m "$f" -p 512 -n 128 -r 1 -t "$t" --json |
        python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["prompt_tok_s"], r["gen_tok_s"], r["rank0_gen_gb_s"])')
      theirs=""
      if [ -n "$llama" ]; then
        theirs=$("$llama" -m "$f" -t "$t" -p 512 -n 128 -r 1 -o json 2>/dev/null |
          python3 -c 'import json, sys; r = json.load(sys.stdin); print(*[x["avg_ts"] for x in r])')
      fi
      echo "round $round: $type $t threads, probe $bw GB/s, ours $ours, llama.cpp ${theirs:-—}" >&2
      echo "$type $t $bw $ours $theirs"
    done
  done
done | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    f = line.split()
    runs.setdefault((f[0], int(f[1])), []).append([float(x) for x in f[2:]])
side = any(len(r) > 5 for rs in runs.values() for r in rs)
med = statistics.median
head = "%-8s %7s %8s %8s %10s %11s %13s" % ("type", "threads", "pp512", "tg128", "GB/s read", "probe GB/s", "of bandwidth")
if side:
    head += " %9s %9s %9s %9s" % ("llama pp", "llama tg", "pp ratio", "tg ratio")
print("medians of %d rounds" % len(next(iter(runs.values()))))
print(head)
for (name, threads), rs in runs.items():
    line = "%-8s %7d %8.1f %8.1f %10.1f %11.1f %12.0f%%" % (
        name, threads, med(r[1] for r in rs), med(r[2] for r in rs), med(r[3] for r in rs), med(r[0] for r in rs),
        100 * med(r[3] / r[0] for r in rs))
    if side:
        line += " %9.1f %9.1f %8.2fx %8.2fx" % (med(r[4] for r in rs), med(r[5] for r in rs),
                                                med(r[1] / r[4] for r in rs), med(r[2] / r[5] for r in rs))
    print(line)
'
