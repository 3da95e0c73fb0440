#!/usr/bin/env bash
# Concurrent completion requests through HTTP: aggregate generated tok/s of N requests at once against
# `orchard serve --parallel N` and, side by side in the same run, `llama-server -np N` on the same
# file, beside the engine's own batched decode rate (bench_batch_decode) and, with
# ORCHARD_BENCH_SPLIT=1, a 2-rank split server (--world 2) at 1 and 8 requests.
#
# Every request asks /v1/completions for TOKENS tokens (temperature 1, no top-k/top-p/min-p, a
# seed each) after a short prompt; the rate is all completion tokens over the wall time from the first
# request sent to the last answer, so it includes the prompts. Each figure is the best of ROUNDS
# rounds. Servers run one at a time with THREADS threads, each slot with a context of 512.
#
#   bench/serve_batch.sh [BUILD_DIR]     (default: build)
#   env: ORCHARD_BENCH_MODEL (default: the TinyLlama-shaped Q4_0 synthetic file, made on first use
#        in ORCHARD_BENCH_MODELS, default /tmp/orchard-bench), ORCHARD_BENCH_THREADS (2),
#        ORCHARD_BENCH_CONCURRENCY ("1 2 4 8 16"), ORCHARD_BENCH_TOKENS (64), ORCHARD_BENCH_ROUNDS (2),
#        ORCHARD_BENCH_SPLIT (1; 0 skips the split server), ORCHARD_BENCH_SPLIT_STRATEGY (tensor),
#        ORCHARD_BENCH_ENGINE (1; 0 skips bench_batch_decode),
#        LLAMA_SERVER (default /work/llama-src/build/bin/llama-server when it exists; empty: skip),
#        ORCHARD_BENCH_BASELINE (another build directory: its orchard serves each N just before this
#        build's, so a change reads as a ratio from alternated runs on a loaded host; empty: skip).
# llama-server (2026-12 sources) answers 500 "The model produced output that does not match the
# expected Content-only format" to most requests on the synthetic file (its random text), chat or
# not, --no-jinja or not: its column needs a real model's file (ORCHARD_BENCH_MODEL).
set -euo pipefail
build=${1:-build}
models=${ORCHARD_BENCH_MODELS:-/tmp/orchard-bench}
threads=${ORCHARD_BENCH_THREADS:-2}
concurrency=${ORCHARD_BENCH_CONCURRENCY:-"1 2 4 8 16"}
tokens=${ORCHARD_BENCH_TOKENS:-64}
rounds=${ORCHARD_BENCH_ROUNDS:-2}
split=${ORCHARD_BENCH_SPLIT:-1}
engine=${ORCHARD_BENCH_ENGINE:-1}
split_strategy=${ORCHARD_BENCH_SPLIT_STRATEGY:-tensor}
baseline=${ORCHARD_BENCH_BASELINE:-}
default_llama=/work/llama-src/build/bin/llama-server
llama=${LLAMA_SERVER-$([ -x "$default_llama" ] && echo "$default_llama" || true)}
ctx=512
mkdir -p "$models"
model=${ORCHARD_BENCH_MODEL:-$models/llama-tinyllama-1.1b-q4_0.gguf}
[ -f "$model" ] || "$build/orchard" make-model --arch llama --shape tinyllama-1.1b --type q4_0 --seed 1 -o "$model"

port=$((20000 + RANDOM % 20000))
server_pid=""
log=$(mktemp)
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -f "$log"
}
trap cleanup EXIT

wait_ready() {  # url
  for _ in $(seq 600); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "server at $1 did not become ready" >&2
  return 1
}

stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# Prints "tok/s completion_tokens": N concurrent chats against the server at $1, best of rounds.
load() {  # url n
  python3 - "$1" "$2" "$tokens" "$rounds" <<'EOF'
import json, sys, threading, time, urllib.request
url, n, tokens, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
topics = ["apples", "rivers", "the moon", "bread", "trains", "winter", "music", "bees"]
def ask(i, out):
    body = {"prompt": f"Here is a short story about {topics[i % len(topics)]}. Once upon a time,",
            "max_tokens": tokens, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": 1000 + i}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out[i] = json.load(r)["usage"]["completion_tokens"]
def round_():
    out = [0] * n
    threads = [threading.Thread(target=ask, args=(i, out)) for i in range(n)]
    start = time.monotonic()
    for t in threads: t.start()
    for t in threads: t.join()
    return sum(out) / (time.monotonic() - start), sum(out)
ask(0, [0])  # warm-up: the first request pays page faults
best = max((round_() for _ in range(rounds)), key=lambda r: r[0])
print(f"{best[0]:.2f} {best[1]}")
EOF
}

# The orchard server's step split at the end of a run: the share of "other" in its rounds' time
# (percent) and the mean sequences per round.
step_split() {  # url
  curl -sf "$1/metrics" | python3 -c '
import sys
v = {}
for line in sys.stdin:
    if line.startswith("#") or not line.strip():
        continue
    key, value = line.rsplit(" ", 1)
    v[key] = float(value)
forward = v.get("orchard_step_seconds_total{part=\"forward\"}", 0)
other = v.get("orchard_step_seconds_total{part=\"other\"}", 0)
steps = max(v.get("orchard_steps_total", 0), 1)
print("%.1f %.1f" % (100 * other / max(forward + other, 1e-9), v.get("orchard_step_sequences_total", 0) / steps))'
}

run_orchard() {  # n threads [extra flags...]   (env orchard_dir: the build to run, default $build)
  local n=$1 t=$2; shift 2
  "${orchard_dir:-$build}/orchard" serve -m "$model" --port "$port" --parallel "$n" -c "$ctx" -t "$t" "$@" >"$log" 2>&1 &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port"
  local result split_line
  result=$(load "http://127.0.0.1:$port" "$n")
  split_line=$(step_split "http://127.0.0.1:$port")
  stop_server
  echo "$result $split_line"
}

run_llama() {  # n
  local n=$1
  "$llama" -m "$model" --port "$port" -np "$n" -c $((ctx * n)) -t "$threads" -tb "$threads" --no-webui >"$log" 2>&1 &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port"
  local result
  result=$(load "http://127.0.0.1:$port" "$n")
  stop_server
  echo "$result"
}

if [ "$engine" = 1 ]; then
  echo "# engine: bench_batch_decode, $threads threads, 32 tokens per sequence, best of 2"
  "$build/bench/bench_batch_decode" "$model" "$threads" 32 2 16
  if [ -n "$baseline" ]; then
    echo "# engine, baseline build $baseline"
    "$baseline/bench/bench_batch_decode" "$model" "$threads" 32 2 16
  fi
  echo
fi
echo "# HTTP: $tokens tokens per request, $threads threads, best of $rounds rounds (load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'))"
for n in $concurrency; do
  base=-
  if [ -n "$baseline" ]; then read -r base _ <<<"$(orchard_dir=$baseline run_orchard "$n" "$threads")"; fi
  read -r ours _ other mean_batch <<<"$(run_orchard "$n" "$threads")"
  theirs=-
  if [ -n "$llama" ]; then read -r theirs _ <<<"$(run_llama "$n")"; fi
  echo "$n $ours $theirs $other $mean_batch $base"
done | python3 -c '
import sys
print("%-9s %14s %7s %16s %7s %14s %8s %11s %14s %11s" % ("requests", "orchard tok/s", "x one", "llama.cpp tok/s", "x one",
                                                         "orchard/llama", "other %", "mean batch", "baseline tok/s",
                                                         "x baseline"))
first = None
for line in sys.stdin:
    n, ours, theirs, other, batch, base = line.split()
    ours = float(ours)
    theirs = None if theirs == "-" else float(theirs)
    first = first or (ours, theirs)
    t = "%16.2f %6.2fx %13.2fx" % (theirs, theirs / first[1], ours / theirs) if theirs else "%16s %7s %14s" % ("-", "-", "-")
    b = "%14.2f %10.2fx" % (float(base), ours / float(base)) if base != "-" else "%14s %11s" % ("-", "-")
    print("%-9s %14.2f %6.2fx %s %8s %11s %s" % (n, ours, ours / first[0], t, other, batch, b))
    sys.stdout.flush()'

if [ "$split" = 1 ]; then
  echo
  echo "# split server: --world 2 --strategy $split_strategy, one thread per rank"
  for n in 1 8; do
    read -r rate _ other mean_batch <<<"$(run_orchard "$n" 1 --world 2 --strategy "$split_strategy")"
    echo "$n $rate $other $mean_batch"
  done | python3 -c '
import sys
first = None
for line in sys.stdin:
    n, rate, other, batch = line.split()
    rate = float(rate)
    first = first or rate
    print("%-9s %14.2f %6.2fx   other %s%%, mean batch %s" % (n, rate, rate / first, other, batch))'
fi
